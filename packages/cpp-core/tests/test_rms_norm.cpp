// RMSNorm row kernels (the row kinds' loops, tierkit/row_kernels.h, over its functor): forward, backward and
// the fused residual form against long double references, edge cases (d = 1, odd d, empty shapes, zero rows,
// large values), the documented summation order bit for bit, and determinism across thread counts and Runner
// chunkings. The RmsNorm* tests run again with TIERKIT_SIMD=avx2 and =baseline (CMakeLists.txt): every SIMD
// copy gives the same bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>
#include <utility>
#include <vector>

#include "row_nan_payloads.h"
#include "row_test_support.h"
#include "tierkit/row_functors.h"

using tierkit::BFloat16;
using tierkit::compute_t;
using tierkit::Half;
namespace k = tierkit::kernels;

namespace {

// rms_norm's entry points as these tests call them: the generic loops over
// the RmsNorm kind, with its one parameter.
namespace rms {
template <typename T, typename Runner = tierkit::kernels::PoolRunner>
void rms_norm_forward(const T* x, const T* w, double eps, std::int64_t rows, std::int64_t d, T* y,
                      tierkit::compute_t<T>* rstd, const Runner& run = {}) {
  tierkit::kernels::row_forward<tierkit::kernels::RmsNorm>(x, tierkit::kernels::RowParams<T>{w, nullptr}, eps,
                                                           rows, d, y, rstd, run);
}
template <typename T, typename Runner = tierkit::kernels::PoolRunner>
void add_rms_norm_forward(const T* x, const T* residual, const T* w, double eps, std::int64_t rows,
                          std::int64_t d, T* y, T* h_out, tierkit::compute_t<T>* rstd,
                          const Runner& run = {}) {
  tierkit::kernels::row_add_forward<tierkit::kernels::RmsNorm>(
      x, residual, tierkit::kernels::RowParams<T>{w, nullptr}, eps, rows, d, y, h_out, rstd, run);
}
template <typename T, typename Runner = tierkit::kernels::PoolRunner>
void rms_norm_backward(const T* dy, const T* x, const T* w, const tierkit::compute_t<T>* rstd,
                       std::int64_t rows, std::int64_t d, T* dx, tierkit::compute_t<T>* dw,
                       const Runner& run = {}) {
  tierkit::kernels::row_backward<tierkit::kernels::RmsNorm>(
      dy, x, tierkit::kernels::RowParams<T>{w, nullptr}, rstd, rows, d, dx, dw,
      static_cast<tierkit::compute_t<T>*>(nullptr), run);
}
}  // namespace rms

using namespace row_test_support;

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (bits_of(a[i]) != bits_of(b[i])) return false;
  return true;
}

// Significand bits (with the implicit one) and smallest normal exponent of T.
template <typename T>
constexpr int kDigits = std::is_same_v<T, Half>       ? 11
                        : std::is_same_v<T, BFloat16> ? 8
                                                      : std::numeric_limits<T>::digits;
template <typename T>
constexpr int kMinExp = std::is_same_v<T, Half>       ? -14
                        : std::is_same_v<T, BFloat16> ? -126
                                                      : std::numeric_limits<T>::min_exponent - 1;
// One unit in the last place of T at magnitude |v|.
template <typename T>
long double ulp(long double v) {
  const int e = v == 0 ? kMinExp<T> : std::max(kMinExp<T>, std::ilogb(v));
  return std::ldexp(1.0L, e - (kDigits<T> - 1));
}

struct Ref {
  std::vector<long double> y, rstd;
};
template <typename T>
Ref reference_forward(const std::vector<T>& x, const T* w, double eps, std::int64_t rows, std::int64_t d) {
  Ref r{std::vector<long double>(x.size()), std::vector<long double>(rows)};
  for (std::int64_t i = 0; i < rows; ++i) {
    long double ss = 0;
    for (std::int64_t j = 0; j < d; ++j) ss += ld(x[i * d + j]) * ld(x[i * d + j]);
    const long double rs = 1.0L / std::sqrt(ss / d + static_cast<long double>(static_cast<C<T>>(eps)));
    r.rstd[i] = rs;
    for (std::int64_t j = 0; j < d; ++j) r.y[i * d + j] = ld(x[i * d + j]) * rs * (w ? ld(w[j]) : 1.0L);
  }
  return r;
}

template <typename T>
class RmsNorm : public ::testing::Test {};
using Types = ::testing::Types<float, double, Half, BFloat16>;
TYPED_TEST_SUITE(RmsNorm, Types);

const Shape kShapes[] = {{5, 33}, {3, 4097}, {7, 1}, {4, 16}, {2, 1024}, {9, 15}};

// y within 1 ulp of T for the 16-bit types (one rounding of a value
// accurate in float); for float and double, their own error: rstd's (sums of
// up to 4097 / 16 terms a lane) plus two products, 8 ulp.
template <typename T>
long double y_ulps() {
  return sizeof(T) == 2 ? 1.0L : 8.0L;
}

TYPED_TEST(RmsNorm, ForwardMatchesReference) {
  using T = TypeParam;
  for (const Shape& s : kShapes) {
    for (bool with_w : {true, false}) {
      const auto x = random_vec<T>(s.rows * s.d, 1 + s.d);
      const auto w = random_vec<T>(s.d, 2 + s.d);
      std::vector<T> y(x.size());
      std::vector<C<T>> rstd(s.rows);
      const T* wp = with_w ? w.data() : nullptr;
      rms::rms_norm_forward(x.data(), wp, 1e-6, s.rows, s.d, y.data(), rstd.data());
      const Ref ref = reference_forward(x, wp, 1e-6, s.rows, s.d);
      for (std::int64_t i = 0; i < s.rows; ++i)
        EXPECT_LE(std::fabs(rstd[i] - ref.rstd[i]), 8 * eps_c<T>() * ref.rstd[i])
            << "row " << i << " d " << s.d;
      for (std::size_t i = 0; i < y.size(); ++i)
        ASSERT_LE(std::fabs(ld(y[i]) - ref.y[i]), y_ulps<T>() * ulp<T>(std::fabs(ref.y[i])))
            << "i " << i << " d " << s.d << " weight " << with_w;
    }
  }
}

// The order the header documents, written plainly: chunks of 256, each in
// 16 lane sums over j mod 16 added into the row's 16 lanes, a halving tree,
// 1 / sqrt(sum / d + eps), (x * rstd) * w.
template <typename T>
void documented_forward(const T* x, const T* w, double eps, std::int64_t rows, std::int64_t d, T* y,
                        C<T>* rstd) {
  for (std::int64_t r = 0; r < rows; ++r) {
    C<T> acc[16] = {}, chunk[16] = {};
    for (std::int64_t j = 0; j < d; ++j) {
      const C<T> v = tierkit::load_compute(x + r * d + j);
      chunk[j % 16] += v * v;
      if (j % 256 == 255 || j == d - 1)
        for (int q = 0; q < 16; ++q) acc[q] += std::exchange(chunk[q], C<T>(0));
    }
    for (int half = 8; half > 0; half /= 2)
      for (int q = 0; q < half; ++q) acc[q] += acc[q + half];
    const C<T> rs = C<T>(1) / std::sqrt(acc[0] / static_cast<C<T>>(d) + static_cast<C<T>>(eps));
    rstd[r] = rs;
    for (std::int64_t j = 0; j < d; ++j) {
      const C<T> v = tierkit::load_compute(x + r * d + j) * rs;
      tierkit::store_compute(y + r * d + j, w ? v * tierkit::load_compute(w + j) : v);
    }
  }
}

TYPED_TEST(RmsNorm, ForwardIsTheDocumentedOrderBitForBit) {
  using T = TypeParam;
  for (const Shape& s : kShapes) {
    const auto x = random_vec<T>(s.rows * s.d, 3 + s.d);
    const auto w = random_vec<T>(s.d, 4 + s.d);
    for (const T* wp : {w.data(), static_cast<const T*>(nullptr)}) {
      std::vector<T> y(x.size()), y_doc(x.size());
      std::vector<C<T>> rstd(s.rows), rstd_doc(s.rows);
      rms::rms_norm_forward(x.data(), wp, 1e-5, s.rows, s.d, y.data(), rstd.data());
      documented_forward(x.data(), wp, 1e-5, s.rows, s.d, y_doc.data(), rstd_doc.data());
      EXPECT_TRUE(same_bits(y, y_doc)) << "d " << s.d;
      EXPECT_TRUE(same_bits(rstd, rstd_doc)) << "d " << s.d;
    }
  }
}

// Outputs below the smallest normal number, and NaN rows, in the documented
// bits: the vector stores round them as the scalar conversion does (AVX512-
// BF16's conversion alone would flush a subnormal float to zero).
TYPED_TEST(RmsNorm, SubnormalAndNanOutputsAreTheDocumentedBits) {
  using T = TypeParam;
  for (const Shape& s : kShapes) {
    auto x = random_vec<T>(s.rows * s.d, 5 + s.d);
    if (s.rows > 1 && s.d > 0) x[s.d + s.d / 2] = to_t<T>(std::numeric_limits<long double>::quiet_NaN());
    std::vector<T> w(s.d);
    std::mt19937 gen(6);
    std::uniform_real_distribution<float> scale(0.5f, 1.5f);
    // |y| ~ 2^-130: subnormal in float and bfloat16 (zero in half).
    for (auto& e : w) e = to_t<T>(std::ldexp(static_cast<long double>(scale(gen)), -130));
    std::vector<T> y(x.size()), y_doc(x.size());
    std::vector<C<T>> rstd(s.rows), rstd_doc(s.rows);
    rms::rms_norm_forward(x.data(), w.data(), 1e-5, s.rows, s.d, y.data(), rstd.data());
    documented_forward(x.data(), w.data(), 1e-5, s.rows, s.d, y_doc.data(), rstd_doc.data());
    EXPECT_TRUE(same_bits(y, y_doc)) << "d " << s.d;
    bool some_subnormal = false;
    for (const T& v : y) {
      const long double a = std::fabs(ld(v));
      some_subnormal |= a > 0 && a < std::ldexp(1.0L, kMinExp<T>);
    }
    if ((std::is_same_v<T, float> || std::is_same_v<T, BFloat16>) && s.rows * s.d > 4) {
      EXPECT_TRUE(some_subnormal) << "d " << s.d;
    }
  }
}

TYPED_TEST(RmsNorm, BackwardMatchesReference) {
  using T = TypeParam;
  const Shape shapes[] = {{5, 33}, {3, 4097}, {7, 1}, {70, 16}, {600, 64}, {9, 15}};
  for (const Shape& s : shapes) {
    for (bool with_w : {true, false}) {
      const std::int64_t rows = s.rows, d = s.d;
      const auto x = random_vec<T>(rows * d, 5 + d);
      const auto dy = random_vec<T>(rows * d, 6 + d);
      const auto w = random_vec<T>(d, 7 + d);
      const T* wp = with_w ? w.data() : nullptr;
      std::vector<T> y(x.size()), dx(x.size());
      std::vector<C<T>> rstd(rows), dw(d, C<T>(123));
      rms::rms_norm_forward(x.data(), wp, 1e-6, rows, d, y.data(), rstd.data());
      rms::rms_norm_backward(dy.data(), x.data(), wp, rstd.data(), rows, d, dx.data(), dw.data());
      // The reference from the same rstd: only backward's own error.
      std::vector<long double> dw_ref(d, 0), dw_abs(d, 0);
      for (std::int64_t r = 0; r < rows; ++r) {
        const long double rs = rstd[r];
        long double dot = 0, dot_abs = 0;
        for (std::int64_t j = 0; j < d; ++j) {
          const long double g = ld(dy[r * d + j]) * (wp ? ld(w[j]) : 1.0L), xh = ld(x[r * d + j]) * rs;
          dot += g * xh;
          dot_abs += std::fabs(g * xh);
          dw_ref[j] += ld(dy[r * d + j]) * xh;
          dw_abs[j] += std::fabs(ld(dy[r * d + j]) * xh);
        }
        const long double c = dot / d, c_err = 8 * eps_c<T>() * dot_abs / d;
        for (std::int64_t j = 0; j < d; ++j) {
          const long double g = ld(dy[r * d + j]) * (wp ? ld(w[j]) : 1.0L), xh = ld(x[r * d + j]) * rs;
          const long double ref = (g - xh * c) * rs;
          // One rounding to T, plus the compute type's error on the terms
          // (which may cancel) and on c.
          const long double tol =
              (sizeof(T) == 2 ? 1.0L : 0.5L) * ulp<T>(std::fabs(ref)) +
              rs * (4 * eps_c<T>() * (std::fabs(g) + std::fabs(xh * c)) + std::fabs(xh) * c_err);
          ASSERT_LE(std::fabs(ld(dx[r * d + j]) - ref), tol) << "row " << r << " j " << j << " d " << d;
        }
      }
      // Blocked sum: (rows per block + log2(blocks) + 2) roundings a term, or fewer.
      const long double n_round = rows / 8 + 64 + 2;
      for (std::int64_t j = 0; j < d; ++j)
        ASSERT_LE(std::fabs(dw[j] - dw_ref[j]), n_round * eps_c<T>() * dw_abs[j]) << "j " << j << " d " << d;

      // dx alone and dw alone give the same bits as both together.
      std::vector<T> dx_only(x.size());
      std::vector<C<T>> dw_only(d);
      rms::rms_norm_backward(dy.data(), x.data(), wp, rstd.data(), rows, d, dx_only.data(),
                             static_cast<C<T>*>(nullptr));
      rms::rms_norm_backward(dy.data(), x.data(), wp, rstd.data(), rows, d, static_cast<T*>(nullptr),
                             dw_only.data());
      EXPECT_TRUE(same_bits(dx, dx_only));
      EXPECT_TRUE(same_bits(dw, dw_only));
    }
  }
}

TYPED_TEST(RmsNorm, EmptyShapes) {
  using T = TypeParam;
  // rows = 0: nothing written but dw, which is zeroed.
  std::vector<C<T>> dw(4, C<T>(7));
  rms::rms_norm_forward<T>(nullptr, nullptr, 1e-6, 0, 4, nullptr, nullptr);
  rms::add_rms_norm_forward<T>(nullptr, nullptr, nullptr, 1e-6, 0, 4, nullptr, nullptr, nullptr);
  rms::rms_norm_backward<T>(nullptr, nullptr, nullptr, nullptr, 0, 4, nullptr, dw.data());
  for (C<T> v : dw) EXPECT_EQ(v, C<T>(0));
  // d = 0: rstd = 1 / sqrt(0 / 0 + eps) = NaN, as torch's _fused_rms_norm.
  std::vector<C<T>> rstd(3, C<T>(0));
  T dummy[1];
  rms::rms_norm_forward<T>(dummy, nullptr, 1e-6, 3, 0, dummy, rstd.data());
  for (C<T> v : rstd) EXPECT_TRUE(std::isnan(v));
  std::fill(rstd.begin(), rstd.end(), C<T>(0));
  rms::add_rms_norm_forward<T>(dummy, dummy, nullptr, 1e-6, 3, 0, dummy, dummy, rstd.data());
  for (C<T> v : rstd) EXPECT_TRUE(std::isnan(v));
  rms::rms_norm_backward<T>(dummy, dummy, dummy, rstd.data(), 3, 0, dummy, dw.data());
}

TYPED_TEST(RmsNorm, ZeroRows) {
  using T = TypeParam;
  const std::int64_t rows = 3, d = 37;
  std::vector<T> x(rows * d, to_t<T>(0)), y(x.size(), to_t<T>(5)), dx(x.size());
  const auto w = random_vec<T>(d, 9);
  std::vector<C<T>> rstd(rows), dw(d);
  rms::rms_norm_forward(x.data(), w.data(), 1e-6, rows, d, y.data(), rstd.data());
  const C<T> expect = C<T>(1) / std::sqrt(static_cast<C<T>>(1e-6));
  for (C<T> v : rstd) EXPECT_EQ(v, expect);
  for (const T& v : y) EXPECT_EQ(ld(v), 0.0L);
  const auto dy = random_vec<T>(rows * d, 10);
  rms::rms_norm_backward(dy.data(), x.data(), w.data(), rstd.data(), rows, d, dx.data(), dw.data());
  // x_hat = 0: dx = g * rstd, dw = 0.
  for (std::int64_t i = 0; i < rows * d; ++i)
    EXPECT_EQ(bits_of(dx[i]),
              bits_of(to_t<T>(tierkit::load_compute(&dy[i]) * tierkit::load_compute(&w[i % d]) * expect)));
  for (C<T> v : dw) EXPECT_EQ(v, C<T>(0));
}

TEST(RmsNormLarge, FloatSumOfSquaresOf1e18) {
  // 33 squares of 1e18 (1e36 each) fit float's range: rstd ~ 1e-18, y ~ +-1.
  const std::int64_t d = 33;
  std::vector<float> x(d);
  for (std::int64_t j = 0; j < d; ++j) x[j] = (j % 2 ? -1e18f : 1e18f);
  std::vector<float> y(d);
  float rstd = 0;
  rms::rms_norm_forward(x.data(), static_cast<const float*>(nullptr), 1e-6, 1, d, y.data(), &rstd);
  EXPECT_NEAR(rstd * 1e18, 1.0, 1e-6);
  for (std::int64_t j = 0; j < d; ++j) EXPECT_NEAR(y[j], j % 2 ? -1.0 : 1.0, 1e-6);
  // bfloat16 reaches 3e38, float's range: 1e18 in bfloat16 too.
  std::vector<BFloat16> xb(d), yb(d);
  for (std::int64_t j = 0; j < d; ++j) xb[j] = BFloat16(x[j]);
  rms::rms_norm_forward(xb.data(), static_cast<const BFloat16*>(nullptr), 1e-6, 1, d, yb.data(), &rstd);
  for (std::int64_t j = 0; j < d; ++j) EXPECT_EQ(static_cast<float>(yb[j]), j % 2 ? -1.0f : 1.0f);
}

// Forward, backward and add_rms_norm with `run`, for comparing Runners.
template <typename T, typename Runner>
std::vector<std::vector<std::uint64_t>> all_outputs(std::int64_t rows, std::int64_t d, const Runner& run) {
  const auto x = random_vec<T>(rows * d, 11);
  const auto res = random_vec<T>(rows * d, 12);
  const auto dy = random_vec<T>(rows * d, 13);
  const auto w = random_vec<T>(d, 14);
  std::vector<T> y(x.size()), dx(x.size()), h(x.size()), y2(x.size());
  std::vector<C<T>> rstd(rows), dw(d), rstd2(rows);
  rms::rms_norm_forward(x.data(), w.data(), 1e-6, rows, d, y.data(), rstd.data(), run);
  rms::rms_norm_backward(dy.data(), x.data(), w.data(), rstd.data(), rows, d, dx.data(), dw.data(), run);
  rms::add_rms_norm_forward(x.data(), res.data(), w.data(), 1e-6, rows, d, y2.data(), h.data(), rstd2.data(),
                            run);
  return {as_bits(y), as_bits(rstd), as_bits(dx), as_bits(dw), as_bits(y2), as_bits(h), as_bits(rstd2)};
}

TYPED_TEST(RmsNorm, BitIdenticalForAnyRunner) {
  using T = TypeParam;
  expect_same_bits_for_any_runner([](auto... args) { return all_outputs<T>(args...); });
}

// Outputs on whole 64-byte lines, as the vector rows stream them where
// TIERKIT_STREAMING_STORES=on (the RowKinds.streaming_stores CTest entries),
// and 16 bytes off their line: forward, the residual form (h on its line and
// off it) and backward give the scalar rows' bits, every dtype.
TYPED_TEST(RmsNorm, StreamedRowsGiveTheScalarRowsBits) {
  using T = TypeParam;
  for (const auto& [s, off] : kStreamedShapes) {
    SCOPED_TRACE(testing::Message() << "outputs " << off << " bytes past a line");
    const std::int64_t rows = s.rows, d = s.d;
    const std::size_t n = static_cast<std::size_t>(rows * d);
    const auto x = random_vec<T>(n, 31 + d, 1.f, 2.f), r = random_vec<T>(n, 32 + d),
               g = random_vec<T>(n, 33 + d);
    const auto w = random_vec<T>(d, 34, 0.5f, 1.f);
    const std::vector<T> zeros(n);
    Aligned64<T> y(zeros, off), h(zeros, off), dx(zeros, off);
    expect_rows_stream_where_asked(y.p, rows, d);
    std::vector<T> y_s(n), h_s(n), dx_s(n);
    std::vector<C<T>> st(rows), st_s(rows), dw(d), dw_s(d, 0);
    const k::RowParams<T> p{w.data(), nullptr};
    const Widened<T> pc(p, d);
    k::row_forward<k::RmsNorm>(x.data(), p, 1e-5, rows, d, y.p, st.data(), k::PoolRunner{1});
    k::RmsNorm::Rows<T>::forward(x.data(), pc.p, 1e-5, d, 0, rows, y_s.data(), st_s.data());
    EXPECT_EQ(as_bits(y.vec(n)), as_bits(y_s)) << "rms_norm d " << d;
    k::row_add_forward<k::RmsNorm>(x.data(), r.data(), p, 1e-5, rows, d, y.p, h.p, st.data(),
                                   k::PoolRunner{1});
    k::RmsNorm::Rows<T>::add_forward(x.data(), r.data(), pc.p, 1e-5, d, 0, rows, y_s.data(), h_s.data(),
                                     st_s.data());
    EXPECT_EQ(as_bits(y.vec(n)), as_bits(y_s)) << "add_rms_norm d " << d;
    EXPECT_EQ(as_bits(h.vec(n)), as_bits(h_s)) << "add_rms_norm h, d " << d;
    // h off its line (the in-place form's residual may be any view): y still streams, h is stored plainly.
    std::vector<T> h_off(n + 1);
    k::row_add_forward<k::RmsNorm>(x.data(), r.data(), p, 1e-5, rows, d, y.p, h_off.data() + 1, st.data(),
                                   k::PoolRunner{1});
    EXPECT_EQ(as_bits(y.vec(n)), as_bits(y_s)) << "add_rms_norm, h off its line, d " << d;
    EXPECT_EQ(as_bits(std::vector<T>(h_off.begin() + 1, h_off.end())), as_bits(h_s))
        << "add_rms_norm h off its line, d " << d;
    k::row_backward<k::RmsNorm>(g.data(), x.data(), p, st.data(), rows, d, dx.p, dw.data(),
                                static_cast<C<T>*>(nullptr), k::PoolRunner{1});
    k::RmsNorm::Rows<T>::backward(g.data(), x.data(), pc.p, st_s.data(), d, 0, rows, dx_s.data(), dw_s.data(),
                                  nullptr);
    EXPECT_EQ(as_bits(dx.vec(n)), as_bits(dx_s)) << "rms_norm dx, d " << d;
    EXPECT_EQ(as_bits(dw), as_bits(dw_s)) << "rms_norm dw, d " << d;
  }
}

TYPED_TEST(RmsNorm, AddRmsNorm) {
  using T = TypeParam;
  for (const Shape& s : kShapes) {
    const std::int64_t n = s.rows * s.d;
    const auto x = random_vec<T>(n, 15 + s.d);
    const auto res = random_vec<T>(n, 16 + s.d, 3.f);
    const auto w = random_vec<T>(s.d, 17 + s.d);
    std::vector<T> y(n), h(n), y_ref(n), h_ref(n);
    std::vector<C<T>> rstd(s.rows), rstd_ref(s.rows);
    rms::add_rms_norm_forward(x.data(), res.data(), w.data(), 1e-6, s.rows, s.d, y.data(), h.data(),
                              rstd.data());
    for (std::int64_t i = 0; i < n; ++i)
      tierkit::store_compute(&h_ref[i], tierkit::load_compute(&x[i]) + tierkit::load_compute(&res[i]));
    rms::rms_norm_forward(h_ref.data(), w.data(), 1e-6, s.rows, s.d, y_ref.data(), rstd_ref.data());
    EXPECT_TRUE(same_bits(h, h_ref)) << "d " << s.d;
    EXPECT_TRUE(same_bits(y, y_ref)) << "d " << s.d;
    EXPECT_TRUE(same_bits(rstd, rstd_ref)) << "d " << s.d;
    // h_out = residual, in place.
    std::vector<T> inplace = res, y3(n);
    rms::add_rms_norm_forward(x.data(), inplace.data(), w.data(), 1e-6, s.rows, s.d, y3.data(),
                              inplace.data(), rstd.data());
    EXPECT_TRUE(same_bits(inplace, h_ref)) << "d " << s.d;
    EXPECT_TRUE(same_bits(y3, y_ref)) << "d " << s.d;
    // Without a weight.
    rms::add_rms_norm_forward(x.data(), res.data(), static_cast<const T*>(nullptr), 1e-6, s.rows, s.d,
                              y.data(), h.data(), rstd.data());
    rms::rms_norm_forward(h_ref.data(), static_cast<const T*>(nullptr), 1e-6, s.rows, s.d, y_ref.data(),
                          rstd_ref.data());
    EXPECT_TRUE(same_bits(y, y_ref)) << "d " << s.d;
  }
}

// casting_mode "llama" (RowParams::round_normalized): y = T(T(x * rstd) * w),
// bit for bit the norm without a weight, then the product rounded once, in
// both forms, with the weight in T or in the compute type; at every SIMD
// level (this suite runs again under TIERKIT_SIMD=avx2 and =baseline).
TYPED_TEST(RmsNorm, RoundNormalizedIsTheNormThenTheRoundedProduct) {
  using T = TypeParam;
  for (const Shape& s : kShapes) {
    const std::int64_t n = s.rows * s.d;
    const auto x = random_vec<T>(n, 41 + s.d, 3.f), res = random_vec<T>(n, 42 + s.d);
    const auto w = random_vec<T>(s.d, 43 + s.d);
    std::vector<C<T>> wc(static_cast<std::size_t>(s.d));
    for (std::int64_t j = 0; j < s.d; ++j) wc[j] = tierkit::load_compute(&w[j]);
    std::vector<T> xhat(n), want(n), h(n), y(n);
    std::vector<C<T>> rstd(s.rows), rstd_want(s.rows);
    const auto product = [&](const std::vector<T>& normalized) {
      for (std::int64_t i = 0; i < n; ++i)
        tierkit::store_compute(&want[i], tierkit::load_compute(&normalized[i]) * wc[i % s.d]);
    };
    rms::rms_norm_forward(x.data(), static_cast<const T*>(nullptr), 1e-6, s.rows, s.d, xhat.data(),
                          rstd_want.data());
    product(xhat);
    k::RowParams<T> p{w.data(), nullptr};
    p.round_normalized = true;
    k::RowParams<C<T>> pc{wc.data(), nullptr};
    pc.round_normalized = true;
    k::row_forward<k::RmsNorm>(x.data(), p, 1e-6, s.rows, s.d, y.data(), rstd.data());
    EXPECT_TRUE(same_bits(y, want)) << "d " << s.d;
    EXPECT_TRUE(same_bits(rstd, rstd_want)) << "d " << s.d;
    std::fill(y.begin(), y.end(), T{});
    k::row_forward<k::RmsNorm>(x.data(), pc, 1e-6, s.rows, s.d, y.data(), rstd.data());
    EXPECT_TRUE(same_bits(y, want)) << "compute-typed weight, d " << s.d;
    // The fused residual form: h = T(x + residual), then the same on h.
    std::vector<T> h_want(n);
    for (std::int64_t i = 0; i < n; ++i)
      tierkit::store_compute(&h_want[i], tierkit::load_compute(&x[i]) + tierkit::load_compute(&res[i]));
    rms::rms_norm_forward(h_want.data(), static_cast<const T*>(nullptr), 1e-6, s.rows, s.d, xhat.data(),
                          rstd_want.data());
    product(xhat);
    k::row_add_forward<k::RmsNorm>(x.data(), res.data(), p, 1e-6, s.rows, s.d, y.data(), h.data(),
                                   rstd.data());
    EXPECT_TRUE(same_bits(h, h_want)) << "d " << s.d;
    EXPECT_TRUE(same_bits(y, want)) << "add, d " << s.d;
  }
}

// A 16-bit x with y in float (RmsNorm's kWideOutput): casting_mode "llama"
// with a float32 weight, whose product is float32 as HF's Llama norm
// returns it: y = float(T(x * rstd)) * w, the product not rounded to T; and
// without the rounding, y = (x * rstd) * w in float. Both forms (the fused
// residual's h still in T), the weight in T or in float, at every SIMD level.
TYPED_TEST(RmsNorm, WideOutputIsTheProductInTheComputeType) {
  using T = TypeParam;
  if constexpr (sizeof(T) != 2) {
    GTEST_SKIP() << "a wide output is for 16-bit x";
  } else {
    for (const Shape& s : kShapes) {
      const std::int64_t n = s.rows * s.d;
      const auto x = random_vec<T>(n, 51 + s.d, 3.f), res = random_vec<T>(n, 52 + s.d);
      const auto w = random_vec<T>(s.d, 53 + s.d);
      std::vector<float> wc(static_cast<std::size_t>(s.d));
      for (std::int64_t j = 0; j < s.d; ++j) wc[j] = tierkit::load_compute(&w[j]) * 1.25f;  // not all in T
      std::vector<T> xhat(n), h(n), h_want(n);
      std::vector<float> want(n), y(n), rstd(s.rows), rstd_want(s.rows);
      for (std::int64_t i = 0; i < n; ++i)
        tierkit::store_compute(&h_want[i], tierkit::load_compute(&x[i]) + tierkit::load_compute(&res[i]));
      for (const bool round : {true, false}) {
        for (const bool add : {false, true}) {
          const std::vector<T>& in = add ? h_want : x;
          rms::rms_norm_forward(in.data(), static_cast<const T*>(nullptr), 1e-6, s.rows, s.d, xhat.data(),
                                rstd_want.data());
          for (std::int64_t i = 0; i < n; ++i) {
            const float rs = rstd_want[i / s.d];
            const float normalized =
                round ? tierkit::load_compute(&xhat[i]) : tierkit::load_compute(&in[i]) * rs;
            want[i] = normalized * wc[i % s.d];
          }
          k::RowParams<float> p{wc.data(), nullptr};
          p.round_normalized = round;
          std::fill(y.begin(), y.end(), -1.f);
          if (add) {
            k::row_add_forward<k::RmsNorm>(x.data(), res.data(), p, 1e-6, s.rows, s.d, y.data(), h.data(),
                                           rstd.data());
            EXPECT_TRUE(same_bits(h, h_want)) << "d " << s.d;
          } else {
            k::row_forward<k::RmsNorm>(x.data(), p, 1e-6, s.rows, s.d, y.data(), rstd.data());
          }
          EXPECT_TRUE(same_bits(y, want))
              << "d " << s.d << (round ? " llama" : " unrounded") << (add ? " add" : "");
          EXPECT_TRUE(same_bits(rstd, rstd_want)) << "d " << s.d;
        }
      }
      // A weight of x's dtype: the same products.
      k::RowParams<T> pt{w.data(), nullptr};
      pt.round_normalized = true;
      rms::rms_norm_forward(x.data(), static_cast<const T*>(nullptr), 1e-6, s.rows, s.d, xhat.data(),
                            rstd_want.data());
      for (std::int64_t i = 0; i < n; ++i)
        want[i] = tierkit::load_compute(&xhat[i]) * tierkit::load_compute(&w[i % s.d]);
      k::row_forward<k::RmsNorm>(x.data(), pt, 1e-6, s.rows, s.d, y.data(), rstd.data());
      EXPECT_TRUE(same_bits(y, want)) << "weight in T, d " << s.d;
      // The float weight inside y, in a row past y's first rows * d * 2
      // bytes (outside a span counted in x's type) that rows after it read:
      // read as it was at the call.
      if (s.rows > 0 && s.d > 0) {
        const std::int64_t at = std::min(s.rows - 1, (s.rows + 1) / 2);
        std::copy(wc.begin(), wc.end(), y.begin() + at * s.d);
        k::RowParams<float> inside{y.data() + at * s.d, nullptr};
        inside.round_normalized = true;
        for (std::int64_t i = 0; i < n; ++i) want[i] = tierkit::load_compute(&xhat[i]) * wc[i % s.d];
        k::row_forward<k::RmsNorm>(x.data(), inside, 1e-6, s.rows, s.d, y.data(), rstd.data());
        EXPECT_TRUE(same_bits(y, want)) << "weight inside y, d " << s.d;
      }
      // "llama" without a weight: x-hat as T rounds it, in float.
      k::RowParams<float> none{};
      none.round_normalized = true;
      for (std::int64_t i = 0; i < n; ++i) want[i] = tierkit::load_compute(&xhat[i]);
      k::row_forward<k::RmsNorm>(x.data(), none, 1e-6, s.rows, s.d, y.data(), rstd.data());
      EXPECT_TRUE(same_bits(y, want)) << "no weight, d " << s.d;
    }
  }
}

// Rows whose smallest |x| times rstd (times a weight just below 1) lies
// within a few percent of FLT_MIN, either side. The vector rows convert to
// bfloat16 without VCVTNEPS2BF16's subnormal check only where scaled_normal
// (row_kernels.h) proves every stored value normal; on both sides of the
// line each row gives the documented bits: plain, without a weight,
// "llama" (x-hat rounded first) and the fused residual form.
TYPED_TEST(RmsNorm, RowsAtTheSubnormalLineAreTheDocumentedBits) {
  using T = TypeParam;
  if constexpr (!std::is_same_v<T, float> && !std::is_same_v<T, BFloat16>) {
    GTEST_SKIP() << "FLT_MIN's line: float and bfloat16 only";
  } else {
    // 80: whole vectors and a tail at every level. x[r, 0] = 1024 holds
    // rstd near 1 / sqrt(1024^2 / d + eps), so the other elements, FLT_MIN /
    // rstd times f (f from 0.94 to 1.06 over the rows, and up to 4 % more
    // along one), are normal numbers with all their bits.
    const std::int64_t rows = 64, d = 80, n = rows * d;
    const double eps = 1e-6, rs = 1.0 / std::sqrt(1024.0 * 1024.0 / d + eps);
    std::vector<T> x(n), w(d), zeros(n);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t j = 0; j < d; ++j) {
        const double f = (0.94 + 0.12 * r / (rows - 1)) * (1 + 0.01 * (j % 5));
        x[r * d + j] = j == 0 ? to_t<T>(1024) : to_t<T>((j % 2 ? 1 : -1) * FLT_MIN / rs * f);
      }
    for (std::int64_t j = 0; j < d; ++j) w[j] = to_t<T>(1 - 0.004 * (j % 4));
    std::vector<T> y(n), h(n), want(n), xhat(n);
    std::vector<C<T>> rstd(rows), rstd_doc(rows);
    int subnormal = 0, just_normal = 0;
    const auto count = [&](const std::vector<T>& out) {
      for (const T& v : out) {
        const long double a = std::fabs(ld(v));
        subnormal += a > 0 && a < FLT_MIN;
        just_normal += a >= FLT_MIN && a < 1.02L * FLT_MIN;
      }
    };
    const T* const weights[] = {w.data(), nullptr};
    for (const T* wp : weights) {
      rms::rms_norm_forward(x.data(), wp, eps, rows, d, y.data(), rstd.data());
      documented_forward(x.data(), wp, eps, rows, d, want.data(), rstd_doc.data());
      EXPECT_TRUE(same_bits(y, want)) << (wp ? "weighted" : "no weight");
      count(want);
    }
    // "llama": T(T(x * rstd) * w), from the documented x-hat.
    documented_forward(x.data(), static_cast<const T*>(nullptr), eps, rows, d, xhat.data(), rstd_doc.data());
    for (std::int64_t i = 0; i < n; ++i)
      tierkit::store_compute(&want[i], tierkit::load_compute(&xhat[i]) * tierkit::load_compute(&w[i % d]));
    count(want);
    k::RowParams<T> p{w.data(), nullptr};
    p.round_normalized = true;
    k::row_forward<k::RmsNorm>(x.data(), p, eps, rows, d, y.data(), rstd.data());
    EXPECT_TRUE(same_bits(y, want)) << "llama";
    k::row_add_forward<k::RmsNorm>(x.data(), zeros.data(), p, eps, rows, d, y.data(), h.data(), rstd.data());
    EXPECT_TRUE(same_bits(y, want)) << "llama, fused residual";
    EXPECT_GT(subnormal, 0);
    EXPECT_GT(just_normal, 0);
  }
}

#ifdef TIERKIT_ROW_VEC
// The vector weights' floor the bfloat16 rows prove normal stores from
// (float_weight_floor, row_kernels.h) against the scalar definition: the
// smallest nonzero |w|, NaNs and infinities skipped, +inf if none. Special
// values (signed zeros, subnormals, infinities, NaNs of either sign) at
// every position of a vector body and its tail.
struct Lanes8 : k::detail::VecTypes<8> {
  static constexpr std::int64_t kLanes = 8;
};
struct Lanes16 : k::detail::VecTypes<16> {  // AVX-512's, where the rows call it
  static constexpr std::int64_t kLanes = 16;
};
template <typename W>
float weight_floor_of(const std::vector<float>& w) {
  return k::detail::float_weight_floor<W>(w.data(), static_cast<std::int64_t>(w.size()));
}
TEST(RmsNormWeightFloor, MatchesTheScalarDefinition) {
  const auto scalar = [](const std::vector<float>& w) {
    float m = std::numeric_limits<float>::infinity();
    for (float v : w)
      if (std::isfinite(v) && v != 0.f && std::fabs(v) < m) m = std::fabs(v);
    return m;
  };
  const float specials[] = {0.f,
                            -0.f,
                            std::numeric_limits<float>::denorm_min(),
                            -FLT_MIN / 4,
                            FLT_MIN,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            -std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::max()};
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> u(-3.f, 3.f);
  int checked = 0;
  for (std::int64_t d : {0, 1, 7, 8, 9, 23, 64, 100}) {
    for (float sp : specials)
      for (std::int64_t at = 0; at < std::max<std::int64_t>(d, 1); at += 3) {
        std::vector<float> w(d);
        for (float& v : w) v = u(gen);
        if (d > 0) w[at] = sp;
        const float want = scalar(w), got = weight_floor_of<Lanes8>(w), got16 = weight_floor_of<Lanes16>(w);
        EXPECT_EQ(std::memcmp(&want, &got16, sizeof(float)), 0) << "16 lanes, d " << d << " at " << at;
        EXPECT_EQ(std::memcmp(&want, &got, sizeof(float)), 0)
            << "d " << d << " at " << at << " special " << sp;
        ++checked;
      }
    // Only zeros and NaNs, or zeros and infinities: no floor; then one
    // subnormal among them, anywhere: the floor.
    for (int kind = 0; kind < 2; ++kind) {
      std::vector<float> none(d);
      for (std::int64_t j = 0; j < d; ++j) none[j] = specials[j % 2 ? j % 4 / 2 : 5 + 2 * kind + j % 4 / 2];
      EXPECT_EQ(weight_floor_of<Lanes16>(none), std::numeric_limits<float>::infinity());
      EXPECT_EQ(weight_floor_of<Lanes8>(none), std::numeric_limits<float>::infinity())
          << "d " << d << (kind ? ", NaNs" : ", infinities");
      for (std::int64_t at = 0; at < d; ++at) {
        std::vector<float> one = none;
        one[at] = -specials[2];
        EXPECT_EQ(weight_floor_of<Lanes16>(one), specials[2]) << "16 lanes, d " << d << " at " << at;
        EXPECT_EQ(weight_floor_of<Lanes8>(one), specials[2]) << "d " << d << " at " << at;
      }
    }
  }
  EXPECT_GT(checked, 300);
}
#endif  // TIERKIT_ROW_VEC

TYPED_TEST(RmsNorm, InPlaceForward) {
  using T = TypeParam;
  const std::int64_t rows = 4, d = 100;
  auto x = random_vec<T>(rows * d, 18);
  const auto w = random_vec<T>(d, 19);
  std::vector<T> y(x.size());
  std::vector<C<T>> rstd(rows);
  rms::rms_norm_forward(x.data(), w.data(), 1e-6, rows, d, y.data(), rstd.data());
  rms::rms_norm_forward(x.data(), w.data(), 1e-6, rows, d, x.data(), rstd.data());
  EXPECT_TRUE(same_bits(x, y));
}

// A weight that lies in an output is read as it was at the call
// (add_rms_norm_(x, r, r[0]); the bridge's out= with weight = out[0]): the
// same bits as with a separate copy of it, for every row, whatever the Runner.
TYPED_TEST(RmsNorm, WeightInsideAnOutputIsReadAsCalled) {
  using T = TypeParam;
  const std::int64_t rows = 37, d = 33, n = rows * d;
  const auto x = random_vec<T>(n, 40);
  const auto res = random_vec<T>(n, 41, 3.f);
  const auto dy = random_vec<T>(n, 42);
  for (std::int64_t wrow : {std::int64_t{0}, rows / 2, rows - 1}) {
    // add_rms_norm_: h written into residual, the weight residual's row wrow.
    std::vector<T> inplace = res, y(n), y_ref(n), h_ref(n);
    const std::vector<T> w(res.begin() + wrow * d, res.begin() + (wrow + 1) * d);
    std::vector<C<T>> rstd(rows), rstd_ref(rows);
    rms::add_rms_norm_forward(x.data(), res.data(), w.data(), 1e-6, rows, d, y_ref.data(), h_ref.data(),
                              rstd_ref.data());
    for (std::int64_t chunk : {std::int64_t{1}, std::int64_t{5}, rows}) {
      inplace = res;
      rms::add_rms_norm_forward(x.data(), inplace.data(), inplace.data() + wrow * d, 1e-6, rows, d, y.data(),
                                inplace.data(), rstd.data(), ReverseChunkRunner{chunk});
      EXPECT_TRUE(same_bits(y, y_ref)) << "row " << wrow << " chunk " << chunk;
      EXPECT_TRUE(same_bits(inplace, h_ref)) << "row " << wrow << " chunk " << chunk;
    }
    // rms_norm with y = x (the bridge's out=x) and the weight x's row wrow.
    std::vector<T> xy = x;
    const std::vector<T> wx(x.begin() + wrow * d, x.begin() + (wrow + 1) * d);
    rms::rms_norm_forward(x.data(), wx.data(), 1e-6, rows, d, y_ref.data(), rstd_ref.data());
    rms::rms_norm_forward(xy.data(), xy.data() + wrow * d, 1e-6, rows, d, xy.data(), rstd.data(),
                          ReverseChunkRunner{3});
    EXPECT_TRUE(same_bits(xy, y_ref)) << "row " << wrow;
    // rms_norm into y with the weight y's row wrow (out=out, weight=out[0]).
    std::vector<T> yw(n);
    std::copy(wx.begin(), wx.end(), yw.begin() + wrow * d);
    rms::rms_norm_forward(x.data(), yw.data() + wrow * d, 1e-6, rows, d, yw.data(), rstd.data(),
                          ReverseChunkRunner{2});
    EXPECT_TRUE(same_bits(yw, y_ref)) << "row " << wrow;
    // backward with dx = dy in place and the weight dy's row wrow.
    const std::vector<T> wg(dy.begin() + wrow * d, dy.begin() + (wrow + 1) * d);
    std::vector<T> dx_ref(n), dxy = dy;
    std::vector<C<T>> dw_ref(d), dw(d);
    rms::rms_norm_backward(dy.data(), x.data(), wg.data(), rstd_ref.data(), rows, d, dx_ref.data(),
                           dw_ref.data());
    rms::rms_norm_backward(dxy.data(), x.data(), dxy.data() + wrow * d, rstd_ref.data(), rows, d, dxy.data(),
                           dw.data(), ReverseChunkRunner{4});
    EXPECT_TRUE(same_bits(dxy, dx_ref)) << "row " << wrow;
    EXPECT_TRUE(same_bits(dw, dw_ref)) << "row " << wrow;
  }
}

}  // namespace

// NaNs of different payloads meeting in a row (row_nan_payloads.h, issue 51
// item 8): the documented rule at this run's level.
TYPED_TEST(RmsNorm, NanPayloadsFollowTheDocumentedRule) {
  row_nan_payloads::expect_the_documented_rule<k::RmsNorm, TypeParam>(1);
}
