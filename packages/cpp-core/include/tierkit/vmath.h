// Elementary functions the kernels' loops can vectorize. GCC does not
// vectorize a call to std::exp/expf (no vector math library is linked, and
// -fno-math-errno is not set), so a functor calling one runs a scalar loop;
// these are plain inline arithmetic that the `omp simd` loops in kernels.h
// (and their AVX2/AVX-512 clones) turn into vector instructions.
//
// Written for -ffp-contract=off (core's flags): every product and sum that
// is not an explicit std::fma is rounded on its own, so a result does not
// depend on the compiler's contraction.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace tierkit::vmath {

namespace detail {
inline std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);  // a bit cast: GCC vectorizes it as a plain move
  return u;
}
inline float float_of(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
// The reduction's constants and P's coefficients (Cephes expf's minimax
// coefficients, p0 + p1 r + ... + p5 r^5).
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
inline constexpr float kRound = 12582912.0f;  // 1.5 * 2^23
inline constexpr float kExpP[6] = {5.0000001201e-1f, 1.6666665459e-1f, 4.1665795894e-2f,
                                   8.3334519073e-3f, 1.3981999507e-3f, 1.9875691500e-4f};
}  // namespace detail

// exp(x) where only 1 + exp(x) is used (the sigmoid's denominator: silu_mul
// for float and the 16-bit types). Fused multiply-adds (std::fma: exactly
// rounded, so the same bits at every SIMD level, in software where the CPU
// has no FMA) and a single scale factor: half the instructions of the same
// exp without fma (float silu_mul over 2^14 in-cache elements on one Intel
// Xeon core: 1.05 -> 0.47 ns an element with AVX-512). Within 1.011 ulp of
// the exact value on [-80, 88.72] (every float there checked once against
// long double exp: max 1.0103 ulp, at x = -5.87788439; CTest checks every
// 64th pattern); branch-free.
//  * x is clamped to [-80, 88.75]: below -80, exp(x) < 2^-115 and 1 + exp(x)
//    rounds to 1 in float just as 1 + exp(-80) does, so the clamp changes no
//    sum; above ln(FLT_MAX) = 88.7228 it overflows to +inf (the scaling
//    below gives it). The comparisons are false for NaN, which passes
//    through.
//  * Cody-Waite reduction: x = n ln2 + r, |r| <= ln2/2 (a bit more where
//    x*log2(e) rounds across a half-integer). n comes from adding 1.5*2^23,
//    which rounds x*log2(e) to an integer in the low mantissa bits (no
//    float-to-int conversion, which NaN would make undefined). ln2 is split
//    into kLn2Hi, with 9 significant bits, plus kLn2Lo.
//  * exp(r) = 1 + r + r^2 P(r), P of degree 5 by Horner's scheme in fused
//    steps: degree 7 in all.
//  * 2^n as one factor 2^(n-1) times 2y: n - 1 is in [-117, 127], a normal
//    float's exponent, and 2y is exact.
inline float vexp_sigmoid(float x) {
  using detail::kExpP, detail::kLn2Hi, detail::kLn2Lo, detail::kLog2e, detail::kRound;
  constexpr float kMax = 88.75f, kMin = -80.0f;
  x = kMax < x ? kMax : x;
  x = x < kMin ? kMin : x;
  const float t = std::fma(x, kLog2e, kRound);
  const float n = t - kRound;
  const float r = std::fma(-n, kLn2Lo, std::fma(-n, kLn2Hi, x));
  // P written out (a loop here might stay a loop at -O2, which the
  // vectorizer cannot take inside the kernels' loops).
  float p = std::fma(kExpP[5], r, kExpP[4]);
  p = std::fma(p, r, kExpP[3]);
  p = std::fma(p, r, kExpP[2]);
  p = std::fma(p, r, kExpP[1]);
  p = std::fma(p, r, kExpP[0]);
  const float y = std::fma(p, r * r, r) + 1.0f;
  const std::uint32_t ni = detail::bits_of(t) - detail::bits_of(kRound);
  return (y + y) * detail::float_of((ni + 126u) << 23);
}

}  // namespace tierkit::vmath
