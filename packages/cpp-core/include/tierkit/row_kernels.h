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
//   K::Rows<T>  static forward, add_forward and backward over rows [lo, hi)
//               (signatures below), in scalar C++ the compiler vectorizes;
//   K::Rows16<W, T> the same for 16-bit T through float chunks of
//               kRowChunk (W: the width's converters), bit for bit Rows<T>'s.
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
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <type_traits>
#include <utility>

#include "tierkit/dtype.h"
#include "tierkit/kernels.h"

namespace tierkit::kernels {

// A row's per-column parameters (either may be null: absent).
template <typename T>
struct RowParams {
  const T* w = nullptr;  // weight: multiplies
  const T* b = nullptr;  // bias: adds
};

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
// lane_sum of term(j), which only loads.
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

#ifdef TIERKIT_SIMD_DISPATCH

// The 16-bit rows (Rows16: forward and backward) through float buffers of one
// chunk (kRowChunk elements), filled and drained by kernels.h's vector conversions (the same
// bits as load_compute/store_compute): GCC's vectorization of the mixed-width
// loops spent more time converting than the float arithmetic takes
// (bfloat16 [4096, 4096] on two Zen 4 cores: 3.4 ms, float32's 3.7 ms for
// twice the bytes). The sums keep lane_sum's order exactly (chunks of
// kRowChunk, lane j mod kRowLanes, the same tails), so the results are the
// scalar rows' bit for bit at every level. W: the width's converters.
template <typename W, typename T>
TIERKIT_ROW_INLINE void widen(const T* in, std::int64_t m, float* out) {
  std::int64_t j = 0;
  for (; j + W::kLanes <= m; j += W::kLanes) W::to(in + j, out + j);
  for (; j < m; ++j) out[j] = load_compute(in + j);
}
template <typename W, typename T>
TIERKIT_ROW_INLINE void narrow(const float* in, std::int64_t m, T* out) {
  std::int64_t j = 0;
  for (; j + W::kLanes <= m; j += W::kLanes) W::from(in + j, out + j);
  for (; j < m; ++j) store_compute(out + j, in[j]);
}
// One chunk's m terms t[0..m) in kRowLanes partial sums (lane j mod
// kRowLanes; the tail's lanes past m add +0): chunk_sum's and chunk_sum2's.
TIERKIT_ROW_INLINE Lanes<float> chunk_lanes(const float* t, std::int64_t m) {
  Lanes<float> acc;
  std::int64_t j = 0;
  for (; j + kRowLanes <= m; j += kRowLanes) {
    float v[kRowLanes];
    for (int k = 0; k < kRowLanes; ++k) v[k] = t[j + k];
    acc.add(v);
  }
  if (j < m) {
    float v[kRowLanes] = {};
    for (int k = 0; j + k < m; ++k) v[k] = t[j + k];
    acc.add(v);
  }
  return acc;
}
// lane_sum over d terms that fill(j0, m, t) writes a chunk at a time (t[j]
// = term(j0 + j), j < m): the same chunks, lanes and tails as lane_sum.
template <typename Fill>
TIERKIT_ROW_INLINE float chunk_sum(std::int64_t d, const Fill& fill) {
  alignas(64) float t[kRowChunk];
  Lanes<float> row;
  for (std::int64_t j0 = 0; j0 < d; j0 += kRowChunk) {
    const std::int64_t m = std::min(kRowChunk, d - j0);
    fill(j0, m, t);
    row.add(chunk_lanes(t, m));
  }
  return row.total();
}

// chunk_sum of two fills from one pass: fill(j0, m, ta, tb) writes a chunk
// of each; each sum keeps chunk_sum's order (and so its bits).
template <typename Fill>
TIERKIT_ROW_INLINE Sums2<float> chunk_sum2(std::int64_t d, const Fill& fill) {
  alignas(64) float ta[kRowChunk], tb[kRowChunk];
  Lanes<float> ra, rb;
  for (std::int64_t j0 = 0; j0 < d; j0 += kRowChunk) {
    const std::int64_t m = std::min(kRowChunk, d - j0);
    fill(j0, m, ta, tb);
    ra.add(chunk_lanes(ta, m));
    rb.add(chunk_lanes(tb, m));
  }
  return {ra.total(), rb.total()};
}

// The converters of one width. No target attributes here: the row16_*
// functions below are `flatten`, so these and the converters (which carry
// their width's target) are inlined into a function of the same target.
#define TIERKIT_ROW16_WIDTH(NAME, LANES, SUFFIX)  \
  struct NAME {                                   \
    static constexpr std::int64_t kLanes = LANES; \
    template <typename T>                         \
    static void to(const T* in, float* out) {     \
      to_floats_##SUFFIX(in, out);                \
    }                                             \
    template <typename T>                         \
    static void from(const float* in, T* out) {   \
      from_floats_##SUFFIX(in, out);              \
    }                                             \
  };
TIERKIT_ROW16_WIDTH(RowWidth256, kLanes256, 256)
TIERKIT_ROW16_WIDTH(RowWidth512, kLanes512, 512)
#undef TIERKIT_ROW16_WIDTH
#endif  // TIERKIT_SIMD_DISPATCH

// Per-level copies of a kind's row bodies. Baseline x86-64 has SSE2 only;
// AVX2 doubles the width; 16-bit rows go through Rows16 where the CPU has the
// conversions (its AVX-512 copy at that level).
#ifdef TIERKIT_SIMD_DISPATCH
#define TIERKIT_ROW_COPIES(NAME)                                                                           \
  template <typename K, typename T, typename... A>                                                         \
  TIERKIT_16_AVX2 __attribute__((flatten, optimize("fp-contract=off"))) void row16_##NAME##_avx2(A... a) { \
    K::template Rows16<RowWidth256, T>::NAME(a...);                                                        \
  }                                                                                                        \
  template <typename K, typename T, typename... A>                                                         \
  TIERKIT_16_AVX512 __attribute__((flatten, optimize("fp-contract=off"))) void row16_##NAME##_avx512(      \
      A... a) {                                                                                            \
    K::template Rows16<RowWidth512, T>::NAME(a...);                                                        \
  }                                                                                                        \
  template <typename K, typename T, typename... A>                                                         \
  __attribute__((target("avx2"))) void row_##NAME##_avx2(A... a) {                                         \
    K::template Rows<T>::NAME(a...);                                                                       \
  }
TIERKIT_ROW_COPIES(forward)
TIERKIT_ROW_COPIES(add_forward)
TIERKIT_ROW_COPIES(backward)
#undef TIERKIT_ROW_COPIES
#define TIERKIT_ROW_DISPATCH(NAME, K, T, ...)                                                   \
  do {                                                                                          \
    if constexpr (sizeof(T) == 2) {                                                             \
      if (cpu_has_16bit_simd()) {                                                               \
        if (simd_level() == SimdLevel::Avx512) return row16_##NAME##_avx512<K, T>(__VA_ARGS__); \
        if (simd_level() == SimdLevel::Avx2) return row16_##NAME##_avx2<K, T>(__VA_ARGS__);     \
      }                                                                                         \
    }                                                                                           \
    if (simd_level() != SimdLevel::Baseline) return row_##NAME##_avx2<K, T>(__VA_ARGS__);       \
    return K::template Rows<T>::NAME(__VA_ARGS__);                                              \
  } while (0)
#else
#define TIERKIT_ROW_DISPATCH(NAME, K, T, ...) return K::template Rows<T>::NAME(__VA_ARGS__)
#endif

// The functor's three row bodies, each at the CPU's level.
template <typename K, typename T>
void forward_rows(const T* x, RowParams<T> p, compute_t<T> eps, std::int64_t d, std::int64_t lo,
                  std::int64_t hi, T* y, compute_t<T>* stats) {
  TIERKIT_ROW_DISPATCH(forward, K, T, x, p, eps, d, lo, hi, y, stats);
}
template <typename K, typename T>
void add_forward_rows(const T* x, const T* res, RowParams<T> p, compute_t<T> eps, std::int64_t d,
                      std::int64_t lo, std::int64_t hi, T* y, T* h, compute_t<T>* stats) {
  TIERKIT_ROW_DISPATCH(add_forward, K, T, x, res, p, eps, d, lo, hi, y, h, stats);
}
template <typename K, typename T>
void backward_rows(const T* dy, const T* x, RowParams<T> p, const compute_t<T>* stats, std::int64_t d,
                   std::int64_t lo, std::int64_t hi, T* dx, compute_t<T>* dwp, compute_t<T>* dbp) {
  TIERKIT_ROW_DISPATCH(backward, K, T, dy, x, p, stats, d, lo, hi, dx, dwp, dbp);
}
#undef TIERKIT_ROW_DISPATCH

// Rows per chunk: about kGrain elements.
inline std::int64_t row_grain(std::int64_t d) {
  return std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(1, d));
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

// Both parameters as called.
template <typename T>
struct ParamsAsCalled {
  ParamAsCalled<T> w, b;
  ParamsAsCalled(RowParams<T> p, std::int64_t d, Spans outputs) : w(p.w, d, outputs), b(p.b, d, outputs) {}
  RowParams<T> get() const { return {w.get(), b.get()}; }
};

template <typename T>
std::size_t span_bytes(std::int64_t rows, std::int64_t d) {
  return rows > 0 && d > 0 ? static_cast<std::size_t>(rows) * static_cast<std::size_t>(d) * sizeof(T) : 0;
}

}  // namespace detail

// y = K's forward of x over rows of d, with the parameters p (either may be
// null); stats[rows * K::kStats] saved for backward. y may be x exactly; the
// parameters may lie anywhere (read as they were at the call, even where
// they lie in y or stats).
template <typename K, typename T, typename Runner = PoolRunner>
void row_forward(const T* x, RowParams<T> p_in, double eps, std::int64_t rows, std::int64_t d, T* y,
                 compute_t<T>* stats, const Runner& run = {}) {
  using C = compute_t<T>;
  const C e = static_cast<C>(eps);
  const detail::ParamsAsCalled<T> params(
      p_in, d, {{y, detail::span_bytes<T>(rows, d)}, {stats, detail::span_bytes<C>(rows, K::kStats)}});
  const RowParams<T> p = params.get();
  run(rows, detail::row_grain(d),
      [&](std::int64_t lo, std::int64_t hi) { detail::forward_rows<K, T>(x, p, e, d, lo, hi, y, stats); });
}

// h = x + residual rounded to T (h_out may be residual exactly), then K's
// forward of h: one pass over x and residual per row. The parameters may lie
// anywhere, h_out included (read as they were at the call).
template <typename K, typename T, typename Runner = PoolRunner>
void row_add_forward(const T* x, const T* residual, RowParams<T> p_in, double eps, std::int64_t rows,
                     std::int64_t d, T* y, T* h_out, compute_t<T>* stats, const Runner& run = {}) {
  using C = compute_t<T>;
  const C e = static_cast<C>(eps);
  const std::size_t out_bytes = detail::span_bytes<T>(rows, d);
  const detail::ParamsAsCalled<T> params(
      p_in, d, {{y, out_bytes}, {h_out, out_bytes}, {stats, detail::span_bytes<C>(rows, K::kStats)}});
  const RowParams<T> p = params.get();
  run(rows, detail::row_grain(d), [&](std::int64_t lo, std::int64_t hi) {
    detail::add_forward_rows<K, T>(x, residual, p, e, d, lo, hi, y, h_out, stats);
  });
}

// dx (nullable; may be dy or x exactly), dw and db (each nullable, [d],
// overwritten, in compute_t<T>; the caller rounds them) of K's forward, from
// its stats. The parameters may lie in dx, dw or db (read as they were at
// the call).
template <typename K, typename T, typename Runner = PoolRunner>
void row_backward(const T* dy, const T* x, RowParams<T> p_in, const compute_t<T>* stats, std::int64_t rows,
                  std::int64_t d, T* dx, compute_t<T>* dw, compute_t<T>* db, const Runner& run = {}) {
  using C = compute_t<T>;
  const std::size_t grad_bytes = detail::span_bytes<C>(1, d);
  const detail::ParamsAsCalled<T> params(
      p_in, d,
      {{dx, dx ? detail::span_bytes<T>(rows, d) : 0}, {dw, dw ? grad_bytes : 0}, {db, db ? grad_bytes : 0}});
  const RowParams<T> p = params.get();
  if (!dw && !db) {
    if (!dx) return;
    run(rows, detail::row_grain(d), [&](std::int64_t lo, std::int64_t hi) {
      detail::backward_rows<K, T>(dy, x, p, stats, d, lo, hi, dx, static_cast<C*>(nullptr),
                                  static_cast<C*>(nullptr));
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
      detail::backward_rows<K, T>(dy, x, p, stats, d, r0, r1, dx, part(0, b), part(1, b));
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
