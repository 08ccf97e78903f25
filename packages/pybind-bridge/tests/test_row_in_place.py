"""The bridge's in-place row ops for arrays, every ROW_IN_PLACE entry of the
op table (vLLM's cached rotary embedding): query and key written in place as
vLLM's formula gives them (float32: its bits), in the layouts vLLM passes,
and every argument's error."""

import numpy as np
import pytest
import tierkit_bridge as tb
from tierkit_core.op_table import ROW_IN_PLACE

ENTRIES = pytest.mark.parametrize("entry", ROW_IN_PLACE, ids=[e.name for e in ROW_IN_PLACE])


def case(dtype, tokens=7, heads=4, kv_heads=2, head_size=32, rot=32, rows=64, seed=0):
    rng = np.random.default_rng(seed)
    positions = rng.integers(0, rows, tokens)
    query = rng.standard_normal((tokens, heads * head_size)).astype(dtype)
    key = rng.standard_normal((tokens, kv_heads * head_size)).astype(dtype)
    inv = 1.0 / (10000.0 ** (np.arange(0, rot, 2) / rot))
    angles = np.arange(rows)[:, None] * inv[None, :]
    cache = np.concatenate((np.cos(angles), np.sin(angles)), axis=-1).astype(dtype)
    return positions, query, key, cache


def vllm(positions, x, cache, head_size, is_neox, dtype):
    """vLLM's _apply_rotary_emb_torch in numpy, in `dtype` (its roundings)."""
    rot = cache.shape[-1]
    c, s = np.split(cache[positions].astype(dtype), 2, axis=-1)
    h = x.astype(dtype).reshape(x.shape[0], -1, head_size)
    r = h[..., :rot]
    x1, x2 = (r[..., : rot // 2], r[..., rot // 2 :]) if is_neox else (r[..., ::2], r[..., 1::2])
    c, s = c[:, None, :], s[:, None, :]
    o1, o2 = x1 * c - x2 * s, x2 * c + x1 * s
    out = np.concatenate((o1, o2), -1) if is_neox else np.stack((o1, o2), -1).reshape(r.shape)
    return np.concatenate((out, h[..., rot:]), -1).reshape(x.shape)


@ENTRIES
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("rot", [32, 16])
def test_matches_vllms_formula(entry, dtype, is_neox, rot):
    positions, query, key, cache = case(dtype, rot=rot)
    q, k = query.copy(), key.copy()
    assert getattr(tb, entry.name)(positions, q, k, cache, 32, is_neox) is None
    for got, x in ((q, query), (k, key)):
        exact = vllm(positions, x, cache, 32, is_neox, np.longdouble)
        assert np.abs(got.astype(np.longdouble) - exact).max() <= np.finfo(dtype).eps * np.abs(exact).max()
        if dtype == np.float32:  # vLLM's float32 sequence, bit for bit
            np.testing.assert_array_equal(got, vllm(positions, x, cache, 32, is_neox, np.float32))


@ENTRIES
def test_layouts_vllm_passes(entry):
    positions, query, key, cache = case(np.float32)
    want_q = vllm(positions, query, cache, 32, True, np.float32)
    want_k = vllm(positions, key, cache, 32, True, np.float32)
    qkv = np.concatenate((query, key, np.ones((7, 64), np.float32)), -1)  # one fused row a token
    getattr(tb, entry.name)(positions, qkv[:, :128], qkv[:, 128:192], cache, 32, True)
    np.testing.assert_array_equal(qkv[:, :128], want_q)
    np.testing.assert_array_equal(qkv[:, 128:192], want_k)
    assert (qkv[:, 192:] == 1).all()
    q3, qf = query.copy().reshape(7, 4, 32), np.asfortranarray(query)  # heads as a dim; no token rows at all
    getattr(tb, entry.name)(positions.astype(np.int32), q3, None, cache, 32, True)
    getattr(tb, entry.name)(positions, qf, None, cache.astype(np.float32), 32, True)
    np.testing.assert_array_equal(q3.reshape(7, 128), want_q)
    np.testing.assert_array_equal(qf, want_q)


@ENTRIES
def test_errors_name_the_argument_and_write_nothing(entry):
    f, n = getattr(tb, entry.name), entry.name
    p, q, k, c = case(np.float32)
    bad = p.copy()
    bad[2] = 64
    q0 = q.copy()
    with pytest.raises(
        ValueError, match=rf"^{n}: positions\[2\]: expected a row of cos_sin_cache, in \[0, 64\), got 64"
    ):
        f(bad, q, k, c, 32, True)
    np.testing.assert_array_equal(q, q0)
    cases = [
        (
            (p.astype(np.float32), q, k, c, 32, True),
            TypeError,
            r"positions: expected dtype int64 or int32, got float32",
        ),
        ((p, q.astype(np.int32), k, c, 32, True), TypeError, r"query: expected dtype .*, got int32"),
        (
            (p, q, k.astype(np.float64), c, 32, True),
            TypeError,
            r"key: expected dtype float32 \(same as query\)",
        ),
        (
            (p, q, k, c.astype(np.float16), 32, True),
            TypeError,
            r"cos_sin_cache: expected dtype float32 \(query's\)",
        ),
        (
            (p, q, k, c, 48, True),
            ValueError,
            r"query: expected whole heads of head_size \(48\) a token, got 128",
        ),
        (
            (p, q, k, c[:, :31], 32, True),
            ValueError,
            r"cos_sin_cache: expected shape \[rows, r\] .*got \(64, 31\)",
        ),
        ((p, q, q, c, 32, True), ValueError, r"key: shares memory with query"),
        ((p, q, k, c, 32.0, True), TypeError, r"head_size: expected an int, got float"),
        ((p, q, k, c, 32, 1), TypeError, r"is_neox: expected a bool, got int"),
    ]
    for args, error, pattern in cases:
        with pytest.raises(error, match=rf"^{n}: {pattern}"):
            f(*args)
    for which in ("query", "key"):  # writable, with a stride of 0: several elements at one address
        args = {"query": q.copy(), "key": k.copy()}
        args[which] = np.lib.stride_tricks.as_strided(args[which], strides=(0, args[which].strides[1]))
        before = {name: a.copy() for name, a in args.items()}
        with pytest.raises(
            ValueError, match=rf"^{n}: {which}: has internal overlap \(e.g. an expanded array\)"
        ):
            f(p, args["query"], args["key"], c, 32, True)
        for name, a in args.items():
            np.testing.assert_array_equal(a, before[name])
    with pytest.raises(ValueError, match=r"query: expected a writable"):
        ro = q.copy()
        ro.flags.writeable = False
        f(p, ro, None, c, 32, True)
