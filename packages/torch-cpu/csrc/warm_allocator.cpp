// The c10::Allocator behind warm_empty (see warm_allocator.h), and the ops
// tierkit_torch.allocator calls: statistics, trimming, the cap and the switch.
#include "warm_allocator.h"

#include <ATen/EmptyTensor.h>
#include <c10/core/CPUAllocator.h>
#include <torch/library.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tierkit/caching_allocator.h"
#include "tierkit/huge_pages.h"

namespace tierkit_torch {
namespace {

// Core's process-wide pool (this library's copy of it: the bridge's module
// has its own, so each tier's statistics are its own).
tierkit::CachingHostAllocator& pool() { return tierkit::default_host_allocator(); }

bool enabled_from_environment() {
  const char* v = std::getenv("TIERKIT_WARM_OUTPUTS");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

std::atomic<bool>& enabled() {
  static std::atomic<bool> on{enabled_from_environment()};
  return on;
}

class WarmAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(std::size_t n) override {
    if (n < kWarmMinBytes || !enabled().load(std::memory_order_relaxed))
      return c10::GetCPUAllocator()->allocate(n);
    // The Buffer owns the block; destroying it gives the block back to the pool.
    auto* block = new tierkit::Buffer(pool().allocate(n));
    void* data = block->data();
    // A block fresh from the system is untouched: huge pages make its first
    // touch 512x fewer faults (a cached block is already faulted in).
    tierkit::advise_huge_pages(data, n);
    return {data, block, &give_back, c10::Device(c10::DeviceType::CPU)};
  }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

 private:
  static void give_back(void* block) { delete static_cast<tierkit::Buffer*>(block); }
};

WarmAllocator& warm_allocator() {
  static WarmAllocator a;
  return a;
}

// Every function-local static above is constructed when the library loads
// (dlopen: one thread), not on a first call: a fork() while another thread
// is inside such a first call leaves the child's copy of its guard taken
// forever (seen in tests: a child hung in __cxa_guard_acquire for
// warm_allocator()'s object, the parent's other thread having page-faulted
// inside the guard while fork() held the address space).
[[maybe_unused]] const bool kStaticsReady = [] {
  warm_allocator();
  enabled();
  pool();
  return true;
}();

constexpr c10::DispatchKeySet kCpuKeys{c10::DispatchKey::CPU};

// [bytes_in_use, bytes_cached, peak_bytes_in_use, allocations, frees,
//  cache_hits, cache_misses, failed_allocations, evictions, max_cached_bytes,
//  enabled]: tierkit_torch.allocator.stats() names them.
std::vector<int64_t> allocator_stats() {
  const tierkit::AllocatorStats s = pool().stats();
  return {static_cast<int64_t>(s.bytes_in_use),
          static_cast<int64_t>(s.bytes_cached),
          static_cast<int64_t>(s.peak_bytes_in_use),
          static_cast<int64_t>(s.allocations),
          static_cast<int64_t>(s.frees),
          static_cast<int64_t>(s.cache_hits),
          static_cast<int64_t>(s.cache_misses),
          static_cast<int64_t>(s.failed_allocations),
          static_cast<int64_t>(s.evictions),
          static_cast<int64_t>(s.max_cached_bytes),
          enabled().load() ? 1 : 0};
}

void allocator_set(const std::string& what, int64_t value) {
  const char* op = "tierkit::_allocator_set";
  TORCH_CHECK(value >= 0, op, ": value: expected >= 0, got ", value);
  const auto bytes = static_cast<std::size_t>(value);
  if (what == "enabled") {
    enabled().store(value != 0);
  } else if (what == "trim") {
    pool().trim(bytes);
  } else if (what == "max_cached_bytes") {
    pool().set_max_cached_bytes(bytes);
  } else {
    TORCH_CHECK(false, op, ": what: expected 'enabled', 'trim' or 'max_cached_bytes', got '", what, "'");
  }
}

}  // namespace

at::Tensor warm_empty(c10::IntArrayRef sizes, const c10::TensorOptions& options) {
  return at::detail::empty_generic(sizes, &warm_allocator(), kCpuKeys, options.dtype().toScalarType(),
                                   c10::MemoryFormat::Contiguous);
}

at::Tensor warm_empty_strided(c10::IntArrayRef sizes, c10::IntArrayRef strides,
                              const c10::TensorOptions& options) {
  return at::detail::empty_strided_generic(sizes, strides, &warm_allocator(), kCpuKeys,
                                           options.dtype().toScalarType());
}

// No tensor argument to dispatch on: catch-all kernels, as _accepted_dtypes.
TORCH_LIBRARY_FRAGMENT(tierkit, m) {
  m.def("_allocator_stats() -> int[]", &allocator_stats);
  m.def("_allocator_set(str what, int value) -> ()", &allocator_set);
}

}  // namespace tierkit_torch
