// ThreadPool::parallel_for: split [begin, end) into chunks run on a pool
// created once (not per call) plus the calling thread. A call made while the
// pool is busy with another caller, or from inside a pool task, runs inline
// on its own thread instead of queueing: two Python threads that both
// released the GIL still run at the same time.
//
// Hand-offs spin briefly before sleeping on a condition variable: waking a
// sleeping thread costs tens of microseconds on a VM (measured: a 1e5-element
// scale_shift took 50 us through a sleeping pool vs 25 us for torch's
// spinning OpenMP pool), which is the whole budget of a mid-size call.
//
// fork(): the workers do not exist in a child process, and a mutex some
// thread held at fork time stays locked there forever. So the global pool is
// never touched in a child: a pthread_atfork handler forgets it (the parent's
// copy is abandoned, never destroyed or joined), and the child's first
// parallel call starts a fresh pool lazily.
#pragma once

#if defined(__unix__) || defined(__APPLE__)
#include <pthread.h>
#include <sched.h>
#define TIERKIT_POSIX_THREADS 1
#endif

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace tierkit {

class ThreadPool {
 public:
  using Task = std::function<void(std::int64_t, std::int64_t)>;

  // `threads` counts the caller: a pool of N starts N-1 workers. A worker
  // the system refuses to create (thread limits, memory) is simply not
  // there: the pool runs with fewer instead of terminating.
  explicit ThreadPool(unsigned threads = default_threads()) {
    const unsigned n = std::max(1u, threads);
    for (unsigned i = 1; i < n; ++i) {
      slots_.push_back(std::make_unique<Slot>());
      Slot* slot = slots_.back().get();
      try {
        workers_.emplace_back([this, slot, i] { work(*slot, i); });
      } catch (const std::system_error&) {
        slots_.pop_back();
        break;
      }
    }
  }
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    for (auto& slot : slots_) slot->wake.notify_one();
    for (auto& t : workers_) t.join();
  }

  // The threads this process may really use: the CPUs in its affinity mask
  // (taskset, container cpusets), capped by the cgroup v2 CPU quota when one
  // is set (docker --cpus), not the machine's core count.
  static unsigned default_threads() {
    unsigned n = std::max(1u, std::thread::hardware_concurrency());
#ifdef TIERKIT_POSIX_THREADS
#ifdef __linux__
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) n = std::max(1, CPU_COUNT(&set));
    n = std::min(n, cgroup_cpu_quota());
#endif
#endif
    return std::max(1u, n);
  }

  // CPUs allowed by /sys/fs/cgroup/cpu.max ("<quota> <period>" or "max ..."),
  // rounded up; no limit when there is no such file or no quota.
  static unsigned cgroup_cpu_quota(const char* path = "/sys/fs/cgroup/cpu.max") {
    std::ifstream f(path);
    std::string quota;
    long long period = 0;
    if (!(f >> quota >> period) || quota == "max" || period <= 0) return ~0u;
    try {
      const long long q = std::stoll(quota);
      if (q <= 0) return ~0u;
      return static_cast<unsigned>(std::max<long long>(1, (q + period - 1) / period));
    } catch (const std::exception&) {
      return ~0u;
    }
  }

  // The pool every kernel shares; started on first use, and again on first
  // use in a forked child (see the top of this file).
  static ThreadPool& global() {
    GlobalSlot& slot = global_slot();
    if (ThreadPool* p = slot.pool.load(std::memory_order_acquire)) return *p;
    std::lock_guard<std::mutex> lock(slot.mutex);
    ThreadPool* p = slot.pool.load(std::memory_order_relaxed);
    if (!p) {
#ifdef TIERKIT_POSIX_THREADS
      static const int registered = pthread_atfork(nullptr, nullptr, &forget_in_child);
      (void)registered;
#endif
      // Never deleted: at exit the workers may still be waiting, and in a
      // forked child the object is a copy whose threads and locks are gone.
      p = new ThreadPool();  // NOLINT(cppcoreguidelines-owning-memory): process lifetime on purpose
      slot.pool.store(p, std::memory_order_release);
    }
    return *p;
  }

  unsigned size() const { return static_cast<unsigned>(workers_.size()) + 1; }

  // Runs fn over [begin, end) in chunks of at least `grain` items, on up to
  // `max_threads` threads (0: all). Rethrows the first exception a chunk threw.
  void parallel_for(std::int64_t begin, std::int64_t end, std::int64_t grain, const Task& fn,
                    unsigned max_threads = 0) {
    const std::int64_t n = end - begin;
    if (n <= 0) return;
    unsigned want = max_threads == 0 ? size() : std::min(max_threads, size());
    const std::int64_t by_grain = std::max<std::int64_t>(1, n / std::max<std::int64_t>(1, grain));
    want = static_cast<unsigned>(std::min<std::int64_t>(want, by_grain));
    // A call from inside a chunk (on a worker, or on the caller, which holds
    // run_mutex_ already: try_lock on it would be undefined) runs inline.
    std::unique_lock<std::mutex> run(run_mutex_, std::defer_lock);
    if (want <= 1 || in_worker() || !run.try_lock()) {
      fn(begin, end);
      return;
    }
    in_worker() = true;
    struct Reset {
      ~Reset() { in_worker() = false; }
    } reset;
    // Only the want - 1 workers this call needs are woken; the rest sleep on.
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = Job{&fn, begin, end, want};
      pending_.store(want - 1, std::memory_order_relaxed);
      error_ = nullptr;
      ++generation_;
      for (unsigned k = 0; k + 1 < want; ++k)
        slots_[k]->generation.store(generation_, std::memory_order_release);
    }
    for (unsigned k = 0; k + 1 < want; ++k) slots_[k]->wake.notify_one();
    run_part(job_, 0);
    if (!spin_until([this] { return pending_.load(std::memory_order_acquire) == 0; })) {
      std::unique_lock<std::mutex> lock(mutex_);
      done_.wait(lock, [this] { return pending_.load(std::memory_order_acquire) == 0; });
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

 private:
  struct Job {
    const Task* fn = nullptr;
    std::int64_t begin = 0, end = 0;
    unsigned parts = 0;
  };

  // Polls `ready` for a short while (~tens of microseconds); true if it held.
  template <typename Pred>
  static bool spin_until(Pred ready) {
    for (int i = 0; i < kSpins; ++i) {
      if (ready()) return true;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    return ready();
  }
  static constexpr int kSpins = 2000;  // ~50-100 us of pause instructions

  struct GlobalSlot {
    std::atomic<ThreadPool*> pool{nullptr};
    std::mutex mutex;  // guards creation only
  };
  static GlobalSlot& global_slot() {
    static GlobalSlot slot;
    return slot;
  }
  // pthread_atfork child handler: the child has one thread now, so nothing
  // else can be using the slot. Its mutex may have been copied locked.
  static void forget_in_child() {
    GlobalSlot& slot = global_slot();
    slot.pool.store(nullptr, std::memory_order_relaxed);
    new (&slot.mutex) std::mutex();  // the copied one may be held by a thread that is gone
  }

  // True on pool workers, and on a caller while its parallel_for runs.
  static bool& in_worker() {
    thread_local bool flag = false;
    return flag;
  }

  void run_part(const Job& job, unsigned part) {
    const std::int64_t n = job.end - job.begin;
    const std::int64_t lo = job.begin + n * part / job.parts;
    const std::int64_t hi = job.begin + n * (part + 1) / job.parts;
    try {
      (*job.fn)(lo, hi);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
  }

  // Each worker has its own wake-up slot, so a call that needs k threads
  // wakes exactly k - 1 workers.
  struct Slot {
    std::atomic<std::uint64_t> generation{0};  // the last job this worker was given
    std::condition_variable wake;
  };

  void work(Slot& slot, unsigned index) {
    in_worker() = true;
    std::uint64_t seen = 0;
    for (;;) {
      Job job;
      spin_until([&] { return slot.generation.load(std::memory_order_acquire) != seen; });
      {
        std::unique_lock<std::mutex> lock(mutex_);
        slot.wake.wait(lock,
                       [&] { return stop_ || slot.generation.load(std::memory_order_relaxed) != seen; });
        if (stop_) return;
        seen = slot.generation.load(std::memory_order_relaxed);
        job = job_;
      }
      if (index >= job.parts) continue;
      run_part(job, index);
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard<std::mutex> lock(mutex_);  // pairs with the caller's predicate check
        done_.notify_one();
      }
    }
  }

  std::vector<std::unique_ptr<Slot>> slots_;  // slots_[i - 1] belongs to worker i
  std::vector<std::thread> workers_;
  std::mutex run_mutex_;  // one parallel_for at a time uses the workers
  std::mutex mutex_;
  std::condition_variable done_;
  Job job_;
  std::atomic<unsigned> pending_{0};
  std::uint64_t generation_ = 0;  // guarded by mutex_
  std::exception_ptr error_;
  bool stop_ = false;
};

}  // namespace tierkit
