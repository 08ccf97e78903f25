// Core's rotary row map against a long-double evaluation of its formula:
// both layouts (NeoX halves, GPT-J pairs), tables broadcast over leading
// dims, partial width, the transpose as the map's adjoint (<R x, g> = <x,
// R^T g>), every dtype, the same bits for any thread count, and the
// vectorized loops' bits against the scalar formula's, in place or not.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "tierkit/map_functors.h"

namespace {

using tierkit::kernels::Rotary;
using tierkit::kernels::RowTables;

struct Case {
  std::int64_t b = 3, s = 5, d = 16, r = 12;  // x [b, s, d], tables [1, s, r] (broadcast over b)
};

// Rows on 64-byte boundaries (with d's bytes a multiple of 64), as the
// streamed rows need (row_streams; TIERKIT_STREAMING_STORES=on in CTest).
template <typename T>
struct Aligned64 {
  using value_type = T;
  Aligned64() = default;
  template <typename U>
  Aligned64(const Aligned64<U>&) {}
  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{64})); }
  void deallocate(T* p, std::size_t) { ::operator delete(p, std::align_val_t{64}); }
  template <typename U>
  bool operator==(const Aligned64<U>&) const {
    return true;
  }
  template <typename U>
  bool operator!=(const Aligned64<U>&) const {
    return false;
  }
};
template <typename T>
using Rows = std::vector<T, Aligned64<T>>;

template <typename T>
Rows<T> random_of(std::size_t n, std::mt19937& g) {
  std::normal_distribution<double> dist(0.0, 1.0);
  Rows<T> v(n);
  for (auto& e : v) tierkit::store_compute(&e, static_cast<tierkit::compute_t<T>>(dist(g)));
  return v;
}

RowTables<2> layout(const Case& c) {
  RowTables<2> t;
  t.rank = 2;
  t.shape[0] = c.b;
  t.shape[1] = c.s;
  for (int k = 0; k < 2; ++k) {
    t.strides[k][0] = 0;  // broadcast over b
    t.strides[k][1] = c.r;
  }
  return t;
}

template <typename T>
long double at(const Rows<T>& v, std::int64_t i) {
  return static_cast<long double>(tierkit::load_compute(&v[static_cast<std::size_t>(i)]));
}

template <typename T>
void check_forward(bool interleaved, int threads) {
  const Case c;
  std::mt19937 g(7);
  auto x = random_of<T>(c.b * c.s * c.d, g);
  auto cs = random_of<T>(c.s * c.r, g), sn = random_of<T>(c.s * c.r, g);
  Rows<T> y(x.size());
  const T* tables[2] = {cs.data(), sn.data()};
  tierkit::kernels::row_map<Rotary>(x.data(), tables, layout(c), c.b * c.s, c.d, c.r, interleaved, false,
                                    y.data(), tierkit::kernels::PoolRunner{static_cast<unsigned>(threads)});
  const double ulp = std::is_same_v<T, double> ? 1e-15 : std::is_same_v<T, float> ? 1e-6 : 1e-2;
  const std::int64_t h = c.r / 2;
  for (std::int64_t row = 0; row < c.b * c.s; ++row) {
    const std::int64_t t = (row % c.s) * c.r, o = row * c.d;
    for (std::int64_t j = 0; j < c.d; ++j) {
      long double want;
      if (j >= c.r) {
        want = at(x, o + j);
      } else {
        const std::int64_t partner = interleaved ? (j % 2 ? j - 1 : j + 1) : (j < h ? j + h : j - h);
        const long double sign = interleaved ? (j % 2 ? 1 : -1) : (j < h ? -1 : 1);
        want = at(x, o + j) * at(cs, t + j) + sign * at(x, o + partner) * at(sn, t + j);
      }
      EXPECT_NEAR(static_cast<double>(at(y, o + j)), static_cast<double>(want), ulp * 8) << row << "," << j;
    }
  }
}

TEST(Rotary, NeoxHalvesAndGptjPairsEveryDtypeAnyThreads) {
  for (bool inter : {false, true})
    for (int threads : {1, 2}) {
      check_forward<float>(inter, threads);
      check_forward<double>(inter, threads);
      check_forward<tierkit::Half>(inter, threads);
      check_forward<tierkit::BFloat16>(inter, threads);
    }
}

TEST(Rotary, TransposeIsTheAdjoint) {
  const Case c;
  std::mt19937 g(3);
  for (bool inter : {false, true}) {
    auto x = random_of<double>(c.b * c.s * c.d, g), gr = random_of<double>(c.b * c.s * c.d, g);
    auto cs = random_of<double>(c.s * c.r, g), sn = random_of<double>(c.s * c.r, g);
    Rows<double> rx(x.size()), rtg(x.size());
    const double* tables[2] = {cs.data(), sn.data()};
    tierkit::kernels::row_map<Rotary>(x.data(), tables, layout(c), c.b * c.s, c.d, c.r, inter, false,
                                      rx.data());
    tierkit::kernels::row_map<Rotary>(gr.data(), tables, layout(c), c.b * c.s, c.d, c.r, inter, true,
                                      rtg.data());
    long double lhs = 0, rhs = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      lhs += static_cast<long double>(rx[i]) * gr[i];
      rhs += static_cast<long double>(x[i]) * rtg[i];
    }
    EXPECT_NEAR(static_cast<double>(lhs), static_cast<double>(rhs), 1e-12);
  }
}

// The vectorized pair loops give the scalar formula's bits (each element's
// products and sum in the compute type, rounded once to T), written over x
// (y == x) as into a separate y: head widths with and without a vector tail
// at 8 and 16 lanes, and rows of 64-byte multiples (streamed when the
// suite runs with TIERKIT_STREAMING_STORES=on).
template <typename T>
void check_scalar_bits(bool interleaved, bool transpose, std::int64_t d, std::int64_t r) {
  using C = tierkit::compute_t<T>;
  Case c;
  c.d = d;
  c.r = r;
  std::mt19937 g(11);
  auto x = random_of<T>(c.b * c.s * c.d, g);
  auto cs = random_of<T>(c.s * c.r, g), sn = random_of<T>(c.s * c.r, g);
  Rows<T> want(x.size());
  const std::int64_t h = r / 2;
  for (std::int64_t row = 0; row < c.b * c.s; ++row) {
    const T *xr = x.data() + row * d, *cr = cs.data() + (row % c.s) * r, *sr = sn.data() + (row % c.s) * r;
    T* wr = want.data() + row * d;
    for (std::int64_t j = r; j < d; ++j) wr[j] = xr[j];
    for (std::int64_t i = 0; i < h; ++i) {
      const std::int64_t ia = interleaved ? 2 * i : i, ib = interleaved ? 2 * i + 1 : i + h;
      const C a = tierkit::load_compute(xr + ia), b = tierkit::load_compute(xr + ib);
      const C ca = tierkit::load_compute(cr + ia), cb = tierkit::load_compute(cr + ib);
      const C sa = tierkit::load_compute(sr + ia), sb = tierkit::load_compute(sr + ib);
      tierkit::store_compute(wr + ia, transpose ? C(a * ca + b * sb) : C(a * ca - b * sa));
      tierkit::store_compute(wr + ib, transpose ? C(b * cb - a * sa) : C(b * cb + a * sb));
    }
  }
  const T* tables[2] = {cs.data(), sn.data()};
  Rows<T> y(x.size());
  tierkit::kernels::row_map<Rotary>(x.data(), tables, layout(c), c.b * c.s, d, r, interleaved, transpose,
                                    y.data());
  const auto what = [&] {
    return ::testing::Message() << "d " << d << " r " << r << " interleaved " << interleaved << " transpose "
                                << transpose << " element bytes " << sizeof(T);
  };
  EXPECT_EQ(0, std::memcmp(y.data(), want.data(), y.size() * sizeof(T))) << what();
  tierkit::kernels::row_map<Rotary>(x.data(), tables, layout(c), c.b * c.s, d, r, interleaved, transpose,
                                    x.data());
  EXPECT_EQ(0, std::memcmp(x.data(), want.data(), x.size() * sizeof(T))) << what() << " in place";
}

TEST(Rotary, VectorLoopsGiveTheScalarBitsInPlaceOrNot) {
  for (bool inter : {false, true})
    for (bool transpose : {false, true})
      for (auto [d, r] : {std::pair<std::int64_t, std::int64_t>{136, 128},
                          {80, 14},
                          {64, 64},
                          {200, 180},
                          {192, 96},
                          {128, 128}}) {
        check_scalar_bits<float>(inter, transpose, d, r);
        check_scalar_bits<double>(inter, transpose, d, r);
        check_scalar_bits<tierkit::Half>(inter, transpose, d, r);
        check_scalar_bits<tierkit::BFloat16>(inter, transpose, d, r);
      }
}

TEST(Rotary, RefusesAnOddOrTooWideWidth) {
  std::vector<float> x(8), y(8), t(8);
  const float* tables[2] = {t.data(), t.data()};
  RowTables<2> l;
  EXPECT_THROW(tierkit::kernels::row_map<Rotary>(x.data(), tables, l, 1, 8, 3, false, false, y.data()),
               tierkit::InvalidArgument);
  EXPECT_THROW(tierkit::kernels::row_map<Rotary>(x.data(), tables, l, 1, 8, 10, false, false, y.data()),
               tierkit::InvalidArgument);
}

// RowTables::broadcast merges x's leading dims where the tables allow and
// drops those of size 1, so x of any rank fits: each row's table offsets
// equal the unmerged, row-major ones (offsets(), a Walk, the layout
// widened to more tables); more alternating runs than kMaxRank are refused
// (false).
TEST(RowTables, MergedLeadingDimsGiveEveryRowItsOffsets) {
  // x's leading dims (11 of them) and two tables: [2, 1, 3, 1, 1, 5, r]
  // broadcast from the right, and a full one.
  const std::vector<std::int64_t> lead = {2, 1, 2, 1, 2, 2, 3, 1, 1, 5, 4};
  const int n = static_cast<int>(lead.size());
  const std::int64_t r = 6;
  const std::vector<std::int64_t> a_sizes = {2, 3, 1, 1, 5, 1, r};
  std::vector<std::int64_t> b_sizes = lead;
  b_sizes.push_back(r);
  const auto strides_of = [](const std::vector<std::int64_t>& sizes) {
    std::vector<std::int64_t> st(sizes.size());
    std::int64_t s = 1;
    for (int i = static_cast<int>(sizes.size()) - 1; i >= 0; --i) {
      st[i] = s;
      s *= sizes[i];
    }
    return st;
  };
  const auto a_strides = strides_of(a_sizes), b_strides = strides_of(b_sizes);
  RowTables<2> l;
  const int ranks[2] = {static_cast<int>(a_sizes.size()), static_cast<int>(b_sizes.size())};
  const std::int64_t* sizes[2] = {a_sizes.data(), b_sizes.data()};
  const std::int64_t* strides[2] = {a_strides.data(), b_strides.data()};
  ASSERT_TRUE(l.broadcast(lead.data(), n, ranks, sizes, strides));
  EXPECT_LE(l.rank, tierkit::kMaxRank);
  const RowTables<3> wide_l = l.widened<3>();
  EXPECT_EQ(wide_l.rank, l.rank);
  std::int64_t rows = 1;
  for (std::int64_t s : lead) rows *= s;
  for (std::int64_t row = 0; row < rows; ++row) {
    // The unmerged offsets: row-major index over lead, each table's own.
    std::int64_t want[2] = {0, 0}, rest = row;
    for (int k = n - 1; k >= 0; --k) {
      const std::int64_t i = rest % lead[k];
      rest /= lead[k];
      for (int t = 0; t < 2; ++t) {
        const int j = k - (n - (ranks[t] - 1));
        if (j >= 0 && sizes[t][j] != 1) want[t] += i * strides[t][j];
      }
    }
    std::int64_t got[2];
    l.offsets(row, got);
    ASSERT_EQ(got[0], want[0]) << "row " << row;
    ASSERT_EQ(got[1], want[1]) << "row " << row;
    // Widened to more tables (a CUDA launch's), the first two read the same.
    std::int64_t wide[3];
    wide_l.offsets(row, wide);
    ASSERT_EQ(wide[0], want[0]) << "row " << row;
    ASSERT_EQ(wide[1], want[1]) << "row " << row;
    // A walk from any row (the pools' chunks start anywhere) steps to the same offsets.
    for (std::int64_t start : {std::int64_t{0}, row / 2, row}) {
      RowTables<2>::Walk walk(l, start);
      for (std::int64_t k = start; k < row; ++k) walk.next();
      ASSERT_EQ(walk.off[0], want[0]) << "row " << row << " walked from " << start;
      ASSERT_EQ(walk.off[1], want[1]) << "row " << row << " walked from " << start;
    }
  }
  // Nine alternating runs: refused.
  const std::vector<std::int64_t> nine(9, 2);
  const std::vector<std::int64_t> alt = {2, 1, 2, 1, 2, 1, 2, 1, 2, r};
  const auto alt_strides = strides_of(alt);
  const int alt_ranks[2] = {10, 10};
  const std::int64_t* alt_sizes[2] = {alt.data(), alt.data()};
  const std::int64_t* alt_st[2] = {alt_strides.data(), alt_strides.data()};
  RowTables<2> refused;
  EXPECT_FALSE(refused.broadcast(nine.data(), 9, alt_ranks, alt_sizes, alt_st));
}

}  // namespace
