// The row kinds' arithmetic: one functor per row-reduction entry of the op
// table (tierkit_core/op_table.py), kept apart from the loops that run them
// (tierkit/row_kernels.h: the summation order, 16-bit chunks, SIMD copies,
// threads, the parameters' gradients across rows). A contributor adding a
// row reduction writes its body here, each expression once over a runner
// (row_terms.h), and TIERKIT_ROW_KIND makes the kind of it; see
// docs/adding-an-op.md.
//
// Numerics shared by the kinds (C = compute_t<T>: float for float and the
// 16-bit types, double for double): every sum is lane_sum's, in C; each
// output rounds once to T from C; a row's RowsVec gives Rows<T>'s
// bits. Zero-length rows give NaN statistics (0 / 0) and empty outputs, as
// torch's do.
#pragma once

#include <cmath>
#include <cstdint>

#include "tierkit/row_kernels.h"
#include "tierkit/row_terms.h"

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
// RmsNorm's rows, each expression written once over a term's L and run by
// R (row_terms.h: ScalarRowTerms for Rows<T>, VecRowTerms for RowsVec).
template <typename R, typename T>
struct RmsNormBody {
  using C = typename R::C;

  TIERKIT_ROW_INLINE static C rstd_of(C sum_sq, std::int64_t d, C eps) {
    return C(1) / std::sqrt(sum_sq / static_cast<C>(d) + eps);
  }

  // y = (x * rstd) * w, rounded once; with `round` (casting_mode "llama"),
  // y = T(T(x * rstd) * w): x-hat rounded to T first. y may be x (a block is
  // read before it is written).
  // w_floor: the weight's smallest nonzero magnitude, where R can use it
  // (R::kProvesNormal: the row then converts to bfloat16 without the
  // subnormal check where scaled_normal proves there is none to find).
  // y: T, or C where the call wants the product in the compute type
  // (kWideOutput: "llama" with a float32 weight over 16-bit x), not rounded
  // to T; x-hat still is under `round`, with a weight or without. A C row
  // is wider than x's: it may not be x (row_forward says so).
  template <typename Y>
  TIERKIT_ROW_INLINE static void scale(const T* x, const C* w, C w_floor, C rs, std::int64_t d, Y* y,
                                       bool stream, bool round, NextRow<T> ahead) {
    bool normal = false;
    if constexpr (R::kProvesNormal) normal = R::scaled_normal(x, d, rs, w_floor);
    R::out_row(y, d, stream, [&](Y* out, bool st, std::int64_t head) TIERKIT_ROW_LAMBDA {
      if (w && round) {
        R::each_scaled(
            normal, d,
            [&](auto L, std::int64_t j)
                TIERKIT_ROW_LAMBDA { L.st(out + j, L.round(L.ld(x + j) * L.splat(rs)) * L.ld(w + j), st); },
            ahead, head);
      } else if (w) {
        R::each_scaled(
            normal, d,
            [&](auto L, std::int64_t j)
                TIERKIT_ROW_LAMBDA { L.st(out + j, (L.ld(x + j) * L.splat(rs)) * L.ld(w + j), st); },
            ahead, head);
      } else if (!std::is_same_v<Y, T> && round) {  // a C row keeps "llama"'s x-hat as rounded
        R::each_scaled(
            normal, d,
            [&](auto L, std::int64_t j)
                TIERKIT_ROW_LAMBDA { L.st(out + j, L.round(L.ld(x + j) * L.splat(rs)), st); },
            ahead, head);
      } else {
        R::each_scaled(
            normal, d,
            [&](auto L, std::int64_t j) TIERKIT_ROW_LAMBDA { L.st(out + j, L.ld(x + j) * L.splat(rs), st); },
            ahead, head);
      }
    });
  }

  template <typename Y>
  TIERKIT_ROW_INLINE static void forward(const T* x, RowParams<C> p, C eps, std::int64_t d, std::int64_t lo,
                                         std::int64_t hi, Y* y, C* rstd, bool stream) {
    C w_floor = 0;
    if constexpr (R::kProvesNormal) w_floor = R::weight_floor(p.w, d);
    for (std::int64_t r = lo; r < hi; ++r) {
      const T* xr = x + r * d;
      const C ss = R::sum(d, [&](auto L, std::int64_t j) TIERKIT_ROW_LAMBDA {
        const auto v = L.ld(xr + j);
        return v * v;
      });
      const C rs = rstd_of(ss, d, eps);
      rstd[r] = rs;
      scale(xr, p.w, w_floor, rs, d, y + r * d, stream, p.round_normalized, r + 1 < hi ? xr + d : nullptr);
    }
  }

  // h = T(x + residual) (h may be residual: an element's inputs are read
  // before its h is written), then the forward of h as rounded.
  template <typename Y>
  TIERKIT_ROW_INLINE static void add_forward(const T* x, const T* res, RowParams<C> p, C eps, std::int64_t d,
                                             std::int64_t lo, std::int64_t hi, Y* y, T* h, C* rstd,
                                             bool stream) {
    C w_floor = 0;
    if constexpr (R::kProvesNormal) w_floor = R::weight_floor(p.w, d);
    for (std::int64_t r = lo; r < hi; ++r) {
      const T *xr = x + r * d, *rr = res + r * d;
      R::staged_row(h + r * d, d, stream, [&](T* hr) TIERKIT_ROW_LAMBDA {
        const C ss = R::sum_stored(
            d, hr, [&](auto L, std::int64_t j) TIERKIT_ROW_LAMBDA { return L.ld(xr + j) + L.ld(rr + j); },
            [](auto, auto hv) TIERKIT_ROW_LAMBDA { return hv * hv; });
        const C rs = rstd_of(ss, d, eps);
        rstd[r] = rs;
        scale(hr, p.w, w_floor, rs, d, y + r * d, stream, p.round_normalized,
              r + 1 < hi ? NextRow<T>(xr + d, rr + d) : NextRow<T>());
      });
    }
  }

  // The dot's terms, then dx (which may be dy or x: an element's inputs are
  // read before its dx is written) and dw's partial sums added into dwp
  // (if non-null) row by row.
  TIERKIT_ROW_INLINE static void backward(const T* dy, const T* x, RowParams<C> p, const C* rstd,
                                          std::int64_t d, std::int64_t lo, std::int64_t hi, T* dx, C* dwp,
                                          C* /* dbp: no bias */, bool stream) {
    const C* w = p.w;
    for (std::int64_t r = lo; r < hi; ++r) {
      const T *xr = x + r * d, *gr = dy + r * d;
      const C rs = rstd[r];
      if (!dx) {
        R::each(d, [&](auto L, std::int64_t j)
                       TIERKIT_ROW_LAMBDA { L.add(dwp + j, L.ld(gr + j) * (L.ld(xr + j) * L.splat(rs))); });
        continue;
      }
      // sum_j g * x_hat, g = dy * w (dy without a weight).
      const C dot = w ? R::sum(d,
                               [&](auto L, std::int64_t j) TIERKIT_ROW_LAMBDA {
                                 return (L.ld(gr + j) * L.ld(w + j)) * (L.ld(xr + j) * L.splat(rs));
                               })
                      : R::sum(d, [&](auto L, std::int64_t j) TIERKIT_ROW_LAMBDA {
                          return L.ld(gr + j) * (L.ld(xr + j) * L.splat(rs));
                        });
      const C c = dot / static_cast<C>(d);
      T* dxr = dx + r * d;
      // The next row's dy (each's ahead) and x, asked for during this last pass.
      const T* next_x = r + 1 < hi ? xr + d : nullptr;
      R::out_row(dxr, d, stream, [&](T* out, bool st, std::int64_t head) TIERKIT_ROW_LAMBDA {
        R::each(
            d,
            [&](auto L, std::int64_t j) TIERKIT_ROW_LAMBDA {
              if (next_x) R::prefetch(next_x + j, d);
              const auto g0 = L.ld(gr + j), xh = L.ld(xr + j) * L.splat(rs);
              if (dwp) L.add(dwp + j, g0 * xh);
              L.st(out + j,
                   w ? (g0 * L.ld(w + j) - xh * L.splat(c)) * L.splat(rs)
                     : (g0 - xh * L.splat(c)) * L.splat(rs),
                   st);
            },
            r + 1 < hi ? gr + d : nullptr, head);
      });
    }
  }
};

// ---- LayerNorm: y = (x - mean) * rstd * w + b, rstd = 1 / sqrt(var + eps) -
//
//  * mean and var in C, from sums about a point k near the mean: with
//    v = x - k, mean = k + sum_j v / d and var = sum_j v^2 / d - (sum_j v / d)^2
//    (the corrected two-pass variance of Chan, Golub and LeVeque). k is the
//    mean of the row's first kShiftTerms elements, so the sums take one pass
//    over the row as it comes from memory; where k lies too far from the mean
//    for that subtraction to keep var's bits (see moments), a second pass
//    about the mean found takes over, as every row did before. Never a
//    one-pass sum of squares about 0: it loses var when |mean| >> std.
//  * y = ((x - mean) * rstd) * w + b in C, rounded once. aten's CPU kernel
//    computes x * (rstd * w) + (b - mean * rstd * w); the form here rounds
//    less, and is at least as close to float64 (tested per dtype).
//  * Backward: x_hat = (x - mean) * rstd, g = dy * w, a = sum_j g / d,
//    c = sum_j g * x_hat / d, dx = ((g - a) - x_hat * c) * rstd;
//    dw[j] = sum_r dy * x_hat, db[j] = sum_r dy, in C.
template <typename R, typename T>
struct LayerNormBody {
  using C = typename R::C;

  // The first elements whose mean is k: 64 puts k within std / 8 of the
  // mean of a row of independent values (std / sqrt(64)).
  static constexpr std::int64_t kShiftTerms = 64;

  // One pass about k where the subtraction of shift^2 costs var at most an
  // eighth of its value in cancellation (9 shift^2 <= sum v^2 / d, i.e.
  // shift^2 <= var / 8); else the rows whose first elements are not typical
  // of the rest (an outlier channel among them) take a second pass about the
  // mean found, and a row with an infinity or a NaN takes the two passes it
  // always took, so its NaN is the one it gave before. One in-cache pass
  // fewer for most rows: LayerNorm float32 over 64 MiB went from 0.78 to
  // 0.83 of a non-temporal copy at d = 4096, 0.76 to 0.80 at 8192 (the
  // AVX-512 Xeon, 2 threads, old and new code alternating).
  TIERKIT_ROW_INLINE static void moments(const T* xr, std::int64_t d, C eps, C* stats) {
    const std::int64_t m = std::min(d, kShiftTerms);
    const C k = m > 0 ? R::sum(m, [&](auto L, std::int64_t j) TIERKIT_ROW_LAMBDA { return L.ld(xr + j); }) /
                            static_cast<C>(m)
                      : C(0);
    const Sums2<C> s = R::sum2(d, [&](auto L, std::int64_t j, auto& a, auto& b) TIERKIT_ROW_LAMBDA {
      a = L.ld(xr + j) - L.splat(k);
      b = a * a;
    });
    const C n = static_cast<C>(d);
    const C shift = s.a / n, second = s.b / n;
    if (C(9) * (shift * shift) <= second) return finish(k, shift, second, eps, stats);
    if (std::isfinite(second)) return about(xr, k + shift, d, eps, stats);
    about(xr, R::sum(d, [&](auto L, std::int64_t j) TIERKIT_ROW_LAMBDA { return L.ld(xr + j); }) / n, d, eps,
          stats);
  }

  // The sums about mean0, a second pass over the row (in cache).
  TIERKIT_ROW_INLINE static void about(const T* xr, C mean0, std::int64_t d, C eps, C* stats) {
    const Sums2<C> s = R::sum2(d, [&](auto L, std::int64_t j, auto& a, auto& b) TIERKIT_ROW_LAMBDA {
      a = L.ld(xr + j) - L.splat(mean0);
      b = a * a;
    });
    const C n = static_cast<C>(d);
    finish(mean0, s.a / n, s.b / n, eps, stats);
  }

  // mean = k + shift, var = second - shift^2. The mean is corrected by the
  // mean of what is left (x - k), not taken as sum / n: that rounds, and in a
  // row whose spread is small against its mean the rounding, times rstd,
  // would be the whole output (a constant row of 128.23 in float32 gave
  // 0.005 for 0). Exact for a constant row, within an ulp of the mean
  // otherwise.
  TIERKIT_ROW_INLINE static void finish(C k, C shift, C second, C eps, C* stats) {
    stats[0] = k + shift;
    stats[1] = C(1) / std::sqrt(std::max(C(0), second - shift * shift) + eps);
  }

  // y = ((x - mean) * rstd) * w + b, each parameter if given, rounded once
  // (y may be x: an element is read before it is written).
  TIERKIT_ROW_INLINE static void scale(const T* x, RowParams<C> p, C mean, C rs, std::int64_t d, T* y,
                                       bool stream, NextRow<T> ahead) {
    const C *w = p.w, *b = p.b;
    const auto xh = [&](auto L, std::int64_t j)
                        TIERKIT_ROW_LAMBDA { return (L.ld(x + j) - L.splat(mean)) * L.splat(rs); };
    R::out_row(y, d, stream, [&](T* out, bool st, std::int64_t head) TIERKIT_ROW_LAMBDA {
      if (w && b) {
        R::each(
            d,
            [&](auto L, std::int64_t j)
                TIERKIT_ROW_LAMBDA { L.st(out + j, xh(L, j) * L.ld(w + j) + L.ld(b + j), st); },
            ahead, head);
      } else if (w) {
        R::each(
            d, [&](auto L, std::int64_t j) TIERKIT_ROW_LAMBDA { L.st(out + j, xh(L, j) * L.ld(w + j), st); },
            ahead, head);
      } else if (b) {
        R::each(
            d, [&](auto L, std::int64_t j) TIERKIT_ROW_LAMBDA { L.st(out + j, xh(L, j) + L.ld(b + j), st); },
            ahead, head);
      } else {
        R::each(
            d, [&](auto L, std::int64_t j) TIERKIT_ROW_LAMBDA { L.st(out + j, xh(L, j), st); }, ahead, head);
      }
    });
  }

  TIERKIT_ROW_INLINE static void forward(const T* x, RowParams<C> p, C eps, std::int64_t d, std::int64_t lo,
                                         std::int64_t hi, T* y, C* stats, bool stream) {
    for (std::int64_t r = lo; r < hi; ++r) {
      C* s = stats + 2 * r;
      moments(x + r * d, d, eps, s);
      scale(x + r * d, p, s[0], s[1], d, y + r * d, stream, r + 1 < hi ? x + (r + 1) * d : nullptr);
    }
  }

  // h = T(x + residual) row by row (h may be residual: an element's inputs
  // are read before its h is written), then the forward's moments and scale
  // on the row of h in cache: the same bits as the forward of h (its
  // moments are taken about the mean of h's first elements, so the pass
  // that writes h sums nothing).
  TIERKIT_ROW_INLINE static void add_forward(const T* x, const T* res, RowParams<C> p, C eps, std::int64_t d,
                                             std::int64_t lo, std::int64_t hi, T* y, T* h, C* stats,
                                             bool stream) {
    for (std::int64_t r = lo; r < hi; ++r) {
      R::staged_row(h + r * d, d, stream, [&](T* hr) TIERKIT_ROW_LAMBDA {
        R::each(d, [&, xr = x + r * d, rr = res + r * d](auto L, std::int64_t j)
                       TIERKIT_ROW_LAMBDA { L.st(hr + j, L.ld(xr + j) + L.ld(rr + j)); });
        C* s = stats + 2 * r;
        moments(hr, d, eps, s);
        scale(hr, p, s[0], s[1], d, y + r * d, stream,
              r + 1 < hi ? NextRow<T>(x + (r + 1) * d, res + (r + 1) * d) : NextRow<T>());
      });
    }
  }

  // Rows [lo, hi): dx (if non-null); dw's and db's partial sums added into
  // dwp and dbp (each if non-null) row by row.
  TIERKIT_ROW_INLINE static void backward(const T* dy, const T* x, RowParams<C> p, const C* stats,
                                          std::int64_t d, std::int64_t lo, std::int64_t hi, T* dx, C* dwp,
                                          C* dbp, bool stream) {
    const C* w = p.w;
    for (std::int64_t r = lo; r < hi; ++r) {
      const T *xr = x + r * d, *gr = dy + r * d;
      const C mean = stats[2 * r], rs = stats[2 * r + 1];
      const auto xh_of = [&](auto L, std::int64_t j)
                             TIERKIT_ROW_LAMBDA { return (L.ld(xr + j) - L.splat(mean)) * L.splat(rs); };
      const auto g_of = [&](auto L, std::int64_t j)
                            TIERKIT_ROW_LAMBDA { return w ? L.ld(gr + j) * L.ld(w + j) : L.ld(gr + j); };
      if (!dx) {
        if (dwp || dbp) {
          R::each(d, [&](auto L, std::int64_t j) TIERKIT_ROW_LAMBDA {
            const auto g0 = L.ld(gr + j);
            if (dwp) L.add(dwp + j, g0 * xh_of(L, j));
            if (dbp) L.add(dbp + j, g0);
          });
        }
        continue;
      }
      const C n = static_cast<C>(d);
      // mean(g) and mean(g * x-hat) from one pass.
      const Sums2<C> ac = R::sum2(d, [&](auto L, std::int64_t j, auto& a, auto& b) TIERKIT_ROW_LAMBDA {
        a = g_of(L, j);
        b = a * xh_of(L, j);
      });
      const C a = ac.a / n, c = ac.b / n;
      T* dxr = dx + r * d;
      // dx may be dy or x exactly (element j reads only element j, before
      // dx_j is stored). dw's and db's terms are added in this pass too, as
      // RMSNorm's are: a pass of their own over dy and x was a third pass a
      // row. The next row's dy (each's ahead) and x, asked for here.
      const T* next_x = r + 1 < hi ? xr + d : nullptr;
      R::out_row(dxr, d, stream, [&](T* out, bool st, std::int64_t head) TIERKIT_ROW_LAMBDA {
        R::each(
            d,
            [&](auto L, std::int64_t j) TIERKIT_ROW_LAMBDA {
              if (next_x) R::prefetch(next_x + j, d);
              const auto g0 = L.ld(gr + j), xh = xh_of(L, j);
              if (dwp) L.add(dwp + j, g0 * xh);
              if (dbp) L.add(dbp + j, g0);
              const auto g = w ? g0 * L.ld(w + j) : g0;
              L.st(out + j, ((g - L.splat(a)) - xh * L.splat(c)) * L.splat(rs), st);
            },
            r + 1 < hi ? gr + d : nullptr, head);
      });
    }
  }
};

}  // namespace detail

// The kinds: what row_kernels.h's row_forward, row_add_forward and
// row_backward take as K, each its body over the scalar runner (Rows<T>) and
// the vector one (RowsVec<W, T>). The op table's entries name them (functor=).
#ifdef TIERKIT_ROW_VEC
#define TIERKIT_ROW_KIND(NAME, STATS, WIDE)                      \
  struct NAME {                                                  \
    static constexpr int kStats = STATS;                         \
    static constexpr bool kWideOutput = WIDE;                    \
    template <typename T>                                        \
    using Rows = detail::ScalarRowsOf<detail::NAME##Body, T>;    \
    template <typename W, typename T>                            \
    using RowsVec = detail::VecRowsOf<detail::NAME##Body, W, T>; \
  };
#else
#define TIERKIT_ROW_KIND(NAME, STATS, WIDE)                   \
  struct NAME {                                               \
    static constexpr int kStats = STATS;                      \
    static constexpr bool kWideOutput = WIDE;                 \
    template <typename T>                                     \
    using Rows = detail::ScalarRowsOf<detail::NAME##Body, T>; \
  };
#endif
// WIDE: the forward may write y in x's compute type (row_forward's Y):
// RmsNorm's, for casting_mode "llama" with a float32 weight over 16-bit x,
// whose product is float32.
TIERKIT_ROW_KIND(RmsNorm, 1, true)     // stats: rstd
TIERKIT_ROW_KIND(LayerNorm, 2, false)  // stats: mean, rstd
#undef TIERKIT_ROW_KIND

}  // namespace tierkit::kernels

// The op table's row kinds kept in headers of their own, so that one include
// gives every entry's functor.
#include "tierkit/softmax_functors.h"  // NOLINT(build/include_order)
