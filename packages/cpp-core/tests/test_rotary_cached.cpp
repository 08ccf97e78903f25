// vLLM's cached rotary embedding (tierkit/in_place_functors.h): query and key
// rotated in place against a long double reference of vLLM's formula, both
// layouts, an absent key, rot_dim below head_size, token rows wider than
// their heads, a float cache beside 16-bit activations, the same bits for
// any thread split, and bad positions refused before anything is written.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "row_test_support.h"
#include "tierkit/in_place_functors.h"

namespace k = tierkit::kernels;
using namespace row_test_support;  // C<T>: the compute type; the values and bits helpers

namespace {

// vLLM's cache: row p = [cos(p θ_i), sin(p θ_i)], θ_i = 10000^(-2i / rot_dim).
template <typename P>
std::vector<P> cos_sin_cache(std::int64_t rows, std::int64_t rot_dim) {
  std::vector<P> cache(static_cast<std::size_t>(rows * rot_dim));
  const std::int64_t half = rot_dim / 2;
  for (std::int64_t p = 0; p < rows; ++p)
    for (std::int64_t i = 0; i < half; ++i) {
      const long double a = p * std::pow(10000.0L, -2.0L * i / rot_dim);
      cache[p * rot_dim + i] = to_t<P>(std::cos(a));
      cache[p * rot_dim + half + i] = to_t<P>(std::sin(a));
    }
  return cache;
}

struct Case {
  std::int64_t tokens, q_heads, k_heads, head_size, rot_dim, pad;  // pad: extra elements a token row
  bool neox, with_key;
};

// The reference: every head of every token, in long double from the rounded inputs.
template <typename T, typename P>
std::vector<long double> reference(const std::vector<T>& x, const std::vector<std::int64_t>& pos,
                                   const std::vector<P>& cache, std::int64_t stride, std::int64_t heads,
                                   const Case& c) {
  std::vector<long double> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = ld(x[i]);
  const std::int64_t half = c.rot_dim / 2;
  for (std::int64_t t = 0; t < c.tokens; ++t)
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t i = 0; i < half; ++i) {
        const std::int64_t base = t * stride + h * c.head_size;
        const std::int64_t ia = base + (c.neox ? i : 2 * i), ib = base + (c.neox ? i + half : 2 * i + 1);
        const long double co = ld(cache[pos[t] * c.rot_dim + i]),
                          si = ld(cache[pos[t] * c.rot_dim + half + i]);
        const long double a = ld(x[ia]), b = ld(x[ib]);
        out[ia] = a * co - b * si;
        out[ib] = b * co + a * si;
      }
  return out;
}

template <typename T, typename P, typename Runner = k::PoolRunner>
void run_case(const Case& c, std::uint32_t seed, std::vector<T>& q, std::vector<T>& kk,
              std::vector<std::int64_t>& pos, std::vector<P>& cache, const Runner& run = {}) {
  const std::int64_t rows = 64;
  cache = cos_sin_cache<P>(rows, c.rot_dim);
  std::mt19937 gen(seed);
  pos.clear();
  for (std::int64_t t = 0; t < c.tokens; ++t) pos.push_back(static_cast<std::int64_t>(gen() % rows));
  const std::int64_t qs = c.q_heads * c.head_size + c.pad, ks = c.k_heads * c.head_size + c.pad;
  q = random_vec<T>(static_cast<std::size_t>(c.tokens * qs), seed + 1);
  kk = random_vec<T>(static_cast<std::size_t>(c.tokens * ks), seed + 2);
  k::rotary_embedding_cached<T, P>(pos.data(), c.tokens, {q.data(), qs, c.q_heads},
                                   {c.with_key ? kk.data() : nullptr, ks, c.k_heads}, c.head_size,
                                   cache.data(), rows, c.rot_dim, c.neox, run);
}

const Case kCases[] = {
    {7, 4, 2, 64, 64, 0, true, true},     {7, 4, 2, 64, 64, 0, false, true},
    {5, 3, 1, 80, 32, 8, true, true},     {5, 3, 1, 80, 32, 8, false, true},
    {9, 2, 2, 128, 128, 0, true, false},  {1, 1, 1, 2, 2, 0, true, true},
    {300, 8, 2, 64, 48, 16, false, true},
};

template <typename T, typename P>
void expect_matches_reference() {
  for (const Case& c : kCases) {
    std::vector<T> q, kk;
    std::vector<std::int64_t> pos;
    std::vector<P> cache;
    run_case<T, P>(c, 11, q, kk, pos, cache);
    // The inputs again (the same seeds), for the reference.
    const std::int64_t qs = c.q_heads * c.head_size + c.pad, ks = c.k_heads * c.head_size + c.pad;
    const auto q0 = random_vec<T>(q.size(), 12), k0 = random_vec<T>(kk.size(), 13);
    const auto q_ref = reference(q0, pos, cache, qs, c.q_heads, c);
    const auto k_ref = c.with_key ? reference(k0, pos, cache, ks, c.k_heads, c) : std::vector<long double>();
    // Two products and a sum in the compute type, then one rounding to T.
    const long double tol_c = 4 * std::numeric_limits<C<T>>::epsilon();
    for (std::size_t i = 0; i < q.size(); ++i)
      ASSERT_LE(std::fabs(ld(q[i]) - q_ref[i]), half_ulp<T>() * std::fabs(q_ref[i]) + tol_c * 3)
          << "query[" << i << "] head_size " << c.head_size << " neox " << c.neox;
    for (std::size_t i = 0; i < kk.size(); ++i) {
      if (c.with_key)
        ASSERT_LE(std::fabs(ld(kk[i]) - k_ref[i]), half_ulp<T>() * std::fabs(k_ref[i]) + tol_c * 3)
            << "key " << i;
      else
        ASSERT_EQ(bits_of(kk[i]), bits_of(k0[i])) << "no key: the buffer stays as it was";
    }
    // Columns past rot_dim and the padding between token rows pass through bit for bit.
    for (std::int64_t t = 0; t < c.tokens; ++t)
      for (std::int64_t j = c.q_heads * c.head_size; j < qs; ++j)
        ASSERT_EQ(bits_of(q[t * qs + j]), bits_of(q0[t * qs + j]));
    for (std::int64_t t = 0; t < c.tokens; ++t)
      for (std::int64_t h = 0; h < c.q_heads; ++h)
        for (std::int64_t j = c.rot_dim; j < c.head_size; ++j) {
          const std::int64_t i = t * qs + h * c.head_size + j;
          ASSERT_EQ(bits_of(q[i]), bits_of(q0[i]));
        }
  }
}

template <typename T>
class RotaryCached : public ::testing::Test {};
using Types = ::testing::Types<float, double, tierkit::Half, tierkit::BFloat16>;
TYPED_TEST_SUITE(RotaryCached, Types);

TYPED_TEST(RotaryCached, MatchesVllmsFormulaInBothLayouts) {
  expect_matches_reference<TypeParam, TypeParam>();
}

// A float cache beside 16-bit activations (vLLM's float32 cache): the cache
// read as it is, not rounded to x's dtype first.
TYPED_TEST(RotaryCached, AcceptsACacheInTheComputeType) {
  using T = TypeParam;
  expect_matches_reference<T, C<T>>();
}

// float32: vLLM's own sequence, so the same bits as (a * c) - (b * s) in float.
TEST(RotaryCachedFloat, IsVllmsSequenceBitForBit) {
  const Case c{6, 2, 1, 16, 16, 0, true, true};
  std::vector<float> q, kk;
  std::vector<std::int64_t> pos;
  std::vector<float> cache;
  run_case<float, float>(c, 5, q, kk, pos, cache);
  const auto q0 = random_vec<float>(q.size(), 6);
  for (std::int64_t t = 0; t < c.tokens; ++t)
    for (std::int64_t h = 0; h < c.q_heads; ++h)
      for (std::int64_t i = 0; i < 8; ++i) {
        const std::int64_t base = t * 32 + h * 16;
        const float a = q0[base + i], b = q0[base + i + 8], co = cache[pos[t] * 16 + i],
                    si = cache[pos[t] * 16 + 8 + i];
        const volatile float p1 = a * co, p2 = b * si, p3 = b * co, p4 = a * si;  // rounded apart
        ASSERT_EQ(bits_of(q[base + i]), bits_of(static_cast<float>(p1 - p2)));
        ASSERT_EQ(bits_of(q[base + i + 8]), bits_of(static_cast<float>(p3 + p4)));
      }
}

TYPED_TEST(RotaryCached, BitIdenticalForAnyRunner) {
  using T = TypeParam;
  const Case c{300, 8, 2, 64, 64, 4, false, true};
  std::vector<T> q1, k1, q2, k2;
  std::vector<std::int64_t> pos;
  std::vector<T> cache;
  run_case<T, T>(c, 3, q1, k1, pos, cache, k::PoolRunner{1});
  for (std::int64_t chunk : {1, 7}) {
    run_case<T, T>(c, 3, q2, k2, pos, cache, ReverseChunkRunner{chunk});
    EXPECT_EQ(as_bits(q1), as_bits(q2));
    EXPECT_EQ(as_bits(k1), as_bits(k2));
  }
  run_case<T, T>(c, 3, q2, k2, pos, cache, k::PoolRunner{});
  EXPECT_EQ(as_bits(q1), as_bits(q2));
}

// A position outside the cache, or a cache row of odd length or longer than
// a head: InvalidArgument naming what was expected and what came, nothing written.
TYPED_TEST(RotaryCached, RefusesBadArgumentsBeforeWriting) {
  using T = TypeParam;
  const auto cache = cos_sin_cache<T>(4, 8);
  const auto before = random_vec<T>(3 * 16, 1);
  auto q = before, kk = before;
  const std::vector<std::int64_t> bad = {0, 4, 1}, negative = {0, 1, -1}, good = {0, 1, 3};
  const auto call = [&](const std::vector<std::int64_t>& pos, std::int64_t rot_dim, std::int64_t head_size) {
    k::rotary_embedding_cached<T, T>(pos.data(), 3, {q.data(), 16, 16 / head_size},
                                     {kk.data(), 16, 16 / head_size}, head_size, cache.data(), 4, rot_dim,
                                     true);
  };
  try {
    call(bad, 8, 8);
    FAIL() << "no error for a position past the cache";
  } catch (const tierkit::InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "positions[1]: expected a row of cos_sin_cache, in [0, 4), got 4");
  }
  EXPECT_THROW(call(negative, 8, 8), tierkit::InvalidArgument);
  EXPECT_EQ(as_bits(q), as_bits(before));
  EXPECT_EQ(as_bits(kk), as_bits(before));
  try {
    call(good, 7, 8);
    FAIL() << "no error for an odd rot_dim";
  } catch (const tierkit::InvalidArgument& e) {
    EXPECT_STREQ(e.what(),
                 "cos_sin_cache: expected an even row length (rot_dim) of at most head_size (8), got 7");
  }
  EXPECT_THROW(call(good, 8, 4), tierkit::InvalidArgument);  // rot_dim past the head
  EXPECT_EQ(as_bits(q), as_bits(before));
}

// Every binding's view of query and key: token rows where one stride walks
// the tokens, a copy otherwise; and whether key shares an element with query,
// exact for rows sliced from one fused qkv row (against a brute-force
// element overlap), the binding's byte test where that cannot tell.
TEST(RotaryCachedLayout, TokenRowsAndKeySharingQuery) {
  using Dims = std::vector<std::int64_t>;
  // [tokens 4, heads 2, head_size 8] inside fused rows of 48: query at 0, key at 16, value at 32.
  const k::TokenRows q = k::token_rows(Dims{4, 2, 8}, Dims{48, 8, 1}, 1, 4, 8);
  EXPECT_EQ(q.stride, 48);
  EXPECT_EQ(q.heads, 2);
  EXPECT_FALSE(q.copied);
  // Heads not dense within a token: a copy, a token's 16 elements a row.
  const k::TokenRows t = k::token_rows(Dims{4, 2, 8}, Dims{8, 32, 1}, 1, 4, 8);
  EXPECT_TRUE(t.copied);
  EXPECT_EQ(t.stride, 16);
  EXPECT_EQ(t.heads, 2);
  // Two index dims [2, 2] one stride apart.
  EXPECT_EQ(k::token_rows(Dims{2, 2, 16}, Dims{96, 48, 1}, 2, 4, 8).stride, 48);

  std::vector<float> fused(4 * 48);
  const auto elements = [](std::int64_t base, const k::TokenRows& r, std::int64_t head_size) {
    std::vector<std::int64_t> at;
    for (std::int64_t token = 0; token < 4; ++token)
      for (std::int64_t j = 0; j < r.heads * head_size; ++j) at.push_back(base + token * r.stride + j);
    return at;
  };
  const auto never = [] {
    ADD_FAILURE() << "the byte test asked where the rows tell";
    return true;
  };
  for (const std::int64_t key_at : {16, 8, 0, 32, 40, 48}) {
    const k::TokenRows kr = k::token_rows(Dims{4, 2, 8}, Dims{48, 8, 1}, 1, 4, 8);
    const auto qe = elements(0, q, 8), ke = elements(key_at, kr, 8);
    bool brute = false;
    for (const auto a : qe)
      for (const auto b : ke) brute = brute || a == b;
    EXPECT_EQ(k::written_rows_share(fused.data(), q, fused.data() + key_at, kr, sizeof(float), 8, 4, never),
              brute)
        << "key at " << key_at;
  }
  // A copied layout, or key half an element away: the binding's test decides.
  int asked = 0;
  const auto spans = [&] {
    ++asked;
    return true;
  };
  EXPECT_TRUE(k::written_rows_share(fused.data(), q, fused.data() + 16, t, sizeof(float), 8, 4, spans));
  EXPECT_TRUE(k::written_rows_share(fused.data(), q, reinterpret_cast<const char*>(fused.data() + 16) + 2, q,
                                    sizeof(float), 8, 4, spans));
  EXPECT_EQ(asked, 2);
}

}  // namespace
