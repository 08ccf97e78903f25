#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <new>
#include <thread>
#include <vector>

#include "tierkit/caching_allocator.h"

using tierkit::AllocatorStats;
using tierkit::Buffer;
using tierkit::CachingHostAllocator;

TEST(CachingAllocator, SizeClasses) {
  EXPECT_EQ(CachingHostAllocator::size_class(1), 512u);
  EXPECT_EQ(CachingHostAllocator::size_class(512), 512u);
  EXPECT_EQ(CachingHostAllocator::size_class(513), 1024u);
  EXPECT_EQ(CachingHostAllocator::size_class(1 << 20), 1u << 20);
  EXPECT_EQ(CachingHostAllocator::size_class((1 << 20) + 1), 2u << 20);
  EXPECT_EQ(CachingHostAllocator::size_class((5 << 20) - 7), 5u << 20);
}

TEST(CachingAllocator, EveryBlockIsAligned) {
  CachingHostAllocator alloc(256);
  std::vector<Buffer> live;
  for (std::size_t n : {1u, 100u, 513u, 4096u, 70000u, 3000000u}) {
    live.push_back(alloc.allocate(n));
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(live.back().data()) % 256, 0u) << n;
    EXPECT_EQ(live.back().size(), n);
    std::memset(live.back().data(), 1, n);  // the requested bytes are usable
  }
}

TEST(CachingAllocator, StatsAndReuse) {
  CachingHostAllocator alloc;
  void* first = nullptr;
  {
    Buffer b = alloc.allocate(1000);
    first = b.data();
    const AllocatorStats s = alloc.stats();
    EXPECT_EQ(s.bytes_in_use, 1024u);
    EXPECT_EQ(s.bytes_cached, 0u);
    EXPECT_EQ(s.cache_misses, 1u);
    EXPECT_EQ(s.cache_hits, 0u);
    EXPECT_EQ(s.allocations, 1u);
  }
  AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.bytes_cached, 1024u);
  EXPECT_EQ(s.frees, 1u);
  Buffer again = alloc.allocate(900);  // same size class: the cached block
  EXPECT_EQ(again.data(), first);
  s = alloc.stats();
  EXPECT_EQ(s.cache_hits, 1u);
  EXPECT_EQ(s.bytes_cached, 0u);
  EXPECT_EQ(s.bytes_in_use, 1024u);
  EXPECT_EQ(s.peak_bytes_in_use, 1024u);
}

TEST(CachingAllocator, DifferentClassMisses) {
  CachingHostAllocator alloc;
  {
    Buffer b = alloc.allocate(1000);
  }
  Buffer c = alloc.allocate(5000);
  EXPECT_EQ(alloc.stats().cache_misses, 2u);
  EXPECT_EQ(alloc.stats().bytes_cached, 1024u);
}

TEST(CachingAllocator, PeakTracksHighWaterMark) {
  CachingHostAllocator alloc;
  {
    Buffer a = alloc.allocate(512);
    Buffer b = alloc.allocate(512);
  }
  Buffer c = alloc.allocate(512);
  EXPECT_EQ(alloc.stats().peak_bytes_in_use, 1024u);
  EXPECT_EQ(alloc.stats().bytes_in_use, 512u);
}

TEST(CachingAllocator, ReleaseCachedEmptiesFreeLists) {
  CachingHostAllocator alloc;
  {
    Buffer b = alloc.allocate(2 << 20);
  }
  EXPECT_EQ(alloc.stats().bytes_cached, 2u << 20);
  alloc.release_cached();
  EXPECT_EQ(alloc.stats().bytes_cached, 0u);
  Buffer again = alloc.allocate(2 << 20);
  EXPECT_EQ(alloc.stats().cache_misses, 2u);
}

TEST(CachingAllocator, ZeroBytesIsEmpty) {
  CachingHostAllocator alloc;
  Buffer b = alloc.allocate(0);
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(alloc.stats().allocations, 0u);
}

TEST(CachingAllocator, ImpossibleRequestThrowsBadAlloc) {
  CachingHostAllocator alloc;
  EXPECT_THROW(alloc.allocate(std::size_t{1} << 60), std::bad_alloc);
  EXPECT_THROW(alloc.allocate(~std::size_t{0}), tierkit::OutOfMemory);
  EXPECT_EQ(alloc.stats().bytes_in_use, 0u);
}

TEST(CachingAllocator, BuffersOutliveTheAllocatorObject) {
  Buffer survivor;
  {
    CachingHostAllocator alloc;
    survivor = alloc.allocate(64);
  }
  std::memset(survivor.data(), 7, 64);  // pool kept alive by the Buffer's deleter
  survivor.reset();
}

TEST(CachingAllocator, RejectsBadAlignment) {
  EXPECT_THROW(CachingHostAllocator(24), tierkit::InvalidArgument);
}

TEST(CachingAllocator, ConcurrentUseKeepsStatsConsistent) {
  CachingHostAllocator alloc;
  constexpr int kThreads = 4, kIters = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kIters; ++i) {
        const std::size_t n = 100 + static_cast<std::size_t>((i * 37 + t * 11) % 5000);
        Buffer b = alloc.allocate(n);
        std::memset(b.data(), t, n);
        EXPECT_EQ(static_cast<unsigned char*>(b.data())[n - 1], t);
      }
    });
  }
  for (auto& th : threads) th.join();
  const AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.allocations, static_cast<std::uint64_t>(kThreads * kIters));
  EXPECT_EQ(s.frees, s.allocations);
  EXPECT_EQ(s.cache_hits + s.cache_misses, s.allocations);
  EXPECT_GT(s.cache_hits, 0u);
}

TEST(CachingAllocator, DefaultAllocatorIsShared) {
  EXPECT_EQ(&tierkit::default_host_allocator(), &tierkit::default_host_allocator());
}

TEST(CachingAllocator, CacheStaysUnderItsCapEvictingLargestFirst) {
  CachingHostAllocator alloc(tierkit::kDefaultAlignment, 4096);
  {
    Buffer a = alloc.allocate(2048), b = alloc.allocate(1024), c = alloc.allocate(1024),
           d = alloc.allocate(2048);
  }  // 6 KiB given back into a 4 KiB cache
  AllocatorStats s = alloc.stats();
  EXPECT_LE(s.bytes_cached, 4096u);
  EXPECT_GT(s.evictions, 0u);
  EXPECT_EQ(s.max_cached_bytes, 4096u);
  {
    Buffer big = alloc.allocate(8192);  // larger than the whole cap: never cached
  }
  EXPECT_LE(alloc.stats().bytes_cached, 4096u);
  alloc.trim(1024);
  EXPECT_LE(alloc.stats().bytes_cached, 1024u);
  alloc.set_max_cached_bytes(0);
  EXPECT_EQ(alloc.stats().bytes_cached, 0u);
  {
    Buffer again = alloc.allocate(512);
  }
  EXPECT_EQ(alloc.stats().bytes_cached, 0u);  // cap 0: nothing is kept
}

TEST(CachingAllocator, CountersAddUpAfterAFailedAllocation) {
  CachingHostAllocator alloc;
  {
    Buffer ok = alloc.allocate(1000);
  }
  EXPECT_THROW(alloc.allocate(std::size_t{1} << 62), std::bad_alloc);
  const AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.failed_allocations, 1u);
  EXPECT_EQ(s.allocations, 1u);
  EXPECT_EQ(s.cache_hits + s.cache_misses, s.allocations);
}
