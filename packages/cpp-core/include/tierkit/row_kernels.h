// The row kinds' loops: what runs a row functor (tierkit/row_functors.h)
// over a contiguous [rows, d] block, for every row-reduction entry of the op
// table and their fused residual forms. A functor
// writes a row's arithmetic; this file owns everything around it: the fixed
// summation order the functors' sums use (lane_sum, chunk_sum), the 16-bit
// chunk buffers, the per-SIMD-level copies and their dispatch, the parallel
// split over rows, parameters read as they were at the call, and the
// parameters' gradients reduced across rows in a fixed order.
//
// A row kind K (row_functors.h) gives:
//   K::kStats   per-row values saved for backward (for RMSNorm rstd, for
//               LayerNorm mean and rstd), in compute_t<T>, row r's at
//               stats + r * kStats;
//   K::kWideOutput whether the forward may write y in compute_t<T> where x is
//               16-bit (row_forward's Y; RMSNorm's, for casting_mode "llama"
//               with a float32 weight, whose product is float32);
//   K::Rows<T>  static forward, add_forward and backward over rows [lo, hi)
//               (signatures below), in scalar C++ the compiler vectorizes;
//   K::RowsVec<W, T> the same for float and 16-bit T a register block of
//               kRowLanes at a time (W: the level's float16 converters), bit
//               for bit Rows<T>'s.
//
// Determinism: every row's sums run in one fixed order (lane_sum: chunks
// of 256, each in 16 partial sums over j mod 16, added into the row's 16
// lanes, then a fixed halving tree), whatever the thread count, the
// Runner's chunking or the SIMD level; the parameters' gradients are summed
// over rows in blocks whose number depends on rows and d only (each block's
// rows in order, then the blocks in a fixed pairwise tree). So forward and
// backward are bit-identical for any Runner. -ffp-contract=off (the
// tierkit::core target's flag) keeps the vector code's roundings the scalar
// code's.
#pragma once

#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

#include "tierkit/dtype.h"
#include "tierkit/kernels.h"

namespace tierkit::kernels {

// A row's per-column parameters (either may be null: absent), of element
// type P. The entry points (row_forward, row_add_forward, row_backward) take
// them in x's dtype T or in its compute type compute_t<T> (float32 weights
// beside bfloat16 activations: a mixed-precision model, or a casting mode's
// weight + offset in float), and the row bodies always read them in the
// compute type: 16-bit parameters are widened once per call (exact), so
// both forms give the same bits and a 16-bit x is never converted.
template <typename P>
struct RowParams {
  const P* w = nullptr;  // weight: multiplies
  const P* b = nullptr;  // bias: adds
  // x-hat rounded to x's dtype before the weight multiplies it (HF Llama's
  // `weight * hidden.to(input_dtype)`: casting_mode "llama" with a weight of
  // x's dtype), the product then rounded once more. Kinds without it ignore it.
  bool round_normalized = false;
};

// An entry's RowParams from its P parameters' data (schema order: none, the
// weight, or the weight and the bias; null where absent), as each tier's
// binding holds them.
template <typename P, std::size_t N>
RowParams<P> row_params_of(const std::array<const void*, N>& data) {
  static_assert(N <= 2, "a row entry has at most a weight and a bias");
  RowParams<P> p;
  if constexpr (N > 0) p.w = static_cast<const P*>(data[0]);
  if constexpr (N > 1) p.b = static_cast<const P*>(data[1]);
  return p;
}

namespace detail {

// Partial sums per row: 16 floats are two AVX2 vectors (two independent add
// chains) and keep the reduction's order fixed; GCC does not vectorize a
// single float accumulator without -ffast-math.
inline constexpr int kRowLanes = 16;

// The parameters' gradients' row blocks: at most kRowMaxBlocks, of at least
// kRowMinBlockRows rows, and at most kRowMaxScratch elements of partial sums
// in all.
inline constexpr std::int64_t kRowMaxBlocks = 64;
inline constexpr std::int64_t kRowMinBlockRows = 8;
inline constexpr std::int64_t kRowMaxScratch = std::int64_t{1} << 22;

// The number of blocks for [rows, d] and `grads` gradients of d: a function
// of the shape only.
inline std::int64_t param_grad_blocks(std::int64_t rows, std::int64_t d, std::int64_t grads = 1) {
  std::int64_t b = std::min(kRowMaxBlocks, (rows + kRowMinBlockRows - 1) / kRowMinBlockRows);
  if (d > 0) b = std::min(b, std::max<std::int64_t>(1, kRowMaxScratch / (d * grads)));
  return std::max<std::int64_t>(1, b);
}

// v rounded to T and read back as C (identity for float and double); the
// rounded value is stored at p.
template <typename T>
__attribute__((always_inline)) inline compute_t<T> store_rounded(T* p, compute_t<T> v) {
  if constexpr (std::is_same_v<T, Half>) {
    const std::uint16_t b = Half::from_float(v);
    p->bits = b;
    return Half::to_float(b);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    const std::uint16_t b = BFloat16::from_float(v);
    p->bits = b;
    return ::tierkit::detail::bits_float(static_cast<std::uint32_t>(b) << 16);
  } else {
    *p = v;
    return v;
  }
}

template <typename C>
__attribute__((always_inline)) inline C combine_lanes(C (&acc)[kRowLanes]) {
  for (int w = kRowLanes / 2; w > 0; w /= 2)
    for (int k = 0; k < w; ++k) acc[k] += acc[k + w];
  return acc[0];
}

// sum_j term(j) over j in [0, d), in the documented order: chunks of
// kRowChunk elements, each summed in kRowLanes partial sums (lane j mod
// kRowLanes), the chunk's lanes added to the row's lanes, then the halving
// tree. Two levels keep a lane's sum short (16 terms a chunk, plus one per
// chunk: 32 for d = 4096, not 256), so the float sum's error stays at or
// below eager torch's cascade sum. block(j, v) writes the kRowLanes terms at
// j..j+kRowLanes-1 (all its loads before its stores), one(j) gives one term.
inline constexpr std::int64_t kRowChunk = 256;

// The kRowLanes partial sums as 32-byte GCC vectors (two AVX2 registers of
// float, four of double; SSE2 pairs at the baseline level). Written as a
// scalar array, GCC vectorized the loop over j instead and spent its time
// transposing lanes (vpermd/vblendps: 1 ns an element on one core for float,
// where a pass of scale_shift takes 0.16); one 64-byte vector it kept in
// memory. Lane k is still the sum of the terms j = k mod kRowLanes in order,
// so the result is the scalar code's.
template <typename C>
struct Lanes {
  typedef C Vec __attribute__((vector_size(32)));
  static constexpr int kPer = 32 / sizeof(C), kVecs = kRowLanes / kPer;
  Vec v[kVecs] = {};

  __attribute__((always_inline)) void add(const C (&t)[kRowLanes]) {
    for (int q = 0; q < kVecs; ++q) {
      Vec x;
      __builtin_memcpy(&x, t + q * kPer, sizeof(x));
      v[q] += x;
    }
  }
  __attribute__((always_inline)) void add(const Lanes& o) {
    for (int q = 0; q < kVecs; ++q) v[q] += o.v[q];
  }
  __attribute__((always_inline)) C total() const {
    C lanes[kRowLanes];
    __builtin_memcpy(lanes, v, sizeof(lanes));
    return combine_lanes(lanes);
  }
};
static_assert(sizeof(Lanes<float>) == sizeof(float) * kRowLanes &&
              sizeof(Lanes<double>) == sizeof(double) * kRowLanes);

template <typename C, typename Block, typename One>
__attribute__((always_inline)) inline C lane_sum(std::int64_t d, const Block& block, const One& one) {
  Lanes<C> row;
  for (std::int64_t j0 = 0; j0 < d; j0 += kRowChunk) {
    const std::int64_t end = std::min(d, j0 + kRowChunk);
    Lanes<C> acc;
    std::int64_t j = j0;
    for (; j + kRowLanes <= end; j += kRowLanes) {
      C v[kRowLanes];
      block(j, v);
      acc.add(v);
    }
    if (j < end) {  // the chunk's tail; the lanes past it add +0
      C v[kRowLanes] = {};
      for (int k = 0; j + k < end; ++k) v[k] = one(j + k);
      acc.add(v);
    }
    row.add(acc);
  }
  return row.total();
}
#define TIERKIT_ROW_LAMBDA __attribute__((always_inline))
#define TIERKIT_ROW_INLINE __attribute__((always_inline)) inline
// lane_sum of term(j), each j once (a term may also store element j of a row
// of its own: a kind that keeps its terms for the pass after).
template <typename C, typename Term>
__attribute__((always_inline)) inline C lane_sum_of(std::int64_t d, const Term& term) {
  return lane_sum<C>(
      d,
      [&](std::int64_t j, C* v) TIERKIT_ROW_LAMBDA {
        for (int k = 0; k < kRowLanes; ++k) v[k] = term(j + k);
      },
      term);
}

// Two sums over the same terms' pass, each in lane_sum's order (so each is
// the single sum's bits): a row read once for two statistics.
template <typename C>
struct Sums2 {
  C a, b;
};
template <typename C, typename TermA, typename TermB>
__attribute__((always_inline)) inline Sums2<C> lane_sum2_of(std::int64_t d, const TermA& ta,
                                                            const TermB& tb) {
  Lanes<C> ra, rb;
  for (std::int64_t j0 = 0; j0 < d; j0 += kRowChunk) {
    const std::int64_t end = std::min(d, j0 + kRowChunk);
    Lanes<C> aa, ab;
    std::int64_t j = j0;
    for (; j + kRowLanes <= end; j += kRowLanes) {
      C va[kRowLanes], vb[kRowLanes];
      for (int k = 0; k < kRowLanes; ++k) {
        va[k] = ta(j + k);
        vb[k] = tb(j + k);
      }
      aa.add(va);
      ab.add(vb);
    }
    if (j < end) {  // the chunk's tail; the lanes past it add +0
      C va[kRowLanes] = {}, vb[kRowLanes] = {};
      for (int k = 0; j + k < end; ++k) {
        va[k] = ta(j + k);
        vb[k] = tb(j + k);
      }
      aa.add(va);
      ab.add(vb);
    }
    ra.add(aa);
    rb.add(ab);
  }
  return {ra.total(), rb.total()};
}

// One element in the compute type C (float, or double for double) of a row
// of T: the scalar rows' L (row_terms.h) and, in float, a vector tail's
// (OneAt), as VecAt<W, T> is a vector's.
template <typename C, typename T = C>
struct ScalarAt {
  template <typename P>
  TIERKIT_ROW_INLINE static C ld(const P* p) {
    return static_cast<C>(load_compute(p));
  }
  TIERKIT_ROW_INLINE static C splat(C c) { return c; }
  template <typename P>
  TIERKIT_ROW_INLINE static void st(P* p, C v, bool = false) {
    store_compute(p, v);
  }
  // v rounded to T and read back (casting_mode "llama"'s x-hat).
  TIERKIT_ROW_INLINE static C round(C v) {
    T t;
    return store_rounded(&t, v);
  }
  TIERKIT_ROW_INLINE static void add(C* p, C v) { *p += v; }
};

// When a bfloat16 row's scaled stores may skip bf16_native's check. A row
// scaled by s (RmsNormBody::scale) stores x * s, or x-hat * w with x-hat =
// x * s (rounded to bfloat16 first under casting_mode "llama"). With x_floor
// the row's smallest nonzero |x| and w_floor the weight's (1 without one),
// x_floor * s * min(1, w_floor) * (1 - 2^-7) >= FLT_MIN proves none of them
// subnormal: rounding is monotonic, FLT_MIN is a float and a bfloat16, and
// 2^-7 covers x-hat's roundings (2^-8 to bfloat16, 2^-24 to float) and the
// product's own (2^-53 in double). Zeros scale to zeros, infinities and NaNs
// are not subnormal, and a NaN floor fails the test (the checked path).
inline bool scaled_normal(float x_floor, float s, float w_floor) {
  const double w = w_floor < 1.f ? static_cast<double>(w_floor) : 1.0;
  return static_cast<double>(x_floor) * s * w * (1.0 - 1.0 / 128) >= static_cast<double>(FLT_MIN);
}
// The next row's starts a row's last pass asks for (vec_each): its input's,
// and a second input's where the row reads two (the fused add's x and
// residual). Built from one pointer (or nullptr) where there is one. A hint
// only: the results are the same.
template <typename T>
struct NextRow {
  const T* a = nullptr;
  const T* b = nullptr;
  NextRow() = default;
  // NOLINTNEXTLINE: implicit, as a pointer
  NextRow(const T* first, const T* second = nullptr) : a(first), b(second) {}
};
// Whether p starts a 64-byte line: a streamed vector store needs it (every
// build asks: the scalar ones, aarch64's included, too).
inline bool line_aligned(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 64 == 0; }
// A streamed row's elements before its first whole line (at most d), which
// its kernel stores one at a time so that its blocks start on that line
// (vec_each's `head`); 0 where the row starts a line or does not stream.
template <typename T>
inline std::int64_t line_head(const T* p, std::int64_t d, bool stream) {
  const auto off = static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(p) % 64);
  return stream && off ? std::min<std::int64_t>(d, (64 - off) / static_cast<std::int64_t>(sizeof(T))) : 0;
}
// A row of N elements of T on the stack, as raw storage: T's default
// constructor would zero all N on every row (a rotary row of 128 ran 4.7x
// slower through a zeroed stream row).
template <typename T, std::int64_t N>
struct StackRow {
  alignas(64) unsigned char bytes[N * sizeof(T)];
  T* const p = reinterpret_cast<T*>(bytes);
};

// The vector rows: GCC only. Clang (core's fuzzers) rejects these generic
// vectors across functions of another target and the written-out streaming
// stores; there every type runs Rows<T>, which gives the same bits.
#if defined(TIERKIT_SIMD_DISPATCH) && !defined(__clang__)
#define TIERKIT_ROW_VEC 1
#endif
#ifdef TIERKIT_ROW_VEC

// The vector rows (RowsVec: float and the 16-bit types at the AVX2 and
// AVX-512 levels) work in registers: a block of W::kLanes elements is one
// vector of W's width (8 floats at AVX2, 16 at AVX-512), in GCC's generic
// vectors, which compile at the calling function's level. A sum keeps
// kRowLanes lanes as kRowLanes / W::kLanes vectors, so lane k is still the
// terms j = k mod kRowLanes in lane_sum's chunks and order, and every
// element's arithmetic is the scalar rows', so the results are Rows<T>'s bit
// for bit at every level. (They went through float buffers of a chunk
// before: every pass stored and reloaded its blocks, and the 16-bit
// converters, which carry a target attribute, were called, not inlined,
// from the generic lambdas: on one Zen 4 core in cache, bfloat16 rms_norm
// took 0.59 ns an element at AVX-512 and 2.0 at AVX2, float32 0.18.)
// The vectors pass between always-inline functions only, so GCC's notes on
// their ABI without AVX (-Wpsabi) do not apply.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
// A block's loads and stores. float: plain; bfloat16: integer lanes (the
// same bits as BFloat16's scalar conversions: round to nearest even, NaNs
// quieted); float16: W's F16C converters.
template <typename W, typename T>
TIERKIT_ROW_INLINE typename W::F load_lanes(const T* p) {
  typename W::F v;
  if constexpr (std::is_same_v<T, float>) {
    __builtin_memcpy(&v, p, sizeof(v));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    typename W::U u;
    if constexpr (W::kLanes == 16) {
      // One VPMOVZXWD from memory: GCC splits the generic conversion into
      // two 8-lane halves and an insert (five instructions, not one).
      asm("vpmovzxwd %1, %0" : "=v"(u) : "m"(*reinterpret_cast<const typename W::H*>(p)));
    } else {
      typename W::H h;
      __builtin_memcpy(&h, static_cast<const void*>(p), sizeof(h));
      u = __builtin_convertvector(h, typename W::U);
    }
    const typename W::U b = u << 16;
    __builtin_memcpy(&v, &b, sizeof(v));
  } else {
    alignas(64) float f[W::kLanes];
    W::to(p, f);
    __builtin_memcpy(&v, f, sizeof(v));
  }
  return v;
}
// v's lanes rounded to bfloat16, the 16 bits in each 32-bit lane's low half:
// round to nearest even, NaNs quieted (BFloat16's scalar conversion).
template <typename W>
TIERKIT_ROW_INLINE typename W::U bf16_rounded_bits(typename W::F v) {
  typename W::U x;
  __builtin_memcpy(&x, &v, sizeof(x));
  const typename W::U hi = x >> 16;
  const typename W::U rounded = (x + 0x7fffu + (hi & 1u)) >> 16;
  const typename W::U nan = reinterpret_cast<typename W::U>(v != v);  // all ones where NaN
  return (nan & (hi | 0x40u)) | (~nan & rounded);
}
// VCVTNEPS2BF16 (AVX512-BF16): bf16_rounded_bits' bits in one instruction,
// but for subnormal inputs, which it flushes to zero; a block with one (an
// op's result below 2^-126: rare) returns false and takes the integer lanes.
// (VFPCLASSPS class 0x20: denormal; AVX512-DQ, which every AVX512-BF16 CPU has.)
// kNormal: the caller has proved v holds no subnormal (row_normal_floor), so
// the check and its branch go (three of a bfloat16 block's ~17 instructions).
template <typename W, bool kNormal = false>
TIERKIT_ROW_INLINE bool bf16_native(typename W::F v, typename W::H& h) {
  if constexpr (!kNormal) {
    unsigned short subnormal;
    asm("vfpclassps $0x20, %1, %0" : "=k"(subnormal) : "v"(v));
    if (subnormal) return false;
  }
  asm("vcvtneps2bf16 %1, %0" : "=v"(h) : "v"(v));
  return true;
}

// v stored as T at p; `stream`: float with a non-temporal store, around
// the cache (p aligned to the vector's bytes; row_streams says why the
// 16-bit types store plainly).
// GCC has no generic non-temporal store, and the intrinsics' target
// attributes would keep these generic functions from inlining (above): the
// instruction is written out, in the calling function's vector width.
template <typename W, bool kNormal = false, typename T>
TIERKIT_ROW_INLINE void store_lanes(T* p, typename W::F v, bool stream = false) {
  if constexpr (std::is_same_v<T, float>) {
    if (stream) {
      asm volatile("vmovntps %1, %0" : "=m"(*reinterpret_cast<typename W::F*>(p)) : "v"(v));
    } else {
      __builtin_memcpy(p, &v, sizeof(v));
    }
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    typename W::H h;
    if constexpr (W::kNativeBf16) {
      if (bf16_native<W, kNormal>(v, h)) {
        __builtin_memcpy(static_cast<void*>(p), &h, sizeof(h));
        return;
      }
    }
    h = __builtin_convertvector(bf16_rounded_bits<W>(v), typename W::H);
    __builtin_memcpy(static_cast<void*>(p), &h, sizeof(h));
  } else {
    alignas(64) float f[W::kLanes];
    __builtin_memcpy(f, &v, sizeof(v));
    W::from(f, p);
  }
}
// v rounded to T and read back as float, in registers where T is bfloat16
// (store_lanes' rounding: the same bits); float16 through its converters;
// float as is.
template <typename W, typename T, bool kNormal = false>
TIERKIT_ROW_INLINE typename W::F round_lanes(typename W::F v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    typename W::U b;
    if constexpr (W::kNativeBf16) {
      typename W::H h;
      if (bf16_native<W, kNormal>(v, h))
        asm("vpmovzxwd %1, %0" : "=v"(b) : "v"(h));  // one instruction (see load_lanes)
      else
        b = bf16_rounded_bits<W>(v);
    } else {
      b = bf16_rounded_bits<W>(v);
    }
    b = b << 16;
    typename W::F out;
    __builtin_memcpy(&out, &b, sizeof(out));
    return out;
  } else {
    alignas(64) T t[W::kLanes];
    store_lanes<W>(t, v);
    return load_lanes<W>(t);
  }
}
// A bfloat16 row's smallest nonzero |x|, +inf if none, from the bits in
// 16-bit lanes (twice W's lane count): |x| - 1 wraps a zero to 0xffff, above
// every other value. NaN bits sort above infinity's, so a NaN is the floor
// only of a row of zeros and NaNs.
template <typename W>
TIERKIT_ROW_INLINE float bf16_row_floor(const BFloat16* x, std::int64_t d) {
  using H = typename VecTypes<2 * W::kLanes>::H;
  constexpr std::int64_t kStep = 2 * W::kLanes;
  H m = H{} + 0xffffu;
  std::int64_t j = 0;
  for (; j + kStep <= d; j += kStep) {
    H v;
    __builtin_memcpy(&v, static_cast<const void*>(x + j), sizeof(v));
    const H a = (v & 0x7fffu) - 1u;
    m = a < m ? a : m;
  }
  std::uint16_t lanes[kStep];
  __builtin_memcpy(lanes, &m, sizeof(lanes));
  std::uint16_t low = 0xffffu;
  for (std::uint16_t a : lanes) low = a < low ? a : low;
  for (; j < d; ++j) {
    const auto a = static_cast<std::uint16_t>((x[j].bits & 0x7fffu) - 1u);
    low = a < low ? a : low;
  }
  if (low == 0xffffu) return std::numeric_limits<float>::infinity();
  return tierkit::detail::bits_float(static_cast<std::uint32_t>(low + 1u) << 16);
}
// The weights' floor: the smallest nonzero |w|, NaNs and infinities
// skipped, +inf if none, over float weights in W's lanes. |w|'s bits - 1
// wrap a zero to 0xffffffff, and an infinity or NaN (bits >= 0x7f800000) is
// sent there too, so an unsigned min of the rest orders as the magnitudes
// do. The norms' bfloat16 forward asks it once per chunk of rows (about
// kGrain elements): the scalar loop over a weight of 4096 cost as much as
// the chunk's four rows (rms_norm with a weight, one thread in L2, an
// AVX-512 Xeon: 0.132 ns an element against 0.074 without one, when it
// was a scalar loop of fabs and compares).
template <typename W>
TIERKIT_ROW_INLINE float float_weight_floor(const float* w, std::int64_t d) {
  using U = typename W::U;
  constexpr std::int64_t kStep = W::kLanes;
  constexpr std::uint32_t kNone = 0xffffffffu;
  U m = U{} + kNone;
  std::int64_t j = 0;
  for (; j + kStep <= d; j += kStep) {
    U v;
    __builtin_memcpy(&v, w + j, sizeof(v));
    const U mag = v & 0x7fffffffu;
    const U a = mag < 0x7f800000u ? mag - 1u : U{} + kNone;
    m = a < m ? a : m;
  }
  std::uint32_t lanes[kStep];
  __builtin_memcpy(lanes, &m, sizeof(lanes));
  std::uint32_t low = kNone;
  for (std::uint32_t a : lanes) low = a < low ? a : low;
  for (; j < d; ++j) {
    std::uint32_t bits;
    __builtin_memcpy(&bits, w + j, sizeof(bits));
    const std::uint32_t mag = bits & 0x7fffffffu;
    const std::uint32_t a = mag < 0x7f800000u ? mag - 1u : kNone;
    low = a < low ? a : low;
  }
  if (low == kNone) return std::numeric_limits<float>::infinity();
  return tierkit::detail::bits_float(low + 1u);
}
// The widest 16-bit row the vector rows stream (row_streams): its forward
// output is computed into a stack row of this many elements, then leaves a
// line at a time (stream_row).
inline constexpr std::int64_t kStreamRow16 = 8192;
// That stack row.
template <typename T>
using StreamRow = StackRow<T, kStreamRow16>;
// d elements of `row` (64-byte aligned) to `out` (aligned to T) with
// non-temporal stores of W's width: whole lines, where a 16-bit block's own
// store is half a line or a quarter. Where `out` does not start a line (an
// out= array of numpy's own allocation starts 16 bytes into one), the
// elements before its first whole line and after its last are stored
// plainly: they share those lines with the rows beside it.
template <typename W, typename T>
TIERKIT_ROW_INLINE void stream_row(const T* row, T* out, std::int64_t d) {
  using U = typename W::U;
  constexpr std::int64_t kStep = static_cast<std::int64_t>(sizeof(U) / sizeof(T));
  const std::int64_t head = line_head(out, d, /*stream=*/true);
  std::int64_t j = 0;
  for (; j < head; ++j) out[j] = row[j];
  for (; j + kStep <= d; j += kStep) {
    U v;
    __builtin_memcpy(&v, row + j, sizeof(v));
    asm volatile("vmovntdq %1, %0" : "=m"(*reinterpret_cast<U*>(out + j)) : "v"(v));
  }
  for (; j < d; ++j) out[j] = row[j];
}
// A block of float partial sums (the parameters' gradients) += v.
template <typename W>
TIERKIT_ROW_INLINE void add_lanes(float* p, typename W::F v) {
  typename W::F a;
  __builtin_memcpy(&a, p, sizeof(a));
  a += v;
  __builtin_memcpy(p, &a, sizeof(a));
}
template <typename W>
TIERKIT_ROW_INLINE typename W::F splat(float v) {
  return typename W::F{} + v;
}

// kRowLanes partial sums as vectors of W's width.
template <typename W>
struct VecLanes {
  static constexpr int kVecs = kRowLanes / W::kLanes;
  typename W::F v[kVecs] = {};
  TIERKIT_ROW_INLINE void add(const VecLanes& o) {
    for (int q = 0; q < kVecs; ++q) v[q] += o.v[q];
  }
  // Lanes j..j+kRowLanes-1 of a chunk's tail, one(i) for i < end, +0 past it.
  template <typename One>
  TIERKIT_ROW_INLINE void add_tail(std::int64_t j, std::int64_t end, const One& one) {
    alignas(64) float t[kRowLanes] = {};
    for (int k = 0; j + k < end; ++k) t[k] = one(j + k);
    for (int q = 0; q < kVecs; ++q) {
      typename W::F x;
      __builtin_memcpy(&x, t + q * W::kLanes, sizeof(x));
      v[q] += x;
    }
  }
  TIERKIT_ROW_INLINE float total() const {
    float lanes[kRowLanes];
    __builtin_memcpy(lanes, v, sizeof(lanes));
    return combine_lanes(lanes);
  }
};

// lane_sum's order over d terms: block(j) gives the terms j..j+W::kLanes-1
// as a vector, one(j) a single term (the chunks' tails).
template <typename W, typename Block, typename One>
TIERKIT_ROW_INLINE float vec_sum(std::int64_t d, const Block& block, const One& one) {
  VecLanes<W> row;
  for (std::int64_t j0 = 0; j0 < d; j0 += kRowChunk) {
    const std::int64_t end = std::min(d, j0 + kRowChunk);
    VecLanes<W> acc;
    std::int64_t j = j0;
    for (; j + kRowLanes <= end; j += kRowLanes)
      for (int q = 0; q < VecLanes<W>::kVecs; ++q) acc.v[q] += block(j + q * W::kLanes);
    if (j < end) acc.add_tail(j, end, one);
    row.add(acc);
  }
  return row.total();
}
// Two sums from one pass, each in vec_sum's order (so each is the single
// sum's bits): block(j, a, b) and one(j, a, b) give both terms.
template <typename W, typename Block, typename One>
TIERKIT_ROW_INLINE Sums2<float> vec_sum2(std::int64_t d, const Block& block, const One& one) {
  VecLanes<W> ra, rb;
  for (std::int64_t j0 = 0; j0 < d; j0 += kRowChunk) {
    const std::int64_t end = std::min(d, j0 + kRowChunk);
    VecLanes<W> aa, ab;
    std::int64_t j = j0;
    for (; j + kRowLanes <= end; j += kRowLanes)
      for (int q = 0; q < VecLanes<W>::kVecs; ++q) {
        typename W::F a, b;
        block(j + q * W::kLanes, a, b);
        aa.v[q] += a;
        ab.v[q] += b;
      }
    if (j < end) {
      aa.add_tail(j, end, [&](std::int64_t i) TIERKIT_ROW_LAMBDA {
        float a, b;
        one(i, a, b);
        return a;
      });
      ab.add_tail(j, end, [&](std::int64_t i) TIERKIT_ROW_LAMBDA {
        float a, b;
        one(i, a, b);
        return b;
      });
    }
    ra.add(aa);
    rb.add(ab);
  }
  return {ra.total(), rb.total()};
}
// Asks for a line of the next row (p) while this row's last pass runs. A
// row of kAheadToL1 bytes or more has its next row asked for into L2
// (prefetcht1), not L1: the next row's lines then no longer evict this
// row's, which its last pass reads again. Two Zen 4 cores, rms_norm
// forward, 2^24 elements, medians of 21 interleaved: bfloat16 d = 4096
// 1.71 -> 1.43 ms, 8192 2.54 -> 1.87; LayerNorm float32 d = 4096 5.02 ->
// 4.34 (one core: 6.96 -> 6.02); rows of 1024 bfloat16 (2 KiB, two rows
// well inside L1) unchanged within noise, so they keep L1. A hint only.
//
// The line asked for lies one line past p: the block at byte offset o of
// its row asks for the next row's line at o + 64. Rows of exactly 4 KiB ran
// below their neighbours beyond the caches: float32 rms_norm, d = 1024,
// through the bridge with out= (2 GiB arrays, two threads, an AVX-512
// Xeon), 0.87-0.92 of a copy with y 0 or 64 bytes from x's page offset and
// 0.98-1.02 with y 1-2 KiB from it, while d = 768 and 1280 did not care:
// a 4 KiB address alias between x's and y's lines, by the look of it (this
// VM has no counters to show one). Asking one line further helps bfloat16
// rows of 4 KiB and leaves the others within their spread (2^29 elements,
// alternating old and new builds, ms): the bridge, bfloat16 d = 2048
// 85.9-94.7 -> 84.0-87.5; the core at -O3, bfloat16 d = 2048 102-105 ->
// 95-103, float32 d = 1024 151-159 -> 141-159, d = 768 and 4096 unchanged.
// It is not the fix of the float32 gap above, which stays (the bridge: 0.88-
// 0.96 of a copy at y's worst offset). The address is an integer's: past
// the last row it lies outside the array, which a prefetch, never faulting,
// may name.
inline constexpr std::int64_t kAheadToL1 = 4096;
inline constexpr std::uintptr_t kAheadSkew = 64;
template <typename T>
TIERKIT_ROW_INLINE void ask_ahead(const T* p, bool to_l2) {
  const void* line = reinterpret_cast<const void*>(reinterpret_cast<std::uintptr_t>(p) + kAheadSkew);
  if (to_l2)
    __builtin_prefetch(line, 0, 2);
  else
    __builtin_prefetch(line, 0, 3);
}
template <typename T>
TIERKIT_ROW_INLINE bool ahead_to_l2(std::int64_t d) {
  return d * static_cast<std::int64_t>(sizeof(T)) >= kAheadToL1;
}

// block(j) over the full vectors of [0, d), one(j) over the rest. With
// `ahead` (the next row's starts), each block also asks for a line of the
// next row near its offset (ask_ahead: the line after it): a row's last
// pass (reads from cache, writes out) then overlaps the next row's reads from memory, which the
// hardware prefetcher does not start on its own across a long row (float32
// rows of 8192 ran at 0.54 of a copy in the two-statistics norm against
// 0.85 at 1024, an AVX-512 Xeon). Two inputs, both asked (add_rms_norm
// float32 [4096, 4096], 2 threads: 0.76 -> 0.80 of two copies with x's row
// alone asked for).
//
// `head`: elements [0, head) one(j) at a time, the blocks from there: a
// streamed row's blocks then start on its first whole line (out_row).
template <typename W, typename Block, typename One, typename T = float>
TIERKIT_ROW_INLINE void vec_each(std::int64_t d, const Block& block, const One& one, NextRow<T> ahead = {},
                                 std::int64_t head = 0) {
  std::int64_t j = 0;
  for (; j < head; ++j) one(j);
  const bool to_l2 = ahead_to_l2<T>(d);
  if (ahead.a && ahead.b)
    for (; j + W::kLanes <= d; j += W::kLanes) {
      ask_ahead(ahead.a + j, to_l2);
      ask_ahead(ahead.b + j, to_l2);
      block(j);
    }
  else if (ahead.a)
    for (; j + W::kLanes <= d; j += W::kLanes) {
      ask_ahead(ahead.a + j, to_l2);
      block(j);
    }
  for (; j + W::kLanes <= d; j += W::kLanes) block(j);
  for (; j < d; ++j) one(j);
}

// A row's expression written once for its vector body and its scalar tail:
// term(L, j) with L = VecAt<W, T> (W::kLanes elements from j) or OneAt<T>
// (element j). L.ld, L.st, L.splat, L.round (to T and back, casting_mode
// "llama"'s x-hat) and L.add (a partial sum's update) are the loads,
// stores, constants and roundings of each; the arithmetic between them is
// the term's own, so body and tail compute the same expression (CTest's
// bit checks hold each level to the scalar rows).
// kNormal: the block's stores and roundings hold no subnormal (scaled_normal).
template <typename W, typename T, bool kNormal = false>
struct VecAt {
  using F = typename W::F;
  template <typename P>
  TIERKIT_ROW_INLINE static F ld(const P* p) {
    return load_lanes<W>(p);
  }
  TIERKIT_ROW_INLINE static F splat(float c) { return detail::splat<W>(c); }
  template <typename P>
  TIERKIT_ROW_INLINE static void st(P* p, F v, bool stream = false) {
    store_lanes<W, kNormal>(p, v, stream);
  }
  TIERKIT_ROW_INLINE static F round(F v) { return round_lanes<W, T, kNormal>(v); }
  TIERKIT_ROW_INLINE static void add(float* p, F v) { add_lanes<W>(p, v); }
};
// A vector tail's element: row_terms.h's ScalarAt in float.
template <typename T>
using OneAt = ScalarAt<float, T>;
// vec_each, vec_sum and vec_sum2 over one term(L, j) (vec_sum2's: term(L, j, a, b)).
// kNormal: the row's stores hold no subnormal (scaled_normal), so a
// bfloat16 row at the AVX512-BF16 level converts without the check.
template <typename W, typename T, bool kNormal = false, typename Term, typename A = float>
TIERKIT_ROW_INLINE void vec_each_of(std::int64_t d, const Term& term, NextRow<A> ahead = {},
                                    std::int64_t head = 0) {
  vec_each<W>(
      d, [&](std::int64_t j) TIERKIT_ROW_LAMBDA { term(VecAt<W, T, kNormal>{}, j); },
      [&](std::int64_t j) TIERKIT_ROW_LAMBDA { term(OneAt<T>{}, j); }, ahead, head);
}
template <typename W, typename T, typename Term>
TIERKIT_ROW_INLINE float vec_sum_of(std::int64_t d, const Term& term) {
  return vec_sum<W>(
      d, [&](std::int64_t j) TIERKIT_ROW_LAMBDA { return term(VecAt<W, T>{}, j); },
      [&](std::int64_t j) TIERKIT_ROW_LAMBDA { return term(OneAt<T>{}, j); });
}
template <typename W, typename T, typename Term>
TIERKIT_ROW_INLINE Sums2<float> vec_sum2_of(std::int64_t d, const Term& term) {
  return vec_sum2<W>(
      d,
      [&](std::int64_t j, typename W::F& a, typename W::F& b)
          TIERKIT_ROW_LAMBDA { term(VecAt<W, T>{}, j, a, b); },
      [&](std::int64_t j, float& a, float& b) TIERKIT_ROW_LAMBDA { term(OneAt<T>{}, j, a, b); });
}

#pragma GCC diagnostic pop
#endif  // TIERKIT_ROW_VEC

// The kinds' row bodies at the CPU's level (simd_copies.h): float and the
// 16-bit types run RowsVec<W, T> at AVX2 and AVX-512; double, and every
// type where no vector row exists (Clang), run Rows<T> at AVX2 (its
// std::fma an instruction); baseline x86-64 (SSE2 only) runs Rows<T> as
// compiled, vectorized by the compiler.
enum class RowPass { forward, add_forward, backward };
template <RowPass P, typename R, typename... A>
TIERKIT_ROW_INLINE void row_pass(A&&... a) {
  if constexpr (P == RowPass::forward) R::forward(std::forward<A>(a)...);
  if constexpr (P == RowPass::add_forward) R::add_forward(std::forward<A>(a)...);
  if constexpr (P == RowPass::backward) R::backward(std::forward<A>(a)...);
}
template <typename K, typename T, RowPass P>
struct RowsBody {
  template <typename W, typename... A>
  static void run(A... a) {
    row_pass<P, typename K::template Rows<T>>(a...);
  }
};
#ifdef TIERKIT_ROW_VEC
template <typename K, typename T, RowPass P>
struct RowsVecBody {
  template <typename W, typename... A>
  static void run(A... a) {
    row_pass<P, typename K::template RowsVec<W, T>>(a...);
  }
};
#endif
// `stream`: the vector rows' last argument (the scalar rows never stream).
template <typename K, typename T, RowPass P, typename... A>
void rows_at_level(bool stream, A... a) {
#ifdef TIERKIT_SIMD_DISPATCH
#ifdef TIERKIT_ROW_VEC
  // Where no vector row runs, no copy does (run_at_level asks the same CPU
  // features): only double's scalar rows get an AVX2 copy here.
  if constexpr (!std::is_same_v<T, double>) {
    if (run_at_level<RowsVecBody<K, T, P>, T>(a..., stream)) return;
  } else if (run_at_level<RowsBody<K, T, P>, T, SimdLevel::Avx2>(a...)) {
    return;
  }
#else
  if (run_at_level<RowsBody<K, T, P>, T, SimdLevel::Avx2>(a...)) return;
#endif
#endif
  (void)stream;
  row_pass<P, typename K::template Rows<T>>(a...);
}

// The functor's three row bodies, each at the CPU's level. `stream`: the
// vector rows write their output (y, dx) with non-temporal stores
// (row_streams); h, which the row reads back, through a stack row
// (staged_row, row_terms.h).
template <typename K, typename T, typename Y>
void forward_rows(const T* x, RowParams<compute_t<T>> p, compute_t<T> eps, std::int64_t d, std::int64_t lo,
                  std::int64_t hi, Y* y, compute_t<T>* stats, bool stream) {
  rows_at_level<K, T, RowPass::forward>(stream, x, p, eps, d, lo, hi, y, stats);
}
template <typename K, typename T, typename Y>
void add_forward_rows(const T* x, const T* res, RowParams<compute_t<T>> p, compute_t<T> eps, std::int64_t d,
                      std::int64_t lo, std::int64_t hi, Y* y, T* h, compute_t<T>* stats, bool stream) {
  rows_at_level<K, T, RowPass::add_forward>(stream, x, res, p, eps, d, lo, hi, y, h, stats);
}
template <typename K, typename T>
void backward_rows(const T* dy, const T* x, RowParams<compute_t<T>> p, const compute_t<T>* stats,
                   std::int64_t d, std::int64_t lo, std::int64_t hi, T* dx, compute_t<T>* dwp,
                   compute_t<T>* dbp, bool stream) {
  rows_at_level<K, T, RowPass::backward>(stream, dy, x, p, stats, d, lo, hi, dx, dwp, dbp);
}

// Rows per chunk: about kGrain elements.
inline std::int64_t row_grain(std::int64_t d) {
  return std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(1, d));
}

// Whether an output `out` of rows of d, in a kernel over `operands` such
// arrays, is written with non-temporal stores: float and the 16-bit types
// (not double), at the vector levels, where the call's arrays outgrow the
// cache (the whole call against streaming_threshold()'s per-thread share:
// the pools hand rows out in small chunks) and every row starts at the same
// place in its line (d's bytes a multiple of 64). Measured on two Zen 4
// cores (core's pool, [4096, 4096], medians of 15): float32 rms_norm 6.17 ms
// with ordinary stores, which read each line first, 4.84 ms streamed;
// bfloat16 3.37 ms ordinary, 4.02 streamed when each 16-bit block streamed
// its own half line. So 16-bit rows (d <= kStreamRow16) are computed into a
// stack row and leave a whole line at a time (stream_row): the forward
// outputs (the row kinds' scale, the row maps) and the norms' dx (out_row);
// a kind whose backward stores its blocks straight into dx stores a 16-bit
// dx plainly. (The norms' bfloat16 backward, 2^24 elements, two Zen 4
// cores, dx stored plainly against streamed from a stack row, both builds in
// one process, 41 alternating pairs: 1.12x (rms_norm) and 1.15x (LayerNorm)
// as fast at d = 4096, 1.14x and 1.11x at 1024.)
//
// `out` need not start a line (numpy allocates large arrays 16 bytes into
// one): a forward row off its line stores its elements up to its first
// whole line one at a time and streams its blocks from there (out_row,
// line_head); stream_row stores a stack row's head and tail plainly. A
// kernel whose blocks go straight into `out` with no such head (backward's
// dx, the row maps) streams only where line_aligned(out). The bridge's
// float32 rms_norm [4096, 4096] into numpy's out=, two Zen 4 cores: 4.7 ms
// stored plainly, 3.0 ms so.
template <typename T>
bool row_streams(const T* out, std::int64_t rows, std::int64_t d, std::size_t operands) {
#ifdef TIERKIT_ROW_VEC
  if constexpr (std::is_same_v<T, double>) {
    (void)out, (void)rows, (void)d, (void)operands;
    return false;
  } else {
    const std::size_t threads = hardware_threads();
    return out && rows > 0 && d > 0 && (sizeof(T) == 4 || d <= kStreamRow16) &&
           reinterpret_cast<std::uintptr_t>(out) % sizeof(T) == 0 &&
           (static_cast<std::size_t>(d) * sizeof(T)) % 64 == 0 &&
           static_cast<std::size_t>(rows) * static_cast<std::size_t>(d) * sizeof(T) * operands / threads >=
               streaming_threshold() &&
           simd_level() != SimdLevel::Baseline && cpu_has_16bit_simd();
  }
#else
  (void)out, (void)rows, (void)d, (void)operands;
  return false;
#endif
}

// Whether the byte spans [a, a + an) and [b, b + bn) share a byte.
inline bool spans_meet(const void* a, std::size_t an, const void* b, std::size_t bn) {
  const auto pa = reinterpret_cast<std::uintptr_t>(a), pb = reinterpret_cast<std::uintptr_t>(b);
  return an > 0 && bn > 0 && pa < pb + bn && pb < pa + an;
}

using Spans = std::initializer_list<std::pair<const void*, std::size_t>>;

// A parameter as every row reads it: the values it had at the call. Rows
// run in parallel and each writes its own outputs, so a parameter that lies
// in an output (the in-place residual form with weight = residual[0]; the
// bridge's out= with weight = out[0]) would be read rewritten by later rows
// and other threads: such a parameter is copied first (d elements, beside
// rows * d of work).
template <typename T>
class ParamAsCalled {
 public:
  // `outputs`: the {pointer, bytes} spans the kernel writes.
  ParamAsCalled(const T* w, std::int64_t d, Spans outputs) : w_(w) {
    if (!w || d <= 0) return;
    const std::size_t bytes = static_cast<std::size_t>(d) * sizeof(T);
    for (const auto& o : outputs) {
      if (!spans_meet(w, bytes, o.first, o.second)) continue;
      copy_.reset(new T[static_cast<std::size_t>(d)]);
      std::copy(w, w + d, copy_.get());
      w_ = copy_.get();
      return;
    }
  }
  const T* get() const { return w_; }

 private:
  const T* w_;
  std::unique_ptr<T[]> copy_;
};

// Both parameters as every row reads them: as called (ParamAsCalled), in
// the compute type C. Parameters of another type than C (16-bit ones) are
// widened here, before any row runs: the widened copies are as called.
template <typename C, typename P>
class ParamsInCompute {
 public:
  ParamsInCompute(RowParams<P> p, std::int64_t d, Spans outputs) {
    if constexpr (std::is_same_v<P, C>) {
      w_.emplace(p.w, d, outputs);
      b_.emplace(p.b, d, outputs);
      p_ = {w_->get(), b_->get()};
    } else {
      p_ = {widen(p.w, d, wide_w_), widen(p.b, d, wide_b_)};
    }
    p_.round_normalized = p.round_normalized;
  }
  RowParams<C> get() const { return p_; }

 private:
  static const C* widen(const P* p, std::int64_t d, std::unique_ptr<C[]>& into) {
    if (!p) return nullptr;
    into.reset(new C[static_cast<std::size_t>(std::max<std::int64_t>(d, 1))]);
    for (std::int64_t j = 0; j < d; ++j) into[j] = static_cast<C>(load_compute(p + j));
    return into.get();
  }
  std::optional<ParamAsCalled<C>> w_, b_;
  std::unique_ptr<C[]> wide_w_, wide_b_;
  RowParams<C> p_;
};

// The parameter types an entry point takes: x's dtype or its compute type.
template <typename T, typename P>
inline constexpr bool kRowParamType = std::is_same_v<P, T> || std::is_same_v<P, compute_t<T>>;

template <typename T>
std::size_t span_bytes(std::int64_t rows, std::int64_t d) {
  return rows > 0 && d > 0 ? static_cast<std::size_t>(rows) * static_cast<std::size_t>(d) * sizeof(T) : 0;
}

}  // namespace detail

namespace detail {
// y's element type: x's, or (a kind with kWideOutput) x's compute type.
template <typename K, typename T, typename Y>
inline constexpr bool kRowOutputType =
    std::is_same_v<Y, T> || (K::kWideOutput && sizeof(T) == 2 && std::is_same_v<Y, compute_t<T>>);
}  // namespace detail

// y = K's forward of x over rows of d, with the parameters p (either may be
// null); stats[rows * K::kStats] saved for backward. y may be x exactly; the
// parameters may lie anywhere (read as they were at the call, even where
// they lie in y or stats). y is of x's type T, or, for a kind with
// kWideOutput and 16-bit x, of float: the row's last product is then
// stored in float, not rounded to T (RMSNorm's "llama" with a float32
// weight: T(x-hat) * w in float32, as HF's Llama norm returns it). A float
// y must not overlap x: its rows are twice as wide, so row r would
// overwrite rows not yet read (the callers allocate it, or compute apart).
template <typename K, typename T, typename P, typename Y, typename Runner = PoolRunner>
void row_forward(const T* x, RowParams<P> p_in, double eps, std::int64_t rows, std::int64_t d, Y* y,
                 compute_t<T>* stats, const Runner& run = {}) {
  static_assert(detail::kRowParamType<T, P>, "row parameters: x's dtype or its compute type");
  static_assert(detail::kRowOutputType<K, T, Y>, "row output: x's dtype, or its compute type (kWideOutput)");
  using C = compute_t<T>;
  const C e = static_cast<C>(eps);
  const detail::ParamsInCompute<C, P> params(
      p_in, d, {{y, detail::span_bytes<Y>(rows, d)}, {stats, detail::span_bytes<C>(rows, K::kStats)}});
  const RowParams<C> p = params.get();
  const bool stream = detail::row_streams(y, rows, d, 2);
  run(rows, detail::row_grain(d), [&](std::int64_t lo, std::int64_t hi) {
    detail::forward_rows<K, T>(x, p, e, d, lo, hi, y, stats, stream);
  });
}

// h = x + residual rounded to T (h_out may be residual exactly), then K's
// forward of h: one pass over x and residual per row. The parameters may lie
// anywhere, h_out included (read as they were at the call).
template <typename K, typename T, typename P, typename Y, typename Runner = PoolRunner>
void row_add_forward(const T* x, const T* residual, RowParams<P> p_in, double eps, std::int64_t rows,
                     std::int64_t d, Y* y, T* h_out, compute_t<T>* stats, const Runner& run = {}) {
  static_assert(detail::kRowParamType<T, P>, "row parameters: x's dtype or its compute type");
  static_assert(detail::kRowOutputType<K, T, Y>, "row output: x's dtype, or its compute type (kWideOutput)");
  using C = compute_t<T>;
  const C e = static_cast<C>(eps);
  const detail::ParamsInCompute<C, P> params(p_in, d,
                                             {{y, detail::span_bytes<Y>(rows, d)},
                                              {h_out, detail::span_bytes<T>(rows, d)},
                                              {stats, detail::span_bytes<C>(rows, K::kStats)}});
  const RowParams<C> p = params.get();
  const bool stream = detail::row_streams(y, rows, d, 4);
  run(rows, detail::row_grain(d), [&](std::int64_t lo, std::int64_t hi) {
    detail::add_forward_rows<K, T>(x, residual, p, e, d, lo, hi, y, h_out, stats, stream);
  });
}

// dx (nullable; may be dy or x exactly), dw and db (each nullable, [d],
// overwritten, in compute_t<T>; the caller rounds them) of K's forward, from
// its stats. The parameters may lie in dx, dw or db (read as they were at
// the call).
template <typename K, typename T, typename P, typename Runner = PoolRunner>
void row_backward(const T* dy, const T* x, RowParams<P> p_in, const compute_t<T>* stats, std::int64_t rows,
                  std::int64_t d, T* dx, compute_t<T>* dw, compute_t<T>* db, const Runner& run = {}) {
  static_assert(detail::kRowParamType<T, P>, "row parameters: x's dtype or its compute type");
  using C = compute_t<T>;
  const std::size_t grad_bytes = detail::span_bytes<C>(1, d);
  const detail::ParamsInCompute<C, P> params(
      p_in, d,
      {{dx, dx ? detail::span_bytes<T>(rows, d) : 0}, {dw, dw ? grad_bytes : 0}, {db, db ? grad_bytes : 0}});
  const RowParams<C> p = params.get();
  // A kind may store dx's blocks straight into it (the norms' leave through
  // out_row): streamed only from whole lines.
  const bool stream = detail::row_streams(dx, rows, d, 3) && detail::line_aligned(dx);
  if (!dw && !db) {
    if (!dx) return;
    run(rows, detail::row_grain(d), [&](std::int64_t lo, std::int64_t hi) {
      detail::backward_rows<K, T>(dy, x, p, stats, d, lo, hi, dx, static_cast<C*>(nullptr),
                                  static_cast<C*>(nullptr), stream);
    });
    return;
  }
  C* grads[2] = {dw, db};
  const std::int64_t n_grads = (dw ? 1 : 0) + (db ? 1 : 0);
  for (C* g : grads)
    if (g) std::fill(g, g + d, C(0));
  if (rows <= 0 || d <= 0) return;
  // Block b's partial sums (its rows in order): dw and db themselves for
  // block 0, scratch for the others; then summed in a fixed tree into them.
  const std::int64_t blocks = detail::param_grad_blocks(rows, d, n_grads);
  const std::int64_t per = (rows + blocks - 1) / blocks;
  std::unique_ptr<C[]> scratch(blocks > 1 ? new C[static_cast<std::size_t>((blocks - 1) * d * n_grads)]
                                          : nullptr);
  // Gradient g's (0: dw, 1: db) partial sums of block b; null when not wanted.
  auto part = [&](int g, std::int64_t b) -> C* {
    if (!grads[g]) return nullptr;
    if (b == 0) return grads[g];
    const std::int64_t slot = g == 1 && dw ? 1 : 0;
    return scratch.get() + ((b - 1) * n_grads + slot) * d;
  };
  run(blocks, 1, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t b = lo; b < hi; ++b) {
      for (int g = 0; g < 2; ++g)
        if (b > 0 && part(g, b)) std::fill(part(g, b), part(g, b) + d, C(0));
      const std::int64_t r0 = std::min(rows, b * per), r1 = std::min(rows, r0 + per);
      detail::backward_rows<K, T>(dy, x, p, stats, d, r0, r1, dx, part(0, b), part(1, b), stream);
    }
  });
  if (blocks == 1) return;
  // The blocks' sums in a fixed pairwise tree (block b += block b + s for
  // s = 1, 2, 4, ...): log2(blocks) roundings instead of blocks - 1.
  run(d, std::max<std::int64_t>(1, detail::kGrain / blocks), [&](std::int64_t lo, std::int64_t hi) {
    for (int g = 0; g < 2; ++g) {
      if (!grads[g]) continue;
      for (std::int64_t step = 1; step < blocks; step *= 2)
        for (std::int64_t b = 0; b + step < blocks; b += 2 * step) {
          C* into = part(g, b);
          const C* from = part(g, b + step);
          TIERKIT_VECTORIZE_LOOP
          for (std::int64_t j = lo; j < hi; ++j) into[j] += from[j];
        }
    }
  });
}

}  // namespace tierkit::kernels
