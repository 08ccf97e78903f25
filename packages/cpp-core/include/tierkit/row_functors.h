// The row kinds' arithmetic: one functor per row-reduction entry of the op
// table (tierkit_core/op_table.py), kept apart from the loops that run them
// (tierkit/row_kernels.h: the summation order, 16-bit chunks, SIMD copies,
// threads, the parameters' gradients across rows). A contributor adding a
// row reduction writes its Rows<T> (and, for speed, Rows16<W, T>) here and a
// kind struct naming them; see docs/adding-an-op.md.
//
// Numerics shared by the kinds (C = compute_t<T>: float for float and the
// 16-bit types, double for double): every sum is lane_sum's, in C; each
// output rounds once to T from C; a 16-bit row's Rows16 gives Rows<T>'s
// bits. Zero-length rows give NaN statistics (0 / 0) and empty outputs, as
// torch's do.
#pragma once

#include <cmath>
#include <cstdint>

#include "tierkit/row_kernels.h"

namespace tierkit::kernels {

// ---- RMSNorm: y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps) ----------
//
//  * rstd[r] = 1 / sqrt(sum_j x[r,j]^2 / d + C(eps)), the sum in C. The
//    formula and its roundings are torch's (_fused_rms_norm's decomposition:
//    x.float().pow(2).mean(-1).add(eps).rsqrt(), mean = sum / d); the sum's
//    order is ours (torch's reduction order differs, so rstd may differ from
//    eager's in the last bits either way).
//  * y[r,j] = (x[r,j] * rstd[r]) * w[j] in C, rounded once to T. Eager
//    F.rms_norm (torch 2.14, CPU) does the same for every dtype: measured bit
//    for bit against (x.float() * rstd * w.float()).to(T) for bfloat16 and
//    float16, so no eager-style double rounding is needed to match it.
//  * An all-zero row gives rstd = 1 / sqrt(eps), y = 0. A row whose sum of
//    squares overflows C (float: beyond ~3.4e38, e.g. 4096 elements of 1e18)
//    gives rstd = 0 and y = 0, as eager's float accumulation does.
//  * Backward: x_hat = x * rstd, g = dy * w (dy without a weight),
//    c = sum_j g * x_hat / d, dx = (g - x_hat * c) * rstd rounded once to T;
//    dw[j] = sum_r dy[r,j] * x_hat[r,j] in C (the caller rounds it to T).
namespace detail {
template <typename T>
struct RmsNormRows {
  using C = compute_t<T>;

  TIERKIT_ROW_INLINE static C rstd_of(C sum_sq, std::int64_t d, C eps) {
    return C(1) / std::sqrt(sum_sq / static_cast<C>(d) + eps);
  }

  // y = (x * rstd) * w, rounded once.
  TIERKIT_ROW_INLINE static void scale(const T* x, const T* w, C rstd, std::int64_t d, T* y) {
    if (w) {
      TIERKIT_VECTORIZE_LOOP
      for (std::int64_t j = 0; j < d; ++j)
        store_compute(y + j, (load_compute(x + j) * rstd) * load_compute(w + j));
    } else {
      TIERKIT_VECTORIZE_LOOP
      for (std::int64_t j = 0; j < d; ++j) store_compute(y + j, load_compute(x + j) * rstd);
    }
  }

  TIERKIT_ROW_INLINE static void forward(const T* x, RowParams<T> p, C eps, std::int64_t d, std::int64_t lo,
                                         std::int64_t hi, T* y, C* rstd) {
    const T* w = p.w;
    for (std::int64_t r = lo; r < hi; ++r) {
      const T* xr = x + r * d;
      const C ss = lane_sum_of<C>(d, [xr](std::int64_t j) TIERKIT_ROW_LAMBDA {
        const C v = load_compute(xr + j);
        return v * v;
      });
      const C rs = rstd_of(ss, d, eps);
      rstd[r] = rs;
      scale(xr, w, rs, d, y + r * d);
    }
  }

  // h = T(x + residual) (h may be residual), then forward on h.
  TIERKIT_ROW_INLINE static void add_forward(const T* x, const T* res, RowParams<T> p, C eps, std::int64_t d,
                                             std::int64_t lo, std::int64_t hi, T* y, T* h, C* rstd) {
    const T* w = p.w;
    for (std::int64_t r = lo; r < hi; ++r) {
      const T* xr = x + r * d;
      const T* rr = res + r * d;
      T* hr = h + r * d;
      const C ss = lane_sum<C>(
          d,
          [&](std::int64_t j, C* v) TIERKIT_ROW_LAMBDA {
            // Every load of the block before any store: h may be residual.
            C sum[kRowLanes];
            for (int k = 0; k < kRowLanes; ++k) sum[k] = load_compute(xr + j + k) + load_compute(rr + j + k);
            for (int k = 0; k < kRowLanes; ++k) {
              const C hv = store_rounded(hr + j + k, sum[k]);
              v[k] = hv * hv;
            }
          },
          [&](std::int64_t j) TIERKIT_ROW_LAMBDA {
            const C hv = store_rounded(hr + j, load_compute(xr + j) + load_compute(rr + j));
            return hv * hv;
          });
      const C rs = rstd_of(ss, d, eps);
      rstd[r] = rs;
      scale(hr, w, rs, d, y + r * d);
    }
  }

  // Rows [lo, hi): dx (if non-null), and dw's partial sums added into dwp
  // (if non-null) row by row; no bias, so no dbp.
  TIERKIT_ROW_INLINE static void backward(const T* dy, const T* x, RowParams<T> p, const C* rstd,
                                          std::int64_t d, std::int64_t lo, std::int64_t hi, T* dx, C* dwp,
                                          C*) {
    const T* w = p.w;
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
                                       [=](std::int64_t j) TIERKIT_ROW_LAMBDA {
                                         return (load_compute(gr + j) * load_compute(w + j)) *
                                                (load_compute(xr + j) * rs);
                                       })
                      : lane_sum_of<C>(d, [=](std::int64_t j) TIERKIT_ROW_LAMBDA {
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

#ifdef TIERKIT_SIMD_DISPATCH
template <typename W, typename T>
struct RmsNormRows16 {
  // y = (x * rstd) * w over the row, chunk by chunk (y may be x: each chunk
  // is read before it is written).
  TIERKIT_ROW_INLINE static void scale(const T* x, const T* w, float rs, std::int64_t d, T* y) {
    alignas(64) float xb[kRowChunk], wb[kRowChunk];
    for (std::int64_t j0 = 0; j0 < d; j0 += kRowChunk) {
      const std::int64_t m = std::min(kRowChunk, d - j0);
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
  TIERKIT_ROW_INLINE static void forward(const T* x, RowParams<T> p, float eps, std::int64_t d,
                                         std::int64_t lo, std::int64_t hi, T* y, float* rstd) {
    const T* w = p.w;
    alignas(64) float xb[kRowChunk];
    for (std::int64_t r = lo; r < hi; ++r) {
      const T* xr = x + r * d;
      const float ss = chunk_sum(d, [&](std::int64_t j0, std::int64_t m, float* t) TIERKIT_ROW_LAMBDA {
        widen<W>(xr + j0, m, xb);
        TIERKIT_VECTORIZE_LOOP
        for (std::int64_t j = 0; j < m; ++j) t[j] = xb[j] * xb[j];
      });
      const float rs = RmsNormRows<T>::rstd_of(ss, d, eps);
      rstd[r] = rs;
      scale(xr, w, rs, d, y + r * d);
    }
  }
  // h = T(x + residual) chunk by chunk (h may be residual: both inputs of a
  // chunk are read before its h is written), the sum over h as rounded.
  TIERKIT_ROW_INLINE static void add_forward(const T* x, const T* res, RowParams<T> p, float eps,
                                             std::int64_t d, std::int64_t lo, std::int64_t hi, T* y, T* h,
                                             float* rstd) {
    const T* w = p.w;
    alignas(64) float xb[kRowChunk], rb[kRowChunk];
    for (std::int64_t r = lo; r < hi; ++r) {
      T* hr = h + r * d;
      const float ss = chunk_sum(d, [&](std::int64_t j0, std::int64_t m, float* t) TIERKIT_ROW_LAMBDA {
        widen<W>(x + r * d + j0, m, xb);
        widen<W>(res + r * d + j0, m, rb);
        TIERKIT_VECTORIZE_LOOP
        for (std::int64_t j = 0; j < m; ++j) xb[j] = xb[j] + rb[j];
        narrow<W>(xb, m, hr + j0);
        widen<W>(hr + j0, m, xb);  // h as rounded to T
        TIERKIT_VECTORIZE_LOOP
        for (std::int64_t j = 0; j < m; ++j) t[j] = xb[j] * xb[j];
      });
      const float rs = RmsNormRows<T>::rstd_of(ss, d, eps);
      rstd[r] = rs;
      scale(hr, w, rs, d, y + r * d);
    }
  }
  // RmsNormRows::backward's arithmetic, chunk by chunk: the dot's terms summed
  // in lane_sum's order, then dx (which may be dy or x: a chunk's inputs are
  // read before its dx is written) and dw's partial sums.
  TIERKIT_ROW_INLINE static void backward(const T* dy, const T* x, RowParams<T> p, const float* rstd,
                                          std::int64_t d, std::int64_t lo, std::int64_t hi, T* dx, float* dwp,
                                          float*) {
    const T* w = p.w;
    alignas(64) float gb[kRowChunk], xh[kRowChunk], wb[kRowChunk];
    // A chunk's g = dy and x_hat = x * rstd (and w where wanted): every pass starts so.
    const auto load = [&](const T* gr, const T* xr, float rs, std::int64_t j0, std::int64_t m, bool with_w)
                          TIERKIT_ROW_LAMBDA {
                            widen<W>(gr + j0, m, gb);
                            widen<W>(xr + j0, m, xh);
                            TIERKIT_VECTORIZE_LOOP
                            for (std::int64_t j = 0; j < m; ++j) xh[j] = xh[j] * rs;
                            if (with_w) widen<W>(w + j0, m, wb);
                          };
    const auto add_dw = [&](std::int64_t j0, std::int64_t m) TIERKIT_ROW_LAMBDA {
      float* p = dwp + j0;
      TIERKIT_VECTORIZE_LOOP
      for (std::int64_t j = 0; j < m; ++j) p[j] += gb[j] * xh[j];
    };
    for (std::int64_t r = lo; r < hi; ++r) {
      const T* xr = x + r * d;
      const T* gr = dy + r * d;
      const float rs = rstd[r];
      if (!dx) {
        for (std::int64_t j0 = 0; j0 < d; j0 += kRowChunk) {
          const std::int64_t m = std::min(kRowChunk, d - j0);
          load(gr, xr, rs, j0, m, false);
          add_dw(j0, m);
        }
        continue;
      }
      const float dot = chunk_sum(d, [&](std::int64_t j0, std::int64_t m, float* t) TIERKIT_ROW_LAMBDA {
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
      for (std::int64_t j0 = 0; j0 < d; j0 += kRowChunk) {
        const std::int64_t m = std::min(kRowChunk, d - j0);
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

#endif  // TIERKIT_SIMD_DISPATCH

// ---- LayerNorm: y = (x - mean) * rstd * w + b, rstd = 1 / sqrt(var + eps) -
//
//  * mean = sum_j x / d, then var = sum_j (x - mean)^2 / d (biased, as
//    torch's), both in C: two passes over the row, which is in cache, so
//    no cancellation (a one-pass sum of squares loses var when |mean| >> std).
//  * y = ((x - mean) * rstd) * w + b in C, rounded once. aten's CPU kernel
//    computes x * (rstd * w) + (b - mean * rstd * w); the form here rounds
//    less, and is at least as close to float64 (tested per dtype).
//  * Backward: x_hat = (x - mean) * rstd, g = dy * w, a = sum_j g / d,
//    c = sum_j g * x_hat / d, dx = ((g - a) - x_hat * c) * rstd;
//    dw[j] = sum_r dy * x_hat, db[j] = sum_r dy, in C.
template <typename T>
struct LayerNormRows {
  using C = compute_t<T>;

  TIERKIT_ROW_INLINE static void moments(const T* xr, std::int64_t d, C eps, C* stats) {
    const C n = static_cast<C>(d);
    // The mean corrected by the mean of what is left (x - mean0): sum / n
    // rounds, and in a row whose spread is small against its mean that
    // rounding, times rstd, would be the whole output (a constant row of
    // 128.23 in float32 gave 0.005 for 0). The corrected mean is exact for a
    // constant row and within an ulp of the row's mean otherwise; the
    // variance is the corrected two-pass one (Chan, Golub and LeVeque), both
    // sums from one pass.
    const C mean0 =
        lane_sum_of<C>(d, [xr](std::int64_t j) TIERKIT_ROW_LAMBDA { return load_compute(xr + j); }) / n;
    const Sums2<C> s = lane_sum2_of<C>(
        d, [xr, mean0](std::int64_t j) TIERKIT_ROW_LAMBDA { return load_compute(xr + j) - mean0; },
        [xr, mean0](std::int64_t j) TIERKIT_ROW_LAMBDA {
          const C v = load_compute(xr + j) - mean0;
          return v * v;
        });
    const C shift = s.a / n;
    const C mean = mean0 + shift;
    const C var = std::max(C(0), s.b / n - shift * shift);
    stats[0] = mean;
    stats[1] = C(1) / std::sqrt(var + eps);
  }

  TIERKIT_ROW_INLINE static void scale(const T* x, RowParams<T> p, C mean, C rs, std::int64_t d, T* y) {
    const T *w = p.w, *b = p.b;
    if (w && b) {
      TIERKIT_VECTORIZE_LOOP
      for (std::int64_t j = 0; j < d; ++j)
        store_compute(y + j, ((load_compute(x + j) - mean) * rs) * load_compute(w + j) + load_compute(b + j));
    } else if (w) {
      TIERKIT_VECTORIZE_LOOP
      for (std::int64_t j = 0; j < d; ++j)
        store_compute(y + j, ((load_compute(x + j) - mean) * rs) * load_compute(w + j));
    } else if (b) {
      TIERKIT_VECTORIZE_LOOP
      for (std::int64_t j = 0; j < d; ++j)
        store_compute(y + j, (load_compute(x + j) - mean) * rs + load_compute(b + j));
    } else {
      TIERKIT_VECTORIZE_LOOP
      for (std::int64_t j = 0; j < d; ++j) store_compute(y + j, (load_compute(x + j) - mean) * rs);
    }
  }

  TIERKIT_ROW_INLINE static void forward(const T* x, RowParams<T> p, C eps, std::int64_t d, std::int64_t lo,
                                         std::int64_t hi, T* y, C* stats) {
    for (std::int64_t r = lo; r < hi; ++r) {
      C* s = stats + 2 * r;
      moments(x + r * d, d, eps, s);
      scale(x + r * d, p, s[0], s[1], d, y + r * d);
    }
  }

  // h = T(x + residual) row by row (h may be residual: element j reads only
  // element j), then forward on the row of h while it is in cache.
  TIERKIT_ROW_INLINE static void add_forward(const T* x, const T* res, RowParams<T> p, C eps, std::int64_t d,
                                             std::int64_t lo, std::int64_t hi, T* y, T* h, C* stats) {
    for (std::int64_t r = lo; r < hi; ++r) {
      const T *xr = x + r * d, *rr = res + r * d;
      T* hr = h + r * d;
      TIERKIT_VECTORIZE_LOOP
      for (std::int64_t j = 0; j < d; ++j) store_compute(hr + j, load_compute(xr + j) + load_compute(rr + j));
      forward(h, p, eps, d, r, r + 1, y, stats);
    }
  }

  TIERKIT_ROW_INLINE static C g_of(const T* gr, const T* w, std::int64_t j) {
    return w ? load_compute(gr + j) * load_compute(w + j) : load_compute(gr + j);
  }

  // Rows [lo, hi): dx (if non-null); dw's and db's partial sums added into
  // dwp and dbp (each if non-null) row by row.
  TIERKIT_ROW_INLINE static void backward(const T* dy, const T* x, RowParams<T> p, const C* stats,
                                          std::int64_t d, std::int64_t lo, std::int64_t hi, T* dx, C* dwp,
                                          C* dbp) {
    const T* w = p.w;
    for (std::int64_t r = lo; r < hi; ++r) {
      const T *xr = x + r * d, *gr = dy + r * d;
      const C mean = stats[2 * r], rs = stats[2 * r + 1];
      if (dwp) {
        TIERKIT_VECTORIZE_LOOP
        for (std::int64_t j = 0; j < d; ++j)
          dwp[j] += load_compute(gr + j) * ((load_compute(xr + j) - mean) * rs);
      }
      if (dbp) {
        TIERKIT_VECTORIZE_LOOP
        for (std::int64_t j = 0; j < d; ++j) dbp[j] += load_compute(gr + j);
      }
      if (!dx) continue;
      const C n = static_cast<C>(d);
      // mean(g) and mean(g * x-hat) from one pass.
      const Sums2<C> ac = lane_sum2_of<C>(
          d, [=](std::int64_t j) TIERKIT_ROW_LAMBDA { return g_of(gr, w, j); },
          [=](std::int64_t j)
              TIERKIT_ROW_LAMBDA { return g_of(gr, w, j) * ((load_compute(xr + j) - mean) * rs); });
      const C a = ac.a / n, c = ac.b / n;
      T* dxr = dx + r * d;
      // dx may be dy or x exactly (element j reads only element j).
      TIERKIT_VECTORIZE_LOOP
      for (std::int64_t j = 0; j < d; ++j) {
        const C xh = (load_compute(xr + j) - mean) * rs;
        store_compute(dxr + j, ((g_of(gr, w, j) - a) - xh * c) * rs);
      }
    }
  }
};

#ifdef TIERKIT_SIMD_DISPATCH
// LayerNormRows' arithmetic on float chunks (see RmsNormRows16): the same
// terms in the same order, so the same bits.
template <typename W, typename T>
struct LayerNormRows16 {
  TIERKIT_ROW_INLINE static void moments(const T* xr, std::int64_t d, float eps, float* stats) {
    const float n = static_cast<float>(d);
    // The mean corrected by the mean of x - mean0 and the corrected two-pass
    // variance, as LayerNormRows' (why there).
    const float mean0 = chunk_sum(d, [&](std::int64_t j0, std::int64_t m, float* t)
                                         TIERKIT_ROW_LAMBDA { widen<W>(xr + j0, m, t); }) /
                        n;
    const Sums2<float> s =
        chunk_sum2(d, [&](std::int64_t j0, std::int64_t m, float* ta, float* tb) TIERKIT_ROW_LAMBDA {
          widen<W>(xr + j0, m, ta);
          TIERKIT_VECTORIZE_LOOP
          for (std::int64_t j = 0; j < m; ++j) {
            const float v = ta[j] - mean0;
            ta[j] = v;
            tb[j] = v * v;
          }
        });
    const float shift = s.a / n;
    const float mean = mean0 + shift;
    const float var = std::max(0.f, s.b / n - shift * shift);
    stats[0] = mean;
    stats[1] = 1.f / std::sqrt(var + eps);
  }

  // y = ((x - mean) * rstd) * w + b chunk by chunk (y may be x).
  TIERKIT_ROW_INLINE static void scale(const T* x, RowParams<T> p, float mean, float rs, std::int64_t d,
                                       T* y) {
    alignas(64) float xb[kRowChunk], wb[kRowChunk], bb[kRowChunk];
    for (std::int64_t j0 = 0; j0 < d; j0 += kRowChunk) {
      const std::int64_t m = std::min(kRowChunk, d - j0);
      widen<W>(x + j0, m, xb);
      if (p.w) widen<W>(p.w + j0, m, wb);
      if (p.b) widen<W>(p.b + j0, m, bb);
      if (p.w && p.b) {
        TIERKIT_VECTORIZE_LOOP
        for (std::int64_t j = 0; j < m; ++j) xb[j] = ((xb[j] - mean) * rs) * wb[j] + bb[j];
      } else if (p.w) {
        TIERKIT_VECTORIZE_LOOP
        for (std::int64_t j = 0; j < m; ++j) xb[j] = ((xb[j] - mean) * rs) * wb[j];
      } else if (p.b) {
        TIERKIT_VECTORIZE_LOOP
        for (std::int64_t j = 0; j < m; ++j) xb[j] = (xb[j] - mean) * rs + bb[j];
      } else {
        TIERKIT_VECTORIZE_LOOP
        for (std::int64_t j = 0; j < m; ++j) xb[j] = (xb[j] - mean) * rs;
      }
      narrow<W>(xb, m, y + j0);
    }
  }

  TIERKIT_ROW_INLINE static void forward(const T* x, RowParams<T> p, float eps, std::int64_t d,
                                         std::int64_t lo, std::int64_t hi, T* y, float* stats) {
    for (std::int64_t r = lo; r < hi; ++r) {
      float* s = stats + 2 * r;
      moments(x + r * d, d, eps, s);
      scale(x + r * d, p, s[0], s[1], d, y + r * d);
    }
  }

  TIERKIT_ROW_INLINE static void add_forward(const T* x, const T* res, RowParams<T> p, float eps,
                                             std::int64_t d, std::int64_t lo, std::int64_t hi, T* y, T* h,
                                             float* stats) {
    alignas(64) float xb[kRowChunk], rb[kRowChunk];
    for (std::int64_t r = lo; r < hi; ++r) {
      for (std::int64_t j0 = 0; j0 < d; j0 += kRowChunk) {
        const std::int64_t m = std::min(kRowChunk, d - j0);
        widen<W>(x + r * d + j0, m, xb);
        widen<W>(res + r * d + j0, m, rb);
        TIERKIT_VECTORIZE_LOOP
        for (std::int64_t j = 0; j < m; ++j) xb[j] = xb[j] + rb[j];
        narrow<W>(xb, m, h + r * d + j0);
      }
      forward(h, p, eps, d, r, r + 1, y, stats);
    }
  }

  TIERKIT_ROW_INLINE static void backward(const T* dy, const T* x, RowParams<T> p, const float* stats,
                                          std::int64_t d, std::int64_t lo, std::int64_t hi, T* dx, float* dwp,
                                          float* dbp) {
    alignas(64) float gb[kRowChunk], xh[kRowChunk], wb[kRowChunk];
    const T* w = p.w;
    // A chunk's dy, x_hat and g = dy * w (into gb when there is a weight).
    const auto load = [&](const T* gr, const T* xr, float mean, float rs, std::int64_t j0, std::int64_t m)
                          TIERKIT_ROW_LAMBDA {
                            widen<W>(gr + j0, m, gb);
                            widen<W>(xr + j0, m, xh);
                            TIERKIT_VECTORIZE_LOOP
                            for (std::int64_t j = 0; j < m; ++j) xh[j] = (xh[j] - mean) * rs;
                          };
    const auto with_w = [&](std::int64_t j0, std::int64_t m) TIERKIT_ROW_LAMBDA {
      if (!w) return;
      widen<W>(w + j0, m, wb);
      TIERKIT_VECTORIZE_LOOP
      for (std::int64_t j = 0; j < m; ++j) gb[j] = gb[j] * wb[j];
    };
    for (std::int64_t r = lo; r < hi; ++r) {
      const T *xr = x + r * d, *gr = dy + r * d;
      const float mean = stats[2 * r], rs = stats[2 * r + 1];
      if (dwp || dbp) {
        for (std::int64_t j0 = 0; j0 < d; j0 += kRowChunk) {
          const std::int64_t m = std::min(kRowChunk, d - j0);
          load(gr, xr, mean, rs, j0, m);
          if (dwp) {
            float* q = dwp + j0;
            TIERKIT_VECTORIZE_LOOP
            for (std::int64_t j = 0; j < m; ++j) q[j] += gb[j] * xh[j];
          }
          if (dbp) {
            float* q = dbp + j0;
            TIERKIT_VECTORIZE_LOOP
            for (std::int64_t j = 0; j < m; ++j) q[j] += gb[j];
          }
        }
      }
      if (!dx) continue;
      const float n = static_cast<float>(d);
      // mean(g) and mean(g * x-hat) from one pass.
      const Sums2<float> ac =
          chunk_sum2(d, [&](std::int64_t j0, std::int64_t m, float* ta, float* tb) TIERKIT_ROW_LAMBDA {
            load(gr, xr, mean, rs, j0, m);
            with_w(j0, m);
            TIERKIT_VECTORIZE_LOOP
            for (std::int64_t j = 0; j < m; ++j) {
              ta[j] = gb[j];
              tb[j] = gb[j] * xh[j];
            }
          });
      const float a = ac.a / n, c = ac.b / n;
      for (std::int64_t j0 = 0; j0 < d; j0 += kRowChunk) {
        const std::int64_t m = std::min(kRowChunk, d - j0);
        load(gr, xr, mean, rs, j0, m);
        with_w(j0, m);
        TIERKIT_VECTORIZE_LOOP
        for (std::int64_t j = 0; j < m; ++j) gb[j] = ((gb[j] - a) - xh[j] * c) * rs;
        narrow<W>(gb, m, dx + r * d + j0);
      }
    }
  }
};
#endif  // TIERKIT_SIMD_DISPATCH

}  // namespace detail

// The kinds: what row_kernels.h's row_forward, row_add_forward and
// row_backward take as K. The op table's entries name them (functor=).
#ifdef TIERKIT_SIMD_DISPATCH
#define TIERKIT_ROW_KIND(NAME, STATS)          \
  struct NAME {                                \
    static constexpr int kStats = STATS;       \
    template <typename T>                      \
    using Rows = detail::NAME##Rows<T>;        \
    template <typename W, typename T>          \
    using Rows16 = detail::NAME##Rows16<W, T>; \
  };
#else
#define TIERKIT_ROW_KIND(NAME, STATS)    \
  struct NAME {                          \
    static constexpr int kStats = STATS; \
    template <typename T>                \
    using Rows = detail::NAME##Rows<T>;  \
  };
#endif
TIERKIT_ROW_KIND(RmsNorm, 1)    // stats: rstd
TIERKIT_ROW_KIND(LayerNorm, 2)  // stats: mean, rstd
#undef TIERKIT_ROW_KIND

}  // namespace tierkit::kernels
