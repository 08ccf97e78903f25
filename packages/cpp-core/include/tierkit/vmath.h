// Elementary functions the kernels' loops can vectorize. GCC does not
// vectorize a call to std::exp/expf (no vector math library is linked, and
// -fno-math-errno is not set), so a functor calling one runs a scalar loop;
// these are plain inline arithmetic that the `omp simd` loops in kernels.h
// (and their AVX2/AVX-512 clones) turn into vector instructions.
//
// Written for -ffp-contract=off (core's flags): every product and sum is
// rounded on its own, and the error bounds below hold without fma (with it
// they hold too; nothing relies on two roundings).
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
// c ? a : b without a branch GCC could thread: a `?:` here became one, and
// partial redundancy elimination then copied the rest of vexp onto the
// clamped path, where 2^64 * 2^64 overflows at compile time -- a trapping
// operation the vectorizer may not if-convert, so the loop stayed scalar.
inline float select(bool c, float a, float b) {
  const std::uint32_t m = 0u - static_cast<std::uint32_t>(c);
  return float_of((bits_of(a) & m) | (bits_of(b) & ~m));
}
// The constants both exps below share: the reduction's and P's (Cephes
// expf's minimax coefficients, p0 + p1 r + ... + p5 r^5).
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
inline constexpr float kRound = 12582912.0f;  // 1.5 * 2^23
inline constexpr float kExpP[6] = {5.0000001201e-1f, 1.6666665459e-1f, 4.1665795894e-2f,
                                   8.3334519073e-3f, 1.3981999507e-3f, 1.9875691500e-4f};
}  // namespace detail

// exp(x) for float, within 1.004 ulp of the exact value (every float checked
// once against double exp: max 1.0037 ulp, at x = 70.3719101, the only
// input above 1 ulp; CTest checks every 64th bit pattern and the boundaries,
// in core's tests),
// subnormal results included; exp(+inf) = +inf, exp(-inf) = +0, NaN in NaN
// out; branch-free.
//  * x is clamped to [-104, 88.75]: below, exp(x) < 2^-150 rounds to +0;
//    above ln(FLT_MAX) = 88.7228, it overflows to +inf (the scaling below
//    gives both). The comparisons are false for NaN, which passes through.
//  * Cody-Waite reduction: x = n ln2 + r, |r| <= ln2/2 (a bit more where
//    x*log2(e) rounds across a half-integer). n comes from adding 1.5*2^23,
//    which rounds x*log2(e) to an integer in the low mantissa bits (no
//    float-to-int conversion, which NaN would make undefined). ln2 is split
//    into kLn2Hi, with 9 significant bits so n*kLn2Hi (|n| <= 150) and
//    x - n*kLn2Hi are exact, plus kLn2Lo.
//  * exp(r) = 1 + r + r^2 P(r), P of degree 5 (Cephes expf's minimax
//    coefficients): degree 7 in all.
//  * times 2^n as 2^(n/2) * 2^(n - n/2): each factor is a normal float built
//    from exponent bits for n in [-150, 128], so the first product is exact
//    and the second rounds once, into the subnormals or to inf as the
//    exact result would.
inline float vexp(float x) {
  using detail::kExpP, detail::kLn2Hi, detail::kLn2Lo, detail::kLog2e, detail::kRound;
  constexpr float kMax = 88.75f, kMin = -104.0f;
  x = detail::select(x > kMax, kMax, x);
  x = detail::select(x < kMin, kMin, x);
  const float t = x * kLog2e + kRound;
  const float n = t - kRound;
  const float r = (x - n * kLn2Hi) - n * kLn2Lo;
  // P by Estrin's scheme, not Horner's: three independent pairs, then two
  // levels, a dependency chain of 6 operations instead of 10 (silu(a) * b over
  // 1e6 floats on one Zen 3 core: 0.90 ns/element, Horner's 1.01; Horner's
  // max error 0.990 ulp, this one's 1.0037).
  const float r2 = r * r;
  const float q0 = kExpP[0] + kExpP[1] * r;
  const float q1 = kExpP[2] + kExpP[3] * r;
  const float q2 = kExpP[4] + kExpP[5] * r;
  const float p = q0 + r2 * (q1 + r2 * q2);
  const float y = (p * r2 + r) + 1.0f;
  // n as an integer: the low bits of t (two's complement, in unsigned
  // arithmetic so a NaN's garbage bits cannot overflow anything).
  const std::uint32_t ni = detail::bits_of(t) - detail::bits_of(kRound);
  const std::uint32_t half = static_cast<std::uint32_t>(static_cast<std::int32_t>(ni) >> 1);
  const float s1 = detail::float_of((half + 127u) << 23);
  const float s2 = detail::float_of((ni - half + 127u) << 23);
  // Products, not an integer add to y's exponent bits: a NaN stays NaN
  // whatever garbage its bits made of n.
  return y * s1 * s2;
}

// exp(x) where only 1 + exp(x) is used (the sigmoid's denominator), for
// results that are rounded to a 16-bit float afterwards. Fused multiply-adds
// (std::fma: exactly rounded, so the same bits at every SIMD level, in
// software where the CPU has no FMA) and a single scale factor: measured
// 0.30 ns an element for bfloat16 silu_mul on one AMD Zen 4 core in core's
// 16-bit blocked loop (kernels.h), vexp 0.40. Within 1.011 ulp of the
// exact value on [-80, 88.72] (every float there checked once against long
// double exp: max 1.0103 ulp, at x = -5.87788439; CTest checks every 64th
// pattern); vexp's reduction and coefficients, by Horner's scheme in fused
// steps.
//  * x is clamped to [-80, 88.75]: below -80, exp(x) < 2^-115 and 1 + exp(x)
//    rounds to 1 in float just as 1 + exp(-80) does, so the clamp changes no
//    sum; above, as vexp: +inf past ln(FLT_MAX). NaN passes the clamps.
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
  // vexp's P by Horner's scheme, written out (a loop here might stay a loop
  // at -O2, which the vectorizer cannot take inside the kernels' loops).
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
