// Elementwise kernels, templated on the element type: the loops that run
// the op table's functors (tierkit/functors.h, the arithmetic a contributor
// writes), apart from them.
//
// Two layers:
//  * contiguous range loops (`add(a, b, out, n)` ...) written so the compiler
//    vectorizes them for float/double: no loop-carried dependency, unit
//    stride, and `omp simd` because `out` may alias an input exactly;
//  * TensorView entry points that check shapes, dtypes and overlap, take the
//    contiguous loop when every operand is contiguous, walk strides
//    otherwise, and split the work over the shared ThreadPool.
// 16-bit floats compute in float and round once on store.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <type_traits>
#include <utility>

#include "tierkit/checks.h"
#include "tierkit/dtype.h"
#include "tierkit/error.h"
#include "tierkit/functors.h"
#include "tierkit/op_table.h"
#include "tierkit/parallel.h"
#include "tierkit/view.h"
#include "tierkit/vmath.h"

// At file scope: the intrinsics' declarations must not land in a tierkit
// namespace (a later `#include <immintrin.h>` in the user's file would then
// find them already included, under our namespace, and declare nothing).
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__) && !defined(__CUDACC__)
#include <cpuid.h>  // __get_cpuid: F16C under clang (cpu_has_f16c)
#include <immintrin.h>
#endif
#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>  // sysconf: the last-level cache's size (streaming_threshold)
#endif

// `omp simd` asserts no loop-carried dependency (true even when out is an
// input: element i only reads element i) and, with -fopenmp-simd (which the
// tierkit::core CMake target adds), makes GCC vectorize at -O2 too, where its
// "very cheap" cost model would otherwise refuse loops that need a tail.
#if defined(__GNUC__) || defined(__clang__)
#define TIERKIT_VECTORIZE_LOOP _Pragma("omp simd")
#else
#define TIERKIT_VECTORIZE_LOOP
#endif

namespace tierkit::kernels {

// ---- contiguous loops ------------------------------------------------------

// Ops whose arithmetic, not memory, limits their loops (an exp, a
// division: SiluMulOp says so with kComputeBound): map_contiguous runs
// them at the widest vector level for float and double too, and the
// strided loops in their FMA build.
template <typename Op, typename = void>
struct compute_bound : std::false_type {};
template <typename Op>
struct compute_bound<Op, std::void_t<decltype(Op::kComputeBound)>> : std::bool_constant<Op::kComputeBound> {};

// Ops of the form outer(inner(a), rest...) whose inner part costs most
// (silu_mul: silu(a), an exp and a division; then one product) declare
// `static C inner(C a)` and `C outer(C inner_a, C rest...) const`, with
// operator() == outer(inner(a), rest...). A 16-bit a has only 65536
// values, so the vector loops over 16-bit storage gather inner(a) from a
// table of all of them (inner_table, built at load, 256 KiB for each
// type and op: in each shared library that includes these headers with
// hidden visibility, once a process where they are exported) and compute
// only outer. The table holds the functor's own float results, computed in
// the IEEE default mode, so the bits are the computed ones (the scalar tails
// and the strided loops compute), but for the sign and payload of a NaN made
// from two NaN operands, which IEEE 754 leaves unspecified and the loops'
// operand orders differ in (tested: a NaN at every position); a caller in another mode (flush-to-zero or
// denormals-are-zero, torch.set_flush_denormal; another rounding) gets the
// computed loop, which follows it. Measured on one Intel Xeon (Sapphire Rapids)
// core, silu_mul over 2^16 in-cache randn elements, computed vs table side
// by side: bfloat16 0.87 -> 0.49 ns an element with AVX-512, 1.4-1.7 ->
// 0.62-0.73 with AVX2; float16 0.84 -> 0.52 with AVX-512. The table's lines
// that a tensor's values touch stay in L1/L2 (uniformly random bit
// patterns, the worst case: 1.4 ns, still faster). Not measured on AMD
// CPUs. Gathers are slow on CPUs with Intel's Gather Data Sampling
// microcode mitigation (Skylake to Ice Lake): there the table may not pay.
// Only an inner computed in float counts (a wider one would be rounded to
// float in the table: a rounding the functor does not do).
template <typename Op, typename = void>
struct has_inner : std::false_type {};
template <typename Op>
struct has_inner<Op, std::enable_if_t<std::is_same_v<decltype(Op::inner(std::declval<float>())), float>>>
    : std::true_type {};
template <typename T, typename Op>
const float* inner_table();
template <typename First, typename...>
struct first_of {
  using type = First;
};

// Whether the calling thread's SSE control register (MXCSR) is in the IEEE
// default mode: round to nearest, no flush-to-zero (bit 15), no
// denormals-are-zero (bit 6). Only then does a table built in that mode
// give the bits this thread would compute. IeeeFloatMode holds that mode
// for its lifetime (exceptions masked) and restores the caller's register,
// flags and all, after.
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__) && !defined(__CUDACC__)
inline bool ieee_float_mode() { return (_mm_getcsr() & 0xE040u) == 0; }
class IeeeFloatMode {
 public:
  IeeeFloatMode() : saved_(_mm_getcsr()) { _mm_setcsr(0x1f80u); }
  ~IeeeFloatMode() { _mm_setcsr(saved_); }
  IeeeFloatMode(const IeeeFloatMode&) = delete;
  IeeeFloatMode& operator=(const IeeeFloatMode&) = delete;

 private:
  unsigned saved_;
};
#else
inline bool ieee_float_mode() { return true; }  // no table loop is built here
struct IeeeFloatMode {};
#endif
// outer(inner_a, rest...) as a functor: what the 16-bit blocks apply to the
// gathered values.
template <typename Op>
struct OuterOp {
  const Op& op;
  template <typename... C>
  float operator()(float inner_a, C... rest) const {
    return op.outer(inner_a, rest...);
  }
};
// inner(a) alone, for building the table with the float loops.
template <typename Op>
struct InnerOp {
  static constexpr bool kComputeBound = true;
  float operator()(float a) const { return Op::inner(a); }
};

#define TIERKIT_MAP_LOOP \
  TIERKIT_VECTORIZE_LOOP \
  for (std::int64_t i = 0; i < n; ++i) store_compute(out + i, op(load_compute(in + i)...));

// Builds for baseline x86-64 get SSE2 only; the same loop compiled for AVX2
// (or AVX-512) and picked at run time moves twice (four times) the bytes per
// instruction (measured on 1e6 in-cache floats: 392 us with SSE2, 198 us with
// AVX2), and makes the branch-free half/bfloat16 conversions (dtype.h)
// vectorize. Never "fma": contracting a*x+b into one rounding would change
// results (and -ffp-contract=off forbids it anyway).
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__) && !defined(__AVX2__) && \
    !defined(__CUDACC__)
#define TIERKIT_SIMD_DISPATCH 1
namespace detail {
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
// The vector loops are unrolled (GCC's -funroll-loops for these two
// functions only; Clang interleaves vectorized loops by itself): a loop of
// one vector per iteration measured 1.95 us for a 1e4-element float add on
// AMD Zen 3 when the operands sit at unlucky offsets modulo 4 KiB (as numpy
// happens to place them), 1.45-1.55 us unrolled; other offsets ~1.3 us
// either way.
#if defined(__GNUC__) && !defined(__clang__)
#define TIERKIT_UNROLLED , optimize("unroll-loops")
#else
#define TIERKIT_UNROLLED
#endif
// The levels' targets. With "fma" only an explicit std::fma becomes one:
// fp-contract=off (core's flag, and on the functions themselves, in case a
// consumer's build lacks the flag) keeps a*x+b rounded twice.
#define TIERKIT_AVX2 __attribute__((target("avx2,fma"), optimize("fp-contract=off") TIERKIT_UNROLLED))
#define TIERKIT_AVX512 \
  __attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl"), optimize("fp-contract=off") TIERKIT_UNROLLED))
template <typename T, typename Op, typename... In>
TIERKIT_AVX2 void map_contiguous_avx2(const Op& op, T* out, std::int64_t n, const In*... in) {
  TIERKIT_MAP_LOOP
}
template <typename T, typename Op, typename... In>
TIERKIT_AVX512 void map_contiguous_avx512(const Op& op, T* out, std::int64_t n, const In*... in) {
  TIERKIT_MAP_LOOP
}

// The 16-bit types in blocks: kBlock16 elements of each input converted to
// float in aligned stack buffers by explicit vector conversions, the op's
// plain float loop over the block (vectorized like float's own), the
// results converted back. GCC's vectorization of the mixed-width loop
// (16-bit loads, float arithmetic) spilled registers once an op had an exp
// in it: bfloat16 silu_mul over 1e6 elements on one AMD Zen 4 core took
// 0.50 ns an element with AVX-512 (1.0 with AVX2), float's own loop 0.26;
// blocked, 0.30 (with vexp_sigmoid). A plain add: 0.12 -> 0.08 ns.
// (On Zen 3 a first float16 version that staged blocks through scalar
// conversions was 3.5x slower than converting a vector at a time; these
// conversions are vectors.) The block is read whole before it is written,
// so out may alias an input exactly.
//
// Conversions, bit-identical to the scalar ones (tests/test_conversions_simd.cpp,
// every input): float16 through F16C, which rounds to nearest even and
// handles subnormals as the scalar code does; only NaN outputs differ (F16C
// keeps payload bits, the scalar gives sign | 0x7e00), so those lanes are
// rewritten. bfloat16 by integer arithmetic, the scalar formula in lanes.
// The functions carry "fma" so that vmath::vexp_sigmoid's std::fma becomes
// an instruction; no other contraction happens (-ffp-contract=off, core's
// flag, and fp-contract=off on the functions themselves).
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

inline void canonical_nans(const float* in, Half* out, unsigned lanes) {
  for (; lanes; lanes &= lanes - 1) {
    const int k = __builtin_ctz(lanes);
    out[k].bits = Half::from_float(in[k]);
  }
}

// The 16-bit loops' targets (the row kernels' 16-bit rows use them too).
#define TIERKIT_16_AVX2 __attribute__((target("avx2,f16c,fma")))
#define TIERKIT_16_AVX512 __attribute__((target("avx2,f16c,fma,avx512f,avx512bw,avx512vl")))

// Each converter moves one vector of floats' worth, in order: 8 elements
// (AVX2) or 16 (AVX-512). (Widening bfloat16 by interleaving with zeros,
// which permutes the elements, measured no faster for silu_mul; the row kernels'
// sums need the order.)
inline constexpr std::int64_t kLanes256 = 8;
inline constexpr std::int64_t kLanes512 = 16;

TIERKIT_16_AVX2 inline void to_floats_256(const Half* in, float* out) {
  _mm256_store_ps(out, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in))));
}
TIERKIT_16_AVX2 inline void from_floats_256(const float* in, Half* out) {
  const __m256 v = _mm256_load_ps(in);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out),
                   _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  const unsigned nan = static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
  if (nan) canonical_nans(in, out, nan);
}
TIERKIT_16_AVX2 inline void to_floats_256(const BFloat16* in, float* out) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in)));
  _mm256_store_ps(out, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
}
// BFloat16::from_float in lanes: (x + 0x7fff + lsb) >> 16, NaNs quieted.
TIERKIT_16_AVX2 inline void from_floats_256(const float* in, BFloat16* out) {
  const __m256 v = _mm256_load_ps(in);
  const __m256i x = _mm256_castps_si256(v);
  const __m256i hi = _mm256_srli_epi32(x, 16);
  const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb), 16);
  const __m256i quiet = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
  const __m256i r =
      _mm256_blendv_epi8(rounded, quiet, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
  // 32 -> 16 bits (every lane is <= 0xffff, so the unsigned saturation never
  // bites), the two 128-bit halves' results brought together.
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm256_castsi256_si128(packed));
}
// inner_table's entries for 8 or 16 16-bit patterns (any 16-bit type).
TIERKIT_16_AVX2 inline void gather_256(const void* in, const float* table, float* out) {
  const __m256i idx = _mm256_cvtepu16_epi32(_mm_loadu_si128(static_cast<const __m128i*>(in)));
  _mm256_store_ps(out, _mm256_mask_i32gather_ps(_mm256_setzero_ps(), table, idx,
                                                _mm256_castsi256_ps(_mm256_set1_epi32(-1)), 4));
}
TIERKIT_16_AVX512 inline void gather_512(const void* in, const float* table, float* out) {
  const __m512i idx =
      _mm512_maskz_cvtepu16_epi32(0xffff, _mm256_loadu_si256(static_cast<const __m256i*>(in)));
  _mm512_store_ps(out, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), 0xffff, idx, table, 4));
}

TIERKIT_16_AVX512 inline void to_floats_512(const Half* in, float* out) {
  // The masked form: the plain one starts from _mm512_undefined_ps, which
  // GCC 12 reports as maybe-uninitialized (as it does for the plain integer
  // shifts and conversions: hence their maskz forms below).
  _mm512_store_ps(out, _mm512_mask_cvtph_ps(_mm512_setzero_ps(), 0xffff,
                                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in))));
}
TIERKIT_16_AVX512 inline void from_floats_512(const float* in, Half* out) {
  const __m512 v = _mm512_load_ps(in);
  _mm256_storeu_si256(
      reinterpret_cast<__m256i*>(out),
      _mm512_mask_cvtps_ph(_mm256_setzero_si256(), 0xffff, v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  const unsigned nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  if (nan) canonical_nans(in, out, nan);
}
TIERKIT_16_AVX512 inline void to_floats_512(const BFloat16* in, float* out) {
  const __m512i w =
      _mm512_maskz_cvtepu16_epi32(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in)));
  _mm512_store_ps(out, _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, w, 16)));
}
TIERKIT_16_AVX512 inline __m512i bf16_bits_512(const float* in) {
  const __m512 v = _mm512_load_ps(in);
  const __m512i x = _mm512_castps_si512(v);
  const __m512i hi = _mm512_maskz_srli_epi32(0xffff, x, 16);
  const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_maskz_srli_epi32(
      0xffff, _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), lsb), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  return _mm512_mask_or_epi32(rounded, nan, hi, _mm512_set1_epi32(0x40));
}
TIERKIT_16_AVX512 inline void from_floats_512(const float* in, BFloat16* out) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out),
                      _mm512_maskz_cvtepi32_epi16(0xffff, bf16_bits_512(in)));
}

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
TIERKIT_16_AVX512BF16 inline void from_floats_512_bf16(const float* in, BFloat16* out) {
  const __m512 v = _mm512_load_ps(in);
  const __m512i x = _mm512_castps_si512(v);
  // Subnormal: exponent bits 0, mantissa not.
  const __mmask16 subnormal = _mm512_mask_test_epi32_mask(
      _mm512_testn_epi32_mask(x, _mm512_set1_epi32(0x7f800000)), x, _mm512_set1_epi32(0x007fffff));
  const __m256i r = subnormal ? _mm512_maskz_cvtepi32_epi16(0xffff, bf16_bits_512(in))
                              : reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), r);
}

inline constexpr std::int64_t kBlock16 = 256;

template <typename Op, std::size_t N, std::size_t... K>
__attribute__((always_inline)) inline void apply_block(const Op& op, const float (&src)[N][kBlock16],
                                                       float* dst, std::int64_t m,
                                                       std::index_sequence<K...>) {
  TIERKIT_VECTORIZE_LOOP
  for (std::int64_t j = 0; j < m; ++j) dst[j] = op(src[K][j]...);
}
// The block's op: outer alone where src[0] holds gathered inner(a) values
// (`gathered`: an op with an inner part, its table in use), else op whole.
template <typename Op, std::size_t N, typename Seq>
__attribute__((always_inline)) inline void apply_block_of(const Op& op, bool gathered,
                                                          const float (&src)[N][kBlock16], float* dst,
                                                          std::int64_t m, Seq seq) {
  if constexpr (has_inner<Op>::value)
    if (gathered) return apply_block(OuterOp<Op>{op}, src, dst, m, seq);
  apply_block(op, src, dst, m, seq);
}

// One body for both widths (a macro: each copy is compiled under its own
// function's target attribute). The last elements (fewer than LANES) go
// through the scalar conversions, which give the same bits. An op with an
// inner part (has_inner) gets its first block from inner_table instead
// (where there is a block, and in the IEEE default mode).
#define TIERKIT_16_BLOCKS(LANES, TO_FLOATS, FROM_FLOATS, GATHER, STREAM_LINE)               \
  constexpr bool kTable = has_inner<Op>::value;                                             \
  const float* table = nullptr;                                                             \
  if constexpr (kTable) {                                                                   \
    static_assert(std::is_same_v<typename first_of<In...>::type, T>,                        \
                  "the table is indexed by the first input's bits: it must be of T");       \
    if (n >= (LANES) && ieee_float_mode()) table = inner_table<T, Op>();                    \
  }                                                                                         \
  alignas(64) float src[sizeof...(In)][kBlock16];                                           \
  alignas(64) float dst[kBlock16];                                                          \
  alignas(64) T lines[kBlock16];                                                            \
  std::int64_t i = 0;                                                                       \
  if (stream)                                                                               \
    for (; i < n && reinterpret_cast<std::uintptr_t>(out + i) % 64 != 0; ++i)               \
      store_compute(out + i, op(load_compute(in + i)...));                                  \
  while (n - i >= (LANES)) {                                                                \
    const std::int64_t m = std::min<std::int64_t>(kBlock16, (n - i) / (LANES) * (LANES));   \
    std::size_t k = 0;                                                                      \
    (                                                                                       \
        (void)[&](const auto* p, float* to) {                                               \
          if (table && to == src[0]) {                                                      \
            for (std::int64_t j = 0; j < m; j += (LANES)) GATHER(p + i + j, table, to + j); \
          } else {                                                                          \
            for (std::int64_t j = 0; j < m; j += (LANES)) TO_FLOATS(p + i + j, to + j);     \
          }                                                                                 \
        }(in, src[k++]),                                                                    \
        ...);                                                                               \
    apply_block_of(op, table != nullptr, src, dst, m, std::index_sequence_for<In...>{});    \
    if (stream && m % kLine16 == 0) {                                                       \
      for (std::int64_t j = 0; j < m; j += (LANES)) FROM_FLOATS(dst + j, lines + j);        \
      for (std::int64_t j = 0; j < m; j += kLine16) STREAM_LINE(lines + j, out + i + j);    \
    } else {                                                                                \
      for (std::int64_t j = 0; j < m; j += (LANES)) FROM_FLOATS(dst + j, out + i + j);      \
    }                                                                                       \
    i += m;                                                                                 \
  }                                                                                         \
  for (; i < n; ++i) store_compute(out + i, op(load_compute(in + i)...));                   \
  if (stream) _mm_sfence();

// A 64-byte line of 16-bit results from `from` (aligned) to `to` (aligned),
// around the cache.
inline constexpr std::int64_t kLine16 = 32;
TIERKIT_16_AVX2 inline void stream_line_256(const void* from, void* to) {
  const auto* f = static_cast<const __m256i*>(from);
  auto* t = static_cast<__m256i*>(to);
  _mm256_stream_si256(t, _mm256_load_si256(f));
  _mm256_stream_si256(t + 1, _mm256_load_si256(f + 1));
}
TIERKIT_16_AVX512 inline void stream_line_512(const void* from, void* to) {
  _mm512_stream_si512(static_cast<__m512i*>(to), _mm512_load_si512(from));
}

// `stream`: whole blocks' results go out a line at a time around the cache
// (streaming_stores_16bit), converted into `lines` first: a converter's own
// store is half a line (AVX-512) or a quarter (AVX2), and non-temporal
// partial lines combine worse than whole ones.
template <typename T, typename Op, typename... In>
TIERKIT_16_AVX2 __attribute__((optimize("fp-contract=off") TIERKIT_UNROLLED)) void map_16bit_avx2(
    const Op& op, T* out, std::int64_t n, bool stream, const In*... in) {
  TIERKIT_16_BLOCKS(kLanes256, to_floats_256, from_floats_256, gather_256, stream_line_256);
}
template <typename T, typename Op, typename... In>
TIERKIT_16_AVX512 __attribute__((optimize("fp-contract=off") TIERKIT_UNROLLED)) void map_16bit_avx512(
    const Op& op, T* out, std::int64_t n, bool stream, const In*... in) {
  TIERKIT_16_BLOCKS(kLanes512, to_floats_512, from_floats_512, gather_512, stream_line_512);
}
template <typename Op, typename... In>
TIERKIT_16_AVX512BF16 __attribute__((optimize("fp-contract=off") TIERKIT_UNROLLED)) void map_bf16_avx512bf16(
    const Op& op, BFloat16* out, std::int64_t n, bool stream, const In*... in) {
  using T = BFloat16;
  TIERKIT_16_BLOCKS(kLanes512, to_floats_512, from_floats_512_bf16, gather_512, stream_line_512);
}
#undef TIERKIT_16_BLOCKS

// Streaming (non-temporal) stores for float and double: the op's loop
// writes a 256-byte block on the stack (vectorized as map_contiguous_avx2's),
// whose lines then go to `out` with 256-bit (AVX2) or 512-bit (AVX-512)
// streams, around the cache.
// An ordinary store first reads the destination's line into the cache (a
// read for ownership), so a kernel that writes memory moves 1.5x (unary) or
// 1.33x (binary) the bytes it must; measured with the bench's compiled
// STREAM on two AMD Zen 4 cores: scale 39 GB/s ordinary, 58 non-temporal.
// Only where the output will not be in the cache for its reader anyway:
// map_contiguous asks streaming_stores() (below). Scalar head up to a
// 64-byte boundary of `out`, so each streamed group fills a whole line;
// scalar tail; a fence, so the stores are visible before the chunk reports
// done. Reads the block's inputs before writing it: out may alias an input
// exactly.
#define TIERKIT_STREAMING_LOOP(BYTES, VEC, LOAD, STREAM)                                          \
  constexpr std::int64_t kBlock = 256 / sizeof(T);                                                \
  constexpr std::int64_t kVector = (BYTES) / sizeof(T);                                           \
  alignas(64) T block[kBlock];                                                                    \
  std::int64_t i = 0;                                                                             \
  for (; i < n && reinterpret_cast<std::uintptr_t>(out + i) % 64 != 0; ++i)                       \
    store_compute(out + i, op(load_compute(in + i)...));                                          \
  for (; n - i >= kBlock; i += kBlock) {                                                          \
    TIERKIT_VECTORIZE_LOOP                                                                        \
    for (std::int64_t j = 0; j < kBlock; ++j) block[j] = op(load_compute(in + i + j)...);         \
    for (std::int64_t j = 0; j < kBlock; j += kVector)                                            \
      STREAM(reinterpret_cast<VEC*>(out + i + j), LOAD(reinterpret_cast<const VEC*>(block + j))); \
  }                                                                                               \
  for (; i < n; ++i) store_compute(out + i, op(load_compute(in + i)...));                         \
  _mm_sfence();
template <typename T, typename Op, typename... In>
TIERKIT_AVX2 void map_streaming_avx2(const Op& op, T* out, std::int64_t n, const In*... in) {
  TIERKIT_STREAMING_LOOP(32, __m256i, _mm256_load_si256, _mm256_stream_si256)
}
// Where the CPU has AVX-512: whole-line streams (measured on an Intel Xeon,
// two threads, 3.15e8-element scale: 256-bit 28-31 GB/s, 512-bit 33-35).
template <typename T, typename Op, typename... In>
TIERKIT_AVX512 void map_streaming_avx512(const Op& op, T* out, std::int64_t n, const In*... in) {
  TIERKIT_STREAMING_LOOP(64, __m512i, _mm512_load_si512, _mm512_stream_si512)
}
#undef TIERKIT_STREAMING_LOOP
}  // namespace detail
#endif

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
      share = llc / static_cast<long>(std::max(1u, std::thread::hardware_concurrency()));
    }
    return static_cast<std::size_t>(share) / 4 * 3;
  }();
  return threshold;
}
// The 16-bit types too, where their vector loops run (whole lines from a
// converted block: map_16bit_*; on an AVX-512 Xeon, bfloat16 silu_mul of
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

// out[i] = op(in[i]...) over n contiguous elements.
template <typename T, typename Op, typename... In>
void map_contiguous(const Op& op, T* out, std::int64_t n, const In*... in) {
#ifdef TIERKIT_SIMD_DISPATCH
  constexpr bool k16 = sizeof(T) == 2;
  constexpr bool wide = compute_bound<Op>::value;
  if constexpr (!k16) {
    if (streaming_stores<T>(n, sizeof...(In) + 1)) {
      if (detail::simd_level() == detail::SimdLevel::Avx512)
        return detail::map_streaming_avx512(op, out, n, in...);
      return detail::map_streaming_avx2(op, out, n, in...);
    }
  }
  const bool stream16 = k16 && streaming_stores<T>(n, sizeof...(In) + 1);
  (void)stream16;
  switch (detail::simd_level()) {
    case detail::SimdLevel::Avx512:
      if constexpr (k16) {
        if constexpr (std::is_same_v<T, BFloat16>)
          if (detail::cpu_has_avx512bf16() && detail::cpu_has_16bit_simd())
            return detail::map_bf16_avx512bf16(op, out, n, stream16, in...);
        if (detail::cpu_has_16bit_simd()) return detail::map_16bit_avx512(op, out, n, stream16, in...);
        return detail::map_contiguous_avx512(op, out, n, in...);
      }
      // AVX-512 pays for the 16-bit conversions and for compute-bound ops
      // (silu_mul's exp and division: float over 2^14 in-cache elements on
      // one Intel Xeon core, 0.85-1.04 ns an element with AVX2, 0.53-0.63
      // with AVX-512, side by side); other float and double loops are memory-bound, where it
      // measured 5-10% slower than AVX2 (Intel, 64M-element add: 12.2 vs
      // 13.5 GB/s on one core).
      if constexpr (wide) return detail::map_contiguous_avx512(op, out, n, in...);
      return detail::map_contiguous_avx2(op, out, n, in...);
    case detail::SimdLevel::Avx2:
      if constexpr (k16)
        if (detail::cpu_has_16bit_simd()) return detail::map_16bit_avx2(op, out, n, stream16, in...);
      return detail::map_contiguous_avx2(op, out, n, in...);
    case detail::SimdLevel::Baseline: break;
  }
#endif
  TIERKIT_MAP_LOOP
}
#undef TIERKIT_MAP_LOOP
#undef TIERKIT_UNROLLED

// Op::inner(x) for every bit pattern x of the 16-bit type T, in float
// (has_inner above): built on first use by the float loops (the scalar
// functor's bits) in the IEEE default mode whatever the first caller's,
// then kept for the life of the process (never freed, so no loop can
// outlive it at exit).
template <typename T, typename Op>
const float* inner_table() {
  static_assert(sizeof(T) == 2, "a table of every value exists for 16-bit types only");
  static const float* const table = [] {
    [[maybe_unused]] const IeeeFloatMode mode;
    constexpr std::int64_t kValues = 65536;
    float* values = new float[kValues];
    for (std::int64_t u = 0; u < kValues; ++u) {
      const T x = T::from_bits(static_cast<std::uint16_t>(u));
      values[u] = load_compute(&x);
    }
    map_contiguous(InnerOp<Op>{}, values, kValues, static_cast<const float*>(values));
    return values;
  }();
  return table;
}

// Every lazily built static above, built while the library that includes
// this header loads (an inline variable's initializer runs then, in every
// shared object with a copy), not on first use: a fork() while another
// thread is inside a first use (a DataLoader forking its workers while a
// thread runs its first bfloat16 silu_mul) would leave the child waiting
// forever on that static's guard. About 1 ms at load: the CPU queries, the
// environment, and the 16-bit tables of every op of the op table that has
// an inner part (two of 256 KiB each).
#ifdef TIERKIT_SIMD_DISPATCH
template <typename Op>
void build_inner_tables() {
  if constexpr (has_inner<Op>::value) {
    (void)inner_table<Half, Op>();
    (void)inner_table<BFloat16, Op>();
  }
}
inline bool build_statics_at_load() {
  (void)detail::simd_level();
  (void)detail::cpu_has_16bit_simd();
  (void)detail::cpu_has_avx512bf16();
  (void)detail::cpu_has_avx512bf16_dq();
  (void)streaming_threshold();
#define TIERKIT_BUILD_TABLES(name, Functor, n_tensors, n_scalars) build_inner_tables<Functor##Op<float>>();
  TIERKIT_POINTWISE_OPS(TIERKIT_BUILD_TABLES)
#undef TIERKIT_BUILD_TABLES
  return true;
}
#else
inline bool build_statics_at_load() {
  (void)streaming_threshold();
  return true;
}
#endif
inline const bool kStaticsBuiltAtLoad = build_statics_at_load();
#undef TIERKIT_AVX2
#undef TIERKIT_AVX512

// The functor F<C> of an op with float arguments `scalars` (schema order).
template <template <typename> class F, typename C, std::size_t M, std::size_t... J>
F<C> make_functor(const std::array<double, M>& scalars, std::index_sequence<J...>) {
  return F<C>{static_cast<C>(scalars[J])...};
}
template <template <typename> class F, typename C, std::size_t M>
F<C> make_functor(const std::array<double, M>& scalars) {
  return make_functor<F, C>(scalars, std::make_index_sequence<M>{});
}

template <typename T>
void add(const T* a, const T* b, T* out, std::int64_t n) {
  map_contiguous(AddOp<compute_t<T>>{}, out, n, a, b);
}
template <typename T>
void mul(const T* a, const T* b, T* out, std::int64_t n) {
  map_contiguous(MulOp<compute_t<T>>{}, out, n, a, b);
}
template <typename T>
void silu_mul(const T* a, const T* b, T* out, std::int64_t n) {
  map_contiguous(SiluMulOp<compute_t<T>>{}, out, n, a, b);
}
template <typename T>
void scale_shift(const T* x, compute_t<T> alpha, compute_t<T> beta, T* out, std::int64_t n) {
  map_contiguous(ScaleShiftOp<compute_t<T>>{alpha, beta}, out, n, x);
}
template <typename T>
void muladd(const T* a, const T* b, compute_t<T> c, T* out, std::int64_t n) {
  map_contiguous(MulAddOp<compute_t<T>>{c}, out, n, a, b);
}

// ---- the driver shared by every view entry point (checks: tierkit/checks.h) --

namespace detail {

// Pointer to the element at row-major linear index `linear` of `v`.
template <typename T>
T* element_at(const TensorView& v, std::int64_t linear) {
  std::int64_t pos = 0;
  for (int d = v.rank() - 1; d >= 0; --d) {
    const std::int64_t size = v.shape()[d];
    pos += (linear % size) * v.strides()[d];
    linear /= size;
  }
  return static_cast<T*>(v.data()) + pos;
}

// Contiguous chunk [lo, hi): the vectorized loop on offset pointers.
template <typename T, typename Op, std::size_t N, std::size_t... K>
void map_chunk(const Op& op, const TensorView& out, const TensorView* const (&ins)[N], std::int64_t lo,
               std::int64_t hi, std::index_sequence<K...>) {
  map_contiguous(op, static_cast<T*>(out.data()) + lo, hi - lo,
                 (static_cast<const T*>(ins[K]->data()) + lo)...);
}

// Element-by-element over [begin, end) in row-major order of `out`, walking
// each operand's strides; runs along the innermost dimension step by stride.
#define TIERKIT_STRIDED_ROWS                                             \
  for (std::int64_t i = begin; i < end;) {                               \
    const std::int64_t count = std::min(inner - i % inner, end - i);     \
    T* o = element_at<T>(out, i);                                        \
    const T* in[N] = {element_at<const T>(*ins[K], i)...};               \
    for (std::int64_t k = 0; k < count; ++k)                             \
      store_compute(o + k * so, op(load_compute(in[K] + k * si[K])...)); \
    i += count;                                                          \
  }
template <typename T, typename Op, std::size_t N, std::size_t... K>
void strided_rows(const Op& op, const TensorView& out, const TensorView* const (&ins)[N], std::int64_t begin,
                  std::int64_t end, std::int64_t inner, std::int64_t so, const std::int64_t (&si)[N],
                  std::index_sequence<K...>) {
  TIERKIT_STRIDED_ROWS
}
#ifdef TIERKIT_SIMD_DISPATCH
// The same rows where the CPU has FMA: a compute-bound op's std::fma is then an
// instruction, not a call into libm (the same bits either way).
template <typename T, typename Op, std::size_t N, std::size_t... K>
__attribute__((target("avx2,fma"), optimize("fp-contract=off"))) void strided_rows_fma(
    const Op& op, const TensorView& out, const TensorView* const (&ins)[N], std::int64_t begin,
    std::int64_t end, std::int64_t inner, std::int64_t so, const std::int64_t (&si)[N],
    std::index_sequence<K...>) {
  TIERKIT_STRIDED_ROWS
}
#endif
#undef TIERKIT_STRIDED_ROWS

template <typename T, typename Op, std::size_t N, std::size_t... K>
void map_strided(const Op& op, const TensorView& out, const TensorView* const (&ins)[N], std::int64_t begin,
                 std::int64_t end, std::index_sequence<K...> seq) {
  const int rank = out.rank();
  const std::int64_t inner = rank == 0 ? 1 : out.shape()[rank - 1];
  const std::int64_t so = rank == 0 ? 0 : out.strides()[rank - 1];
  const std::int64_t si[N] = {(rank == 0 ? 0 : ins[K]->strides()[rank - 1])...};
#ifdef TIERKIT_SIMD_DISPATCH
  if constexpr (compute_bound<Op>::value)
    if (cpu_has_16bit_simd()) return strided_rows_fma<T>(op, out, ins, begin, end, inner, so, si, seq);
#endif
  strided_rows<T>(op, out, ins, begin, end, inner, so, si, seq);
}

// Roughly 64 KiB of float per chunk: big enough to amortise the hand-off,
// small enough to keep two cores busy on mid-size inputs.
inline constexpr std::int64_t kGrain = 16384;

// The one driver behind every view entry point: check, dispatch on dtype,
// pick the contiguous or strided loop, hand the range to `run`.
// `make_op(C{})` builds the operation for compute type C.
template <std::size_t N, typename Runner, typename MakeOp>
void map_views(const TensorView& out, const TensorView* const (&ins)[N], const char* const (&names)[N],
               const Runner& run, MakeOp make_op) {
  checks::accepted_dtype("out", out.dtype());
  checks::writable_layout(out);
  for (std::size_t k = 0; k < N; ++k) checks::operand(out, *ins[k], names[k]);
  dispatch_accepted(out.dtype(), "out", [&](auto tag) {
    using T = decltype(tag);
    const auto op = make_op(compute_t<T>{});
    bool contiguous = out.is_contiguous();
    for (std::size_t k = 0; k < N; ++k) contiguous = contiguous && ins[k]->is_contiguous();
    const auto seq = std::make_index_sequence<N>{};
    run(out.numel(), kGrain, [&](std::int64_t lo, std::int64_t hi) {
      if (contiguous) {
        map_chunk<T>(op, out, ins, lo, hi, seq);
      } else {
        map_strided<T>(op, out, ins, lo, hi, seq);
      }
    });
  });
}

}  // namespace detail

// ---- view entry points ------------------------------------------------------
// `run(n, grain, fn)` decides how [0, n) is split; fn(lo, hi) does a chunk.
// The default is core's ThreadPool; a host framework passes its own (the
// torch tier passes at::parallel_for, so torch.set_num_threads governs it).

struct PoolRunner {
  unsigned max_threads = 0;  // 0: every pool thread; 1: the calling thread only
  template <typename Fn>
  void operator()(std::int64_t n, std::int64_t grain, const Fn& fn) const {
    if (n <= 0) return;
    // One chunk's worth (the pool would run it inline anyway) or one thread
    // allowed: call it here, without building the pool's std::function
    // (measured: 0.9k instructions a call at n=1e3, a fifth of the bridge's).
    if (n < 2 * grain || max_threads == 1) return fn(0, n);
    ThreadPool::global().parallel_for(0, n, grain, fn, max_threads);
  }
};

template <typename Runner = PoolRunner>
void add(const TensorView& a, const TensorView& b, const TensorView& out, const Runner& run = {}) {
  detail::map_views(out, {&a, &b}, {"a", "b"}, run, [](auto c) { return AddOp<decltype(c)>{}; });
}

template <typename Runner = PoolRunner>
void mul(const TensorView& a, const TensorView& b, const TensorView& out, const Runner& run = {}) {
  detail::map_views(out, {&a, &b}, {"a", "b"}, run, [](auto c) { return MulOp<decltype(c)>{}; });
}

template <typename Runner = PoolRunner>
void silu_mul(const TensorView& a, const TensorView& b, const TensorView& out, const Runner& run = {}) {
  detail::map_views(out, {&a, &b}, {"a", "b"}, run, [](auto c) { return SiluMulOp<decltype(c)>{}; });
}

template <typename Runner = PoolRunner>
void scale_shift(const TensorView& x, double alpha, double beta, const TensorView& out,
                 const Runner& run = {}) {
  detail::map_views(out, {&x}, {"x"}, run, [=](auto c) {
    using C = decltype(c);
    return ScaleShiftOp<C>{static_cast<C>(alpha), static_cast<C>(beta)};
  });
}

template <typename Runner = PoolRunner>
void muladd(const TensorView& a, const TensorView& b, double c, const TensorView& out,
            const Runner& run = {}) {
  detail::map_views(out, {&a, &b}, {"a", "b"}, run, [=](auto z) {
    using C = decltype(z);
    return MulAddOp<C>{static_cast<C>(c)};
  });
}

// Any op's functor F<C> over views: `in` (named `names` in errors), its
// float arguments `scalars`, into `out`. What the tiers' generic code calls
// for every pointwise op of the op table.
template <template <typename> class F, std::size_t N, std::size_t M, typename Runner = PoolRunner>
void pointwise(const std::array<const TensorView*, N>& in, const std::array<const char*, N>& names,
               const std::array<double, M>& scalars, const TensorView& out, const Runner& run = {}) {
  const TensorView* ins[N];
  const char* ns[N];
  for (std::size_t k = 0; k < N; ++k) {
    ins[k] = in[k];
    ns[k] = names[k];
  }
  detail::map_views(out, ins, ns, run, [&](auto c) { return make_functor<F, decltype(c)>(scalars); });
}

}  // namespace tierkit::kernels
