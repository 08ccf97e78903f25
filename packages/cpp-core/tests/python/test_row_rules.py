"""core's Python row rules (tierkit_core.row_rules) say what its C++ rules
say (tests/test_row_rules.cpp holds the same texts in torch's words)."""

from __future__ import annotations

from tierkit_core import row_rules as rules


def refusal(rule) -> str:
    for ok, message in rule:
        if not ok:
            return message()
    return ""


def fit(x, a, b):
    return refusal(rules.tables_fit(x, [a, b], ["cos", "sin"], "even, at most x.size(-1)", rules.TORCH))


def test_x_needs_a_dimension():
    assert refusal(rules.x_rank(1, "the last is normalised", rules.TORCH)) == ""
    assert refusal(rules.x_rank(0, "the last is normalised", rules.TORCH)) == (
        "x: expected a tensor with at least one dimension (the last is normalised), got a 0-d tensor"
    )


def test_a_parameter_is_one_column_long():
    assert refusal(rules.param_shape("weight", [4], 4, rules.TORCH)) == ""
    assert refusal(rules.param_shape("weight", [5], 4, rules.TORCH)) == (
        "weight: expected shape [4] (x's last dimension), got [5]"
    )


def test_tables_share_an_even_width_and_broadcast():
    assert fit([2, 5, 8], [5, 8], [1, 5, 8]) == ""
    assert fit([2, 5, 8], [5, 4], [5, 4]) == ""
    assert fit([2, 5, 8], [5, 7], [5, 7]) == (
        "cos: expected a width r = cos.size(-1) that is even, at most x.size(-1) (8), got 7"
    )
    assert fit([2, 5, 8], [5, 8], [5, 6]) == "sin: expected a last dimension of 8 (the width, cos's), got 6"
    assert fit([2, 5, 8], [4, 8], [5, 8]) == (
        "cos: shape [4, 8] does not broadcast against x[..., :8] of shape [2, 5, 8]"
    )
    assert refusal(rules.table_rank("cos", 0, rules.TORCH)) == (
        "cos: expected a tensor with at least one dimension (its last is the width r), got a 0-d tensor"
    )


def test_the_in_place_roles_are_named_by_the_entry():
    # tests/test_row_rules.cpp's TheInPlaceRolesAreNamedByTheEntry, in torch's words.
    q, pos = [3, 4, 8], [3, 4]
    assert refusal(rules.indexed_heads("query", q, pos, "positions", 8, "head_size", rules.TORCH)) == ""
    assert refusal(rules.indexed_heads("q", q, [4], "ids", 8, "width", rules.TORCH)) == (
        "q: expected ids's shape [4] as its leading dims and a token's heads after them, got shape [3, 4, 8]"
    )
    assert refusal(rules.indexed_heads("q", q, pos, "ids", 3, "width", rules.TORCH)) == (
        "q: expected whole heads of width (3) a token, got 8 elements a token"
    )
    assert refusal(rules.gathered_table("cos_sin_cache", [16, 8], 8, "head_size", rules.TORCH)) == ""
    assert refusal(rules.gathered_table("table", [16, 8], 4, "width", rules.TORCH)) == (
        "table: expected shape [rows, r] with r even, at most width (4), got [16, 8]"
    )
    assert refusal(rules.index_dtype("positions", "int32")) == ""
    assert refusal(rules.index_dtype("ids", "float32")) == "ids: expected dtype int64 or int32, got float32"
    assert refusal(rules.gathered_dtype("cache", "q", "float32", "float16")) == (
        "cache: expected dtype float32 (q's), got float16"
    )
    assert refusal(rules.gathered_dtype("cache", "q", "bfloat16", "float32")) == ""
    assert refusal(rules.gathered_dtype("cache", "q", "bfloat16", "float64")) == (
        "cache: expected dtype bfloat16 or float32 (q's or its compute type), got float64"
    )
    assert refusal(rules.same_dtype("k", "q", "float32", "float64")) == (
        "k: expected dtype float32 (same as q), got float64"
    )
    assert (
        refusal(rules.same_device("k", "q", "cpu", "meta")) == "k: expected device cpu (same as q), got meta"
    )


def test_stats_are_what_the_forward_saved():
    assert refusal(rules.stats(6, "float32", 6, "float32", "_f")) == ""
    assert refusal(rules.stats(5, "float64", 6, "float32", "_f")) == (
        "stats: expected 6 values of dtype float32 (from _f), got 5 of float64"
    )


def test_a_dim_lies_within_the_rank():
    assert refusal(rules.dim("dim", -3, 3, rules.TORCH)) == refusal(rules.dim("dim", 2, 3, rules.TORCH)) == ""
    assert (
        refusal(rules.dim("dim", 3, 3, rules.TORCH))
        == "dim: expected a dim in [-3, 3) for x of 3 dimensions, got 3"
    )
    assert refusal(rules.dim("axis", -2, 1, rules.TORCH)) == (
        "axis: expected a dim in [-1, 1) for x of 1 dimension, got -2"
    )
    # A 0-d x's dim wraps as a 1-d one's (torch.softmax(scalar, -1) and (scalar, 0)).
    assert refusal(rules.dim("dim", -1, 0, rules.TORCH)) == refusal(rules.dim("dim", 0, 0, rules.TORCH)) == ""
    assert (
        refusal(rules.dim("dim", 1, 0, rules.TORCH))
        == "dim: expected a dim in [-1, 1) for x of 0 dimensions, got 1"
    )


def test_compute_dtype_is_cores_mixed_dtype_rule():
    # row_rules.h's mixed_dtypes (CTest RowRules.MixedDtypesComputeAsAtensNorms) in names.
    assert rules.compute_dtype("bfloat16", ["float32", None]) == "float32"
    assert rules.compute_dtype("float16", ["bfloat16"]) == "float32"
    assert rules.compute_dtype("float32", [None, "float64"]) == "float64"
    assert rules.compute_dtype("float64", ["float16"]) == "float64"
    assert rules.compute_dtype("bfloat16") == "float32"
