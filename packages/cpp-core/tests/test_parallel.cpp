#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tierkit/parallel.h"

using tierkit::ThreadPool;

// The emulation sessions (tests-core-aarch64, tests-core-x86-baseline) run
// these tests under qemu-user and name it in TIERKIT_EMULATED. qemu-user
// (7.2) cannot start a thread in a forked child of a threaded guest: it
// aborts in its own code ("qemu_plugin_vcpu_init_hook: assertion failed",
// then rcu_read_unlock), so the fork tests say so and skip there; they run
// on every native build.
#define SKIP_FORK_UNDER_EMULATION()                           \
  if (const char* emulator = std::getenv("TIERKIT_EMULATED")) \
  GTEST_SKIP() << "under " << emulator                        \
               << ": qemu-user aborts when a forked child of a threaded process starts a thread"

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

// A nested call from the calling thread's own chunk runs inline (it must not
// try_lock the run mutex it already holds: TSan reports that as a double
// lock, and it is undefined behaviour) and still covers its range.
TEST(ThreadPool, NestedCallFromCallerRunsInline) {
  ThreadPool pool(2);
  std::atomic<std::int64_t> total{0};
  pool.parallel_for(0, 2, 1, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t i = lo; i < hi; ++i) {
      pool.parallel_for(0, 1000, 10, [&](std::int64_t a, std::int64_t b) { total += b - a; });
    }
  });
  EXPECT_EQ(total.load(), 2000);
}

TEST(ThreadPool, CgroupQuotaIsParsed) {
  const std::string path = testing::TempDir() + "/cpu.max";
  auto write = [&](const char* text) {
    std::ofstream(path) << text;
    return ThreadPool::cgroup_cpu_quota(path.c_str());
  };
  EXPECT_EQ(write("max 100000\n"), ~0u);
  EXPECT_EQ(write("150000 100000\n"), 2u);
  EXPECT_EQ(write("50000 100000\n"), 1u);
  EXPECT_EQ(ThreadPool::cgroup_cpu_quota("/nonexistent/cpu.max"), ~0u);
  EXPECT_GE(ThreadPool::default_threads(), 1u);
}

// fork() after parallel work: the child's workers do not exist, so its
// first call must not wait for them (it used to hang forever), and forks in
// a row and a grandchild work too. Each child reports through its exit code.
TEST(ThreadPool, SurvivesFork) {
  SKIP_FORK_UNDER_EMULATION();
  auto sum = [] {
    std::atomic<std::int64_t> total{0};
    ThreadPool::global().parallel_for(0, 1 << 20, 1024,
                                      [&](std::int64_t lo, std::int64_t hi) { total += hi - lo; });
    return total.load();
  };
  ASSERT_EQ(sum(), 1 << 20);
  for (int round = 0; round < 3; ++round) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      alarm(20);  // a hang becomes SIGALRM, a failed test, not a stuck run
      bool ok = sum() == (1 << 20) && sum() == (1 << 20);
      const pid_t grandchild = fork();
      if (grandchild == 0) _exit(sum() == (1 << 20) ? 0 : 3);
      int gstatus = 0;
      waitpid(grandchild, &gstatus, 0);
      ok = ok && WIFEXITED(gstatus) && WEXITSTATUS(gstatus) == 0;
      std::exit(ok ? 0 : 2);  // runs static destructors: must not join missing threads
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status)) << "child died with signal "
                                   << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    EXPECT_EQ(WEXITSTATUS(status), 0);
    EXPECT_EQ(sum(), 1 << 20);  // the parent's pool still works
  }
}

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
// A worker the system refuses to create makes a smaller pool, not a
// std::terminate. In a child process, address space is capped so thread
// stacks (8 MiB each) run out after a few; the pool must still work.
TEST(ThreadPool, RefusedThreadsMeanFewerWorkers) {
  SKIP_FORK_UNDER_EMULATION();
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    alarm(20);
    rlimit limit{};
    getrlimit(RLIMIT_AS, &limit);
    std::ifstream statm("/proc/self/statm");
    std::size_t pages = 0;
    statm >> pages;
    limit.rlim_cur = pages * static_cast<std::size_t>(sysconf(_SC_PAGESIZE)) + (64u << 20);
    if (setrlimit(RLIMIT_AS, &limit) != 0) _exit(3);
    ThreadPool pool(512);  // far more than 64 MiB of stacks
    std::atomic<std::int64_t> total{0};
    pool.parallel_for(0, 1 << 16, 1, [&](std::int64_t lo, std::int64_t hi) { total += hi - lo; });
    const bool fewer = pool.size() < 512 && pool.size() >= 1;
    _exit(fewer && total.load() == (1 << 16) ? 0 : 2);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child died with signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}
#endif
