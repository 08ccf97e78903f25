// The 16-bit conversions are branch-free so the kernels' loops vectorize
// (AVX2/AVX-512, picked at run time). Here they are held to the branching
// reference they replaced -- bit for bit, NaN payloads, subnormals and ties
// included -- and the vectorized kernels to a scalar loop over every 16-bit
// input pattern.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "tierkit/kernels.h"

using tierkit::BFloat16;
using tierkit::DType;
using tierkit::Half;
using tierkit::TensorView;

namespace {

using tierkit::detail::bits_float;
using tierkit::detail::float_bits;

// The branching conversions as they were before they became branch-free.
std::uint16_t reference_half_from_float(float f) {
  const std::uint32_t x = float_bits(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u)
    return static_cast<std::uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (abs < 0x38800000u) {
    const float r = bits_float(abs) + bits_float(0x3f000000u);
    return static_cast<std::uint16_t>(sign | (float_bits(r) - 0x3f000000u));
  }
  const std::uint32_t odd = (abs >> 13) & 1u;
  return static_cast<std::uint16_t>(sign | ((abs + 0xfffu + odd - (112u << 23)) >> 13));
}
float reference_half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    const float v = static_cast<float>(man) * bits_float(0x33800000u);
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp + 112u) << 23) | (man << 13));
}
std::uint16_t reference_bf16_from_float(float f) {
  const std::uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

TEST(BranchFreeConversions, HalfToFloatOnEveryPattern) {
  for (std::uint32_t h = 0; h < 65536; ++h)
    ASSERT_EQ(float_bits(Half::to_float(static_cast<std::uint16_t>(h))),
              float_bits(reference_half_to_float(static_cast<std::uint16_t>(h))))
        << h;
}

// Every float whose low 13 bits are one of the rounding-relevant patterns
// (exact, just below/at/above the tie, odd/even neighbours), over all 2^19
// high parts: every exponent, sign, NaN payload class and subnormal.
TEST(BranchFreeConversions, FloatToHalfAndBFloat16OnASweep) {
  const std::uint32_t lows[] = {0x0000, 0x0001, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x0800,
                                0x17ff, 0x7fff, 0x8000, 0x8001, 0xffff, 0x2345, 0x1234 & 0x1fff};
  for (std::uint32_t high = 0; high < (1u << 19); ++high) {
    for (std::uint32_t low : lows) {
      const std::uint32_t x = (high << 13) | (low & 0x1fffu);
      const float f = bits_float(x);
      ASSERT_EQ(Half::from_float(f), reference_half_from_float(f)) << std::hex << x;
      const std::uint32_t y = (high << 13) | low;  // bfloat16 rounds at bit 16: lows reach past bit 13
      ASSERT_EQ(BFloat16::from_float(bits_float(y)), reference_bf16_from_float(bits_float(y)))
          << std::hex << y;
    }
  }
}

#ifdef TIERKIT_SIMD_DISPATCH
// VCVTNEPS2BF16, with its fix-up for the subnormals it flushes, against the
// branching reference on the same sweep, 16 floats a call (a block of 16
// mixes classes: subnormals beside normals, NaNs, ties).
TEST(BranchFreeConversions, Avx512Bf16InstructionOnASweep) {
  namespace d = tierkit::kernels::detail;
  if (!d::cpu_has_avx512bf16()) GTEST_SKIP() << "no AVX512-BF16 here (or TIERKIT_SIMD=avx512)";
  const std::uint32_t lows[] = {0x0000,  0x0001,  0x7fff, 0x8000, 0x8001, 0xffff, 0x17fff, 0x18000,
                                0x18001, 0x1ffff, 0x2345, 0x4000, 0xc000, 0x3fff, 0x10000, 0x1234};
  alignas(64) float in[16];
  BFloat16 out[16];
  for (std::uint32_t high = 0; high < (1u << 15); ++high) {
    for (int k = 0; k < 16; ++k) in[k] = bits_float((high << 17) | lows[k]);
    d::from_floats_512_bf16(in, out);
    for (int k = 0; k < 16; ++k)
      ASSERT_EQ(out[k].bits, reference_bf16_from_float(in[k])) << std::hex << float_bits(in[k]);
  }
}
#endif

// The vectorized kernel over every 16-bit input pattern, against a scalar
// loop using the reference conversions.
template <typename T, typename ToFloat, typename FromFloat>
void kernel_matches_scalar(ToFloat to_float, FromFloat from_float) {
  const std::int64_t n = 65536;
  std::vector<T> in(n), out(n);
  for (std::int64_t i = 0; i < n; ++i) in[i] = T::from_bits(static_cast<std::uint16_t>(i));
  const auto vi = TensorView::contiguous(in.data(), n, tierkit::dtype_of_v<T>, {n});
  const auto vo = TensorView::contiguous(out.data(), n, tierkit::dtype_of_v<T>, {n});
  const double alpha = 1.5, beta = -0.25;
  tierkit::kernels::scale_shift(vi, alpha, beta, vo, tierkit::kernels::PoolRunner{1});
  for (std::int64_t i = 0; i < n; ++i) {
    const float x = to_float(in[i].bits);
    const std::uint16_t want = from_float(static_cast<float>(alpha) * x + static_cast<float>(beta));
    ASSERT_EQ(out[i].bits, want) << "input bits " << i;
  }
  tierkit::kernels::muladd(vi, vi, 0.5, vo, tierkit::kernels::PoolRunner{1});
  for (std::int64_t i = 0; i < n; ++i) {
    const float x = to_float(in[i].bits);
    ASSERT_EQ(out[i].bits, from_float(x * x + 0.5f)) << "input bits " << i;
  }
  // Unaligned and not a multiple of the vector width: the scalar tail too.
  const std::int64_t m = n - 3;
  const auto ti = TensorView::contiguous(in.data() + 1, m, tierkit::dtype_of_v<T>, {m});
  const auto to = TensorView::contiguous(out.data() + 1, m, tierkit::dtype_of_v<T>, {m});
  tierkit::kernels::add(ti, ti, to, tierkit::kernels::PoolRunner{1});
  for (std::int64_t i = 1; i <= m; ++i) {
    const float x = to_float(in[i].bits);
    ASSERT_EQ(out[i].bits, from_float(x + x)) << "input bits " << i;
  }
}

TEST(VectorizedKernels, HalfMatchesScalarOnEveryInput) {
  kernel_matches_scalar<Half>(reference_half_to_float, reference_half_from_float);
}

TEST(VectorizedKernels, BFloat16MatchesScalarOnEveryInput) {
  kernel_matches_scalar<BFloat16>(
      [](std::uint16_t b) { return bits_float(static_cast<std::uint32_t>(b) << 16); },
      reference_bf16_from_float);
}

}  // namespace
