// Softmax and log-softmax over a row: two row kinds (row_kernels.h's K) for
// the op table's softmax and log_softmax, with no parameters and no eps
// (row_forward's are ignored) and no fused residual form. Stats: the row's
// max m and its sum s = sum_j exp(x_j - m) (softmax) or log(s)
// (log_softmax), in the compute type C; backward recomputes each output
// from x and them, the forward's bits.
//
// Numerics (C = float for float and the 16-bit types, double for double):
//  * m = the row's largest element, NaNs skipped, a zero read as +0 (so
//    the bits do not depend on the order the lanes meet -0 and +0); an
//    empty row gives m = -inf.
//  * s = lane_sum's sum of e_j = exp(x_j - m) in C (x_j - m <= 0, so no
//    e_j overflows and the largest is exactly 1). exp is exp_nonpositive
//    below for float (within 1.02 ulp, subnormal results included), std::exp
//    for double.
//  * softmax y_j = e_j / s; log_softmax y_j = (x_j - m) - log(s); each
//    rounded once to T. aten multiplies by 1 / s (two roundings) and
//    subtracts m + log(s) (a rounding more), so these are at least as close
//    to the exact values.
//  * Rows as aten gives them: a -inf element gives y = 0 (log: -inf); an
//    all -inf row gives NaN (x - m = -inf - -inf); a +inf or NaN element
//    makes the whole row NaN.
//  * Backward, g = dy: softmax dx_j = y_j * (g_j - sum_k g_k y_k);
//    log_softmax dx_j = g_j - exp(y_j) * sum_k g_k; y recomputed in C (aten
//    reads the rounded output instead), once per element (SoftmaxBody's
//    kKeep).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "tierkit/row_kernels.h"
#include "tierkit/row_terms.h"

namespace tierkit::kernels {
namespace detail {

// exp(x) for x <= 0 (or NaN) in float: Cody-Waite reduction and Cephes'
// degree-7 polynomial in fused multiply-adds, vmath::vexp_sigmoid's, then
// 2^n applied as two normal factors, so results down to the subnormals
// round once (exp(-103) = 1.4e-45 is the smallest; below -110 the result is
// 0, -inf included). Written once over M: a float (ExpOne) or a vector of
// W's width (ExpVec), the same operations in the same order, so every level
// gives the same bits. Checked against long double exp on every 16th float
// in [-110, 0] (CTest: every 256th; within 1.02 ulp in the normal range).
struct ExpOne {
  using F = float;
  using U = std::uint32_t;
  static constexpr bool kScalef = false;
  TIERKIT_ROW_INLINE static F fma(F a, F b, F c) { return std::fma(a, b, c); }
  TIERKIT_ROW_INLINE static F splat(float c) { return c; }
};

template <typename M>
TIERKIT_ROW_INLINE typename M::F exp_nonpositive(typename M::F x) {
  using F = typename M::F;
  using U = typename M::U;
  constexpr float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  constexpr float kP[6] = {5.0000001201e-1f, 1.6666665459e-1f, 4.1665795894e-2f,
                           8.3334519073e-3f, 1.3981999507e-3f, 1.9875691500e-4f};
  const F lo = M::splat(-110.0f), zero = M::splat(0.0f);
  x = x < lo ? lo : x;  // false for NaN, which passes through
  x = x > zero ? zero : x;
  const F t = M::fma(x, M::splat(kLog2e), M::splat(kRound));
  const F n = t - M::splat(kRound);  // round(x log2 e), in [-159, 0]
  const F r = M::fma(-n, M::splat(kLn2Lo), M::fma(-n, M::splat(kLn2Hi), x));
  F p = M::fma(M::splat(kP[5]), r, M::splat(kP[4]));
  p = M::fma(p, r, M::splat(kP[3]));
  p = M::fma(p, r, M::splat(kP[2]));
  p = M::fma(p, r, M::splat(kP[1]));
  p = M::fma(p, r, M::splat(kP[0]));
  const F y = M::fma(p, r * r, r) + M::splat(1.0f);
  if constexpr (M::kScalef) return M::scalef(y, n);
  // n + 159 = e in [0, 159], split as n = (e1 - 80) + (e2 - 79): both
  // factors' exponents normal, y times the first exact.
  U tb, kb;
  const F kr = M::splat(kRound);
  std::memcpy(&tb, &t, sizeof tb);
  std::memcpy(&kb, &kr, sizeof kb);
  const U e = tb - kb + 159u;
  const U e1 = e >> 1, e2 = e - e1;
  const U b1 = (e1 + 47u) << 23, b2 = (e2 + 48u) << 23;
  F s1, s2;
  std::memcpy(&s1, &b1, sizeof s1);
  std::memcpy(&s2, &b2, sizeof s2);
  return (y * s1) * s2;
}

template <typename C, typename T>
TIERKIT_ROW_INLINE C exp_at(ScalarAt<C, T>, C x) {
  if constexpr (std::is_same_v<C, double>)
    return std::exp(x);
  else
    return exp_nonpositive<ExpOne>(x);
}

// The two kinds' rows, each expression written once over a term's L and
// run by R (row_terms.h's runners). No parameters, eps or fused form: the
// row kinds' signature with those ignored, so ScalarRowsOf / VecRowsOf make
// Rows<T> and RowsVec<W, T> of it as of the norms' bodies.
template <typename R, typename T, bool kLog>
struct SoftmaxBody {
  using C = typename R::C;
  // y_j from x_j and the row's stats (m, s or log s).
  template <typename L, typename V>
  TIERKIT_ROW_INLINE static V value(L, V x, C m, C s) {
    if constexpr (kLog)
      return (x - L::splat(m)) - L::splat(s);
    else
      return exp_at(L{}, x - L::splat(m)) / L::splat(s);
  }

  TIERKIT_ROW_INLINE static void forward(const T* x, RowParams<C>, C, std::int64_t d, std::int64_t lo,
                                         std::int64_t hi, T* y, C* stats, bool stream) {
    if (!kLog && d <= kKeptRow)
      forward_rows<true>(x, d, lo, hi, y, stats, stream);
    else
      forward_rows<false>(x, d, lo, hi, y, stats, stream);
  }

  // dx may be dy or x exactly (element j reads only element j); no parameters.
  TIERKIT_ROW_INLINE static void backward(const T* dy, const T* x, RowParams<C>, const C* stats,
                                          std::int64_t d, std::int64_t lo, std::int64_t hi, T* dx, C*, C*,
                                          bool stream) {
    if (!dx) return;
    if (!kLog && d <= kKeptRow)
      backward_rows<true>(dy, x, stats, d, lo, hi, dx, stream);
    else
      backward_rows<false>(dy, x, stats, d, lo, hi, dx, stream);
  }

 private:
  // kKeep: the row's softmax terms (e_j forward, y_j backward), computed in
  // the pass that sums them, are kept in C in a row on the stack, and the
  // pass that writes reads them there instead of computing each exp again:
  // one exp per element, not two, the same bits (the same function of the
  // same inputs). Softmax in bfloat16 was bound by its exps, not by memory
  // (an AVX-512 Xeon: forward + backward at 0.13 of the copy limit, 0.75x
  // torch.compile).
  template <bool kKeep>
  TIERKIT_ROW_INLINE static void forward_rows(const T* x, std::int64_t d, std::int64_t lo, std::int64_t hi,
                                              T* y, C* stats, bool stream) {
    KeptRow<kKeep> kept;
    for (std::int64_t r = lo; r < hi; ++r) {
      const T* xr = x + r * d;
      const C m = R::max(xr, d);
      const C sum = R::sum(d, [&](auto L, std::int64_t j) TIERKIT_ROW_LAMBDA {
        const auto e = exp_at(L, L.ld(xr + j) - L.splat(m));
        if constexpr (kKeep) L.st(kept.p + j, e);
        return e;
      });
      const C s = kLog ? std::log(sum) : sum;
      stats[2 * r] = m;
      stats[2 * r + 1] = s;
      T* yr = y + r * d;
      // 16-bit rows store plainly (store_lanes); float ones stream where row_streams says, their
      // blocks from the row's first whole line (line_head: the elements before it one at a time).
      // Not through out_row's stack row, as the norms' 16-bit rows leave: these rows are bound by
      // their exps, and the stack row's copy cost more than the read of each output line saved
      // (bfloat16, 2^24 elements, two Zen 4 cores, both builds in one process, 41 alternating
      // pairs: forward and backward 0.87-0.99x as fast at d = 1024 and 4096, both kinds).
      R::each(
          d,
          [&](auto L, std::int64_t j) TIERKIT_ROW_LAMBDA {
            if constexpr (kKeep)
              L.st(yr + j, L.ld(kept.p + j) / L.splat(s), stream);
            else
              L.st(yr + j, value(L, L.ld(xr + j), m, s), stream);
          },
          r + 1 < hi ? xr + d : nullptr, line_head(yr, d, stream));
    }
  }

  template <bool kKeep>
  TIERKIT_ROW_INLINE static void backward_rows(const T* dy, const T* x, const C* stats, std::int64_t d,
                                               std::int64_t lo, std::int64_t hi, T* dx, bool stream) {
    KeptRow<kKeep> kept;
    for (std::int64_t r = lo; r < hi; ++r) {
      const T* xr = x + r * d;
      const T* gr = dy + r * d;
      const C m = stats[2 * r], s = stats[2 * r + 1];
      T* dxr = dx + r * d;
      if constexpr (kLog) {
        const C sg = R::sum(d, [&](auto L, std::int64_t j) TIERKIT_ROW_LAMBDA { return L.ld(gr + j); });
        R::each(d, [&](auto L, std::int64_t j) TIERKIT_ROW_LAMBDA {
          L.st(dxr + j, L.ld(gr + j) - exp_at(L, value(L, L.ld(xr + j), m, s)) * L.splat(sg), stream);
        });
      } else {
        const C dot = R::sum(d, [&](auto L, std::int64_t j) TIERKIT_ROW_LAMBDA {
          const auto yj = value(L, L.ld(xr + j), m, s);
          if constexpr (kKeep) L.st(kept.p + j, yj);
          return L.ld(gr + j) * yj;
        });
        R::each(d, [&](auto L, std::int64_t j) TIERKIT_ROW_LAMBDA {
          if constexpr (kKeep)
            L.st(dxr + j, L.ld(kept.p + j) * (L.ld(gr + j) - L.splat(dot)), stream);
          else
            L.st(dxr + j, value(L, L.ld(xr + j), m, s) * (L.ld(gr + j) - L.splat(dot)), stream);
        });
      }
    }
  }

  // The widest row whose terms are kept: 32 KiB of C on the stack (8192
  // floats, 4096 doubles); wider rows compute them again.
  static constexpr std::int64_t kKeptRow = 32768 / static_cast<std::int64_t>(sizeof(C));
  template <bool kKeep>
  using KeptRow = StackRow<C, kKeep ? kKeptRow : 1>;
};

#ifdef TIERKIT_ROW_VEC
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"  // vectors between always-inline functions (row_kernels.h)
// exp_nonpositive's operations on W's vectors: the fused multiply-add
// written out (its intrinsics' target attributes would keep these generic
// functions from inlining: row_kernels.h's store_lanes says why).
template <typename W>
struct ExpVec {
  using F = typename W::F;
  using U = typename W::U;
  TIERKIT_ROW_INLINE static F fma(F a, F b, F c) {
    asm("vfmadd213ps %2, %1, %0" : "+v"(a) : "v"(b), "v"(c));
    return a;
  }
  TIERKIT_ROW_INLINE static F splat(float c) { return detail::splat<W>(c); }
  // AVX-512: y * 2^n in one VSCALEFPS, rounded once as the two factors'
  // second product rounds (y * s1 is exact), so the bits are the same; a
  // NaN y stays y's NaN (s1 and s2 are never NaN). Nine instructions fewer
  // an exp.
  static constexpr bool kScalef = W::kLanes == 16;
  TIERKIT_ROW_INLINE static F scalef(F y, F n) {
    asm("vscalefps %2, %1, %0" : "=v"(y) : "v"(y), "v"(n));
    return y;
  }
};
template <typename W, typename T>
TIERKIT_ROW_INLINE typename W::F exp_at(VecAt<W, T>, typename W::F x) {
  return exp_nonpositive<ExpVec<W>>(x);
}

#pragma GCC diagnostic pop
#endif  // TIERKIT_ROW_VEC

}  // namespace detail

// The kinds (row_kernels.h's K): stats m and s (softmax) or log s (log_softmax).
template <bool kLog>
struct SoftmaxKind {
  static constexpr int kStats = 2;
  static constexpr bool kWideOutput = false;
  template <typename R, typename T>
  using Body = detail::SoftmaxBody<R, T, kLog>;
  template <typename T>
  using Rows = detail::ScalarRowsOf<Body, T>;
#ifdef TIERKIT_ROW_VEC
  template <typename W, typename T>
  using RowsVec = detail::VecRowsOf<Body, W, T>;
#endif
};
using Softmax = SoftmaxKind<false>;
using LogSoftmax = SoftmaxKind<true>;

}  // namespace tierkit::kernels
