// Softmax and log-softmax row kinds (tierkit/softmax_functors.h through
// row_kernels.h's loops): the float exp against long double exp, forward
// and backward against long double references, the rows aten gives special
// values for, and the same bits for any thread split and (run again with
// TIERKIT_SIMD=avx2 and =baseline: CMakeLists.txt) every SIMD copy.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "row_test_support.h"
#include "tierkit/softmax_functors.h"

using tierkit::BFloat16;
using tierkit::Half;
namespace k = tierkit::kernels;

namespace {

using namespace row_test_support;

constexpr float kInf = std::numeric_limits<float>::infinity();

// T's smallest subnormal.
template <typename T>
long double tiny() {
  if constexpr (std::is_same_v<T, Half>) return 1.0L / (1 << 24);
  if constexpr (std::is_same_v<T, BFloat16>) return std::ldexp(1.0L, -133);
  return std::numeric_limits<T>::denorm_min();
}

// ---- exp_nonpositive -------------------------------------------------------

long double ulp_of(long double v) {
  const float f = static_cast<float>(v);
  if (std::fabs(f) < std::numeric_limits<float>::min()) return std::numeric_limits<float>::denorm_min();
  return std::nextafter(std::fabs(f), kInf) - std::fabs(f);
}

TEST(SoftmaxExp, WithinOneUlpOfLongDoubleDownToTheSubnormals) {
  double worst = 0, worst_sub = 0;
  float at = 0;
  // Every 256th float in [-110, 0], by bit pattern (0x80000000 is -0).
  for (std::uint32_t u = 0x80000000u; u <= 0xc2dc0000u; u += 256) {
    const float x = from_bits<float>(u);
    const long double want = std::exp(static_cast<long double>(x));
    const float got = k::detail::exp_nonpositive<k::detail::ExpOne>(x);
    const double err = static_cast<double>(std::fabs(got - want) / ulp_of(want));
    if (want >= std::numeric_limits<float>::min()) {
      if (err > worst) worst = err, at = x;
    } else {
      worst_sub = std::max(worst_sub, err);
    }
  }
  EXPECT_LE(worst, 1.02) << "at x = " << at;
  EXPECT_LE(worst_sub, 1.0);  // a subnormal result: within one of its steps (2^-149)
}

TEST(SoftmaxExp, EdgesAreExact) {
  using k::detail::ExpOne;
  EXPECT_EQ(k::detail::exp_nonpositive<ExpOne>(0.0f), 1.0f);
  EXPECT_EQ(k::detail::exp_nonpositive<ExpOne>(-0.0f), 1.0f);
  EXPECT_EQ(k::detail::exp_nonpositive<ExpOne>(-kInf), 0.0f);
  EXPECT_EQ(k::detail::exp_nonpositive<ExpOne>(-120.0f), 0.0f);
  EXPECT_TRUE(std::isnan(k::detail::exp_nonpositive<ExpOne>(std::nanf(""))));
}

// ---- the rows --------------------------------------------------------------

struct Ref {
  std::vector<long double> y, dx, arg;  // arg: x - m, exact
};
// kLog: log_softmax. In long double from the rounded inputs.
template <typename T>
Ref reference(bool log, const std::vector<T>& x, const std::vector<T>& dy, std::int64_t rows,
              std::int64_t d) {
  Ref r{std::vector<long double>(x.size()), std::vector<long double>(x.size()),
        std::vector<long double>(x.size())};
  for (std::int64_t i = 0; i < rows; ++i) {
    long double m = -INFINITY, s = 0, dot = 0, sg = 0;
    for (std::int64_t j = 0; j < d; ++j) m = std::max(m, ld(x[i * d + j]));
    for (std::int64_t j = 0; j < d; ++j) s += std::exp(ld(x[i * d + j]) - m);
    for (std::int64_t j = 0; j < d; ++j) {
      const long double e = ld(x[i * d + j]) - m;
      r.arg[i * d + j] = e;
      r.y[i * d + j] = log ? e - std::log(s) : std::exp(e) / s;
      dot += ld(dy[i * d + j]) * std::exp(e) / s;
      sg += ld(dy[i * d + j]);
    }
    for (std::int64_t j = 0; j < d; ++j) {
      const long double p = std::exp(ld(x[i * d + j]) - m) / s, g = ld(dy[i * d + j]);
      r.dx[i * d + j] = log ? g - p * sg : p * (g - dot);
    }
  }
  return r;
}

template <typename K, typename T, typename Runner = k::PoolRunner>
void run_rows(const std::vector<T>& x, const std::vector<T>& dy, std::int64_t rows, std::int64_t d,
              std::vector<T>& y, std::vector<C<T>>& stats, std::vector<T>& dx, const Runner& run = {}) {
  y.assign(x.size(), T{});
  dx.assign(x.size(), T{});
  stats.assign(static_cast<std::size_t>(2 * rows), C<T>{});
  k::row_forward<K>(x.data(), k::RowParams<T>{}, 0.0, rows, d, y.data(), stats.data(), run);
  k::row_backward<K>(dy.data(), x.data(), k::RowParams<T>{}, stats.data(), rows, d, dx.data(), nullptr,
                     nullptr, run);
}

// log_softmax's rows where `log`, softmax's otherwise.
template <typename T>
void run_kind(bool log, const std::vector<T>& x, const std::vector<T>& dy, std::int64_t rows, std::int64_t d,
              std::vector<T>& y, std::vector<C<T>>& stats, std::vector<T>& dx) {
  if (log)
    run_rows<k::LogSoftmax>(x, dy, rows, d, y, stats, dx);
  else
    run_rows<k::Softmax>(x, dy, rows, d, y, stats, dx);
}

template <typename T>
class Softmax : public ::testing::Test {};
using Types = ::testing::Types<float, double, Half, BFloat16>;
TYPED_TEST_SUITE(Softmax, Types);

// 4097 and 8193: past the rows whose softmax terms are kept on the stack
// (SoftmaxBody::kKeptRow: 4096 doubles, 8192 floats), which compute them again.
const Shape kShapes[] = {{5, 33}, {3, 4097}, {7, 2}, {8, 300}, {70, 16},
                         {9, 15}, {2, 1024}, {4, 1}, {2, 8193}};

// Spread 1 (every term counts), 8 (a few dominate) and 40 (most underflow).
TYPED_TEST(Softmax, ForwardAndBackwardMatchLongDouble) {
  using T = TypeParam;
  for (const bool log : {false, true}) {
    for (const Shape& s : kShapes) {
      for (const float spread : {1.f, 8.f, 40.f}) {
        const std::int64_t rows = s.rows, d = s.d;
        const auto x = random_vec<T>(rows * d, 3 + d, spread), dy = random_vec<T>(rows * d, 4 + d);
        std::vector<T> y, dx;
        std::vector<C<T>> stats;
        run_kind(log, x, dy, rows, d, y, stats, dx);
        const Ref ref = reference(log, x, dy, rows, d);
        for (std::int64_t i = 0; i < rows * d; ++i) {
          const long double want = ref.y[i], got = ld(y[i]);
          // y: T's rounding of a value a few compute-type roundings off, and the
          // rounding of x - m in C, which exp turns into a relative error of |x - m|
          // roundings (aten's too); log_softmax's (x - m) - log s is absolute in
          // their size. Results below T's smallest subnormal may round to 0.
          const long double arg = std::fabs(ref.arg[i]);
          const long double scale = log ? arg + std::fabs(want) + 4 : std::fabs(want) * (arg / 2 + 8);
          ASSERT_LE(std::fabs(got - want), half_ulp<T>() * std::fabs(want) + eps_c<T>() * scale + tiny<T>())
              << (log ? "log_softmax" : "softmax") << " y[" << i << "] d " << d << " spread " << spread;
          // dx: a difference of terms of the size of |g| (and the dot product, up to max |g|).
          const long double dscale = std::fabs(ld(dy[i])) + 4;
          ASSERT_LE(std::fabs(ld(dx[i]) - ref.dx[i]),
                    half_ulp<T>() * std::fabs(ref.dx[i]) + 32 * eps_c<T>() * dscale)
              << (log ? "log_softmax" : "softmax") << " dx[" << i << "] d " << d << " spread " << spread;
        }
      }
    }
  }
}

// Rows of special values, as aten's softmax and log_softmax give them.
TYPED_TEST(Softmax, SpecialRowsAsAten) {
  using T = TypeParam;
  const float nan = std::nanf("");
  const std::int64_t d = 4;
  const std::vector<float> in = {
      -kInf, 0.f,   1.f,   -kInf,  // some -inf: they give 0 (log: -inf)
      -kInf, -kInf, -kInf, -kInf,  // all -inf: NaN
      kInf,  0.f,   1.f,   2.f,    // +inf: NaN
      nan,   0.f,   1.f,   2.f,    // NaN: NaN
      5.f,   5.f,   5.f,   5.f,    // equal: 1/4 (log: -log 4)
  };
  std::vector<T> x;
  for (float v : in) x.push_back(to_t<T>(v));
  const std::int64_t rows = static_cast<std::int64_t>(x.size()) / d;
  const std::vector<T> dy(x.size(), to_t<T>(1.0L));
  for (const bool log : {false, true}) {
    std::vector<T> y, dx;
    std::vector<C<T>> stats;
    run_kind(log, x, dy, rows, d, y, stats, dx);
    const long double e = std::exp(1.0L), z = 1 + e;  // row 0's sum
    EXPECT_EQ(ld(y[0]), log ? -INFINITY : 0.0L);
    EXPECT_EQ(ld(y[3]), log ? -INFINITY : 0.0L);
    EXPECT_NEAR(ld(y[1]), log ? -std::log(z) : 1 / z, 8 * half_ulp<T>());
    EXPECT_NEAR(ld(y[2]), log ? 1 - std::log(z) : e / z, 8 * half_ulp<T>());
    for (std::int64_t i = 4; i < 16; ++i) EXPECT_TRUE(std::isnan(ld(y[i]))) << (log ? "log " : "") << i;
    for (std::int64_t i = 16; i < 20; ++i)
      EXPECT_NEAR(ld(y[i]), log ? -std::log(4.0L) : 0.25L, 4 * half_ulp<T>()) << i;
    // dx of an all-ones dy: 0 for softmax (sum of y is 1); 1 - 4 y for log_softmax.
    EXPECT_EQ(ld(dx[0]), log ? 1.0L : 0.0L);  // the -inf element: y = 0
    for (std::int64_t i = 16; i < 20; ++i) EXPECT_NEAR(ld(dx[i]), 0.0L, 8 * half_ulp<T>()) << i;
  }
}

TYPED_TEST(Softmax, EmptyRowsAndSingleElements) {
  using T = TypeParam;
  std::vector<T> y, dx;
  std::vector<C<T>> stats;
  const std::vector<T> none;
  run_rows<k::Softmax>(none, none, 3, 0, y, stats, dx);  // rows of 0: nothing written
  run_rows<k::LogSoftmax>(none, none, 0, 5, y, stats, dx);
  const std::vector<T> x = {to_t<T>(-3.0L), to_t<T>(40.0L)}, g = {to_t<T>(2.0L), to_t<T>(-1.0L)};
  run_rows<k::Softmax>(x, g, 2, 1, y, stats, dx);
  EXPECT_EQ(ld(y[0]), 1.0L);
  EXPECT_EQ(ld(y[1]), 1.0L);
  EXPECT_EQ(ld(dx[0]), 0.0L);
  run_rows<k::LogSoftmax>(x, g, 2, 1, y, stats, dx);
  EXPECT_EQ(ld(y[0]), 0.0L);
  EXPECT_EQ(ld(dx[1]), 0.0L);
}

template <typename T, typename Runner>
std::vector<std::vector<std::uint64_t>> all_outputs(std::int64_t rows, std::int64_t d, const Runner& run) {
  const auto x = random_vec<T>(rows * d, 8, 4.f), dy = random_vec<T>(rows * d, 9);
  std::vector<T> y, dx, ly, ldx;
  std::vector<C<T>> stats, lstats;
  run_rows<k::Softmax>(x, dy, rows, d, y, stats, dx, run);
  run_rows<k::LogSoftmax>(x, dy, rows, d, ly, lstats, ldx, run);
  return {as_bits(y), as_bits(stats), as_bits(dx), as_bits(ly), as_bits(lstats), as_bits(ldx)};
}

TYPED_TEST(Softmax, BitIdenticalForAnyRunner) {
  using T = TypeParam;
  expect_same_bits_for_any_runner([](auto... args) { return all_outputs<T>(args...); });
}

// Whatever copy the CPU's level dispatches to (AVX-512, AVX2: the vector
// rows), its bits are the plain scalar rows', called directly here;
// 64-byte-aligned rows of 64-byte multiples also go through the streamed
// stores where TIERKIT_STREAMING_STORES=on.
template <typename K, typename T>
void expect_scalar_bits(const char* name) {
  for (const Shape& s : kShapes) {
    const std::int64_t rows = s.rows, d = s.d;
    const auto x = random_vec<T>(rows * d, 21 + d, 6.f), dy = random_vec<T>(rows * d, 22 + d);
    std::vector<T> y, dx, y_s(x.size()), dx_s(x.size());
    std::vector<C<T>> st, st_s(2 * rows);
    run_rows<K>(x, dy, rows, d, y, st, dx, k::PoolRunner{1});
    using Scalar = typename K::template Rows<T>;
    Scalar::forward(x.data(), {}, C<T>(0), d, 0, rows, y_s.data(), st_s.data());
    Scalar::backward(dy.data(), x.data(), {}, st_s.data(), d, 0, rows, dx_s.data(), nullptr, nullptr);
    EXPECT_EQ(as_bits(y), as_bits(y_s)) << name << " d " << d;
    EXPECT_EQ(as_bits(st), as_bits(st_s)) << name << " d " << d;
    EXPECT_EQ(as_bits(dx), as_bits(dx_s)) << name << " d " << d;
  }
}

// The vector exp (AVX-512: its last step one VSCALEFPS) gives ExpOne's bits
// for every 256th float in [-110, 0], subnormal results included: rows of a
// 0 (their max) and 63 of them, so e_j = exp(x_j) and softmax's y_j = e_j / s
// (s = 1 exactly where the rest are below 2^-30), through every block and tail
// of the level this run dispatches (TIERKIT_SIMD picks it: CMakeLists.txt).
TEST(SoftmaxExp, EveryLevelGivesTheScalarExpsBits) {
  constexpr std::int64_t d = 64;
  std::vector<float> x;
  for (std::uint32_t u = 0x80000000u; u <= 0xc2dc0000u; u += 256) {
    if (x.size() % d == 0) x.push_back(0.0f);
    x.push_back(from_bits<float>(u));
  }
  while (x.size() % d) x.push_back(-kInf);
  const std::int64_t rows = static_cast<std::int64_t>(x.size()) / d;
  std::vector<float> y, dx, st, y_s(x.size()), dx_s(x.size()), st_s(2 * rows);
  const std::vector<float> dy(x.size(), 0.5f);
  for (const bool log : {false, true}) {
    run_kind(log, x, dy, rows, d, y, st, dx);
    if (log) {
      k::LogSoftmax::Rows<float>::forward(x.data(), {}, 0.f, d, 0, rows, y_s.data(), st_s.data());
      k::LogSoftmax::Rows<float>::backward(dy.data(), x.data(), {}, st_s.data(), d, 0, rows, dx_s.data(),
                                           nullptr, nullptr);
    } else {
      k::Softmax::Rows<float>::forward(x.data(), {}, 0.f, d, 0, rows, y_s.data(), st_s.data());
      k::Softmax::Rows<float>::backward(dy.data(), x.data(), {}, st_s.data(), d, 0, rows, dx_s.data(),
                                        nullptr, nullptr);
    }
    EXPECT_EQ(as_bits(y), as_bits(y_s)) << (log ? "log_softmax" : "softmax");
    EXPECT_EQ(as_bits(dx), as_bits(dx_s)) << (log ? "log_softmax" : "softmax");
  }
}

TYPED_TEST(Softmax, EverySimdCopyGivesTheScalarRowsBits) {
  expect_scalar_bits<k::Softmax, TypeParam>("softmax");
  expect_scalar_bits<k::LogSoftmax, TypeParam>("log_softmax");
}

// Outputs of whole 64-byte rows on 64-byte boundaries, and 16 bytes off
// them (kStreamedShapes): float rows stream their stores where
// TIERKIT_STREAMING_STORES=on (the RowKinds.streaming_stores CTest entries;
// 16-bit rows store plainly: softmax_functors.h says why), with the scalar
// rows' bits.
template <typename K, typename T>
void expect_streamed_scalar_bits(const char* name) {
  for (const auto& [s, off] : kStreamedShapes) {
    SCOPED_TRACE(testing::Message() << "outputs " << off << " bytes past a line");
    const std::int64_t rows = s.rows, d = s.d;
    const std::size_t n = static_cast<std::size_t>(rows * d);
    const auto x = random_vec<T>(n, 31 + d, 5.f), dy = random_vec<T>(n, 32 + d);
    const std::vector<T> zeros(n);
    Aligned64<T> y(zeros, off), dx(zeros, off);
    std::vector<T> y_s(n), dx_s(n);
    std::vector<C<T>> st(2 * rows), st_s(2 * rows);
    expect_rows_stream_where_asked(y.p, rows, d);
    k::row_forward<K>(x.data(), k::RowParams<T>{}, 0.0, rows, d, y.p, st.data(), k::PoolRunner{1});
    k::row_backward<K>(dy.data(), x.data(), k::RowParams<T>{}, st.data(), rows, d, dx.p, nullptr, nullptr,
                       k::PoolRunner{1});
    using Scalar = typename K::template Rows<T>;
    Scalar::forward(x.data(), {}, C<T>(0), d, 0, rows, y_s.data(), st_s.data());
    Scalar::backward(dy.data(), x.data(), {}, st_s.data(), d, 0, rows, dx_s.data(), nullptr, nullptr);
    EXPECT_EQ(as_bits(y.vec(n)), as_bits(y_s)) << name << " d " << d;
    EXPECT_EQ(as_bits(dx.vec(n)), as_bits(dx_s)) << name << " dx, d " << d;
  }
}

TYPED_TEST(Softmax, StreamedRowsGiveTheScalarRowsBits) {
  expect_streamed_scalar_bits<k::Softmax, TypeParam>("softmax");
  expect_streamed_scalar_bits<k::LogSoftmax, TypeParam>("log_softmax");
}

}  // namespace
