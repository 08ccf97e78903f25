// Operator handles looked up once per call site, safely across fork().
//
// `static const auto h = Dispatcher::singleton().findSchemaOrThrow(...)` in
// a kernel takes the static's guard on the first call and holds it while
// the lookup takes the dispatcher's lock; a fork() from another thread in
// that window (a DataLoader forking its workers while a thread makes its
// first call) leaves the child waiting on the guard forever. Here the
// lookup runs under one mutex that pthread_atfork takes in the forking
// thread (so the child starts with it free and the table whole), and each
// call site caches the result in a constant-initialized atomic, which has no
// guard:
//
//   static std::atomic<const c10::OperatorHandle*> slot{nullptr};
//   const auto h = op_handle<Sig>(slot, "tierkit::rms_norm");
//
// Header-only: each library that includes it (torch-cpu's, torch-cuda's)
// has its own table and fork handlers.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <pthread.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace tierkit_torch {
namespace detail {
inline std::mutex op_handle_mutex;
inline std::vector<std::pair<std::string, std::unique_ptr<c10::OperatorHandle>>> op_handles;
[[maybe_unused]] inline const int op_handle_fork_handlers = pthread_atfork(
    [] { op_handle_mutex.lock(); }, [] { op_handle_mutex.unlock(); }, [] { op_handle_mutex.unlock(); });
}  // namespace detail

// The operator "ns::name" or "ns::name.overload", found once per process.
inline const c10::OperatorHandle& find_op(const char* qualified) {
  const std::lock_guard<std::mutex> lock(detail::op_handle_mutex);
  for (const auto& [name, handle] : detail::op_handles)
    if (name == qualified) return *handle;
  const std::string q(qualified);
  const auto dot = q.find('.');
  detail::op_handles.emplace_back(
      q, std::make_unique<c10::OperatorHandle>(c10::Dispatcher::singleton().findSchemaOrThrow(
             q.substr(0, dot).c_str(), dot == std::string::npos ? "" : q.substr(dot + 1).c_str())));
  return *detail::op_handles.back().second;
}

// The typed handle of `qualified`, cached in the call site's `slot`.
template <typename Sig>
c10::TypedOperatorHandle<Sig> op_handle(std::atomic<const c10::OperatorHandle*>& slot,
                                        const char* qualified) {
  const c10::OperatorHandle* h = slot.load(std::memory_order_acquire);
  if (h == nullptr) {
    h = &find_op(qualified);
    slot.store(h, std::memory_order_release);
  }
  return h->typed<Sig>();
}

}  // namespace tierkit_torch
