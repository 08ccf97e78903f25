// Built with -mfma (an FMA host, like aarch64 or -march=native): the kernels
// must still round a*x and then +b separately, because tierkit::core carries
// -ffp-contract=off to every consumer. Inputs are chosen so that one rounding
// (an fma) and two roundings give different floats.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tierkit/kernels.h"

using tierkit::DType;
using tierkit::TensorView;

namespace {

// x = alpha = 1 + 2^-23: x*alpha = 1 + 2^-22 + 2^-46 exactly, which rounds to
// 1 + 2^-22; adding beta = -(1 + 2^-22) then gives 0. A fused a*x+b keeps
// the 2^-46.
const float kOnePlus = 1.0f + std::ldexp(1.0f, -23);
const double kBeta = -(1.0 + std::ldexp(1.0, -22));

TEST(FpContract, InputsTellOneRoundingFromTwo) {
  volatile float x = kOnePlus, alpha = kOnePlus, beta = static_cast<float>(kBeta);
  EXPECT_EQ(std::fma(alpha, x, beta), std::ldexp(1.0f, -46));
  EXPECT_EQ(alpha * x, 1.0f + std::ldexp(1.0f, -22));
}

TEST(FpContract, ScaleShiftRoundsTwiceOnAnFmaHost) {
  if (!__builtin_cpu_supports("fma")) GTEST_SKIP() << "this CPU has no FMA";
  std::vector<float> in(64, kOnePlus), out(64);
  const auto vi = TensorView::contiguous(in.data(), 64, DType::Float32, {64});
  const auto vo = TensorView::contiguous(out.data(), 64, DType::Float32, {64});
  tierkit::kernels::scale_shift(vi, kOnePlus, kBeta, vo, tierkit::kernels::PoolRunner{1});
  for (float r : out) EXPECT_EQ(r, 0.0f);
}

TEST(FpContract, MulAddRoundsTwiceOnAnFmaHost) {
  if (!__builtin_cpu_supports("fma")) GTEST_SKIP() << "this CPU has no FMA";
  std::vector<float> a(64, kOnePlus), out(64);
  const auto va = TensorView::contiguous(a.data(), 64, DType::Float32, {64});
  const auto vo = TensorView::contiguous(out.data(), 64, DType::Float32, {64});
  tierkit::kernels::muladd(va, va, kBeta, vo, tierkit::kernels::PoolRunner{1});
  for (float r : out) EXPECT_EQ(r, 0.0f);
}

}  // namespace
