// LayerNorm row kernels (tierkit/row_functors.h through row_kernels.h's
// loops): forward, backward (dx, dw, db) and the fused residual form against
// long double references, the edge cases, and determinism across thread
// counts and Runner chunkings. The LayerNorm* tests run again with
// TIERKIT_SIMD=avx2 and =baseline (CMakeLists.txt): every SIMD copy, the
// vector rows of float and the 16-bit types included, gives the same bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <type_traits>
#include <vector>

#include "row_nan_payloads.h"
#include "row_test_support.h"
#include "tierkit/row_functors.h"

using tierkit::BFloat16;
using tierkit::compute_t;
using tierkit::Half;
namespace k = tierkit::kernels;

namespace {

using namespace row_test_support;

template <typename T>
long double eps_of() {
  if constexpr (std::is_same_v<T, Half>) return 1.0L / 1024;
  if constexpr (std::is_same_v<T, BFloat16>) return 1.0L / 128;
  if constexpr (std::is_floating_point_v<T>) return std::numeric_limits<T>::epsilon();
  return 0;
}
// Values around `mean`: a mean offset of 3 (against a spread of 1) makes a
// one-pass variance lose digits.
template <typename T>
std::vector<T> shifted(std::size_t n, std::uint32_t seed, float mean, float scale = 1.f) {
  return random_vec<T>(n, seed, scale, mean);
}

struct Ref {
  std::vector<long double> y, mean, rstd, dx, dw, db;
};
template <typename T>
Ref reference(const std::vector<T>& x, const std::vector<T>& dy, const T* w, const T* b, double eps,
              std::int64_t rows, std::int64_t d) {
  Ref r;
  r.y.resize(x.size());
  r.dx.resize(x.size());
  r.dw.assign(d, 0);
  r.db.assign(d, 0);
  const long double e = static_cast<long double>(static_cast<C<T>>(eps));
  for (std::int64_t i = 0; i < rows; ++i) {
    long double m = 0, v = 0;
    for (std::int64_t j = 0; j < d; ++j) m += ld(x[i * d + j]);
    m /= d;
    for (std::int64_t j = 0; j < d; ++j) v += (ld(x[i * d + j]) - m) * (ld(x[i * d + j]) - m);
    const long double rs = 1.0L / std::sqrt(v / d + e);
    r.mean.push_back(m);
    r.rstd.push_back(rs);
    long double a = 0, c = 0;
    for (std::int64_t j = 0; j < d; ++j) {
      const long double xh = (ld(x[i * d + j]) - m) * rs, g = ld(dy[i * d + j]) * (w ? ld(w[j]) : 1.0L);
      r.y[i * d + j] = xh * (w ? ld(w[j]) : 1.0L) + (b ? ld(b[j]) : 0.0L);
      a += g;
      c += g * xh;
      r.dw[j] += ld(dy[i * d + j]) * xh;
      r.db[j] += ld(dy[i * d + j]);
    }
    for (std::int64_t j = 0; j < d; ++j) {
      const long double xh = (ld(x[i * d + j]) - m) * rs, g = ld(dy[i * d + j]) * (w ? ld(w[j]) : 1.0L);
      r.dx[i * d + j] = (g - a / d - xh * c / d) * rs;
    }
  }
  return r;
}

template <typename T>
class LayerNorm : public ::testing::Test {};
using Types = ::testing::Types<float, double, Half, BFloat16>;
TYPED_TEST_SUITE(LayerNorm, Types);

const Shape kShapes[] = {{5, 33}, {3, 4097}, {7, 2}, {8, 300}, {70, 16}, {600, 64}, {9, 15}, {2, 1024}};

// Within `ulps` of T's epsilon times `scale` (the size of the terms the
// value is computed from), plus one rounding to T of the value itself.
template <typename T>
bool close(long double got, long double want, long double scale, long double ulps) {
  return std::fabs(got - want) <= eps_of<T>() * std::fabs(want) + ulps * eps_c<T>() * scale;
}

TYPED_TEST(LayerNorm, ForwardAndBackwardMatchReference) {
  using T = TypeParam;
  for (const Shape& s : kShapes) {
    for (int params = 0; params < 4; ++params) {
      const bool with_w = params & 1, with_b = params & 2;
      const std::int64_t rows = s.rows, d = s.d;
      const auto x = shifted<T>(rows * d, 1 + d, 3.f);
      const auto dy = random_vec<T>(rows * d, 2 + d);
      const auto w = shifted<T>(d, 3 + d, 1.f, 0.5f);
      const auto bias = random_vec<T>(d, 4 + d);
      const T* wp = with_w ? w.data() : nullptr;
      const T* bp = with_b ? bias.data() : nullptr;
      std::vector<T> y(x.size()), dx(x.size());
      std::vector<C<T>> stats(2 * rows), dw(d), db(d);
      k::row_forward<k::LayerNorm>(x.data(), k::RowParams<T>{wp, bp}, 1e-5, rows, d, y.data(), stats.data());
      k::row_backward<k::LayerNorm>(dy.data(), x.data(), k::RowParams<T>{wp, bp}, stats.data(), rows, d,
                                    dx.data(), with_w ? dw.data() : nullptr, with_b ? db.data() : nullptr);
      const Ref ref = reference(x, dy, wp, bp, 1e-5, rows, d);
      for (std::int64_t i = 0; i < rows; ++i) {
        EXPECT_LE(std::fabs(stats[2 * i] - ref.mean[i]), 8 * eps_c<T>() * 4)
            << "mean, row " << i << " d " << d;
        EXPECT_LE(std::fabs(stats[2 * i + 1] - ref.rstd[i]), 16 * eps_c<T>() * ref.rstd[i])
            << "rstd, d " << d;
      }
      for (std::size_t i = 0; i < y.size(); ++i) {
        const long double scale = 8 * (1 + std::fabs(ref.y[i]));
        ASSERT_TRUE(close<T>(ld(y[i]), ref.y[i], scale, 8))
            << "y " << i << " d " << d << " params " << params << ": " << ld(y[i]) << " vs " << ref.y[i];
        ASSERT_TRUE(close<T>(ld(dx[i]), ref.dx[i], 64, 16))
            << "dx " << i << " d " << d << " params " << params << ": " << ld(dx[i]) << " vs " << ref.dx[i];
      }
      for (std::int64_t j = 0; j < d; ++j) {
        const long double scale = 8 * std::sqrt(static_cast<long double>(rows)) * 4;
        if (with_w) {
          ASSERT_TRUE(close<T>(dw[j], ref.dw[j], scale, 16)) << "dw " << j << " d " << d;
        }
        if (with_b) {
          ASSERT_TRUE(close<T>(db[j], ref.db[j], scale, 16)) << "db " << j << " d " << d;
        }
      }
    }
  }
}

// The moments are taken about the mean of a row's first 64 elements, in one
// pass, unless that point lies too far from the row's mean; then a second
// pass about the mean found. Rows of each kind, in each dtype: the
// reference's accuracy, and the scalar rows' bits at this run's level.
TYPED_TEST(LayerNorm, RowsWhoseFirstElementsAreNotTypicalKeepTheirAccuracy) {
  using T = TypeParam;
  using Scalar = k::LayerNorm::Rows<T>;
  for (const std::int64_t d : {300, 4097}) {
    const std::int64_t rows = 4;
    std::vector<T> x = random_vec<T>(rows * d, 30 + d, 1.f, 3.f);                 // row 0: typical, one pass
    for (std::int64_t j = 0; j < 64; ++j) x[d + j] = to_t<T>(ld(x[d + j]) + 40);  // row 1: first 64 apart
    x[2 * d] = to_t<T>(200.L);                                                    // row 2: one outlier first
    const auto far = random_vec<T>(d, 31 + d, 0.5f, 1000.f);                      // row 3: |mean| >> std
    std::copy(far.begin(), far.end(), x.begin() + 3 * d);
    const auto dy = random_vec<T>(rows * d, 32 + d);
    const Ref ref = reference<T>(x, dy, nullptr, nullptr, 1e-5, rows, d);
    // Row 1 is the second pass's: its first 64 elements' mean lies further
    // than std / sqrt(8) from the row's (the bound in moments). Row 2 is too
    // where the outlier is most of the row's variance (d 4097), not at 300.
    const auto apart = [&](std::int64_t i) {
      long double k0 = 0;
      for (std::int64_t j = 0; j < 64; ++j) k0 += ld(x[i * d + j]);
      const long double off = k0 / 64 - ref.mean[i];
      return off * off * ref.rstd[i] * ref.rstd[i] > 1.0L / 8;
    };
    EXPECT_TRUE(apart(1)) << "d " << d;
    EXPECT_EQ(apart(2), d == 4097) << "d " << d;
    std::vector<T> y(x.size()), y_s(x.size());
    std::vector<C<T>> st(2 * rows), st_s(2 * rows);
    k::row_forward<k::LayerNorm>(x.data(), k::RowParams<T>{}, 1e-5, rows, d, y.data(), st.data(),
                                 k::PoolRunner{1});
    Scalar::forward(x.data(), k::RowParams<C<T>>{}, static_cast<C<T>>(1e-5), d, 0, rows, y_s.data(),
                    st_s.data());
    EXPECT_EQ(as_bits(y), as_bits(y_s)) << "d " << d;
    EXPECT_EQ(as_bits(st), as_bits(st_s)) << "d " << d;
    for (std::int64_t i = 0; i < rows; ++i) {
      EXPECT_LE(std::fabs(st[2 * i] - ref.mean[i]), 16 * eps_c<T>() * (std::fabs(ref.mean[i]) + 1))
          << "mean, row " << i << " d " << d;
      EXPECT_LE(std::fabs(st[2 * i + 1] - ref.rstd[i]), 16 * eps_c<T>() * ref.rstd[i])
          << "rstd, row " << i << " d " << d;
      for (std::int64_t j = 0; j < d; ++j) {
        const std::size_t e = static_cast<std::size_t>(i * d + j);
        // mean's own rounding to C, times rstd, is in y: row 3's most.
        const long double scale = 8 * (1 + std::fabs(ref.y[e]) + std::fabs(ref.mean[i]) * ref.rstd[i]);
        ASSERT_TRUE(close<T>(ld(y[e]), ref.y[e], scale, 8))
            << "y, row " << i << " col " << j << " d " << d << ": " << ld(y[e]) << " vs " << ref.y[e];
      }
    }
  }
}

template <typename T, typename Runner>
std::vector<std::vector<std::uint64_t>> all_outputs(std::int64_t rows, std::int64_t d, const Runner& run) {
  const auto x = shifted<T>(rows * d, 8, 2.f), dy = random_vec<T>(rows * d, 9),
             res = random_vec<T>(rows * d, 10);
  const auto w = random_vec<T>(d, 11), b = random_vec<T>(d, 12);
  const k::RowParams<T> p{w.data(), b.data()};
  std::vector<T> y(x.size()), dx(x.size()), y2(x.size()), h(x.size());
  std::vector<C<T>> stats(2 * rows), stats2(2 * rows), dw(d), db(d);
  k::row_forward<k::LayerNorm>(x.data(), p, 1e-5, rows, d, y.data(), stats.data(), run);
  k::row_backward<k::LayerNorm>(dy.data(), x.data(), p, stats.data(), rows, d, dx.data(), dw.data(),
                                db.data(), run);
  k::row_add_forward<k::LayerNorm>(x.data(), res.data(), p, 1e-5, rows, d, y2.data(), h.data(), stats2.data(),
                                   run);
  return {as_bits(y),  as_bits(stats), as_bits(dx), as_bits(dw),
          as_bits(db), as_bits(y2),    as_bits(h),  as_bits(stats2)};
}

TYPED_TEST(LayerNorm, BitIdenticalForAnyRunner) {
  using T = TypeParam;
  expect_same_bits_for_any_runner([](auto... args) { return all_outputs<T>(args...); });
}

// Whatever copy the CPU's level dispatches to (AVX-512, AVX2: the vector
// rows), its bits are the plain scalar rows', called directly here.
TYPED_TEST(LayerNorm, EverySimdCopyGivesTheScalarRowsBits) {
  using T = TypeParam;
  using Scalar = k::LayerNorm::Rows<T>;
  for (const Shape& s : kShapes) {
    const std::int64_t rows = s.rows, d = s.d;
    const auto x = shifted<T>(rows * d, 21 + d, 3.f), dy = random_vec<T>(rows * d, 22 + d);
    const auto w = random_vec<T>(d, 23), b = random_vec<T>(d, 24);
    for (int params = 0; params < 4; ++params) {
      const k::RowParams<T> p{params & 1 ? w.data() : nullptr, params & 2 ? b.data() : nullptr};
      const Widened<T> pc(p, d);
      std::vector<T> y(x.size()), y_s(x.size()), dx(x.size()), dx_s(x.size());
      std::vector<C<T>> st(2 * rows), st_s(2 * rows), dw(d), dw_s(d, 0), db(d), db_s(d, 0);
      k::row_forward<k::LayerNorm>(x.data(), p, 1e-5, rows, d, y.data(), st.data(), k::PoolRunner{1});
      Scalar::forward(x.data(), pc.p, static_cast<C<T>>(1e-5), d, 0, rows, y_s.data(), st_s.data());
      EXPECT_EQ(as_bits(y), as_bits(y_s)) << "d " << d << " params " << params;
      EXPECT_EQ(as_bits(st), as_bits(st_s)) << "d " << d;
      // One block of rows (rows <= 8), so dw and db are the rows' sums in order.
      if (rows > 8) continue;
      k::row_backward<k::LayerNorm>(dy.data(), x.data(), p, st.data(), rows, d, dx.data(), dw.data(),
                                    db.data(), k::PoolRunner{1});
      Scalar::backward(dy.data(), x.data(), pc.p, st_s.data(), d, 0, rows, dx_s.data(), dw_s.data(),
                       db_s.data());
      // The same call with the parameters in the compute type (a mixed call): the same bits.
      if (!std::is_same_v<T, C<T>>) {
        std::vector<T> y_c(x.size()), dx_c(x.size());
        std::vector<C<T>> st_c(2 * rows), dw_c(d), db_c(d);
        k::row_forward<k::LayerNorm>(x.data(), pc.p, 1e-5, rows, d, y_c.data(), st_c.data(),
                                     k::PoolRunner{1});
        k::row_backward<k::LayerNorm>(dy.data(), x.data(), pc.p, st.data(), rows, d, dx_c.data(), dw_c.data(),
                                      db_c.data(), k::PoolRunner{1});
        EXPECT_EQ(as_bits(y_c), as_bits(y)) << "compute-typed params, d " << d << " params " << params;
        EXPECT_EQ(as_bits(dx_c), as_bits(dx)) << "compute-typed params, d " << d << " params " << params;
        EXPECT_EQ(as_bits(dw_c), as_bits(dw)) << "compute-typed params, d " << d;
        EXPECT_EQ(as_bits(db_c), as_bits(db)) << "compute-typed params, d " << d;
      }
      EXPECT_EQ(as_bits(dx), as_bits(dx_s)) << "d " << d << " params " << params;
      EXPECT_EQ(as_bits(dw), as_bits(dw_s)) << "d " << d;
      EXPECT_EQ(as_bits(db), as_bits(db_s)) << "d " << d;
    }
  }
}

// Outputs of whole 64-byte rows on 64-byte boundaries, as the vector rows
// write float and 16-bit outputs, y and dx (the 16-bit ones through a stack
// row, a line at a time) with non-temporal stores where
// TIERKIT_STREAMING_STORES=on (the RowKinds.streaming_stores CTest entries;
// beyond the cache otherwise): the bits of the scalar rows, every dtype and
// every form (RMSNorm's in test_rms_norm.cpp), on a line and off it
// (kStreamedShapes; dx off its line stores plainly).
TYPED_TEST(LayerNorm, StreamedRowsGiveTheScalarRowsBits) {
  using T = TypeParam;
  for (const auto& [s, off] : kStreamedShapes) {
    SCOPED_TRACE(testing::Message() << "outputs " << off << " bytes past a line");
    const std::int64_t rows = s.rows, d = s.d;
    const std::size_t n = static_cast<std::size_t>(rows * d);
    const auto x = shifted<T>(n, 31 + d, 2.f), r = random_vec<T>(n, 32 + d), g = random_vec<T>(n, 33 + d);
    const auto w = shifted<T>(d, 34, 1.f, 0.5f), b = random_vec<T>(d, 35);
    const std::vector<T> zeros(n);
    Aligned64<T> y(zeros, off), h(zeros, off), dx(zeros, off);
    expect_rows_stream_where_asked(y.p, rows, d);
    std::vector<T> y_s(n), h_s(n), dx_s(n);
    std::vector<C<T>> st(2 * rows), st_s(2 * rows), dw(d), dw_s(d, 0), db(d), db_s(d, 0);
    // LayerNorm: forward, the residual form, backward with every gradient.
    const k::RowParams<T> p{w.data(), b.data()};
    const Widened<T> pc(p, d);
    k::row_forward<k::LayerNorm>(x.data(), p, 1e-5, rows, d, y.p, st.data(), k::PoolRunner{1});
    k::LayerNorm::Rows<T>::forward(x.data(), pc.p, 1e-5, d, 0, rows, y_s.data(), st_s.data());
    EXPECT_EQ(as_bits(y.vec(n)), as_bits(y_s)) << "layer_norm d " << d;
    k::row_add_forward<k::LayerNorm>(x.data(), r.data(), p, 1e-5, rows, d, y.p, h.p, st.data(),
                                     k::PoolRunner{1});
    k::LayerNorm::Rows<T>::add_forward(x.data(), r.data(), pc.p, 1e-5, d, 0, rows, y_s.data(), h_s.data(),
                                       st_s.data());
    EXPECT_EQ(as_bits(y.vec(n)), as_bits(y_s)) << "add_layer_norm d " << d;
    EXPECT_EQ(as_bits(h.vec(n)), as_bits(h_s)) << "add_layer_norm h, d " << d;
    k::row_backward<k::LayerNorm>(g.data(), x.data(), p, st.data(), rows, d, dx.p, dw.data(), db.data(),
                                  k::PoolRunner{1});
    k::LayerNorm::Rows<T>::backward(g.data(), x.data(), pc.p, st_s.data(), d, 0, rows, dx_s.data(),
                                    dw_s.data(), db_s.data());
    EXPECT_EQ(as_bits(dx.vec(n)), as_bits(dx_s)) << "layer_norm dx, d " << d;
    EXPECT_EQ(as_bits(dw), as_bits(dw_s)) << "layer_norm dw, d " << d;
    EXPECT_EQ(as_bits(db), as_bits(db_s)) << "layer_norm db, d " << d;
  }
}

// The fused form is x + residual rounded to T, then the forward on it; h may be residual itself.
TYPED_TEST(LayerNorm, AddForwardIsTheSumThenTheForward) {
  using T = TypeParam;
  for (const Shape& s : kShapes) {
    const std::int64_t n = s.rows * s.d;
    const auto x = random_vec<T>(n, 13 + s.d), res = shifted<T>(n, 14 + s.d, 1.f, 3.f);
    const auto w = random_vec<T>(s.d, 15), b = random_vec<T>(s.d, 16);
    const k::RowParams<T> p{w.data(), b.data()};
    std::vector<T> h(n), y(n), y_ref(n), h_ref(n), res_in_place = res;
    std::vector<C<T>> st(2 * s.rows), st_ref(2 * s.rows), st2(2 * s.rows);
    for (std::int64_t i = 0; i < n; ++i) tierkit::store_compute(&h_ref[i], ld(x[i]) + ld(res[i]) + 0.0L);
    for (std::int64_t i = 0; i < n; ++i)
      tierkit::store_compute(&h_ref[i], tierkit::load_compute(&x[i]) + tierkit::load_compute(&res[i]));
    k::row_forward<k::LayerNorm>(h_ref.data(), p, 1e-5, s.rows, s.d, y_ref.data(), st_ref.data());
    k::row_add_forward<k::LayerNorm>(x.data(), res.data(), p, 1e-5, s.rows, s.d, y.data(), h.data(),
                                     st.data());
    EXPECT_EQ(as_bits(h), as_bits(h_ref));
    EXPECT_EQ(as_bits(y), as_bits(y_ref));
    EXPECT_EQ(as_bits(st), as_bits(st_ref));
    std::vector<T> y2(n);
    k::row_add_forward<k::LayerNorm>(x.data(), res_in_place.data(), p, 1e-5, s.rows, s.d, y2.data(),
                                     res_in_place.data(), st2.data());
    EXPECT_EQ(as_bits(res_in_place), as_bits(h_ref));
    EXPECT_EQ(as_bits(y2), as_bits(y_ref));
  }
}

// y may be x itself; a weight inside an output is read as it was at the call.
TYPED_TEST(LayerNorm, InPlaceAndParametersInsideOutputs) {
  using T = TypeParam;
  const std::int64_t rows = 6, d = 40;
  const auto x = random_vec<T>(rows * d, 17), w = random_vec<T>(d, 18), b = random_vec<T>(d, 19);
  std::vector<T> y(rows * d), inplace = x;
  std::vector<C<T>> st(2 * rows), st2(2 * rows);
  k::row_forward<k::LayerNorm>(x.data(), k::RowParams<T>{w.data(), b.data()}, 1e-5, rows, d, y.data(),
                               st.data());
  k::row_forward<k::LayerNorm>(inplace.data(), k::RowParams<T>{w.data(), b.data()}, 1e-5, rows, d,
                               inplace.data(), st2.data());
  EXPECT_EQ(as_bits(inplace), as_bits(y));
  // The weight and bias are rows 2 and 3 of the output itself.
  std::vector<T> out = x, x_copy = x;
  std::copy(w.begin(), w.end(), out.begin() + 2 * d);
  std::copy(b.begin(), b.end(), out.begin() + 3 * d);
  std::vector<T> expect(rows * d);
  k::row_forward<k::LayerNorm>(x_copy.data(), k::RowParams<T>{w.data(), b.data()}, 1e-5, rows, d,
                               expect.data(), st.data());
  k::row_forward<k::LayerNorm>(x_copy.data(), k::RowParams<T>{out.data() + 2 * d, out.data() + 3 * d}, 1e-5,
                               rows, d, out.data(), st2.data(), k::PoolRunner{2});
  EXPECT_EQ(as_bits(out), as_bits(expect));
}

TYPED_TEST(LayerNorm, EmptyShapesAndConstantRows) {
  using T = TypeParam;
  std::vector<T> none;
  std::vector<C<T>> st(4, C<T>(7));
  k::row_forward<k::LayerNorm>(none.data(), k::RowParams<T>{}, 1e-5, 0, 8, none.data(), st.data());
  EXPECT_EQ(st[0], C<T>(7));  // no rows: nothing written
  // A constant row: mean is the constant, var 0, y = b exactly.
  const std::int64_t d = 300;
  std::vector<T> x(d, to_t<T>(2.5L)), y(d);
  const auto b = random_vec<T>(d, 20);
  k::row_forward<k::LayerNorm>(x.data(), k::RowParams<T>{nullptr, b.data()}, 1e-5, 1, d, y.data(), st.data());
  EXPECT_EQ(st[0], C<T>(2.5));
  EXPECT_EQ(as_bits(y), as_bits(b));
}

}  // namespace

// NaNs of different payloads meeting in a row (row_nan_payloads.h, issue 51
// item 8): the documented rule at this run's level.
TYPED_TEST(LayerNorm, NanPayloadsFollowTheDocumentedRule) {
  row_nan_payloads::expect_the_documented_rule<k::LayerNorm, TypeParam>(2);
}
