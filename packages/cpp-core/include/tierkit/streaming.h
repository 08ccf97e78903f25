// When an output goes around the cache: the last-level cache's share of a
// thread (sysfs, capped), the threshold over it, and the rule every
// contiguous loop asks (streaming_stores<T>). The streaming loops
// themselves are kernels.h's and the row kinds'.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <type_traits>

#include "tierkit/dtype.h"
#include "tierkit/simd_level.h"

#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>  // sysconf: the last-level cache's size (streaming_threshold)
#endif

namespace tierkit::kernels {

// Whether a contiguous loop over `n` elements of T with `operands` arrays
// (inputs and output) streams its output past the cache. Yes once the
// chunk moves at least streaming_threshold() bytes: 3/4 of the last-level
// cache's share of one hardware thread (the rule glibc's memcpy uses for
// its non-temporal copies). The torch tiers and core's pool split an op
// into one chunk a thread, so a chunk that large means the op's arrays
// cannot all stay in the cache: its output would be evicted before anyone
// reads it, and the read for ownership is pure cost. Smaller outputs keep
// ordinary stores, which leave the result in the cache for the next op.
// TIERKIT_STREAMING_STORES=off never streams, =on always (tests use it to
// run every kernel through the streaming loop); read once.
namespace detail {
// The last-level cache's share of one hardware thread, in bytes, as the
// kernel reports it (sysfs: the highest cache level of cpu0, its size over
// the CPUs that share it, as lscpu reads it); -1 where sysfs has no caches.
// Not sysconf's: glibc derives it from CPUID, which a VM may fill in as it
// likes (an AMD EPYC VM with a 32 MiB L3 shared by its 2 CPUs: sysconf
// 320 MiB, so nothing here ever streamed).
// At most this much a thread, whatever sysfs says: no CPU gives one core
// more than ~12 MiB of its last-level cache (an X3D CCD's 96 MiB over 8
// cores), but a VM sees the host's whole L3 shared by only its own CPUs (an
// Intel Xeon VM of 2 CPUs: 480 MiB, 240 MiB a thread, so a rotary
// embedding's 128 MiB rows never streamed, though streamed they ran in
// 9.1 ms against 13.5 ms).
inline constexpr long kMaxLlcShare = 32L << 20;
inline long sysfs_llc_share() {
  long best = -1;
  int best_level = 0;
  for (int i = 0; i < 16; ++i) {
    char path[96];
    const auto read = [&](const char* leaf, char* buf, int n) {
      std::snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu0/cache/index%d/%s", i, leaf);
      std::FILE* f = std::fopen(path, "r");
      if (!f) return false;
      const bool ok = std::fgets(buf, n, f) != nullptr;
      std::fclose(f);
      return ok;
    };
    char level[16], size[32], shared[256];
    if (!read("level", level, sizeof(level))) break;
    if (!read("size", size, sizeof(size)) || !read("shared_cpu_list", shared, sizeof(shared))) continue;
    char* unit = nullptr;
    long bytes = std::strtol(size, &unit, 10);
    if (*unit == 'K') bytes <<= 10;
    if (*unit == 'M') bytes <<= 20;
    long cpus = 0;  // "0-1", "0-7,64-71"
    for (char* p = shared; *p && *p != '\n';) {
      const long a = std::strtol(p, &p, 10);
      const long b = *p == '-' ? std::strtol(p + 1, &p, 10) : a;
      cpus += b - a + 1;
      if (*p == ',')
        ++p;
      else if (*p && *p != '\n')
        break;
    }
    const int lv = std::atoi(level);
    if (bytes > 0 && cpus > 0 && lv >= best_level) {
      best_level = lv;
      best = bytes / cpus;
    }
  }
  return best;
}
}  // namespace detail

// The machine's hardware threads, asked once: glibc's
// std::thread::hardware_concurrency() opens and reads
// /sys/devices/system/cpu/online on every call, ~4 of the 7 us a one-row
// float32 row op took through torch (a decode step makes one per norm).
inline unsigned hardware_threads() {
  static const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  return threads;
}

inline std::size_t streaming_threshold() {
  static const std::size_t threshold = [] {
    if (const char* mode = std::getenv("TIERKIT_STREAMING_STORES")) {
      if (std::strcmp(mode, "off") == 0) return SIZE_MAX;
      if (std::strcmp(mode, "on") == 0) return std::size_t{0};
    }
    long share = std::min(detail::sysfs_llc_share(), detail::kMaxLlcShare);
    if (share <= 0) {
      long llc = -1;
#if defined(_SC_LEVEL3_CACHE_SIZE)
      llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
      if (llc <= 0) llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
      if (llc <= 0) llc = 32L << 20;  // not known: a common server LLC
      // The hardware threads, not ThreadPool::default_threads(): its cgroup
      // reading would pull file streams into every library that includes this.
      share = llc / static_cast<long>(hardware_threads());
    }
    return static_cast<std::size_t>(share) / 4 * 3;
  }();
  return threshold;
}
// The 16-bit types too, where their vector loops run (whole lines from a
// converted block: kernels.h's Map16Body; on an AVX-512 Xeon, bfloat16 silu_mul of
// 1.6e7 elements 3.0 -> 2.5 ms, add 2.25 -> 1.77 ms).
template <typename T>
bool streaming_stores(std::int64_t n, std::size_t operands) {
#ifdef TIERKIT_SIMD_DISPATCH
  constexpr bool k16 = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
  return (std::is_same_v<T, float> || std::is_same_v<T, double> || k16) && n > 0 &&
         static_cast<std::size_t>(n) * sizeof(T) * operands >= streaming_threshold() &&
         detail::simd_level() != detail::SimdLevel::Baseline && (!k16 || detail::cpu_has_16bit_simd());
#else
  (void)n;
  (void)operands;
  return false;
#endif
}

}  // namespace tierkit::kernels
