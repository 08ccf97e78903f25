// CachingHostAllocator: hands out aligned host memory as Buffers whose
// deleter returns the block to a per-size-class free list instead of the OS,
// so a steady-state loop that allocates the same sizes stops paying for
// fresh pages (first-touch page faults dominate large new outputs).
// Thread-safe. The pool outlives the allocator object for as long as any
// Buffer it handed out is alive, so destruction order cannot dangle.
//
// Bounded: at most max_cached_bytes() sit in the free lists (default 1 GiB,
// settable); a block given back beyond that evicts the largest cached
// blocks first, and a block larger than the cap goes straight back to the
// system. trim(n) shrinks the cache to n bytes on demand, and an allocation
// the system refuses releases the whole cache and tries once more (memory
// pressure). Counters: cache_hits + cache_misses == allocations, always.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#if defined(__unix__)
#include <pthread.h>
#endif

#include "tierkit/buffer.h"
#include "tierkit/error.h"

namespace tierkit {

struct AllocatorStats {
  std::size_t bytes_in_use = 0;          // size-class bytes held by live Buffers
  std::size_t bytes_cached = 0;          // bytes in free lists, ready for reuse
  std::size_t peak_bytes_in_use = 0;     // high-water mark of bytes_in_use
  std::uint64_t allocations = 0;         // allocate() calls that returned memory
  std::uint64_t frees = 0;               // Buffers given back
  std::uint64_t cache_hits = 0;          // served from a free list
  std::uint64_t cache_misses = 0;        // needed fresh memory from the system
  std::uint64_t failed_allocations = 0;  // allocate() calls the system refused (not in allocations)
  std::uint64_t evictions = 0;           // cached blocks freed to respect the cap (or by trim)
  std::size_t max_cached_bytes = 0;      // the cap in force
};

class CachingHostAllocator {
 public:
  // Blocks up to kSmallLimit round up to a power of two (min kMinBlock);
  // larger ones to a multiple of kLargeGranule, bounding waste to 1 MiB.
  static constexpr std::size_t kMinBlock = 512;
  static constexpr std::size_t kSmallLimit = std::size_t{1} << 20;
  static constexpr std::size_t kLargeGranule = std::size_t{1} << 20;

  static constexpr std::size_t kDefaultMaxCachedBytes = std::size_t{1} << 30;

  explicit CachingHostAllocator(std::size_t alignment = kDefaultAlignment,
                                std::size_t max_cached_bytes = kDefaultMaxCachedBytes)
      : pool_(std::make_shared<Pool>(alignment, max_cached_bytes)) {
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
  void release_cached() { pool_->trim(0); }
  // Frees cached blocks, largest first, until at most `max_bytes` are cached.
  void trim(std::size_t max_bytes) { pool_->trim(max_bytes); }
  // Caps the cache (trimming now if it holds more).
  void set_max_cached_bytes(std::size_t max_bytes) { pool_->set_cap(max_bytes); }
  std::size_t max_cached_bytes() const { return pool_->stats().max_cached_bytes; }

  std::size_t alignment() const { return pool_->alignment; }

  // fork(): a mutex another thread holds at fork time stays locked in the
  // child forever, so a child's first allocation or free would hang. These
  // are pthread_atfork's prepare and parent/child handlers: hold the lock
  // across fork() so the child's copy of the pool is consistent and unlocked
  // (what glibc's malloc does for its arenas). default_host_allocator()
  // registers them.
  void lock_for_fork() { pool_->mutex.lock(); }
  void unlock_after_fork() { pool_->mutex.unlock(); }

 private:
  struct Pool {
    Pool(std::size_t align, std::size_t cap) : alignment(align) { st.max_cached_bytes = cap; }

    Buffer take(std::size_t cls) {
      {
        std::lock_guard<std::mutex> lock(mutex);
        auto it = free_lists.find(cls);
        if (it != free_lists.end() && !it->second.empty()) {
          Buffer b = std::move(it->second.back());
          it->second.pop_back();
          if (it->second.empty()) free_lists.erase(it);
          st.bytes_cached -= cls;
          ++st.cache_hits;
          return b;
        }
      }
      Buffer fresh;
      try {
        fresh = Buffer(cls, alignment);
      } catch (const std::bad_alloc&) {
        trim(0);  // memory pressure: give cached memory back, then try once more
        try {
          fresh = Buffer(cls, alignment);
        } catch (const std::bad_alloc&) {
          std::lock_guard<std::mutex> lock(mutex);
          ++st.failed_allocations;
          throw;
        }
      }
      std::lock_guard<std::mutex> lock(mutex);
      ++st.cache_misses;  // counted once the memory exists, so hits + misses == allocations
      return fresh;
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
      std::vector<Buffer> doomed;  // freed after the lock is released
      std::lock_guard<std::mutex> lock(mutex);
      auto it = in_use.find(p);
      if (it == in_use.end()) return;  // unreachable: only our deleters call this
      const std::size_t cls = it->second.second;
      Buffer block = std::move(it->second.first);
      in_use.erase(it);
      st.bytes_in_use -= cls;
      ++st.frees;
      if (cls > st.max_cached_bytes) {
        doomed.push_back(std::move(block));  // larger than the whole cache may hold
        return;
      }
      evict_until(st.max_cached_bytes - cls, doomed);
      free_lists[cls].push_back(std::move(block));
      st.bytes_cached += cls;
    }

    void trim(std::size_t max_bytes) {
      std::vector<Buffer> doomed;
      std::lock_guard<std::mutex> lock(mutex);
      evict_until(max_bytes, doomed);
    }

    void set_cap(std::size_t max_bytes) {
      std::vector<Buffer> doomed;
      std::lock_guard<std::mutex> lock(mutex);
      st.max_cached_bytes = max_bytes;
      evict_until(max_bytes, doomed);
    }

    // Moves cached blocks, largest first, into `doomed` until at most
    // `max_bytes` stay cached. Caller holds the mutex; `doomed` outlives it.
    void evict_until(std::size_t max_bytes, std::vector<Buffer>& doomed) {
      while (st.bytes_cached > max_bytes && !free_lists.empty()) {
        auto largest = std::prev(free_lists.end());
        doomed.push_back(std::move(largest->second.back()));
        largest->second.pop_back();
        st.bytes_cached -= largest->first;
        ++st.evictions;
        if (largest->second.empty()) free_lists.erase(largest);
      }
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
// Fork-safe: the first call registers the atfork handlers above.
inline CachingHostAllocator& default_host_allocator() {
  static CachingHostAllocator allocator;
#if defined(__unix__)
  static const int registered = pthread_atfork([] { default_host_allocator().lock_for_fork(); },
                                               [] { default_host_allocator().unlock_after_fork(); },
                                               [] { default_host_allocator().unlock_after_fork(); });
  (void)registered;
#endif
  return allocator;
}

}  // namespace tierkit
