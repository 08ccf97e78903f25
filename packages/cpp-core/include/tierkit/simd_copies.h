// How every vector kernel in core gets its per-level copies, one way for
// all of them: the pointwise loops (kernels.h), the row kinds
// (row_kernels.h) and the row maps (row_maps.h).
//
// A kernel is written once, as a body: a struct with
// `template <typename W> static void run(...)`, where W is a level's width
// (its lane count, GCC vector types and 16-bit converters). Each vector
// level is one function template below (and its unrolled twin, for bodies
// with kUnrolled), compiled under the level's target, that calls
// Body::run<W> with the level's width:
//
//   copy_avx2        AVX2 + F16C + FMA     Width256
//   copy_avx512      AVX-512 (F, BW, VL)   Width512
//   copy_avx512bf16  AVX-512 + AVX512-BF16 Width512Bf16 (bfloat16 only)
//
// The copies are `flatten`: the body, its templates, GCC's generic vectors
// and the converters (which carry no level of their own, or a lower one)
// are all compiled into the copy, at its level. `run_at_level` picks the
// copy for the CPU (capped by TIERKIT_SIMD and by the kernel's own cap); at
// the baseline level the caller runs its plain C++ loop, which gives the
// same bits (the CTest bit checks compare every level).
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

#include "tierkit/dtype.h"
#include "tierkit/simd_convert.h"
#include "tierkit/simd_level.h"

#ifdef TIERKIT_SIMD_DISPATCH
namespace tierkit::kernels::detail {

// The vectors pass between always-inline functions only, so GCC's notes on
// their ABI without AVX (-Wpsabi) do not apply.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
// N lanes of float (F), of 32-bit integers (U) and of 16-bit integers (H).
template <int N>
struct VecTypes {
  typedef float F __attribute__((vector_size(4 * N)));
  typedef std::uint32_t U __attribute__((vector_size(4 * N)));
  typedef std::uint16_t H __attribute__((vector_size(2 * N)));
};
#pragma GCC diagnostic pop

// The widths. `to`/`from`: a vector's worth of 16-bit values to floats and
// back (simd_convert.h); `gather`: an op's inner table at a vector of 16-bit
// patterns; `stream_line`: one 64-byte line around the cache.
#define TIERKIT_WIDTH(NAME, LANES, SUFFIX)                                                                  \
  struct NAME : VecTypes<LANES> {                                                                           \
    static constexpr std::int64_t kLanes = LANES;                                                           \
    static constexpr bool kNativeBf16 = false;                                                              \
    template <typename T>                                                                                   \
    static void to(const T* in, float* out) {                                                               \
      to_floats_##SUFFIX(in, out);                                                                          \
    }                                                                                                       \
    template <typename T>                                                                                   \
    static void from(const float* in, T* out) {                                                             \
      from_floats_##SUFFIX(in, out);                                                                        \
    }                                                                                                       \
    static void gather(const void* in, const float* table, float* out) { gather_##SUFFIX(in, table, out); } \
    static void stream_line(const void* from, void* to) { stream_line_##SUFFIX(from, to); }                 \
  };
TIERKIT_WIDTH(Width256, kLanes256, 256)
TIERKIT_WIDTH(Width512, kLanes512, 512)
#undef TIERKIT_WIDTH
// AVX-512 where bfloat16 rounds in one instruction (VCVTNEPS2BF16).
struct Width512Bf16 : Width512 {
  static constexpr bool kNativeBf16 = true;
  template <typename T>
  static void from(const float* in, T* out) {
    if constexpr (std::is_same_v<T, BFloat16>)
      from_floats_512_bf16(in, out);
    else
      from_floats_512(in, out);
  }
};

// The copies. fp-contract=off (core's flag, and on the copies themselves,
// in case a consumer's build lacks it) keeps a*x+b rounded twice: with
// "fma" in the targets only an explicit std::fma becomes one. AVX-512's
// copies ask GCC for 512-bit vectors in the loops it vectorizes itself.
// Each level has a copy with its loops as written and one unrolled
// (TIERKIT_UNROLLED), the body's choice (below).
#if defined(__clang__)
#define TIERKIT_WIDE_VECTORS
#else
#define TIERKIT_WIDE_VECTORS __attribute__((target("prefer-vector-width=512")))
#endif
#define TIERKIT_LEVEL_COPY(NAME, TARGET, EXTRA, UNROLL, W)                                        \
  template <typename Body, typename... A>                                                         \
  TARGET __attribute__((flatten, optimize("fp-contract=off") UNROLL)) EXTRA void NAME(A&&... a) { \
    Body::template run<W>(std::forward<A>(a)...);                                                 \
  }
TIERKIT_LEVEL_COPY(copy_avx2, TIERKIT_16_AVX2, , , Width256)
TIERKIT_LEVEL_COPY(copy_avx512, TIERKIT_16_AVX512, TIERKIT_WIDE_VECTORS, , Width512)
TIERKIT_LEVEL_COPY(copy_avx512bf16, TIERKIT_16_AVX512BF16, TIERKIT_WIDE_VECTORS, , Width512Bf16)
TIERKIT_LEVEL_COPY(unrolled_avx2, TIERKIT_16_AVX2, , TIERKIT_UNROLLED, Width256)
TIERKIT_LEVEL_COPY(unrolled_avx512, TIERKIT_16_AVX512, TIERKIT_WIDE_VECTORS, TIERKIT_UNROLLED, Width512)
TIERKIT_LEVEL_COPY(unrolled_avx512bf16, TIERKIT_16_AVX512BF16, TIERKIT_WIDE_VECTORS, TIERKIT_UNROLLED,
                   Width512Bf16)
#undef TIERKIT_LEVEL_COPY
#undef TIERKIT_WIDE_VECTORS

// A body's loops are unrolled where it says `kUnrolled = true`: the
// pointwise loops (simd_level.h says why). The row kinds' and maps' are
// not: unrolling them measured +-10% by row width (this Xeon, float32
// LayerNorm rows over 64 MiB: 9.2 -> 8.3 ms at d = 1024, 6.3 -> 6.8 at 4096).
template <typename Body, typename = void>
struct unrolled : std::false_type {};
template <typename Body>
struct unrolled<Body, std::void_t<decltype(Body::kUnrolled)>> : std::bool_constant<Body::kUnrolled> {};
#define TIERKIT_AT_LEVEL(LEVEL)                      \
  template <typename Body, typename... A>            \
  void at_##LEVEL(A&&... a) {                        \
    if constexpr (unrolled<Body>::value)             \
      unrolled_##LEVEL<Body>(std::forward<A>(a)...); \
    else                                             \
      copy_##LEVEL<Body>(std::forward<A>(a)...);     \
  }
TIERKIT_AT_LEVEL(avx2)
TIERKIT_AT_LEVEL(avx512)
TIERKIT_AT_LEVEL(avx512bf16)
#undef TIERKIT_AT_LEVEL

// Runs Body at the CPU's level, at most Cap (a kernel that AVX-512 does not
// pay for caps it at AVX2, and no copy above its cap is compiled), for
// elements of T (bfloat16 takes the AVX512-BF16 copy where the CPU has it
// and DQ, which every such CPU has). False where no vector level runs (the
// baseline, or a CPU without F16C): the caller then runs its plain loop.
template <typename Body, typename T, SimdLevel Cap = SimdLevel::Avx512, typename... A>
bool run_at_level(A&&... a) {
  if (!cpu_has_16bit_simd()) return false;
  if constexpr (Cap == SimdLevel::Avx512) {
    if (simd_level() == SimdLevel::Avx512) {
      if constexpr (std::is_same_v<T, BFloat16>) {
        if (cpu_has_avx512bf16_dq()) {
          at_avx512bf16<Body>(std::forward<A>(a)...);
          return true;
        }
      }
      at_avx512<Body>(std::forward<A>(a)...);
      return true;
    }
  }
  if (simd_level() != SimdLevel::Baseline) {
    at_avx2<Body>(std::forward<A>(a)...);
    return true;
  }
  return false;
}

}  // namespace tierkit::kernels::detail
#endif
