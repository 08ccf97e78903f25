// The row kinds' arithmetic on CUDA: one functor per row-reduction entry of
// the op table (tierkit_core/op_table.py names it: functor="RmsNorm" means
// RmsNormRowsF here and tierkit::kernels::RmsNorm in core), kept apart from
// the kernels that run them (row_kernels.cu: the row-to-thread mapping,
// vector loads, warp and block sums, the parameters' gradients per slot).
// A functor gives, in the compute type C with round-to-nearest operations
// (no FMA contraction, as core's CPU functors):
//   kStats                     per-row values saved for backward;
//   kTranscendental            (optional, false when absent) an exp or log
//                              per element: the double backward kernels
//                              then get more registers;
//   stats(sum, max, d, eps, s) s[0..kStats) from row reductions: sum(term)
//                              is sum_j term(x_j) over the row, max() the
//                              row's largest x_j (NaNs skipped), every
//                              thread's;
//   xhat(x, s)                 the normalised value (y = xhat * w + b);
//   dx(g, xh, a, c, s, n)      dx from g = dy * w, x-hat, a = mean(g) and
//                              c = mean(g * x-hat) over the row of n.
#pragma once

#include <cstdint>

#include "device_math.cuh"

namespace tierkit_cuda {

// IEEE round-to-nearest division and 1 / sqrt, spelled as intrinsics: the
// same whatever -prec-div and -prec-sqrt say.
__device__ __forceinline__ float div_rn(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ double div_rn(double a, double b) { return __ddiv_rn(a, b); }
__device__ __forceinline__ float rsqrt_rn(float v) { return __frcp_rn(__fsqrt_rn(v)); }
__device__ __forceinline__ double rsqrt_rn(double v) { return __drcp_rn(__dsqrt_rn(v)); }

// RMSNorm: rstd = 1 / sqrt(sum(x^2) / d + eps), x-hat = x * rstd,
// dx = (g - x-hat * c) * rstd (core's formulas and roundings).
template <typename C>
struct RmsNormRowsF {
  static constexpr int kStats = 1;
  template <typename Sum, typename Max>
  __device__ static void stats(const Sum& sum, const Max&, int64_t d, C eps, C* s) {
    const C ss = sum([](C v) { return mul_rn(v, v); });
    s[0] = rsqrt_rn(add_rn(div_rn(ss, static_cast<C>(d)), eps));
  }
  __device__ static C xhat(C x, const C* s) { return mul_rn(x, s[0]); }
  __device__ static C dx(C g, C xh, C, C c, const C* s, C) { return mul_rn(add_rn(g, -mul_rn(xh, c)), s[0]); }
};

// LayerNorm: core's LayerNormBody statistics (tierkit/row_functors.h) with
// its roundings, about the plain mean: mean0 = sum(x) / d; with
// v = x - mean0, shift = sum(v) / d, mean = mean0 + shift (exact for a
// constant row) and var = max(0, sum(v^2) / d - shift^2) (the corrected
// two-pass variance of Chan, Golub and LeVeque: no cancellation when
// |mean| >> std); rstd = 1 / sqrt(var + eps); x-hat = (x - mean) * rstd,
// dx = ((g - a) - x-hat * c) * rstd. What is not the CPU's: the order of each
// sum (per-thread strided partials, then a shuffle tree; the CPU adds lanes
// in a fixed order) and the point: the CPU sums about the mean of the row's
// first 64 elements in the pass that reads the row from memory, and about
// the mean it found only where that point is too far from it. So mean and
// rstd agree with the CPU's within the compute type's rounding of a d-term
// sum, not bit for bit.
template <typename C>
struct LayerNormRowsF {
  static constexpr int kStats = 2;
  template <typename Sum, typename Max>
  __device__ static void stats(const Sum& sum, const Max&, int64_t d, C eps, C* s) {
    const C n = static_cast<C>(d);
    const C mean0 = div_rn(sum([](C v) { return v; }), n);
    const C shift = div_rn(sum([mean0](C v) { return add_rn(v, -mean0); }), n);
    const C ss = sum([mean0](C v) {
      const C c = add_rn(v, -mean0);
      return mul_rn(c, c);
    });
    const C diff = add_rn(div_rn(ss, n), -mul_rn(shift, shift));
    s[0] = add_rn(mean0, shift);
    // std::max(C(0), diff)'s result, a NaN included (0 < NaN is false: 0).
    s[1] = rsqrt_rn(add_rn(C(0) < diff ? diff : C(0), eps));
  }
  __device__ static C xhat(C x, const C* s) { return mul_rn(add_rn(x, -s[0]), s[1]); }
  __device__ static C dx(C g, C xh, C a, C c, const C* s, C) {
    return mul_rn(add_rn(add_rn(g, -a), -mul_rn(xh, c)), s[1]);
  }
};

__device__ __forceinline__ float exp_of(float v) { return expf(v); }
__device__ __forceinline__ double exp_of(double v) { return exp(v); }
__device__ __forceinline__ float log_of(float v) { return logf(v); }
__device__ __forceinline__ double log_of(double v) { return log(v); }

// Softmax (kLog false) and log-softmax: core's SoftmaxKind's stats and
// formulas (tierkit/softmax_functors.h): m = the row's max, e = sum of
// exp(x - m); y = exp(x - m) / e, or (x - m) - log(e); backward recomputes
// y: dx = y * (g - sum(g y)), or g - exp(y) * sum(g). The sums' order and
// CUDA's expf (within 2 ulp; core's within 1.02) are not the CPU's, so the
// results agree with the CPU's within a few roundings, not bit for bit.
template <typename C, bool kLog>
struct SoftmaxRowsOf {
  static constexpr int kStats = 2;
  static constexpr bool kTranscendental = true;  // an exp (log) per element
  template <typename Sum, typename Max>
  __device__ static void stats(const Sum& sum, const Max& max, int64_t, C, C* s) {
    const C m = max();
    const C e = sum([m](C v) { return exp_of(add_rn(v, -m)); });
    s[0] = m;
    s[1] = kLog ? log_of(e) : e;
  }
  __device__ static C xhat(C x, const C* s) {
    if constexpr (kLog)
      return add_rn(add_rn(x, -s[0]), -s[1]);
    else
      return div_rn(exp_of(add_rn(x, -s[0])), s[1]);
  }
  __device__ static C dx(C g, C y, C a, C c, const C*, C n) {
    if constexpr (kLog)
      return add_rn(g, -mul_rn(exp_of(y), mul_rn(a, n)));
    else
      return mul_rn(y, add_rn(g, -mul_rn(c, n)));
  }
};
template <typename C>
using SoftmaxRowsF = SoftmaxRowsOf<C, false>;
template <typename C>
using LogSoftmaxRowsF = SoftmaxRowsOf<C, true>;

}  // namespace tierkit_cuda
