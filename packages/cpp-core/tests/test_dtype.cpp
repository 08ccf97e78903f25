#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "tierkit/dtype.h"

using tierkit::BFloat16;
using tierkit::DType;
using tierkit::Half;

TEST(DType, SizesAndNames) {
  EXPECT_EQ(tierkit::dtype_size(DType::Float32), 4u);
  EXPECT_EQ(tierkit::dtype_size(DType::Float64), 8u);
  EXPECT_EQ(tierkit::dtype_size(DType::Float16), 2u);
  EXPECT_EQ(tierkit::dtype_size(DType::BFloat16), 2u);
  EXPECT_EQ(tierkit::dtype_size(DType::Int32), 4u);
  EXPECT_EQ(tierkit::dtype_size(DType::Int64), 8u);
  for (DType t :
       {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int32, DType::Int64}) {
    EXPECT_EQ(tierkit::dtype_from_name(tierkit::dtype_name(t)), t);
  }
  EXPECT_TRUE(tierkit::is_floating(DType::BFloat16));
  EXPECT_FALSE(tierkit::is_floating(DType::Int64));
  EXPECT_EQ(tierkit::dtype_of_v<Half>, DType::Float16);
}

TEST(DType, UnknownNameIsATypeError) {
  try {
    tierkit::dtype_from_name("complex64");
    FAIL();
  } catch (const tierkit::DTypeError& e) {
    EXPECT_NE(std::string(e.what()).find("complex64"), std::string::npos);
  }
}

// Every one of the 65536 half bit patterns survives half -> float -> half
// (nan stays nan), which pins down both conversions on the whole domain.
TEST(Half, EveryBitPatternRoundTrips) {
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const float f = Half::to_float(static_cast<std::uint16_t>(b));
    const std::uint16_t back = Half::from_float(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(Half::to_float(back))) << b;
    } else {
      ASSERT_EQ(back, b) << "bits " << b << " value " << f;
    }
  }
}

TEST(Half, KnownValues) {
  EXPECT_EQ(Half(1.0f).bits, 0x3c00);
  EXPECT_EQ(Half(-2.0f).bits, 0xc000);
  EXPECT_EQ(Half(65504.0f).bits, 0x7bff);
  EXPECT_EQ(Half(1e6f).bits, 0x7c00);  // overflow -> inf
  EXPECT_EQ(Half(-0.0f).bits, 0x8000);
  EXPECT_EQ(Half(5.9604645e-8f).bits, 0x0001);  // smallest subnormal
  EXPECT_EQ(Half(std::numeric_limits<float>::infinity()).bits, 0x7c00);
  EXPECT_TRUE(std::isnan(float(Half(std::nanf("")))));
}

TEST(Half, RoundsToNearestEven) {
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties go to the even (1).
  EXPECT_EQ(Half(1.0f + std::ldexp(1.0f, -11)).bits, 0x3c00);
  // 1 + 3*2^-11 is halfway between 0x3c01 and 0x3c02: even is 0x3c02.
  EXPECT_EQ(Half(1.0f + 3 * std::ldexp(1.0f, -11)).bits, 0x3c02);
  // Just above the halfway point rounds up.
  EXPECT_EQ(Half(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)).bits, 0x3c01);
  // 65520 is halfway between 65504 and the next (2^16): rounds to inf.
  EXPECT_EQ(Half(65520.0f).bits, 0x7c00);
  EXPECT_EQ(Half(65519.0f).bits, 0x7bff);
  // Subnormal tie: 1.5 * 2^-24 goes to 2 * 2^-24 (even).
  EXPECT_EQ(Half(1.5f * std::ldexp(1.0f, -24)).bits, 0x0002);
  EXPECT_EQ(Half(0.5f * std::ldexp(1.0f, -24)).bits, 0x0000);  // tie to even zero
}

// Compare against a straightforward reference: the nearest half by exhaustive
// search over the finite halves (ties to even), for a spread of floats.
TEST(Half, MatchesExhaustiveNearest) {
  auto nearest = [](float f) {
    double best_err = INFINITY;
    std::uint16_t best = 0;
    for (std::uint32_t b = 0; b < 0x7c00; ++b) {
      const double v = Half::to_float(static_cast<std::uint16_t>(b));
      const double err = std::fabs(v - std::fabs(f));
      if (err < best_err || (err == best_err && (b & 1) == 0)) {
        best_err = err;
        best = static_cast<std::uint16_t>(b);
      }
    }
    return static_cast<std::uint16_t>(best | (std::signbit(f) ? 0x8000 : 0));
  };
  for (float f :
       {0.1f, 0.3333333f, 3.14159f, -2.71828f, 1000.7f, 1e-5f, 6.1e-5f, 3e-7f, 12345.6f, -0.00042f}) {
    EXPECT_EQ(Half::from_float(f), nearest(f)) << f;
  }
}

TEST(BFloat16, KnownValuesAndRounding) {
  EXPECT_EQ(BFloat16(1.0f).bits, 0x3f80);
  EXPECT_EQ(BFloat16(-2.0f).bits, 0xc000);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1).
  EXPECT_EQ(BFloat16(1.0f + std::ldexp(1.0f, -8)).bits, 0x3f80);
  EXPECT_EQ(BFloat16(1.0f + 3 * std::ldexp(1.0f, -8)).bits, 0x3f82);
  EXPECT_EQ(BFloat16(std::nextafter(1.0f + std::ldexp(1.0f, -8), 2.0f)).bits, 0x3f81);
  EXPECT_TRUE(std::isnan(float(BFloat16(std::nanf("")))));
  EXPECT_TRUE(std::isinf(float(BFloat16(std::numeric_limits<float>::max()))));
}

TEST(BFloat16, EveryBitPatternRoundTrips) {
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const float f = float(BFloat16::from_bits(static_cast<std::uint16_t>(b)));
    if (std::isnan(f)) continue;
    ASSERT_EQ(BFloat16(f).bits, b) << b;
  }
}

// The dtype table is the one list; everything derived from it must agree.
TEST(DTypeTable, DerivedFactsAgree) {
  EXPECT_EQ(tierkit::accepted_dtype_names(), "float32, float64, float16 or bfloat16");
  EXPECT_EQ(tierkit::all_dtype_names(), "float32, float64, float16, bfloat16, int32, int64");
  for (const tierkit::DTypeInfo& d : tierkit::kDTypeTable) {
    EXPECT_EQ(tierkit::dtype_from_name(d.name), d.dtype);
    const auto* back = tierkit::dtype_from_dlpack(d.dlpack_code, 8 * d.size);
    ASSERT_NE(back, nullptr);
    EXPECT_EQ(back->dtype, d.dtype);
  }
  EXPECT_EQ(tierkit::dtype_from_dlpack(2, 8), nullptr);  // float8: not in the table
  EXPECT_EQ(tierkit::dtype_size(DType::BFloat16), sizeof(tierkit::BFloat16));
}

TEST(DTypeTable, DispatchAcceptedRefusesIntegers) {
  int calls = 0;
  tierkit::dispatch_accepted(DType::Float16, "x", [&](auto tag) {
    EXPECT_TRUE((std::is_same_v<decltype(tag), tierkit::Half>));
    ++calls;
  });
  EXPECT_EQ(calls, 1);
  try {
    tierkit::dispatch_accepted(DType::Int32, "x", [&](auto) { ++calls; });
    FAIL() << "int32 was dispatched";
  } catch (const tierkit::DTypeError& e) {
    EXPECT_STREQ(e.what(), "x: expected dtype float32, float64, float16 or bfloat16, got int32");
  }
  EXPECT_EQ(calls, 1);
}

// round_to<Half/BFloat16>(double) rounds once: every value halfway between
// two 16-bit neighbours, nudged by less than float's precision either way,
// goes to the nearer (ties to even), where double -> float -> 16 bits
// rounded the nudged ties to even instead (off by one ulp).
template <typename D>
void check_rounds_once(int shift) {
  int checked = 0, double_rounding_differs = 0;
  for (std::uint32_t b = 0x0001; b < 0x7bff; b += 7) {
    D lo, hi;
    lo.bits = static_cast<std::uint16_t>(b);
    hi.bits = static_cast<std::uint16_t>(b + 1);
    const double a = tierkit::load_compute(&lo), c = tierkit::load_compute(&hi);
    const double mid = (a + c) / 2;
    const double nudge = (c - a) * std::ldexp(1.0, -(shift + 2));  // below float's last bit here
    for (const double v : {mid, mid + nudge, mid - nudge, -(mid + nudge)}) {
      const double want_mag = std::fabs(v) == mid ? ((b & 1) ? c : a) : (std::fabs(v) > mid ? c : a);
      const D got = tierkit::round_to<D>(v);
      EXPECT_EQ(static_cast<double>(tierkit::load_compute(&got)), std::copysign(want_mag, v)) << v;
      D twice;
      twice.bits = D::from_float(static_cast<float>(v));
      double_rounding_differs += twice.bits != got.bits;
      ++checked;
    }
  }
  EXPECT_GT(checked, 1000);
  EXPECT_GT(double_rounding_differs, 0);  // the case the test is for does occur
}

TEST(RoundTo, Float64ToFloat16RoundsOnce) { check_rounds_once<tierkit::Half>(14); }
TEST(RoundTo, Float64ToBFloat16RoundsOnce) { check_rounds_once<tierkit::BFloat16>(17); }
TEST(RoundTo, ExactNanInfAndFloatPassThrough) {
  EXPECT_EQ(tierkit::round_to<float>(0.1), static_cast<float>(0.1));
  const tierkit::Half inf = tierkit::round_to<tierkit::Half>(1e300);
  EXPECT_TRUE(std::isinf(tierkit::load_compute(&inf)));
  const tierkit::Half nan = tierkit::round_to<tierkit::Half>(std::nan(""));
  EXPECT_TRUE(std::isnan(tierkit::load_compute(&nan)));
  const tierkit::BFloat16 one = tierkit::round_to<tierkit::BFloat16>(1.0);
  EXPECT_EQ(tierkit::load_compute(&one), 1.0f);
}
