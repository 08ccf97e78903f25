// RMSNorm over the last dimension of a contiguous [rows, d] block: forward,
// backward, and the fused residual form (h = x + residual, then RMSNorm(h)).
//
// Numerics (C = compute_t<T>: float for float and the 16-bit types, double
// for double):
//  * rstd[r] = 1 / sqrt(sum_j x[r,j]^2 / d + C(eps)), the sum in C. The
//    formula and its roundings are torch's (_fused_rms_norm's decomposition:
//    x.float().pow(2).mean(-1).add(eps).rsqrt(), mean = sum / d); the sum's
//    order is ours (torch's reduction order differs, so rstd may differ from
//    eager's in the last bits either way).
//  * y[r,j] = (x[r,j] * rstd[r]) * w[j] in C, rounded once to T. Eager
//    F.rms_norm (torch 2.14, CPU) does the same for every dtype: measured bit
//    for bit against (x.float() * rstd * w.float()).to(T) for bfloat16 and
//    float16, so no eager-style double rounding is needed to match it.
//  * d = 0: rstd = 1 / sqrt(0 / 0 + eps) = NaN, as torch's _fused_rms_norm
//    gives; y is empty. An all-zero row gives rstd = 1 / sqrt(eps), y = 0.
//  * A row whose sum of squares overflows C (float: beyond ~3.4e38, e.g.
//    4096 elements of 1e18) gives rstd = 0 and y = 0, as eager's float
//    accumulation does.
//  * Backward: x_hat = x * rstd, g = dy * w (dy without a weight),
//    c = sum_j g * x_hat / d, dx = (g - x_hat * c) * rstd rounded once to T;
//    dw[j] = sum_r dy[r,j] * x_hat[r,j] in C (the caller rounds it to T).
//
// Determinism: every row's sums run in one fixed order (lane_sum: chunks
// of 256, each in 16 partial sums over j mod 16, added into the row's 16
// lanes, then a fixed halving tree), whatever the thread count, the Runner's chunking or the SIMD level;
// dw's sum over rows is split into blocks whose number depends on rows and d
// only (each block's rows in order, then the blocks in a fixed pairwise
// tree). So forward
// and backward are bit-identical for any Runner. -ffp-contract=off (the
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

namespace detail {

// Partial sums per row: 16 floats are two AVX2 vectors (two independent add
// chains) and keep the reduction's order fixed; GCC does not vectorize a
// single float accumulator without -ffast-math.
inline constexpr int kRmsLanes = 16;

// dw's row blocks: at most kRmsMaxBlocks, of at least kRmsMinBlockRows rows,
// and at most kRmsMaxScratch elements of partial sums in all.
inline constexpr std::int64_t kRmsMaxBlocks = 64;
inline constexpr std::int64_t kRmsMinBlockRows = 8;
inline constexpr std::int64_t kRmsMaxScratch = std::int64_t{1} << 22;

// The number of dw blocks for [rows, d]: a function of the shape only.
inline std::int64_t rms_dw_blocks(std::int64_t rows, std::int64_t d) {
  std::int64_t b = std::min(kRmsMaxBlocks, (rows + kRmsMinBlockRows - 1) / kRmsMinBlockRows);
  if (d > 0) b = std::min(b, std::max<std::int64_t>(1, kRmsMaxScratch / d));
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
__attribute__((always_inline)) inline C combine_lanes(C (&acc)[kRmsLanes]) {
  for (int w = kRmsLanes / 2; w > 0; w /= 2)
    for (int k = 0; k < w; ++k) acc[k] += acc[k + w];
  return acc[0];
}

// sum_j term(j) over j in [0, d), in the documented order: chunks of
// kRmsChunk elements, each summed in kRmsLanes partial sums (lane j mod
// kRmsLanes), the chunk's lanes added to the row's lanes, then the halving
// tree. Two levels keep a lane's sum short (16 terms a chunk, plus one per
// chunk: 32 for d = 4096, not 256), so the float sum's error stays at or
// below eager torch's cascade sum. block(j, v) writes the kRmsLanes terms at
// j..j+kRmsLanes-1 (all its loads before its stores), one(j) gives one term.
inline constexpr std::int64_t kRmsChunk = 256;

// The kRmsLanes partial sums as 32-byte GCC vectors (two AVX2 registers of
// float, four of double; SSE2 pairs at the baseline level). Written as a
// scalar array, GCC vectorized the loop over j instead and spent its time
// transposing lanes (vpermd/vblendps: 1 ns an element on one core for float,
// where a pass of scale_shift takes 0.16); one 64-byte vector it kept in
// memory. Lane k is still the sum of the terms j = k mod kRmsLanes in order,
// so the result is the scalar code's.
template <typename C>
struct Lanes {
  typedef C Vec __attribute__((vector_size(32)));
  static constexpr int kPer = 32 / sizeof(C), kVecs = kRmsLanes / kPer;
  Vec v[kVecs] = {};

  __attribute__((always_inline)) void add(const C (&t)[kRmsLanes]) {
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
    C lanes[kRmsLanes];
    __builtin_memcpy(lanes, v, sizeof(lanes));
    return combine_lanes(lanes);
  }
};
static_assert(sizeof(Lanes<float>) == sizeof(float) * kRmsLanes &&
              sizeof(Lanes<double>) == sizeof(double) * kRmsLanes);

template <typename C, typename Block, typename One>
__attribute__((always_inline)) inline C lane_sum(std::int64_t d, const Block& block, const One& one) {
  Lanes<C> row;
  for (std::int64_t j0 = 0; j0 < d; j0 += kRmsChunk) {
    const std::int64_t end = std::min(d, j0 + kRmsChunk);
    Lanes<C> acc;
    std::int64_t j = j0;
    for (; j + kRmsLanes <= end; j += kRmsLanes) {
      C v[kRmsLanes];
      block(j, v);
      acc.add(v);
    }
    if (j < end) {  // the chunk's tail; the lanes past it add +0
      C v[kRmsLanes] = {};
      for (int k = 0; j + k < end; ++k) v[k] = one(j + k);
      acc.add(v);
    }
    row.add(acc);
  }
  return row.total();
}
#define TIERKIT_RMS_LAMBDA __attribute__((always_inline))
// lane_sum of term(j), which only loads.
template <typename C, typename Term>
__attribute__((always_inline)) inline C lane_sum_of(std::int64_t d, const Term& term) {
  return lane_sum<C>(
      d,
      [&](std::int64_t j, C* v) TIERKIT_RMS_LAMBDA {
        for (int k = 0; k < kRmsLanes; ++k) v[k] = term(j + k);
      },
      term);
}

// The row bodies, written once and compiled per SIMD level (below).
#define TIERKIT_RMS_INLINE __attribute__((always_inline)) inline
template <typename T>
struct RmsRows {
  using C = compute_t<T>;

  TIERKIT_RMS_INLINE static C rstd_of(C sum_sq, std::int64_t d, C eps) {
    return C(1) / std::sqrt(sum_sq / static_cast<C>(d) + eps);
  }

  // y = (x * rstd) * w, rounded once.
  TIERKIT_RMS_INLINE static void scale(const T* x, const T* w, C rstd, std::int64_t d, T* y) {
    if (w) {
      TIERKIT_VECTORIZE_LOOP
      for (std::int64_t j = 0; j < d; ++j)
        store_compute(y + j, (load_compute(x + j) * rstd) * load_compute(w + j));
    } else {
      TIERKIT_VECTORIZE_LOOP
      for (std::int64_t j = 0; j < d; ++j) store_compute(y + j, load_compute(x + j) * rstd);
    }
  }

  TIERKIT_RMS_INLINE static void forward(const T* x, const T* w, C eps, std::int64_t d, std::int64_t lo,
                                         std::int64_t hi, T* y, C* rstd) {
    for (std::int64_t r = lo; r < hi; ++r) {
      const T* xr = x + r * d;
      const C ss = lane_sum_of<C>(d, [xr](std::int64_t j) TIERKIT_RMS_LAMBDA {
        const C v = load_compute(xr + j);
        return v * v;
      });
      const C rs = rstd_of(ss, d, eps);
      rstd[r] = rs;
      scale(xr, w, rs, d, y + r * d);
    }
  }

  // h = T(x + residual) (h may be residual), then forward on h.
  TIERKIT_RMS_INLINE static void add_forward(const T* x, const T* res, const T* w, C eps, std::int64_t d,
                                             std::int64_t lo, std::int64_t hi, T* y, T* h, C* rstd) {
    for (std::int64_t r = lo; r < hi; ++r) {
      const T* xr = x + r * d;
      const T* rr = res + r * d;
      T* hr = h + r * d;
      const C ss = lane_sum<C>(
          d,
          [&](std::int64_t j, C* v) TIERKIT_RMS_LAMBDA {
            // Every load of the block before any store: h may be residual.
            C sum[kRmsLanes];
            for (int k = 0; k < kRmsLanes; ++k) sum[k] = load_compute(xr + j + k) + load_compute(rr + j + k);
            for (int k = 0; k < kRmsLanes; ++k) {
              const C hv = store_rounded(hr + j + k, sum[k]);
              v[k] = hv * hv;
            }
          },
          [&](std::int64_t j) TIERKIT_RMS_LAMBDA {
            const C hv = store_rounded(hr + j, load_compute(xr + j) + load_compute(rr + j));
            return hv * hv;
          });
      const C rs = rstd_of(ss, d, eps);
      rstd[r] = rs;
      scale(hr, w, rs, d, y + r * d);
    }
  }

  // Rows [lo, hi): dx (if non-null), and dw's partial sums added into dwp
  // (if non-null) row by row.
  TIERKIT_RMS_INLINE static void backward(const T* dy, const T* x, const T* w, const C* rstd, std::int64_t d,
                                          std::int64_t lo, std::int64_t hi, T* dx, C* dwp) {
    for (std::int64_t r = lo; r < hi; ++r) {
      const T* xr = x + r * d;
      const T* gr = dy + r * d;
      const C rs = rstd[r];
      if (!dx) {
        TIERKIT_VECTORIZE_LOOP
        for (std::int64_t j = 0; j < d; ++j) dwp[j] += load_compute(gr + j) * (load_compute(xr + j) * rs);
        continue;
      }
      // sum_j g * x_hat, g = dy * w (dy without a weight).
      const C dot = w ? lane_sum_of<C>(d,
                                       [=](std::int64_t j) TIERKIT_RMS_LAMBDA {
                                         return (load_compute(gr + j) * load_compute(w + j)) *
                                                (load_compute(xr + j) * rs);
                                       })
                      : lane_sum_of<C>(d, [=](std::int64_t j) TIERKIT_RMS_LAMBDA {
                          return load_compute(gr + j) * (load_compute(xr + j) * rs);
                        });
      const C c = dot / static_cast<C>(d);
      T* dxr = dx + r * d;
      // dx may be dy or x exactly (element j reads only element j).
      if (w && dwp) {
        TIERKIT_VECTORIZE_LOOP
        for (std::int64_t i = 0; i < d; ++i) {
          const C g0 = load_compute(gr + i), xh = load_compute(xr + i) * rs;
          dwp[i] += g0 * xh;
          store_compute(dxr + i, (g0 * load_compute(w + i) - xh * c) * rs);
        }
      } else if (w) {
        TIERKIT_VECTORIZE_LOOP
        for (std::int64_t i = 0; i < d; ++i) {
          const C xh = load_compute(xr + i) * rs;
          store_compute(dxr + i, (load_compute(gr + i) * load_compute(w + i) - xh * c) * rs);
        }
      } else {
        TIERKIT_VECTORIZE_LOOP
        for (std::int64_t i = 0; i < d; ++i) {
          const C g0 = load_compute(gr + i), xh = load_compute(xr + i) * rs;
          if (dwp) dwp[i] += g0 * xh;
          store_compute(dxr + i, (g0 - xh * c) * rs);
        }
      }
    }
  }
};

// Per-level copies. Baseline x86-64 has SSE2 only; AVX2 doubles the width.
#ifdef TIERKIT_SIMD_DISPATCH

// The 16-bit rows (forward and backward) through float buffers of one chunk (kRmsChunk
// elements), filled and drained by kernels.h's vector conversions (the same
// bits as load_compute/store_compute): GCC's vectorization of the mixed-width
// loops spent more time converting than the float arithmetic takes
// (bfloat16 [4096, 4096] on two Zen 4 cores: 3.4 ms, float32's 3.7 ms for
// twice the bytes). The sums keep lane_sum's order exactly (chunks of
// kRmsChunk, lane j mod kRmsLanes, the same tails), so the results are the
// scalar rows' bit for bit at every level. W: the width's converters.
template <typename W, typename T>
TIERKIT_RMS_INLINE void widen(const T* in, std::int64_t m, float* out) {
  std::int64_t j = 0;
  for (; j + W::kLanes <= m; j += W::kLanes) W::to(in + j, out + j);
  for (; j < m; ++j) out[j] = load_compute(in + j);
}
template <typename W, typename T>
TIERKIT_RMS_INLINE void narrow(const float* in, std::int64_t m, T* out) {
  std::int64_t j = 0;
  for (; j + W::kLanes <= m; j += W::kLanes) W::from(in + j, out + j);
  for (; j < m; ++j) store_compute(out + j, in[j]);
}
// lane_sum over d terms that fill(j0, m, t) writes a chunk at a time (t[j]
// = term(j0 + j), j < m): the same chunks, lanes and tails as lane_sum.
template <typename Fill>
TIERKIT_RMS_INLINE float chunk_sum(std::int64_t d, const Fill& fill) {
  alignas(64) float t[kRmsChunk];
  Lanes<float> row;
  for (std::int64_t j0 = 0; j0 < d; j0 += kRmsChunk) {
    const std::int64_t m = std::min(kRmsChunk, d - j0);
    fill(j0, m, t);
    Lanes<float> acc;
    std::int64_t j = 0;
    for (; j + kRmsLanes <= m; j += kRmsLanes) {
      float v[kRmsLanes];
      for (int k = 0; k < kRmsLanes; ++k) v[k] = t[j + k];
      acc.add(v);
    }
    if (j < m) {  // the chunk's tail; the lanes past it add +0
      float v[kRmsLanes] = {};
      for (int k = 0; j + k < m; ++k) v[k] = t[j + k];
      acc.add(v);
    }
    row.add(acc);
  }
  return row.total();
}

template <typename W, typename T>
struct RmsRows16 {
  // y = (x * rstd) * w over the row, chunk by chunk (y may be x: each chunk
  // is read before it is written).
  TIERKIT_RMS_INLINE static void scale(const T* x, const T* w, float rs, std::int64_t d, T* y) {
    alignas(64) float xb[kRmsChunk], wb[kRmsChunk];
    for (std::int64_t j0 = 0; j0 < d; j0 += kRmsChunk) {
      const std::int64_t m = std::min(kRmsChunk, d - j0);
      widen<W>(x + j0, m, xb);
      if (w) {
        widen<W>(w + j0, m, wb);
        TIERKIT_VECTORIZE_LOOP
        for (std::int64_t j = 0; j < m; ++j) xb[j] = (xb[j] * rs) * wb[j];
      } else {
        TIERKIT_VECTORIZE_LOOP
        for (std::int64_t j = 0; j < m; ++j) xb[j] = xb[j] * rs;
      }
      narrow<W>(xb, m, y + j0);
    }
  }
  TIERKIT_RMS_INLINE static void forward(const T* x, const T* w, float eps, std::int64_t d, std::int64_t lo,
                                         std::int64_t hi, T* y, float* rstd) {
    alignas(64) float xb[kRmsChunk];
    for (std::int64_t r = lo; r < hi; ++r) {
      const T* xr = x + r * d;
      const float ss = chunk_sum(d, [&](std::int64_t j0, std::int64_t m, float* t) TIERKIT_RMS_LAMBDA {
        widen<W>(xr + j0, m, xb);
        TIERKIT_VECTORIZE_LOOP
        for (std::int64_t j = 0; j < m; ++j) t[j] = xb[j] * xb[j];
      });
      const float rs = RmsRows<T>::rstd_of(ss, d, eps);
      rstd[r] = rs;
      scale(xr, w, rs, d, y + r * d);
    }
  }
  // h = T(x + residual) chunk by chunk (h may be residual: both inputs of a
  // chunk are read before its h is written), the sum over h as rounded.
  TIERKIT_RMS_INLINE static void add_forward(const T* x, const T* res, const T* w, float eps, std::int64_t d,
                                             std::int64_t lo, std::int64_t hi, T* y, T* h, float* rstd) {
    alignas(64) float xb[kRmsChunk], rb[kRmsChunk];
    for (std::int64_t r = lo; r < hi; ++r) {
      T* hr = h + r * d;
      const float ss = chunk_sum(d, [&](std::int64_t j0, std::int64_t m, float* t) TIERKIT_RMS_LAMBDA {
        widen<W>(x + r * d + j0, m, xb);
        widen<W>(res + r * d + j0, m, rb);
        TIERKIT_VECTORIZE_LOOP
        for (std::int64_t j = 0; j < m; ++j) xb[j] = xb[j] + rb[j];
        narrow<W>(xb, m, hr + j0);
        widen<W>(hr + j0, m, xb);  // h as rounded to T
        TIERKIT_VECTORIZE_LOOP
        for (std::int64_t j = 0; j < m; ++j) t[j] = xb[j] * xb[j];
      });
      const float rs = RmsRows<T>::rstd_of(ss, d, eps);
      rstd[r] = rs;
      scale(hr, w, rs, d, y + r * d);
    }
  }
  // RmsRows::backward's arithmetic, chunk by chunk: the dot's terms summed
  // in lane_sum's order, then dx (which may be dy or x: a chunk's inputs are
  // read before its dx is written) and dw's partial sums.
  TIERKIT_RMS_INLINE static void backward(const T* dy, const T* x, const T* w, const float* rstd,
                                          std::int64_t d, std::int64_t lo, std::int64_t hi, T* dx,
                                          float* dwp) {
    alignas(64) float gb[kRmsChunk], xh[kRmsChunk], wb[kRmsChunk];
    // A chunk's g = dy and x_hat = x * rstd (and w where wanted): every pass starts so.
    const auto load = [&](const T* gr, const T* xr, float rs, std::int64_t j0, std::int64_t m, bool with_w)
                          TIERKIT_RMS_LAMBDA {
                            widen<W>(gr + j0, m, gb);
                            widen<W>(xr + j0, m, xh);
                            TIERKIT_VECTORIZE_LOOP
                            for (std::int64_t j = 0; j < m; ++j) xh[j] = xh[j] * rs;
                            if (with_w) widen<W>(w + j0, m, wb);
                          };
    const auto add_dw = [&](std::int64_t j0, std::int64_t m) TIERKIT_RMS_LAMBDA {
      float* p = dwp + j0;
      TIERKIT_VECTORIZE_LOOP
      for (std::int64_t j = 0; j < m; ++j) p[j] += gb[j] * xh[j];
    };
    for (std::int64_t r = lo; r < hi; ++r) {
      const T* xr = x + r * d;
      const T* gr = dy + r * d;
      const float rs = rstd[r];
      if (!dx) {
        for (std::int64_t j0 = 0; j0 < d; j0 += kRmsChunk) {
          const std::int64_t m = std::min(kRmsChunk, d - j0);
          load(gr, xr, rs, j0, m, false);
          add_dw(j0, m);
        }
        continue;
      }
      const float dot = chunk_sum(d, [&](std::int64_t j0, std::int64_t m, float* t) TIERKIT_RMS_LAMBDA {
        load(gr, xr, rs, j0, m, w != nullptr);
        if (w) {
          TIERKIT_VECTORIZE_LOOP
          for (std::int64_t j = 0; j < m; ++j) t[j] = (gb[j] * wb[j]) * xh[j];
        } else {
          TIERKIT_VECTORIZE_LOOP
          for (std::int64_t j = 0; j < m; ++j) t[j] = gb[j] * xh[j];
        }
      });
      const float c = dot / static_cast<float>(d);
      T* dxr = dx + r * d;
      for (std::int64_t j0 = 0; j0 < d; j0 += kRmsChunk) {
        const std::int64_t m = std::min(kRmsChunk, d - j0);
        load(gr, xr, rs, j0, m, w != nullptr);
        if (dwp) add_dw(j0, m);
        if (w) {
          TIERKIT_VECTORIZE_LOOP
          for (std::int64_t j = 0; j < m; ++j) gb[j] = (gb[j] * wb[j] - xh[j] * c) * rs;
        } else {
          TIERKIT_VECTORIZE_LOOP
          for (std::int64_t j = 0; j < m; ++j) gb[j] = (gb[j] - xh[j] * c) * rs;
        }
        narrow<W>(gb, m, dxr + j0);
      }
    }
  }
};

// The converters of one width. No target attributes here: the rms16_*
// functions below are `flatten`, so these and the converters (which carry
// their width's target) are inlined into a function of the same target.
#define TIERKIT_RMS16_WIDTH(NAME, LANES, SUFFIX)  \
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
TIERKIT_RMS16_WIDTH(RmsWidth256, kLanes256, 256)
TIERKIT_RMS16_WIDTH(RmsWidth512, kLanes512, 512)
// Each row body's copy per width, under kernels.h's 16-bit targets.
#define TIERKIT_RMS16_COPIES(NAME)                                                                         \
  template <typename T, typename... A>                                                                     \
  TIERKIT_16_AVX2 __attribute__((flatten, optimize("fp-contract=off"))) void rms16_##NAME##_avx2(A... a) { \
    RmsRows16<RmsWidth256, T>::NAME(a...);                                                                 \
  }                                                                                                        \
  template <typename T, typename... A>                                                                     \
  TIERKIT_16_AVX512 __attribute__((flatten, optimize("fp-contract=off"))) void rms16_##NAME##_avx512(      \
      A... a) {                                                                                            \
    RmsRows16<RmsWidth512, T>::NAME(a...);                                                                 \
  }
TIERKIT_RMS16_COPIES(forward)
TIERKIT_RMS16_COPIES(add_forward)
TIERKIT_RMS16_COPIES(backward)
#undef TIERKIT_RMS16_COPIES
#undef TIERKIT_RMS16_WIDTH

#define TIERKIT_RMS_AVX2 __attribute__((target("avx2")))
template <typename T, typename... A>
TIERKIT_RMS_AVX2 void rms_forward_avx2(A... a) {
  RmsRows<T>::forward(a...);
}
template <typename T, typename... A>
TIERKIT_RMS_AVX2 void rms_add_forward_avx2(A... a) {
  RmsRows<T>::add_forward(a...);
}
template <typename T, typename... A>
TIERKIT_RMS_AVX2 void rms_backward_avx2(A... a) {
  RmsRows<T>::backward(a...);
}
#undef TIERKIT_RMS_AVX2
#define TIERKIT_RMS_DISPATCH(NAME, T, ...)                                             \
  do {                                                                                 \
    if (simd_level() != SimdLevel::Baseline) return rms_##NAME##_avx2<T>(__VA_ARGS__); \
    return RmsRows<T>::NAME(__VA_ARGS__);                                              \
  } while (0)
// The rows of a 16-bit T through RmsRows16 where the CPU has the
// conversions (its AVX-512 copy at that level), else as the others.
#define TIERKIT_RMS16_DISPATCH(NAME, T, ...)                                                 \
  do {                                                                                       \
    if constexpr (sizeof(T) == 2) {                                                          \
      if (cpu_has_16bit_simd()) {                                                            \
        if (simd_level() == SimdLevel::Avx512) return rms16_##NAME##_avx512<T>(__VA_ARGS__); \
        if (simd_level() == SimdLevel::Avx2) return rms16_##NAME##_avx2<T>(__VA_ARGS__);     \
      }                                                                                      \
    }                                                                                        \
    TIERKIT_RMS_DISPATCH(NAME, T, __VA_ARGS__);                                              \
  } while (0)
#else
#define TIERKIT_RMS_DISPATCH(NAME, T, ...) return RmsRows<T>::NAME(__VA_ARGS__)
#define TIERKIT_RMS16_DISPATCH TIERKIT_RMS_DISPATCH
#endif

template <typename T>
void rms_forward_rows(const T* x, const T* w, compute_t<T> eps, std::int64_t d, std::int64_t lo,
                      std::int64_t hi, T* y, compute_t<T>* rstd) {
  TIERKIT_RMS16_DISPATCH(forward, T, x, w, eps, d, lo, hi, y, rstd);
}
template <typename T>
void rms_add_forward_rows(const T* x, const T* res, const T* w, compute_t<T> eps, std::int64_t d,
                          std::int64_t lo, std::int64_t hi, T* y, T* h, compute_t<T>* rstd) {
  TIERKIT_RMS16_DISPATCH(add_forward, T, x, res, w, eps, d, lo, hi, y, h, rstd);
}
template <typename T>
void rms_backward_rows(const T* dy, const T* x, const T* w, const compute_t<T>* rstd, std::int64_t d,
                       std::int64_t lo, std::int64_t hi, T* dx, compute_t<T>* dwp) {
  TIERKIT_RMS16_DISPATCH(backward, T, dy, x, w, rstd, d, lo, hi, dx, dwp);
}
#undef TIERKIT_RMS_DISPATCH
#undef TIERKIT_RMS16_DISPATCH
#undef TIERKIT_RMS_INLINE
#undef TIERKIT_RMS_LAMBDA

// Rows per chunk: about kGrain elements.
inline std::int64_t rms_row_grain(std::int64_t d) {
  return std::max<std::int64_t>(1, kGrain / std::max<std::int64_t>(1, d));
}

// Whether the byte spans [a, a + an) and [b, b + bn) share a byte.
inline bool spans_meet(const void* a, std::size_t an, const void* b, std::size_t bn) {
  const auto pa = reinterpret_cast<std::uintptr_t>(a), pb = reinterpret_cast<std::uintptr_t>(b);
  return an > 0 && bn > 0 && pa < pb + bn && pb < pa + an;
}

// The weight as every row reads it: the values it had at the call. Rows
// run in parallel and each writes its own outputs, so a weight that lies in
// an output (add_rms_norm_(x, r, r[0]); the bridge's out= with weight =
// out[0]) would be read rewritten by later rows and other threads: such a
// weight is copied first (d elements, beside rows * d of work).
template <typename T>
class WeightAsCalled {
 public:
  // `outputs`: the {pointer, bytes} spans the kernel writes.
  WeightAsCalled(const T* w, std::int64_t d,
                 std::initializer_list<std::pair<const void*, std::size_t>> outputs)
      : w_(w) {
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

template <typename T>
std::size_t span_bytes(std::int64_t rows, std::int64_t d) {
  return rows > 0 && d > 0 ? static_cast<std::size_t>(rows) * static_cast<std::size_t>(d) * sizeof(T) : 0;
}

}  // namespace detail

// y = rms_norm(x) * w over rows of d; rstd[rows] saved for backward. w may
// be null (no weight); y may be x exactly; w may lie anywhere (it is read as
// it was at the call, even where it lies in y or rstd).
template <typename T, typename Runner = PoolRunner>
void rms_norm_forward(const T* x, const T* w_in, double eps, std::int64_t rows, std::int64_t d, T* y,
                      compute_t<T>* rstd, const Runner& run = {}) {
  using C = compute_t<T>;
  const C e = static_cast<C>(eps);
  const detail::WeightAsCalled<T> weight(
      w_in, d, {{y, detail::span_bytes<T>(rows, d)}, {rstd, detail::span_bytes<C>(rows, 1)}});
  const T* w = weight.get();
  run(rows, detail::rms_row_grain(d),
      [&](std::int64_t lo, std::int64_t hi) { detail::rms_forward_rows<T>(x, w, e, d, lo, hi, y, rstd); });
}

// h = x + residual rounded to T (h_out may be residual exactly), then
// y = rms_norm(h) * w and rstd as rms_norm_forward gives for h: one pass
// over x and residual per row. w may lie anywhere, h_out included (it is
// read as it was at the call).
template <typename T, typename Runner = PoolRunner>
void add_rms_norm_forward(const T* x, const T* residual, const T* w_in, double eps, std::int64_t rows,
                          std::int64_t d, T* y, T* h_out, compute_t<T>* rstd, const Runner& run = {}) {
  using C = compute_t<T>;
  const C e = static_cast<C>(eps);
  const std::size_t out_bytes = detail::span_bytes<T>(rows, d);
  const detail::WeightAsCalled<T> weight(
      w_in, d, {{y, out_bytes}, {h_out, out_bytes}, {rstd, detail::span_bytes<C>(rows, 1)}});
  const T* w = weight.get();
  run(rows, detail::rms_row_grain(d), [&](std::int64_t lo, std::int64_t hi) {
    detail::rms_add_forward_rows<T>(x, residual, w, e, d, lo, hi, y, h_out, rstd);
  });
}

// dx (nullable; may be dy or x exactly) and dw (nullable, [d], overwritten,
// in compute_t<T>) of y = rms_norm(x) * w, from rms_norm_forward's rstd; w
// may lie in dx or dw (it is read as it was at the call).
template <typename T, typename Runner = PoolRunner>
void rms_norm_backward(const T* dy, const T* x, const T* w_in, const compute_t<T>* rstd, std::int64_t rows,
                       std::int64_t d, T* dx, compute_t<T>* dw, const Runner& run = {}) {
  using C = compute_t<T>;
  const detail::WeightAsCalled<T> weight(
      w_in, d, {{dx, dx ? detail::span_bytes<T>(rows, d) : 0}, {dw, dw ? detail::span_bytes<C>(1, d) : 0}});
  const T* w = weight.get();
  if (!dw) {
    if (!dx) return;
    run(rows, detail::rms_row_grain(d), [&](std::int64_t lo, std::int64_t hi) {
      detail::rms_backward_rows<T>(dy, x, w, rstd, d, lo, hi, dx, static_cast<C*>(nullptr));
    });
    return;
  }
  std::fill(dw, dw + d, C(0));
  if (rows <= 0 || d <= 0) return;
  // Block b's partial sums (its rows in order): dw itself for block 0,
  // scratch for the others; then summed in a fixed tree into dw.
  const std::int64_t blocks = detail::rms_dw_blocks(rows, d);
  const std::int64_t per = (rows + blocks - 1) / blocks;
  std::unique_ptr<C[]> scratch(blocks > 1 ? new C[static_cast<std::size_t>((blocks - 1) * d)] : nullptr);
  auto part = [&](std::int64_t b) { return b == 0 ? dw : scratch.get() + (b - 1) * d; };
  run(blocks, 1, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t b = lo; b < hi; ++b) {
      C* p = part(b);
      if (b > 0) std::fill(p, p + d, C(0));
      const std::int64_t r0 = std::min(rows, b * per), r1 = std::min(rows, r0 + per);
      detail::rms_backward_rows<T>(dy, x, w, rstd, d, r0, r1, dx, p);
    }
  });
  if (blocks == 1) return;
  // The blocks' sums in a fixed pairwise tree (block b += block b + s for
  // s = 1, 2, 4, ...): log2(blocks) roundings instead of blocks - 1.
  run(d, std::max<std::int64_t>(1, detail::kGrain / blocks), [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t step = 1; step < blocks; step *= 2)
      for (std::int64_t b = 0; b + step < blocks; b += 2 * step) {
        C* into = part(b);
        const C* from = part(b + step);
        TIERKIT_VECTORIZE_LOOP
        for (std::int64_t j = lo; j < hi; ++j) into[j] += from[j];
      }
  });
}

}  // namespace tierkit::kernels
