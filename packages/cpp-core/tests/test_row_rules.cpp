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

// An argument as a binding reads it, for in_place_roles: a dtype's name,
// sizes, strides, a device.
struct Arg {
  std::string dtype;
  Sizes sizes, strides;
  std::string device = "cpu";
};
struct ArgReader {
  static std::string dtype(const Arg& a) { return a.dtype; }
  static bool indexes(const std::string& t) { return t == "int64" || t == "int32"; }
  static std::string compute(const std::string& t) { return t == "float64" ? t : "float32"; }
  static std::string name(const std::string& t) { return t; }
  static Sizes sizes(const Arg& a) { return a.sizes; }
  static Sizes strides(const Arg& a) { return a.strides; }
  static bool device_differs(const Arg& a, const Arg& x) { return a.device != x.device; }
  static std::string device(const Arg& a) { return a.device; }
};
struct Cached {  // an entry's names (the codegen's in_place_info)
  static constexpr const char* index = "positions";
  static constexpr const char* written[2] = {"query", "key"};
  static constexpr const char* table = "cos_sin_cache";
  static constexpr const char* size = "head_size";
};

TEST(RowRules, AnInPlaceEntrysRolesAreAskedInOneOrder) {
  const Arg pos{"int64", {3}, {1}}, q{"bfloat16", {3, 16}, {16, 1}}, k{"bfloat16", {3, 8}, {8, 1}},
      cache{"float32", {10, 8}, {8, 1}};
  const auto float_pos_of = [](Arg a) {
    a.dtype = "float32";
    return a;
  };
  const auto roles = [&](const Arg& index, const Arg& x, const Arg* x2, const Arg& table, std::int64_t size) {
    return refusal(
        [&] { rules::in_place_roles<Cached>(ArgReader{}, index, x, x2, table, size, rules::kTorchWords); });
  };
  EXPECT_EQ(roles(pos, q, &k, cache, 8), "");
  EXPECT_EQ(roles(pos, q, nullptr, cache, 8), "");
  // Devices first (the fakes' order: torch-common's in_place_checks), then
  // the index's dtype, the table's, the shapes, then the second x's.
  Arg elsewhere = pos;
  elsewhere.device = "meta";
  elsewhere.dtype = "float32";
  EXPECT_EQ(roles(elsewhere, q, &k, cache, 8), "positions: expected device cpu (same as query), got meta");
  Arg key_elsewhere = k;
  key_elsewhere.device = "meta";
  EXPECT_EQ(roles(float_pos_of(pos), q, &key_elsewhere, cache, 8),
            "key: expected device cpu (same as query), got meta");
  Arg float_pos = pos;
  float_pos.dtype = "float32";
  Arg wide_cache = cache;
  wide_cache.dtype = "float64";
  EXPECT_EQ(roles(float_pos, q, &k, wide_cache, 8), "positions: expected dtype int64 or int32, got float32");
  EXPECT_EQ(roles(pos, q, &k, wide_cache, 8),
            "cos_sin_cache: expected dtype bfloat16 or float32 (query's or its compute type), got float64");
  EXPECT_EQ(roles(pos, q, &k, cache, 5),
            "query: expected whole heads of head_size (5) a token, got 16 elements a token");
  Arg wide_key = k;
  wide_key.dtype = "float64";
  EXPECT_EQ(roles(pos, q, &wide_key, cache, 8), "key: expected dtype bfloat16 (same as query), got float64");
  // Last: an x written in place needs an address per element.
  Arg expanded = q;
  expanded.strides = {0, 1};
  EXPECT_EQ(roles(pos, expanded, &k, cache, 8),
            "query: has internal overlap (e.g. an expanded tensor), so several elements share one address");
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
