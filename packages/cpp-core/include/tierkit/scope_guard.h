// ScopeGuard: run a one-off cleanup when the scope ends, unless dismissed.
// For anything with a lifetime of its own, write an RAII type instead.
#pragma once

#include <utility>

namespace tierkit {

template <typename F>
class ScopeGuard {
 public:
  explicit ScopeGuard(F fn) : fn_(std::move(fn)) {}
  ScopeGuard(ScopeGuard&& other) noexcept : fn_(std::move(other.fn_)), active_(other.active_) {
    other.active_ = false;
  }
  ScopeGuard(const ScopeGuard&) = delete;
  ScopeGuard& operator=(const ScopeGuard&) = delete;
  ScopeGuard& operator=(ScopeGuard&&) = delete;
  ~ScopeGuard() {
    if (active_) fn_();
  }
  // The cleanup will not run (e.g. the work it undoes succeeded).
  void dismiss() noexcept { active_ = false; }

 private:
  F fn_;
  bool active_ = true;
};

// auto closer = tierkit::on_exit([&] { ... });
template <typename F>
[[nodiscard]] ScopeGuard<F> on_exit(F fn) {
  return ScopeGuard<F>(std::move(fn));
}

}  // namespace tierkit
