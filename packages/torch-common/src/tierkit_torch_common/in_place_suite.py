"""The in-place row ops' test suite (the op table's ROW_IN_PLACE: vLLM's
cached rotary embedding) in one torch namespace: each torch tier's
``tests/test_row_in_place.py`` imports these tests and gives them its
namespace (the ``ops`` fixture).

The reference is vLLM's own code (``RotaryEmbedding.forward_native`` and
``_apply_rotary_emb_torch``, written out below in torch): the float32 result
is its bits (vLLM's sequence of two products and a sum, each rounded), every
dtype is within an ulp of its value in float64, and the layouts vLLM passes
(a query that is a slice of a fused qkv row, [tokens, heads, head_size] or
[tokens, heads * head_size], [batch, seq] positions, key None, a float32
cache beside bfloat16 activations, rot_dim below head_size) are written in
place. Errors name the argument, a bad position writes nothing, and the op
refuses a derivative it cannot give. Like ``testing``, it imports torch and
is for test suites only.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from tierkit_core.op_table import ROW_IN_PLACE

ENTRIES = pytest.mark.parametrize("entry", ROW_IN_PLACE, ids=[e.name for e in ROW_IN_PLACE])
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def vllm_reference(positions: Any, query: Any, key: Any, cache: Any, head_size: int, is_neox: bool) -> Any:
    """vLLM's forward_native: (query, key) rotated, new tensors, in query's dtype."""
    flat = positions.flatten()
    cos, sin = cache.index_select(0, flat).chunk(2, dim=-1)
    rot = cache.shape[-1]

    def apply(x: Any) -> Any:
        shape = x.shape
        x = x.reshape(flat.shape[0], -1, head_size)
        c, s = cos.unsqueeze(-2).to(x.dtype), sin.unsqueeze(-2).to(x.dtype)
        r = x[..., :rot]
        x1, x2 = r.chunk(2, dim=-1) if is_neox else (r[..., ::2], r[..., 1::2])
        o1 = x1 * c - x2 * s
        o2 = x2 * c + x1 * s
        out = torch.cat((o1, o2), dim=-1) if is_neox else torch.stack((o1, o2), dim=-1).flatten(-2)
        return torch.cat((out, x[..., rot:]), dim=-1).reshape(shape)

    return apply(query), None if key is None else apply(key)


def make_case(
    dtype: Any,
    gen: Any,
    tokens: Any = (7,),
    heads: int = 4,
    kv_heads: int = 2,
    head_size: int = 32,
    rot: int = 32,
    rows: int = 64,
    cache_dtype: Any = None,
) -> tuple[Any, Any, Any, Any]:
    """positions (shape `tokens`), query and key ([*tokens, heads * head_size]), cos_sin_cache ([rows, rot])."""
    positions = torch.randint(0, rows, tokens, generator=gen)
    query = torch.randn(*tokens, heads * head_size, generator=gen, dtype=torch.float64).to(dtype)
    key = torch.randn(*tokens, kv_heads * head_size, generator=gen, dtype=torch.float64).to(dtype)
    # vLLM's cache: cos and sin of position * inverse frequency, halves side by side.
    inv = 1.0 / (10000.0 ** (torch.arange(0, rot, 2, dtype=torch.float64) / rot))
    angles = torch.arange(rows, dtype=torch.float64)[:, None] * inv[None, :]
    cache = torch.cat((angles.cos(), angles.sin()), dim=-1).to(cache_dtype or dtype)
    return positions, query, key, cache


def run(ops: Any, entry: Any, positions: Any, query: Any, key: Any, cache: Any, head_size: int, neox: bool):
    with torch.no_grad():
        getattr(ops, entry.name)(positions, query, key, cache, head_size, neox)


@ENTRIES
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("rot", [32, 16], ids=["full", "partial"])
@pytest.mark.parametrize("with_key", [True, False], ids=["key", "no-key"])
def test_matches_vllms_formula(ops, entry, dtype, neox, rot, with_key, gen):
    positions, query, key, cache = make_case(dtype, gen, rot=rot)
    key = key if with_key else None
    exact_q, exact_k = vllm_reference(
        positions, query.double(), None if key is None else key.double(), cache.double(), 32, neox
    )
    want_q, want_k = vllm_reference(positions, query, key, cache, 32, neox)
    q, k = query.clone(), None if key is None else key.clone()
    run(ops, entry, positions, q, k, cache, 32, neox)
    pairs = [(q, exact_q, want_q)] + ([] if key is None else [(k, exact_k, want_k)])
    for got, exact, theirs in pairs:
        assert got.dtype == dtype
        if dtype == torch.float32:  # vLLM's float32 sequence, bit for bit
            assert torch.equal(got, theirs)
        # Rounded once from the compute type: within an ulp of the exact value's magnitude.
        ulp = torch.finfo(dtype).eps * exact.abs().max().item()
        assert (got.double() - exact).abs().max().item() <= ulp
        # The columns past the rotated width pass through.
        heads = got.reshape(*got.shape[:-1], -1, 32)
        before = (query if got is q else key).reshape(heads.shape)
        assert torch.equal(heads[..., rot:], before[..., rot:])


@ENTRIES
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_a_float32_cache_beside_16_bit_activations(ops, entry, dtype, gen):
    # vLLM keeps its cache in float32; the result is the float32 computation rounded once.
    positions, query, key, cache = make_case(dtype, gen, cache_dtype=torch.float32)
    q, k = query.clone(), key.clone()
    run(ops, entry, positions, q, k, cache, 32, True)
    want_q, want_k = vllm_reference(positions, query.float(), key.float(), cache, 32, True)
    assert torch.equal(q, want_q.to(dtype)) and torch.equal(k, want_k.to(dtype))


@ENTRIES
def test_layouts_vllm_passes_are_written_in_place(ops, entry, gen):
    positions, query, key, cache = make_case(torch.float32, gen, tokens=(2, 5))
    want_q, want_k = vllm_reference(positions, query, key, cache, 32, True)
    # [batch, seq] positions; query and key slices of one fused qkv row (vLLM's split).
    qkv = torch.cat((query, key, torch.randn(2, 5, 64, generator=gen)), dim=-1)
    v = qkv[..., 192:].clone()
    q, k = qkv[..., :128], qkv[..., 128:192]
    assert not q.is_contiguous()
    run(ops, entry, positions, q, k, cache, 32, True)
    assert torch.equal(q, want_q) and torch.equal(k, want_k) and torch.equal(qkv[..., 192:], v)
    # [tokens, heads, head_size], and a layout that is no token rows at all (written back).
    q3 = query.clone().reshape(2, 5, 4, 32)
    run(ops, entry, positions, q3, None, cache, 32, True)
    assert torch.equal(q3.reshape(2, 5, 128), want_q)
    qt = query.clone().transpose(0, 1).contiguous().transpose(0, 1)
    run(ops, entry, positions, qt, None, cache, 32, True)
    assert torch.equal(qt, want_q)
    # int32 positions, as some callers keep them.
    q32 = query.clone()
    run(ops, entry, positions.int(), q32, None, cache, 32, True)
    assert torch.equal(q32, want_q)


@ENTRIES
def test_a_bad_position_raises_and_writes_nothing(ops, entry, gen):
    positions, query, key, cache = make_case(torch.float32, gen)
    positions[3] = 64  # one past the cache
    q, k = query.clone(), key.clone()
    with pytest.raises(
        RuntimeError, match=r"positions\[3\]: expected a row of cos_sin_cache, in \[0, 64\), got 64"
    ):
        run(ops, entry, positions, q, k, cache, 32, True)
    assert torch.equal(q, query) and torch.equal(k, key)
    positions[3] = -1
    with pytest.raises(RuntimeError, match=r"positions\[3\]: .* got -1"):
        run(ops, entry, positions, q, k, cache, 32, True)
    assert torch.equal(q, query)


def error_cases(gen: Any) -> list[tuple[str, Any]]:
    """(what the message says, the arguments) for every rule the kernel and the fake both check."""
    p, q, k, c = make_case(torch.float32, gen)
    return [
        (r"query: expected dtype .*, got int32", (p, q.int(), k, c, 32, True)),
        (r"positions: expected dtype int64 or int32, got float32", (p.float(), q, k, c, 32, True)),
        (r"key: expected dtype float32 \(same as query\), got float64", (p, q, k.double(), c, 32, True)),
        (
            r"cos_sin_cache: expected dtype bfloat16 or float32 \(query's or its compute type\), got float16",
            (p, q.bfloat16(), k.bfloat16(), c.half(), 32, True),
        ),
        (
            r"query: expected whole heads of head_size \(48\) a token, got 128 elements a token",
            (p, q, k, c, 48, True),
        ),
        (
            r"query: expected positions's shape \[6\] as its leading dims and a token's heads after them, "
            r"got shape \[7, 128\]",
            (p[:6], q, k, c, 32, True),
        ),
        (
            r"cos_sin_cache: expected shape \[rows, r\] with r even, at most head_size \(32\), got \[64, 31\]",
            (p, q, k, c[:, :31], 32, True),
        ),
        (
            r"cos_sin_cache: expected shape \[rows, r\] .*got \[64, 64\]",
            (p, q, k, torch.cat((c, c), -1), 32, True),
        ),
    ]


@ENTRIES
@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_errors_name_the_argument(ops, entry, device, gen):
    # The kernel (cpu) and the fake (meta) say the same, in the same words.
    for pattern, args in error_cases(gen):
        moved = [a.to(device) if isinstance(a, torch.Tensor) else a for a in args]
        with pytest.raises(RuntimeError, match=rf"{ops.name}::{entry.name}: {pattern}"):
            run(ops, entry, *moved)
    p, q, _, c = make_case(torch.float32, gen)
    with pytest.raises(RuntimeError, match=rf"{ops.name}::{entry.name}: key: shares memory with query"):
        run(ops, entry, p, q, q, c, 32, True)


@ENTRIES
@pytest.mark.parametrize("which", ["query", "key"])
def test_an_expanded_written_argument_is_refused_before_any_write(ops, entry, which, gen):
    # Several elements at one address: the write would race (or a copied
    # layout's write-back fail half way). Refused by name, nothing written.
    p, q, k, c = make_case(torch.float32, gen)
    args = {"query": q, "key": k}
    args[which] = args[which][:1].expand_as(args[which])
    before = {n: t.clone() for n, t in args.items()}
    with pytest.raises(
        RuntimeError,
        match=rf"{ops.name}::{entry.name}: {which}: has internal overlap \(e.g. an expanded tensor\)",
    ):
        run(ops, entry, p, args["query"], args["key"], c, 32, True)
    for n, t in args.items():
        assert torch.equal(t, before[n]), n


@ENTRIES
def test_refuses_a_derivative_and_marks_the_write(ops, entry, gen):
    p, q, k, c = make_case(torch.float32, gen)
    with pytest.raises(
        RuntimeError, match=rf"{entry.name}: writes query and key in place and is not differentiable"
    ):
        getattr(ops, entry.name)(p, q.clone().requires_grad_(), k, c, 32, True)
    version = q._version
    run(ops, entry, p, q, k, c, 32, True)
    assert q._version > version  # autograd and compile see the write
    with torch.inference_mode():
        qi, ki = q.clone(), k.clone()
        getattr(ops, entry.name)(p, qi, ki, c, 32, True)


@ENTRIES
def test_opcheck(ops, entry, gen):
    p, q, k, c = make_case(torch.float32, gen)
    for args in ((p, q, k, c, 32, True), (p, q, None, c, 32, False), (p, q.bfloat16(), None, c, 32, True)):
        result = torch.library.opcheck(getattr(ops, entry.name).default, args)
        assert all(v == "SUCCESS" for v in result.values()), result


@ENTRIES
def test_compile_functionalizes_the_write(ops, entry, gen):
    p, q, k, c = make_case(torch.float32, gen)
    want_q, want_k = vllm_reference(p, q, k, c, 32, True)
    op = getattr(ops, entry.name)

    @torch.compile(fullgraph=True)
    def step(positions, query, key, cache):
        op(positions, query, key, cache, 32, True)
        return query * 2

    with torch.no_grad():
        got = step(p, q, k, c)
    assert torch.equal(q, want_q) and torch.equal(k, want_k)
    torch.testing.assert_close(got, want_q * 2, rtol=0, atol=0)


# What a tier's tests/test_row_in_place.py collects: the tests, and what they share.
__all__ = [
    "ENTRIES",
    "make_case",
    "vllm_reference",
    *sorted(n for n in list(globals()) if n.startswith("test_")),
]
