// silu_mul(a, b) = silu(a) * b (kernels.h) and the vectorizable exp under
// it (vmath.h): vexp_sigmoid against exact exp; silu_mul against a higher-precision
// reference, against eager torch's results on special values (a table from
// torch, silu_mul_eager_specials.h), and the vectorized loops against the
// scalar functor bit for bit. The VectorizedKernels.* tests run again with
// TIERKIT_SIMD=avx2 and =baseline (CMakeLists.txt).
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "silu_mul_eager_specials.h"
#include "tierkit/kernels.h"
#include "tierkit/vmath.h"

using tierkit::BFloat16;
using tierkit::DType;
using tierkit::Half;
using tierkit::TensorView;
namespace k = tierkit::kernels;

namespace {

using tierkit::detail::bits_float;
using tierkit::detail::float_bits;

template <typename T>
std::uint64_t bits_of(T v) {
  std::uint64_t u = 0;
  std::memcpy(&u, &v, sizeof(T));
  return u;
}
template <typename T>
double to_double(T v) {
  return static_cast<double>(tierkit::load_compute(&v));
}
template <typename T>
bool is_nan(T v) {
  return std::isnan(to_double(v));
}
// Equal bits, or both NaN (a NaN's sign and payload are not compared: which
// operand's NaN an x86 product keeps depends on the order the compiler
// picked, and torch's own 16-bit conversions differ in them).
template <typename T>
bool same(T x, T y) {
  return (is_nan(x) && is_nan(y)) || bits_of(x) == bits_of(y);
}

// Significand bits after the leading one.
template <typename T>
constexpr int kMantissa = std::is_same_v<T, Half>       ? 10
                          : std::is_same_v<T, BFloat16> ? 7
                          : std::is_same_v<T, float>    ? 23
                                                        : 52;
template <typename T>
constexpr int kMinExp = std::is_same_v<T, Half>     ? -14
                        : std::is_same_v<T, double> ? -1022
                                                    : -126;

// |got - want| in units of T's last place at want (the subnormal spacing
// below T's smallest normal).
template <typename T>
long double ulps(T got, long double want) {
  const long double g = to_double(got);
  if (g == want) return 0;
  int e = 0;
  std::frexp(want, &e);
  const int ulp_exp = std::max(e - 1, kMinExp<T>) - kMantissa<T>;
  return std::fabs(g - want) / std::ldexp(1.0L, ulp_exp);
}

template <typename T>
TensorView view1d(std::vector<T>& v, std::int64_t offset = 0) {
  const auto n = static_cast<std::int64_t>(v.size()) - offset;
  return TensorView::contiguous(v.data() + offset, n, tierkit::dtype_of_v<T>, {n});
}

// Every 64th bit pattern (2^26 floats: every exponent and sign, NaNs,
// infinities and subnormals), a few neighbours of each.
std::vector<float> every_64th_float() {
  std::vector<float> xs;
  xs.reserve(1u << 26);
  for (std::uint64_t u = 0; u < (1ull << 32); u += 64)
    xs.push_back(bits_float(static_cast<std::uint32_t>(u + (u >> 12) % 64)));
  return xs;
}

// ---- vexp_sigmoid (silu_mul's exp) -----------------------------------------

// Vectorized with FMA where the CPU has it, and in software (std::fma gives
// the same bits), as the kernels' loops compute it.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx2,fma")))
#endif
void vexp_sigmoid_fma(const float* x, float* y, std::size_t n) {
  TIERKIT_VECTORIZE_LOOP
  for (std::size_t i = 0; i < n; ++i) y[i] = tierkit::vmath::vexp_sigmoid(x[i]);
}
void vexp_sigmoid_soft(const float* x, float* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = tierkit::vmath::vexp_sigmoid(x[i]);
}

// Every 64th bit pattern: within 1.011 ulp on [-80, 88.7228) (vmath.h: 1.0103
// at worst over every float there), +inf above, and below -80 (the clamp)
// a value that 1 + rounds away, as 1 + exp(x) is there.
TEST(VExpSigmoid, WithinAnUlpOnItsRangeAndOneWhereTheSumIsOne) {
  std::vector<float> xs = every_64th_float();
  xs.push_back(-5.87788439f);  // the worst float
  std::vector<float> fast(xs.size()), soft(xs.size());
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  const bool fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  const bool fma =
      true;  // elsewhere (aarch64) std::fma is an instruction of every CPU: compare the two copies
#endif
  if (fma) vexp_sigmoid_fma(xs.data(), fast.data(), xs.size());
  vexp_sigmoid_soft(xs.data(), soft.data(), xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const float x = xs[i], y = soft[i];
    if (fma) {
      ASSERT_TRUE(float_bits(fast[i]) == float_bits(y) || (std::isnan(fast[i]) && std::isnan(y))) << x;
    }
    if (std::isnan(x)) {
      ASSERT_TRUE(std::isnan(y));
    } else if (x < -80.0f) {
      ASSERT_EQ(1.0f + y, 1.0f) << x;
      ASSERT_EQ(1.0f + std::exp(x), 1.0f) << x;
    } else if (x >= 88.72283935546875f) {  // exp rounds to inf from here
      ASSERT_EQ(y, INFINITY) << x;
    } else {
      ASSERT_LE(ulps(y, std::exp(static_cast<long double>(x))), 1.011L) << std::hexfloat << x;
    }
  }
  EXPECT_EQ(tierkit::vmath::vexp_sigmoid(INFINITY), INFINITY);
  EXPECT_EQ(1.0f + tierkit::vmath::vexp_sigmoid(-INFINITY), 1.0f);
  EXPECT_EQ(tierkit::vmath::vexp_sigmoid(0.0f), 1.0f);
  EXPECT_EQ(tierkit::vmath::vexp_sigmoid(-0.0f), 1.0f);
}

// ---- silu_mul: accuracy --------------------------------------------------------

long double silu_mul_exact(long double a, long double b) { return a / (1.0L + std::exp(-a)) * b; }

// Error bounds against an 80-bit reference, on a in [-88, 88] (below -88.72
// exp(-a) overflows float and silu is -0, as eager's; tested below): float
// and double round silu(a) and then the product, like eager (both measured
// 2.75 ulp for float over 2^24 inputs, 3 for double against long double);
// the 16-bit types round once from float (0.5 ulp plus float's error; eager
// rounds twice, up to 1.5 ulp).
template <typename T>
class SiluMulAccuracy : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double, Half, BFloat16>;
TYPED_TEST_SUITE(SiluMulAccuracy, FloatTypes);

TYPED_TEST(SiluMulAccuracy, WithinBoundOfALongDoubleReference) {
  using T = TypeParam;
  const long double bound = sizeof(T) == 2 ? 0.501L : 3.0L;
  std::mt19937 gen(42);
  std::uniform_real_distribution<double> wide(-88.0, 88.0), narrow(-4.0, 4.0), tiny(-1e-3, 1e-3);
  const std::int64_t n = 300000;
  std::vector<T> a(n), b(n), out(n);
  for (std::int64_t i = 0; i < n; ++i) {
    const double x = i % 3 == 0 ? wide(gen) : i % 3 == 1 ? narrow(gen) : tiny(gen);
    a[i] = static_cast<T>(static_cast<tierkit::compute_t<T>>(x));
    b[i] = static_cast<T>(static_cast<tierkit::compute_t<T>>(narrow(gen)));
  }
  k::silu_mul(view1d(a), view1d(b), view1d(out));
  long double worst = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const long double want = silu_mul_exact(to_double(a[i]), to_double(b[i]));
    worst = std::max(worst, ulps(out[i], want));
    ASSERT_LE(ulps(out[i], want), bound) << "a=" << to_double(a[i]) << " b=" << to_double(b[i]);
  }
  this->RecordProperty("max_ulp", std::to_string(static_cast<double>(worst)));
}

TEST(SiluMul, PastExpOverflowGivesMinusZeroInFloatLikeEager) {
  // exp(-a) overflows float for a < -88.7228: a / inf = -0 (exact: ~-2e-37
  // at -89). Double still has room there.
  std::vector<float> a{-88.7f, -88.73f, -89.0f, -100.0f, -1e30f}, b(5, 1.0f), out(5);
  k::silu_mul(view1d(a), view1d(b), view1d(out));
  EXPECT_LT(out[0], 0.0f);
  for (int i = 1; i < 5; ++i) EXPECT_TRUE(out[i] == 0.0f && std::signbit(out[i])) << a[i] << " " << out[i];
  std::vector<double> ad{-89.0}, bd{1.0}, od(1);
  k::silu_mul(view1d(ad), view1d(bd), view1d(od));
  EXPECT_NEAR(od[0], -89.0 * std::exp(-89.0), 1e-50);
}

// ---- silu_mul: special values, against eager ------------------------------------

const double kSpecialValues[] = {0.0,  -0.0,  INFINITY, -INFINITY, NAN,   1e30,   -1e30,
                                 88.7, -88.7, 89.0,     -89.0,     104.0, -104.0, -1e-40};
static_assert(sizeof(kSpecialValues) / sizeof(double) == silu_mul_eager::kSpecials);

template <typename T>
T from_double(double x) {
  return static_cast<T>(static_cast<tierkit::compute_t<T>>(x));
}
template <typename T>
T from_bits_t(std::uint64_t u) {
  if constexpr (sizeof(T) == 2) {
    return T::from_bits(static_cast<std::uint16_t>(u));
  } else {
    T v;
    std::memcpy(&v, &u, sizeof(T));
    return v;
  }
}

// Every pair of special values, contiguous and as strided (transposed)
// views; `expected(i, j)` gives the bits for a = special i, b = special j.
template <typename T, typename Expected>
void check_special_grid(const Expected& expected) {
  constexpr int S = silu_mul_eager::kSpecials;
  std::vector<T> a(S * S), b(S * S), out(S * S), out_t(S * S);
  for (int i = 0; i < S; ++i)
    for (int j = 0; j < S; ++j) {
      a[i * S + j] = from_double<T>(kSpecialValues[i]);
      b[i * S + j] = from_double<T>(kSpecialValues[j]);
    }
  k::silu_mul(view1d(a), view1d(b), view1d(out));
  // The same pairs through the strided loop: (S, S) views of the transposes.
  std::vector<T> at(S * S), bt(S * S);
  for (int i = 0; i < S; ++i)
    for (int j = 0; j < S; ++j) at[j * S + i] = a[i * S + j], bt[j * S + i] = b[i * S + j];
  const DType dt = tierkit::dtype_of_v<T>;
  k::silu_mul(TensorView(at.data(), S * S, dt, {S, S}, {1, S}),
              TensorView(bt.data(), S * S, dt, {S, S}, {1, S}),
              TensorView::contiguous(out_t.data(), S * S, dt, {S, S}));
  for (int i = 0; i < S; ++i)
    for (int j = 0; j < S; ++j) {
      const T want = expected(i, j);
      EXPECT_TRUE(same(out[i * S + j], want))
          << "a=" << kSpecialValues[i] << " b=" << kSpecialValues[j] << " got " << to_double(out[i * S + j])
          << " (signbit " << std::signbit(to_double(out[i * S + j])) << ") want " << to_double(want)
          << " (signbit " << std::signbit(to_double(want)) << ")";
      EXPECT_TRUE(same(out_t[i * S + j], out[i * S + j]))
          << "strided, a=" << kSpecialValues[i] << " b=" << kSpecialValues[j];
    }
}

// float and double: eager's bits, every pair (zero signs included; NaN-ness).
TEST(SiluMul, SpecialValuesMatchEagerFloat) {
  check_special_grid<float>([](int i, int j) {
    return from_bits_t<float>(silu_mul_eager::kEagerF32[i * silu_mul_eager::kSpecials + j]);
  });
}
TEST(SiluMul, SpecialValuesMatchEagerDouble) {
  check_special_grid<double>([](int i, int j) {
    return from_bits_t<double>(silu_mul_eager::kEagerF64[i * silu_mul_eager::kSpecials + j]);
  });
}

// 16-bit: eager's bits except where eager's rounding of silu(a) to 16 bits
// (before * b) changed the product: there the once-rounded float product.
// Those pairs are a in {-88.7 (float16: silu underflows to -0), -1e-40
// (bfloat16: silu = -2^-134, a tie, rounds to -0)} with b large or infinite:
// eager gives 0 * inf = NaN or -0 * 1e30 = -0, the exact results are -inf
// and -4.6e-11.
template <typename T>
void check_special_grid_16(const std::uint16_t* eager) {
  constexpr int S = silu_mul_eager::kSpecials;
  int rounded_once = 0;
  check_special_grid<T>([&](int i, int j) {
    const float a = static_cast<float>(from_double<T>(kSpecialValues[i]));
    const float b = static_cast<float>(from_double<T>(kSpecialValues[j]));
    const float silu = a / (1.0f + std::exp(-a));
    const T eager_bits = from_bits_t<T>(eager[i * S + j]);
    const T once = static_cast<T>(silu * b);
    if (static_cast<float>(static_cast<T>(silu)) != silu && !same(once, eager_bits)) {
      ++rounded_once;
      return once;
    }
    return eager_bits;
  });
  EXPECT_LE(rounded_once, 12);
}
TEST(SiluMul, SpecialValuesMatchEagerHalf) { check_special_grid_16<Half>(silu_mul_eager::kEagerF16); }
TEST(SiluMul, SpecialValuesMatchEagerBFloat16) {
  check_special_grid_16<BFloat16>(silu_mul_eager::kEagerBF16);
}

TEST(SiluMul, RawPointerEntryAndInPlace) {
  std::vector<float> a{-2.0f, -0.5f, 0.0f, 0.5f, 3.0f}, b{1.0f, 2.0f, 3.0f, -1.0f, 0.25f}, out(5);
  k::silu_mul(a.data(), b.data(), out.data(), 5);
  for (int i = 0; i < 5; ++i) EXPECT_FLOAT_EQ(out[i], a[i] / (1.0f + std::exp(-a[i])) * b[i]);
  k::silu_mul(view1d(a), view1d(b), view1d(a));  // out aliases a exactly
  for (int i = 0; i < 5; ++i) EXPECT_EQ(float_bits(a[i]), float_bits(out[i]));
}

// ---- silu_mul: every vectorized loop gives the scalar functor's bits ----------

template <typename T>
std::vector<T> sweep_inputs(std::int64_t n, unsigned seed) {
  std::vector<T> v(n);
  std::mt19937 gen(seed);
  if constexpr (sizeof(T) == 2) {
    for (std::int64_t i = 0; i < n; ++i) v[i] = T::from_bits(static_cast<std::uint16_t>(i * 40503u + seed));
  } else {
    std::uniform_real_distribution<double> d(-110.0, 110.0);
    for (std::int64_t i = 0; i < n; ++i) v[i] = static_cast<T>(d(gen));
    const double specials[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 1e30, -1e30, -88.72284, 88.72284, -1e-40};
    for (std::int64_t i = 0; i < n; i += 97) v[i] = static_cast<T>(specials[(i / 97) % 10]);
  }
  return v;
}

template <typename T>
void kernel_matches_functor() {
  using C = tierkit::compute_t<T>;
  // Every 16-bit pattern for a (b a scrambled sweep), unaligned and of a
  // length no vector width divides (the scalar tail), and the threaded split.
  const std::int64_t n = 65536 + 5;
  auto a = sweep_inputs<T>(n, 1), b = sweep_inputs<T>(n, 7);
  if constexpr (sizeof(T) == 2)
    for (std::int64_t i = 0; i < n; ++i) a[i] = T::from_bits(static_cast<std::uint16_t>(i));
  // The functor the loops apply to T (in float for 16 bits).
  const auto op = k::SiluMulOp<C>{};
  for (std::int64_t offset : {0, 1}) {
    for (unsigned threads : {1u, 0u}) {
      std::vector<T> out(n);
      const std::int64_t m = n - offset;
      const DType dt = tierkit::dtype_of_v<T>;
      k::silu_mul(TensorView::contiguous(a.data() + offset, m, dt, {m}),
                  TensorView::contiguous(b.data() + offset, m, dt, {m}),
                  TensorView::contiguous(out.data() + offset, m, dt, {m}), k::PoolRunner{threads});
      for (std::int64_t i = offset; i < n; ++i) {
        T want;
        tierkit::store_compute(&want, op(tierkit::load_compute(&a[i]), tierkit::load_compute(&b[i])));
        ASSERT_TRUE(same(out[i], want))
            << "i=" << i << " a bits " << std::hex << bits_of(a[i]) << " b bits " << bits_of(b[i]);
      }
    }
  }
}

TEST(VectorizedKernels, SiluMulFloatMatchesScalarFunctor) { kernel_matches_functor<float>(); }
TEST(VectorizedKernels, SiluMulDoubleMatchesScalarFunctor) { kernel_matches_functor<double>(); }
TEST(VectorizedKernels, SiluMulHalfMatchesScalarFunctor) { kernel_matches_functor<Half>(); }
TEST(VectorizedKernels, SiluMulBFloat16MatchesScalarFunctor) { kernel_matches_functor<BFloat16>(); }

// A strided (every other element) view and a broadcast (stride 0) b.
TEST(SiluMul, StridedAndBroadcastViews) {
  std::vector<float> abuf(40), brow{0.5f, -2.0f, 3.0f, 1.0f}, out(20);
  for (int i = 0; i < 40; ++i) abuf[i] = -10.0f + 0.5f * i;
  TensorView a(abuf.data(), 40, DType::Float32, {5, 4}, {8, 2});
  TensorView b(brow.data(), 4, DType::Float32, {5, 4}, {0, 1});
  k::silu_mul(a, b, TensorView::contiguous(out.data(), 20, DType::Float32, {5, 4}));
  const k::SiluMulOp<float> op{};
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 4; ++j)
      ASSERT_EQ(float_bits(out[i * 4 + j]), float_bits(op(abuf[i * 8 + j * 2], brow[j]))) << i << "," << j;
}

// The sign (and payload) of a NaN result is unspecified when both operands
// are NaN: IEEE 754 leaves it open, and the compiler may order the product's
// operands differently in the vector, table and scalar loops (float16
// silu_mul(NaN, -NaN) gave 0xfe00 at element 0 and 0x7e00 at element 34).
// What is pinned: every such element is a NaN, at every position, in every
// loop, for every pair of signs; a NaN in one operand alone gives a NaN.
template <typename T>
void nan_pairs_give_nan_everywhere() {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float pairs[][2] = {{nan, -nan}, {-nan, nan}, {nan, nan}, {-nan, -nan}, {nan, 2.f}, {3.f, -nan}};
  for (const auto& p : pairs) {
    for (std::int64_t n : {1, 7, 35, 300}) {
      std::vector<T> a(n), b(n), out(n);
      for (std::int64_t i = 0; i < n; ++i) {
        tierkit::store_compute(&a[i], static_cast<tierkit::compute_t<T>>(p[0]));
        tierkit::store_compute(&b[i], static_cast<tierkit::compute_t<T>>(p[1]));
      }
      k::silu_mul(a.data(), b.data(), out.data(), n);
      for (std::int64_t i = 0; i < n; ++i)
        EXPECT_TRUE(std::isnan(tierkit::load_compute(&out[i]))) << "n " << n << " element " << i;
    }
  }
}
TEST(SiluMul, NanPairsGiveANanAtEveryPositionFloat) { nan_pairs_give_nan_everywhere<float>(); }
TEST(SiluMul, NanPairsGiveANanAtEveryPositionDouble) { nan_pairs_give_nan_everywhere<double>(); }
TEST(SiluMul, NanPairsGiveANanAtEveryPositionHalf) { nan_pairs_give_nan_everywhere<Half>(); }
TEST(SiluMul, NanPairsGiveANanAtEveryPositionBFloat16) { nan_pairs_give_nan_everywhere<BFloat16>(); }

}  // namespace
