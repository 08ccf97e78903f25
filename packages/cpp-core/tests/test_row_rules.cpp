// The row ops' role rules (tierkit/row_rules.h): what each accepts and the
// words it refuses with, in torch's and numpy's spelling. The torch tiers'
// suites check that the Python twin (tierkit_core.row_rules) says the same.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tierkit/row_rules.h"

namespace {
namespace rules = tierkit::row_rules;
using Sizes = std::vector<std::int64_t>;

template <typename F>
std::string refusal(F&& f) {
  try {
    f();
  } catch (const tierkit::Error& e) {  // InvalidArgument, or DTypeError for the dtype rules
    return e.what();
  }
  return "";
}

TEST(RowRules, XNeedsADimension) {
  EXPECT_EQ(refusal([] { rules::x_rank(1, "the last is normalised", rules::kTorchWords); }), "");
  EXPECT_EQ(refusal([] { rules::x_rank(0, "the last is normalised", rules::kTorchWords); }),
            "x: expected a tensor with at least one dimension (the last is normalised), got a 0-d tensor");
  EXPECT_EQ(refusal([] { rules::x_rank(0, nullptr, rules::kNumpyWords); }),
            "x: expected an array with at least one dimension, got a 0-d one");
}

TEST(RowRules, ADimLiesWithinTheRank) {
  std::int64_t wrapped = -1;
  EXPECT_EQ(refusal([&] { wrapped = rules::dim("dim", -3, 3, rules::kTorchWords); }), "");
  EXPECT_EQ(wrapped, 0);
  EXPECT_EQ(refusal([&] { wrapped = rules::dim("dim", 2, 3, rules::kTorchWords); }), "");
  EXPECT_EQ(wrapped, 2);
  EXPECT_EQ(refusal([] { rules::dim("dim", 3, 3, rules::kTorchWords); }),
            "dim: expected a dim in [-3, 3) for x of 3 dimensions, got 3");
  EXPECT_EQ(refusal([] { rules::dim("axis", -2, 1, rules::kNumpyWords); }),
            "axis: expected a dim in [-1, 1) for x of 1 dimension, got -2");
  // A 0-d x's dim wraps as a 1-d one's (torch.softmax(scalar, -1) and (scalar, 0)).
  EXPECT_EQ(refusal([&] { wrapped = rules::dim("dim", -1, 0, rules::kTorchWords); }), "");
  EXPECT_EQ(wrapped, 0);
  EXPECT_EQ(refusal([] { rules::dim("dim", 1, 0, rules::kTorchWords); }),
            "dim: expected a dim in [-1, 1) for x of 0 dimensions, got 1");
}

TEST(RowRules, AParameterIsOneColumnLong) {
  EXPECT_EQ(refusal([] { rules::param_shape("weight", Sizes{4}, std::int64_t{4}, rules::kTorchWords); }), "");
  EXPECT_EQ(refusal([] { rules::param_shape("weight", Sizes{5}, std::int64_t{4}, rules::kTorchWords); }),
            "weight: expected shape [4] (x's last dimension), got [5]");
  EXPECT_EQ(refusal([] { rules::param_shape("bias", Sizes{2, 2}, std::int64_t{4}, rules::kNumpyWords); }),
            "bias: expected shape (4,) (x's last dimension), got (2, 2)");
}

std::string fit(const Sizes& x, const Sizes& a, const Sizes& b, const rules::Words& w = rules::kTorchWords) {
  return refusal([&] {
    rules::tables_fit(x, std::array<Sizes, 2>{a, b}, {"cos", "sin"}, "even, at most x.size(-1)", w);
  });
}

TEST(RowRules, TablesShareAnEvenWidthAndBroadcast) {
  EXPECT_EQ(fit({2, 5, 8}, {5, 8}, {1, 5, 8}), "");
  EXPECT_EQ(fit({2, 5, 8}, {5, 4}, {5, 4}), "");  // a partial width (Phi-3)
  EXPECT_EQ(fit({2, 5, 8}, {5, 7}, {5, 7}),
            "cos: expected a width r = cos.size(-1) that is even, at most x.size(-1) (8), got 7");
  EXPECT_EQ(fit({2, 5, 8}, {5, 10}, {5, 10}, rules::kNumpyWords),
            "cos: expected a width r = cos.shape[-1] that is even, at most x.size(-1) (8), got 10");
  EXPECT_EQ(fit({2, 5, 8}, {5, 8}, {5, 6}), "sin: expected a last dimension of 8 (the width, cos's), got 6");
  EXPECT_EQ(fit({2, 5, 8}, {4, 8}, {5, 8}),
            "cos: shape [4, 8] does not broadcast against x[..., :8] of shape [2, 5, 8]");
  EXPECT_EQ(fit({2, 5, 8}, {5, 4}, {3, 2, 5, 4}, rules::kNumpyWords),
            "sin: shape (3, 2, 5, 4) does not broadcast against x[..., :4] of shape (2, 5, 4)");
  EXPECT_EQ(refusal([] { rules::table_rank("cos", 0, rules::kTorchWords); }),
            "cos: expected a tensor with at least one dimension (its last is the width r), got a 0-d tensor");
}

TEST(RowRules, StatsAreWhatTheForwardSaved) {
  EXPECT_EQ(refusal([] { rules::stats(std::int64_t{6}, "float32", std::int64_t{6}, "float32", "_f"); }), "");
  EXPECT_EQ(refusal([] { rules::stats(std::int64_t{5}, "float64", std::int64_t{6}, "float32", "_f"); }),
            "stats: expected 6 values of dtype float32 (from _f), got 5 of float64");
}

TEST(RowRules, AWrittenRoleOwnsEachElement) {
  const auto alone = [](const Sizes& sizes, const Sizes& strides,
                        const rules::Words& w = rules::kTorchWords) {
    return refusal([&] { rules::written_alone("residual", sizes, strides, w); });
  };
  EXPECT_EQ(alone({4, 8}, {8, 1}), "");
  EXPECT_EQ(alone({1, 8}, {0, 1}), "");  // a dim of one: its stride is never stepped
  EXPECT_EQ(alone({0, 8}, {0, 1}), "");
  EXPECT_EQ(
      alone({4, 8}, {0, 1}),
      "residual: has internal overlap (e.g. an expanded tensor), so several elements share one address");
  EXPECT_EQ(alone({4, 8}, {8, 0}, rules::kNumpyWords),
            "residual: has internal overlap (e.g. an expanded array), so several elements share one address");
  EXPECT_EQ(refusal([] { rules::written_beside("residual", "x", false); }), "");
  EXPECT_EQ(refusal([] { rules::written_beside("residual", "x", true); }), "residual: partially overlaps x");
  EXPECT_EQ(refusal([] { rules::written_apart("key", "query", false); }), "");
  EXPECT_EQ(refusal([] { rules::written_apart("key", "query", true); }),
            "key: shares memory with query (its elements would be written twice)");
}

TEST(RowRules, TheInPlaceRolesAreNamedByTheEntry) {
  // Each message names the roles as the caller names them (vLLM's names
  // for the cached rotary; another entry's own).
  const Sizes q{3, 4, 8}, pos{3, 4}, cache{16, 8};
  EXPECT_EQ(refusal([&] {
              rules::indexed_heads("query", q, pos, "positions", 8, "head_size", rules::kTorchWords);
            }),
            "");
  EXPECT_EQ(
      refusal([&] { rules::indexed_heads("q", q, Sizes{4}, "ids", 8, "width", rules::kTorchWords); }),
      "q: expected ids's shape [4] as its leading dims and a token's heads after them, got shape [3, 4, 8]");
  EXPECT_EQ(refusal([&] { rules::indexed_heads("q", q, pos, "ids", 3, "width", rules::kNumpyWords); }),
            "q: expected whole heads of width (3) a token, got 8 elements a token");
  EXPECT_EQ(
      refusal([&] { rules::gathered_table("cos_sin_cache", cache, 8, "head_size", rules::kTorchWords); }),
      "");
  EXPECT_EQ(refusal([&] { rules::gathered_table("table", cache, 4, "width", rules::kNumpyWords); }),
            "table: expected shape [rows, r] with r even, at most width (4), got (16, 8)");
  EXPECT_EQ(refusal([] { rules::index_dtype("positions", true, "int32"); }), "");
  EXPECT_EQ(refusal([] { rules::index_dtype("ids", false, "float32"); }),
            "ids: expected dtype int64 or int32, got float32");
  EXPECT_EQ(refusal([] { rules::gathered_dtype("cache", "q", false, "float32", "", "float16"); }),
            "cache: expected dtype float32 (q's), got float16");
  EXPECT_EQ(refusal([] { rules::gathered_dtype("cache", "q", false, "bfloat16", "float32", "float64"); }),
            "cache: expected dtype bfloat16 or float32 (q's or its compute type), got float64");
  EXPECT_EQ(refusal([] { rules::same_dtype("k", "q", false, "float32", "float64"); }),
            "k: expected dtype float32 (same as q), got float64");
  EXPECT_EQ(refusal([] { rules::same_device("k", "q", false, "cpu", "meta"); }),
            "k: expected device cpu (same as q), got meta");
  // The dtype rules throw core's DTypeError: the bridge raises TypeError for it.
  EXPECT_THROW(rules::index_dtype("ids", false, "float32"), tierkit::DTypeError);
}

TEST(RowRules, MixedDtypesComputeAsAtensNorms) {
  using tierkit::DType;
  const auto m = [](DType x, std::optional<DType> w, std::optional<DType> b = std::nullopt) {
    return rules::mixed_dtypes(x, std::array<std::optional<DType>, 2>{w, b});
  };
  const auto same = m(DType::BFloat16, DType::BFloat16);
  EXPECT_FALSE(same.active);
  EXPECT_FALSE(m(DType::Float32, std::nullopt).active);      // absent parameters mix nothing
  const auto autocast = m(DType::BFloat16, DType::Float32);  // float32 weights beside bfloat16 x
  EXPECT_TRUE(autocast.active);
  EXPECT_EQ(autocast.compute, DType::Float32);
  EXPECT_FALSE(autocast.converts_x);
  const auto halves = m(DType::Float16, DType::BFloat16);  // x's compute type, not a promotion
  EXPECT_EQ(halves.compute, DType::Float32);
  EXPECT_FALSE(halves.converts_x);
  const auto wide = m(DType::Float32, std::nullopt, DType::Float64);  // a float64 parameter widens x
  EXPECT_EQ(wide.compute, DType::Float64);
  EXPECT_TRUE(wide.converts_x);
  const auto narrow = m(DType::Float64, DType::Float16);  // float64 x: its own compute type
  EXPECT_TRUE(narrow.active);
  EXPECT_EQ(narrow.compute, DType::Float64);
  EXPECT_FALSE(narrow.converts_x);
}

}  // namespace
