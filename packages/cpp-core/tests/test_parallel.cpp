#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "tierkit/parallel.h"

using tierkit::ThreadPool;

TEST(ThreadPool, CoversRangeExactlyOnce) {
  ThreadPool pool(4);
  for (std::int64_t n : {0, 1, 7, 1025, 100000}) {
    std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
    pool.parallel_for(0, n, 16, [&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t i = lo; i < hi; ++i) hits[static_cast<std::size_t>(i)]++;
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  }
}

TEST(ThreadPool, UsesSeveralThreads) {
  ThreadPool pool(3);
  std::mutex m;
  std::set<std::thread::id> ids;
  pool.parallel_for(0, 3, 1, [&](std::int64_t, std::int64_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::lock_guard<std::mutex> lock(m);
    ids.insert(std::this_thread::get_id());
  });
  EXPECT_EQ(ids.size(), 3u);
}

TEST(ThreadPool, MaxThreadsOneRunsInline) {
  ThreadPool pool(3);
  std::thread::id seen;
  pool.parallel_for(0, 100, 1, [&](std::int64_t, std::int64_t) { seen = std::this_thread::get_id(); }, 1);
  EXPECT_EQ(seen, std::this_thread::get_id());
}

TEST(ThreadPool, PropagatesExceptions) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.parallel_for(0, 1000, 1,
                                 [](std::int64_t lo, std::int64_t) {
                                   if (lo > 0) throw std::runtime_error("chunk failed");
                                 }),
               std::runtime_error);
  // The pool is still usable afterwards.
  std::atomic<std::int64_t> sum{0};
  pool.parallel_for(0, 100, 1, [&](std::int64_t lo, std::int64_t hi) { sum += hi - lo; });
  EXPECT_EQ(sum.load(), 100);
}

TEST(ThreadPool, ConcurrentCallersAndNestingDoNotDeadlock) {
  ThreadPool pool(2);
  std::atomic<std::int64_t> total{0};
  auto body = [&] {
    for (int r = 0; r < 200; ++r) {
      pool.parallel_for(0, 64, 1, [&](std::int64_t lo, std::int64_t hi) {
        pool.parallel_for(lo, hi, 1, [&](std::int64_t a, std::int64_t b) { total += b - a; });
      });
    }
  };
  std::thread t1(body), t2(body);
  t1.join();
  t2.join();
  EXPECT_EQ(total.load(), 2 * 200 * 64);
}
