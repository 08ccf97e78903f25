"""The row maps' test suite (the op table's third kind, ``ROW_MAPS``: rotary
embeddings), every entry in one torch namespace: each torch tier's
``tests/test_row_maps.py`` imports these tests and gives them its namespace
(the ``ops`` fixture); the guard test checks every entry has its cases.

The reference is the models' own code: Hugging Face's ``apply_rotary_pos_emb``
(``q * cos + rotate_half(q) * sin``) and GPT-J's interleaved pairs, written
here apart from the table's formula, in the inputs' dtypes (eager) and in
float64. Values per dtype and layout (bit-identical to eager in float32 and
float64, where eager's roundings are the kernel's; at least as close to
float64 in 16-bit), partial rotary width (Phi-3), broadcast tables, mixed
dtypes, errors (real and fake), gradients for x and the tables in both
modes and double backward, vmap, compile, opcheck.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch
from tierkit_core.op_table import ROW_MAPS, RowMap

from .row_suite import err, make

__all__ = [
    "MAPS",
    "eager",
    "rope_tables",
    "test_map_compile_fullgraph_dynamic_forward_and_backward",
    "test_map_errors_name_the_argument",
    "test_map_fakes_give_the_kernels_dtypes",
    "test_map_gradcheck_gradgradcheck_and_forward_ad",
    "test_map_gradients_as_accurate_as_eager",
    "test_map_matches_eager",
    "test_map_mixed_dtypes_promote",
    "test_map_opcheck",
    "test_map_vmap_without_fallback",
    "test_map_x_of_any_rank",
]

MAPS = pytest.mark.parametrize("entry", ROW_MAPS, ids=[e.name for e in ROW_MAPS])
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def _rotate_half(v: Any) -> Any:
    half = v.shape[-1] // 2
    return torch.cat((-v[..., half:], v[..., :half]), -1)


def _rotate_pairs(v: Any) -> Any:
    a, b = v[..., 0::2], v[..., 1::2]
    return torch.stack((-b, a), -1).flatten(-2)


def eager(x: Any, cos: Any, sin: Any, interleaved: bool = False) -> Any:
    """What the models compute: HF's apply_rotary_pos_emb (partial width as Phi-3's), or GPT-J's pairs."""
    r = cos.shape[-1]
    xr, rest = x[..., :r], x[..., r:]
    y = xr * cos + (_rotate_pairs(xr) if interleaved else _rotate_half(xr)) * sin
    return torch.cat((y, rest.to(y.dtype)), -1)


def rope_tables(seq: int, r: int, dtype: Any, interleaved: bool = False, base: float = 10000.0) -> tuple:
    """cos and sin [seq, r] as HF's rotary modules make them (each frequency twice)."""
    inv = 1.0 / base ** (torch.arange(0, r, 2, dtype=torch.float64) / r)
    freqs = torch.outer(torch.arange(seq, dtype=torch.float64), inv)
    emb = freqs.repeat_interleave(2, -1) if interleaved else torch.cat((freqs, freqs), -1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def call(ops: Any, entry: RowMap, *args: Any) -> Any:
    return getattr(ops, entry.name)(*args)


# [batch, heads, seq, head_dim] against tables [batch or 1, 1, seq, r]: HF's layout.
SHAPES = [
    ((2, 3, 5, 16), (1, 1, 5, 16)),
    ((2, 3, 5, 16), (5, 16)),
    ((2, 4, 7, 32), (2, 1, 7, 24)),
    ((3, 8), (3, 8)),
]


@MAPS
@pytest.mark.parametrize("interleaved", [False, True], ids=["neox", "gptj"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("xs", "ts"), SHAPES, ids=[f"{a}-{b}" for a, b in SHAPES])
def test_map_matches_eager(ops, entry, xs, ts, dtype, interleaved, gen):
    x = make(xs, dtype, gen, 1.0)
    if (len(ts) > 1 and ts[0] == 1) or len(ts) == 2:  # one table for every example: HF's positions
        cos, sin = (t.reshape(ts) for t in rope_tables(ts[-2], ts[-1], dtype, interleaved))
    else:  # per-example tables (positions differ by example)
        cos, sin = make(ts, dtype, gen, 1.0), make(ts, dtype, gen, 1.0)
    ours = call(ops, entry, x, cos, sin, interleaved)
    theirs = eager(x, cos, sin, interleaved)
    assert ours.dtype == theirs.dtype and ours.shape == x.shape and ours.is_contiguous()
    if dtype in (torch.float32, torch.float64):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)  # eager's roundings, bit for bit
    else:
        ref = eager(x.double(), cos.double(), sin.double(), interleaved)
        ulp = torch.finfo(dtype).eps * ref.abs().max().item()
        assert err(ours, ref) <= err(theirs, ref) + ulp
        assert err(ours, ref) <= ulp  # one rounding from float
    # Non-contiguous x (a transposed view, as q.transpose(1, 2) in the models) gives the same.
    xt = x.transpose(0, -2).contiguous().transpose(0, -2)
    torch.testing.assert_close(call(ops, entry, xt, cos, sin, interleaved), ours, rtol=0, atol=0)


@MAPS
def test_map_mixed_dtypes_promote(ops, entry, gen):
    for xd, td in (
        (torch.bfloat16, torch.float32),
        (torch.float32, torch.bfloat16),
        (torch.float16, torch.bfloat16),
    ):
        x = make((2, 3, 4, 8), xd, gen, 1.0)
        cos, sin = rope_tables(4, 8, td)
        ours = call(ops, entry, x, cos, sin, False)
        want = torch.promote_types(xd, td)
        assert ours.dtype == want
        torch.testing.assert_close(ours, eager(x.to(want), cos.to(want), sin.to(want)))


@MAPS
def test_map_gradcheck_gradgradcheck_and_forward_ad(ops, entry, gen):
    for interleaved in (False, True):
        x = make((2, 3, 8), torch.float64, gen, 1.0).requires_grad_()
        cos = make((3, 6), torch.float64, gen, 1.0).requires_grad_()
        sin = make((1, 6), torch.float64, gen, 1.0).requires_grad_()

        def fn(a, c, s, interleaved=interleaved):
            return call(ops, entry, a, c, s, interleaved)

        assert torch.autograd.gradcheck(fn, (x, cos, sin), check_forward_ad=True)
        assert torch.autograd.gradgradcheck(fn, (x, cos, sin))
        # x alone (the usual case: cos and sin are buffers).
        c, s = cos.detach(), sin.detach()
        assert torch.autograd.gradcheck(lambda a, c=c, s=s: fn(a, c, s), (x,), check_forward_ad=True)


@MAPS
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_map_gradients_as_accurate_as_eager(ops, entry, dtype, gen):
    x = make((2, 4, 6, 16), dtype, gen, 1.0).requires_grad_()
    cos, sin = (t.reshape(1, 1, 6, 16).requires_grad_() for t in rope_tables(6, 16, dtype))
    g = make(x.shape, dtype, gen, 1.0)
    ours = torch.autograd.grad(call(ops, entry, x, cos, sin, False), (x, cos, sin), g)
    theirs = torch.autograd.grad(eager(x, cos, sin), (x, cos, sin), g)
    x64, c64, s64 = (t.detach().double().requires_grad_() for t in (x, cos, sin))
    ref = torch.autograd.grad(eager(x64, c64, s64), (x64, c64, s64), g.double())
    for o, a, r in zip(ours, theirs, ref):
        assert o.dtype == a.dtype and o.shape == a.shape
        assert err(o, r) <= err(a, r) + 2 * torch.finfo(dtype).eps * r.abs().max().item(), (
            err(o, r),
            err(a, r),
        )


@MAPS
@pytest.mark.parametrize("in_dims", [(0, None, None), (1, None, None), (0, 0, 0), (None, 0, 0)])
def test_map_vmap_without_fallback(ops, entry, in_dims, gen):
    torch._C._functorch._set_vmap_fallback_enabled(False)
    try:
        x = make((4, 3, 5, 8), torch.float32, gen, 1.0)
        if in_dims[0] is None:
            x = x[0]
        batch = 3 if in_dims[0] == 1 else 4
        cos, sin = rope_tables(5, 8, torch.float32)
        if in_dims[1] == 0:
            cos, sin = (
                make((batch, 5, 8), torch.float32, gen, 1.0),
                make((batch, 5, 8), torch.float32, gen, 1.0),
            )
        got = torch.vmap(lambda a, c, s: call(ops, entry, a, c, s, False), in_dims=in_dims)(x, cos, sin)
        want = torch.vmap(lambda a, c, s: eager(a, c, s), in_dims=in_dims)(x, cos, sin)
        torch.testing.assert_close(got, want)
        # The backward's own rule: the transposed map over a batch of gradients.
        backward = getattr(ops, entry.backward_name)
        gs = make((2, 4, 5, 8), torch.float32, gen, 1.0)
        c, s = rope_tables(5, 8, torch.float32)
        got = torch.vmap(lambda g: backward(g, c, s, False))(gs)
        torch.testing.assert_close(got, torch.stack([backward(g, c, s, False) for g in gs]), rtol=0, atol=0)
    finally:
        torch._C._functorch._set_vmap_fallback_enabled(True)


@MAPS
def test_map_compile_fullgraph_dynamic_forward_and_backward(ops, entry, gen):
    x = make((2, 4, 6, 16), torch.float32, gen, 1.0).requires_grad_()
    cos, sin = (t.reshape(1, 1, 6, 16) for t in rope_tables(6, 16, torch.float32))

    def fn(a):
        return call(ops, entry, a, cos, sin, False) * 2

    compiled = torch.compile(fn, fullgraph=True, dynamic=True)
    torch.testing.assert_close(compiled(x), fn(x))
    torch.testing.assert_close(torch.autograd.grad(compiled(x).sum(), x), torch.autograd.grad(fn(x).sum(), x))
    x2 = make((3, 2, 6, 16), torch.float32, gen, 1.0)
    torch.testing.assert_close(compiled(x2), fn(x2))


@MAPS
def test_map_opcheck(ops, entry, gen):
    cos, sin = rope_tables(5, 8, torch.float32)
    cases = [
        (make((2, 3, 5, 8), torch.float32, gen), cos, sin, False),
        (make((2, 3, 5, 12), torch.float64, gen).requires_grad_(), cos.double(), sin.double(), True),
        (make((5, 8), torch.bfloat16, gen), cos, sin, False),
    ]
    for args in cases:
        torch.library.opcheck(getattr(ops, entry.name).default, args)
    torch.library.opcheck(
        getattr(ops, entry.backward_name).default, (make((2, 5, 8), torch.float32, gen), cos, sin, False)
    )


@MAPS
@pytest.mark.parametrize(
    ("xd", "td"),
    [(torch.bfloat16, torch.float32), (torch.float16, torch.bfloat16), (torch.float32, torch.float64)],
    ids=str,
)
def test_map_fakes_give_the_kernels_dtypes(ops, entry, xd, td, gen):
    """The map and its backward promote x (grad) with the tables: the fakes
    say so (the backward's said grad's dtype, and Inductor then refused the
    kernel's output: "expected dtype torch.bfloat16 but got torch.float32")."""
    cos, sin = rope_tables(5, 8, td)
    x = make((2, 5, 8), xd, gen)
    for name in (entry.name, entry.backward_name):
        overload = getattr(ops, name).default
        real = overload(x, cos, sin, False)
        assert real.dtype == torch.promote_types(xd, td)
        torch.library.opcheck(overload, (x, cos, sin, False), test_utils=("test_schema", "test_faketensor"))
    # What Inductor compiles: the backward of a bfloat16 x against float32 tables.
    xg = x.clone().requires_grad_()
    fn = torch.compile(lambda a: call(ops, entry, a, cos, sin, False).sum(), fullgraph=True)
    (got,) = torch.autograd.grad(fn(xg), xg)
    (want,) = torch.autograd.grad(call(ops, entry, xg, cos, sin, False).sum(), xg)
    assert got.dtype == want.dtype == xd
    torch.testing.assert_close(got, want)


@MAPS
@pytest.mark.parametrize(
    ("xs", "ts"),
    [
        ((2, 1, 2, 1, 2, 1, 2, 3, 4, 8), (3, 1, 8)),  # 10-d x, tables [seq, 1, r]
        (
            (2, 2, 2, 2, 2, 2, 2, 2, 3, 8),
            (2, 1, 2, 1, 2, 1, 2, 2, 3, 8),
        ),  # 9 leading dims, 7 runs once merged
        ((3, 2, 1, 1, 1, 1, 1, 1, 1, 5, 16), (5, 16)),  # 11-d, size-1 dims
    ],
    ids=str,
)
def test_map_x_of_any_rank(ops, entry, xs, ts, gen):
    """x of more than 8 dims is computed like any other (core merges the
    leading dims the tables' broadcast allows), as every other op computes it."""
    x = make(xs, torch.float32, gen, 1.0)
    cos, sin = make(ts, torch.float32, gen, 1.0), make(ts, torch.float32, gen, 1.0)
    got = call(ops, entry, x, cos, sin, False)
    torch.testing.assert_close(got, eager(x, cos, sin), rtol=1e-6, atol=1e-6)
    # Tables broadcast in more alternating runs than core holds: a clear error.
    many = (2,) * 9 + (8,)
    t = torch.ones(2, 1, 2, 1, 2, 1, 2, 1, 2, 8)
    with pytest.raises(
        RuntimeError, match=r"x: expected leading dims that the tables' broadcast leaves in at most 8 runs"
    ):
        call(ops, entry, make(many, torch.float32, gen), t, t, False)


def _error_cases(entry: RowMap, device: str) -> list[tuple[Any, str]]:
    def ones(*shape: int) -> Any:
        return torch.ones(shape, device=device)

    x, c = ones(2, 5, 8), ones(5, 8)
    other = torch.ones(5, 8, device="meta" if device == "cpu" else "cpu")
    return [
        ((x.long(), c, c), "x: expected dtype"),
        ((x, c.int(), c), "cos: expected dtype"),
        ((ones(), c, c), "x: expected a tensor with at least one dimension"),
        ((x, ones(5, 7), ones(5, 7)), "cos: expected a width r = cos.size(-1) that is even"),
        ((x, ones(5, 10), ones(5, 10)), "that is even, at most x.size(-1) (8), got 10"),
        ((x, c, ones(5, 6)), "sin: expected a last dimension of 8"),
        ((x, ones(4, 8), c), "cos: shape [4, 8] does not broadcast against x[..., :8] of shape [2, 5, 8]"),
        ((x, ones(3, 2, 5, 8), ones(3, 2, 5, 8)), "cos: shape [3, 2, 5, 8] does not broadcast"),
        ((x, other, c), "cos: expected device"),
    ]


@MAPS
def test_map_kernel_and_fake_refuse_in_the_same_words(ops, entry):
    # The CPU kernel asks core's C++ rules, the fake kernel core's Python
    # twin (tierkit_core.row_rules): one message, word for word.
    for (args, _), (meta_args, _) in zip(_error_cases(entry, "cpu")[:-1], _error_cases(entry, "meta")[:-1]):
        said = []
        for a in (args, meta_args):
            with pytest.raises(RuntimeError) as info:
                call(ops, entry, *a, False)
            said.append(str(info.value).split("\n")[0])
        assert said[0] == said[1]


@MAPS
@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_map_errors_name_the_argument(ops, entry, device):
    name = f"{ops.name}::{entry.name}"
    for args, text in _error_cases(entry, device):
        with pytest.raises(RuntimeError, match=re.escape(text)) as info:
            call(ops, entry, *args, False)
        assert str(info.value).startswith(f"{name}: ") or name in str(info.value), str(info.value)
    # torch.func's differentiating transforms give eager's gradient (a C++
    # autograd node: tierkit::) or are refused, never silently wrong (a Python
    # one, which runs below them: tierkit_stable::); torch.autograd works in both.
    if device == "cpu":
        cos, sin = rope_tables(5, 8, torch.float32)
        a = torch.randn(5, 8, generator=torch.Generator().manual_seed(2))
        want = torch.func.grad(lambda t: (eager(t, cos, sin) ** 2).sum())(a)
        try:
            got = torch.func.grad(lambda t: (call(ops, entry, t, cos, sin, False) ** 2).sum())(a)
        except RuntimeError as e:
            assert "torch.func transforms that differentiate" in str(e), str(e)
        else:
            torch.testing.assert_close(got, want)
    # With grad, the same errors, naming the op called.
    x = torch.ones(2, 5, 8, device=device, requires_grad=True)
    with pytest.raises(RuntimeError, match=f"{name}: cos: expected a width"):
        call(ops, entry, x, torch.ones(5, 7, device=device), torch.ones(5, 7, device=device), False)
