// Which vector instructions core's kernels may run, and how they are built:
// the CPU's level read once from CPUID (capped by TIERKIT_SIMD), the
// function attributes that compile a loop for a level, and the CPU features
// the 16-bit conversions need (F16C, AVX512-BF16). kernels.h, the row kinds
// and the row maps dispatch on these; nothing above the CPU's level runs.
#pragma once

#include <cstdlib>
#include <cstring>

// At file scope: the intrinsics' declarations must not land in a tierkit
// namespace (a later `#include <immintrin.h>` in the user's file would then
// find them already included, under our namespace, and declare nothing).
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__) && !defined(__CUDACC__)
#include <cpuid.h>  // __get_cpuid: F16C under clang (cpu_has_f16c)
#include <immintrin.h>
#endif

// Builds for baseline x86-64 get SSE2 only; the same loop compiled for AVX2
// (or AVX-512) and picked at run time moves twice (four times) the bytes per
// instruction (measured on 1e6 in-cache floats: 392 us with SSE2, 198 us with
// AVX2), and makes the branch-free half/bfloat16 conversions (dtype.h)
// vectorize. Never "fma": contracting a*x+b into one rounding would change
// results (and -ffp-contract=off forbids it anyway).
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__) && !defined(__AVX2__) && \
    !defined(__CUDACC__)
#define TIERKIT_SIMD_DISPATCH 1
namespace tierkit::kernels::detail {
enum class SimdLevel { Baseline, Avx2, Avx512 };
inline SimdLevel simd_level() {
  static const SimdLevel level = [] {
    __builtin_cpu_init();
    // TIERKIT_SIMD=avx2|baseline caps the level (as ATEN_CPU_CAPABILITY does
    // for torch): to compare, or to avoid AVX-512 on CPUs that slow down for
    // it (=avx512: AVX-512 without its BF16 conversions, below).
    // The vector levels' loops are compiled with FMA too (a compute-bound
    // op's std::fma), so each level asks for it.
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (const char* cap = std::getenv("TIERKIT_SIMD")) {
      if (std::strcmp(cap, "baseline") == 0) return SimdLevel::Baseline;
      if (std::strcmp(cap, "avx2") == 0) return avx2 ? SimdLevel::Avx2 : SimdLevel::Baseline;
    }
    if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
      return SimdLevel::Avx512;
    return avx2 ? SimdLevel::Avx2 : SimdLevel::Baseline;
  }();
  return level;
}
// The vector loops are unrolled (GCC's -funroll-loops for the level copies
// of simd_copies.h only; Clang interleaves vectorized loops by itself): a loop of
// one vector per iteration measured 1.95 us for a 1e4-element float add on
// AMD Zen 3 when the operands sit at unlucky offsets modulo 4 KiB (as numpy
// happens to place them), 1.45-1.55 us unrolled; other offsets ~1.3 us
// either way.
#if defined(__GNUC__) && !defined(__clang__)
#define TIERKIT_UNROLLED , optimize("unroll-loops")
#else
#define TIERKIT_UNROLLED
#endif
// F16C from CPUID leaf 1 (ECX bit 29) under clang, whose
// __builtin_cpu_supports did not know "f16c" before clang 16.
inline bool cpu_has_f16c() {
#if defined(__clang__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
#else
  return __builtin_cpu_supports("f16c");
#endif
}
inline bool cpu_has_16bit_simd() {
  static const bool has = [] {
    __builtin_cpu_init();  // the row kernels' and the strided loops' dispatch may ask before simd_level()
    return cpu_has_f16c() && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return has;
}

// The levels' targets (simd_copies.h compiles every vector loop under one
// of them; the 16-bit converters carry them too). Each has F16C and FMA.
#define TIERKIT_16_AVX2 __attribute__((target("avx2,f16c,fma")))
#define TIERKIT_16_AVX512 __attribute__((target("avx2,f16c,fma,avx512f,avx512bw,avx512vl")))

// Where the CPU has AVX512-BF16 (Intel Cooper Lake and later, AMD Zen 4):
// VCVTNEPS2BF16 rounds 16 floats to bfloat16 in one instruction, to nearest
// even with NaNs quieted (x >> 16 | 0x40): the scalar formula's bits, but
// for subnormal inputs, which it flushes to zero. A block with one (rare:
// an op's result below 2^-126) takes the integer lanes instead.
#define TIERKIT_16_AVX512BF16 __attribute__((target("avx2,f16c,fma,avx512f,avx512bw,avx512vl,avx512bf16")))
// TIERKIT_SIMD=avx512 caps below it (CTest runs the other AVX-512 path so).
inline bool cpu_has_avx512bf16() {
  static const bool has = [] {
    __builtin_cpu_init();
    const char* cap = std::getenv("TIERKIT_SIMD");
    return __builtin_cpu_supports("avx512bf16") && !(cap && std::strcmp(cap, "avx512") == 0);
  }();
  return has;
}
// The row kernels' bfloat16 stores also classify floats (VFPCLASSPS, DQ).
inline bool cpu_has_avx512bf16_dq() {
  static const bool has = cpu_has_avx512bf16() && __builtin_cpu_supports("avx512dq");
  return has;
}

}  // namespace tierkit::kernels::detail
#endif
