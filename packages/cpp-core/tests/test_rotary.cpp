// Core's rotary row map against a long-double evaluation of its formula:
// both layouts (NeoX halves, GPT-J pairs), tables broadcast over leading
// dims, partial width, the transpose as the map's adjoint (<R x, g> = <x,
// R^T g>), every dtype, and the same bits for any thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "tierkit/row_maps.h"

namespace {

using tierkit::kernels::Rotary;
using tierkit::kernels::RowTables;

struct Case {
  std::int64_t b = 3, s = 5, d = 16, r = 12;  // x [b, s, d], tables [1, s, r] (broadcast over b)
};

template <typename T>
std::vector<T> random_of(std::size_t n, std::mt19937& g) {
  std::normal_distribution<double> dist(0.0, 1.0);
  std::vector<T> v(n);
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
long double at(const std::vector<T>& v, std::int64_t i) {
  return static_cast<long double>(tierkit::load_compute(&v[static_cast<std::size_t>(i)]));
}

template <typename T>
void check_forward(bool interleaved, int threads) {
  const Case c;
  std::mt19937 g(7);
  auto x = random_of<T>(c.b * c.s * c.d, g);
  auto cs = random_of<T>(c.s * c.r, g), sn = random_of<T>(c.s * c.r, g);
  std::vector<T> y(x.size());
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
    std::vector<double> rx(x.size()), rtg(x.size());
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

TEST(Rotary, RefusesAnOddOrTooWideWidth) {
  std::vector<float> x(8), y(8), t(8);
  const float* tables[2] = {t.data(), t.data()};
  RowTables<2> l;
  EXPECT_THROW(tierkit::kernels::row_map<Rotary>(x.data(), tables, l, 1, 8, 3, false, false, y.data()),
               tierkit::InvalidArgument);
  EXPECT_THROW(tierkit::kernels::row_map<Rotary>(x.data(), tables, l, 1, 8, 10, false, false, y.data()),
               tierkit::InvalidArgument);
}

}  // namespace
