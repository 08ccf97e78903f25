// CachingHostAllocator: hands out aligned host memory as Buffers whose
// deleter returns the block to a per-size-class free list instead of the OS,
// so a steady-state loop that allocates the same sizes stops paying for
// fresh pages (first-touch page faults dominate large new outputs).
// Thread-safe. The pool outlives the allocator object for as long as any
// Buffer it handed out is alive, so destruction order cannot dangle.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tierkit/buffer.h"
#include "tierkit/error.h"

namespace tierkit {

struct AllocatorStats {
  std::size_t bytes_in_use = 0;       // size-class bytes held by live Buffers
  std::size_t bytes_cached = 0;       // bytes in free lists, ready for reuse
  std::size_t peak_bytes_in_use = 0;  // high-water mark of bytes_in_use
  std::uint64_t allocations = 0;      // allocate() calls that returned memory
  std::uint64_t frees = 0;            // Buffers given back
  std::uint64_t cache_hits = 0;       // served from a free list
  std::uint64_t cache_misses = 0;     // needed fresh memory from the system
};

class CachingHostAllocator {
 public:
  // Blocks up to kSmallLimit round up to a power of two (min kMinBlock);
  // larger ones to a multiple of kLargeGranule, bounding waste to 1 MiB.
  static constexpr std::size_t kMinBlock = 512;
  static constexpr std::size_t kSmallLimit = std::size_t{1} << 20;
  static constexpr std::size_t kLargeGranule = std::size_t{1} << 20;

  explicit CachingHostAllocator(std::size_t alignment = kDefaultAlignment)
      : pool_(std::make_shared<Pool>(alignment)) {
    check(is_power_of_two(alignment) && alignment >= sizeof(void*),
          "alignment: expected a power of two >= ", sizeof(void*), ", got ", alignment);
  }

  static std::size_t size_class(std::size_t nbytes) {
    if (nbytes <= kMinBlock) return kMinBlock;
    if (nbytes <= kSmallLimit) {
      std::size_t c = kMinBlock;
      while (c < nbytes) c <<= 1;
      return c;
    }
    const std::size_t rounded = (nbytes + kLargeGranule - 1) & ~(kLargeGranule - 1);
    if (rounded < nbytes) throw OutOfMemory(detail::concat("allocate: ", nbytes, " bytes is too large"));
    return rounded;
  }

  // A Buffer of exactly `nbytes` (capacity may be larger) that returns its
  // block to this pool when destroyed. Zero bytes gives an empty Buffer.
  Buffer allocate(std::size_t nbytes) {
    if (nbytes == 0) return Buffer();
    const std::size_t cls = size_class(nbytes);
    Buffer block = pool_->take(cls);
    void* p = block.data();
    pool_->hold(std::move(block), cls);
    std::shared_ptr<Pool> pool = pool_;
    return Buffer::wrap(p, nbytes, [pool](void* q) { pool->give_back(q); });
  }

  AllocatorStats stats() const { return pool_->stats(); }

  // Frees every cached (unused) block back to the system.
  void release_cached() { pool_->release_cached(); }

  std::size_t alignment() const { return pool_->alignment; }

 private:
  struct Pool {
    explicit Pool(std::size_t align) : alignment(align) {}

    Buffer take(std::size_t cls) {
      {
        std::lock_guard<std::mutex> lock(mutex);
        auto it = free_lists.find(cls);
        if (it != free_lists.end() && !it->second.empty()) {
          Buffer b = std::move(it->second.back());
          it->second.pop_back();
          st.bytes_cached -= cls;
          ++st.cache_hits;
          return b;
        }
        ++st.cache_misses;
      }
      try {
        return Buffer(cls, alignment);
      } catch (const std::bad_alloc&) {
        release_cached();  // give cached memory back, then try once more
        return Buffer(cls, alignment);
      }
    }

    void hold(Buffer block, std::size_t cls) {
      std::lock_guard<std::mutex> lock(mutex);
      void* p = block.data();
      in_use.emplace(p, std::make_pair(std::move(block), cls));
      st.bytes_in_use += cls;
      ++st.allocations;
      if (st.bytes_in_use > st.peak_bytes_in_use) st.peak_bytes_in_use = st.bytes_in_use;
    }

    void give_back(void* p) {
      std::lock_guard<std::mutex> lock(mutex);
      auto it = in_use.find(p);
      if (it == in_use.end()) return;  // unreachable: only our deleters call this
      const std::size_t cls = it->second.second;
      free_lists[cls].push_back(std::move(it->second.first));
      in_use.erase(it);
      st.bytes_in_use -= cls;
      st.bytes_cached += cls;
      ++st.frees;
    }

    void release_cached() {
      std::map<std::size_t, std::vector<Buffer>> doomed;
      {
        std::lock_guard<std::mutex> lock(mutex);
        doomed.swap(free_lists);
        st.bytes_cached = 0;
      }
      // `doomed` frees its Buffers here, outside the lock.
    }

    AllocatorStats stats() {
      std::lock_guard<std::mutex> lock(mutex);
      return st;
    }

    const std::size_t alignment;
    std::mutex mutex;
    std::map<std::size_t, std::vector<Buffer>> free_lists;
    std::unordered_map<void*, std::pair<Buffer, std::size_t>> in_use;
    AllocatorStats st;
  };

  std::shared_ptr<Pool> pool_;
};

// The process-wide allocator the bindings use by default.
inline CachingHostAllocator& default_host_allocator() {
  static CachingHostAllocator allocator;
  return allocator;
}

}  // namespace tierkit
