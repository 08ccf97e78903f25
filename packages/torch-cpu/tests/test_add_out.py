"""add_out: the mutating op (Tensor(a!) out) -> Tensor(a!), returning `out` as aten's out= ops do."""

import pytest
import torch

ops = torch.ops.tierkit


def test_writes_into_out_and_returns_it(gen):
    a, b = torch.randn(10, 7, generator=gen), torch.randn(10, 7, generator=gen)
    out = torch.full((10, 7), 99.0)
    ptr = out.data_ptr()
    assert ops.add_out(a, b, out) is out
    assert out.data_ptr() == ptr
    torch.testing.assert_close(out, a + b, rtol=0, atol=0)


def test_out_may_alias_an_input_exactly(gen):
    a, b = torch.randn(1000, generator=gen), torch.randn(1000, generator=gen)
    expected = a + b
    ops.add_out(a, b, a)
    assert torch.equal(a, expected)


def test_strided_out(gen):
    a = torch.randn(6, 5, generator=gen)
    big = torch.zeros(6, 10)
    ops.add_out(a, a, big[:, ::2])
    assert torch.equal(big[:, ::2], a + a)
    assert not big[:, 1::2].any()


def test_bumps_the_version_counter(gen):
    a, out = torch.randn(4, generator=gen), torch.empty(4)
    v = out._version
    ops.add_out(a, a, out)
    assert out._version == v + 1


@pytest.mark.parametrize(
    ("make", "pattern"),
    [
        (lambda a: torch.empty(1).expand(10), "out: has internal overlap"),
        (lambda a: torch.empty(9), "out: expected shape \\[10\\] \\(the result's\\), got \\[9\\]"),
        (
            lambda a: torch.empty(0),
            "out: expected shape \\[10\\] \\(the result's\\), got \\[0\\]",
        ),  # never resized
        (
            lambda a: torch.empty(10, dtype=torch.int64),
            "out: expected a dtype the result \\(float32\\) can be cast to, got int64",
        ),
        (lambda a: torch.empty(10, device="meta"), "out: expected device cpu \\(the inputs'\\), got meta"),
    ],
    ids=["expanded", "shape", "empty", "dtype", "device"],
)
def test_bad_out(make, pattern):
    a = torch.randn(10)
    out = make(a)
    with pytest.raises(RuntimeError, match=pattern):
        ops.add_out(a, a, out)


def test_partial_overlap_is_refused():
    base = torch.randn(11)
    with pytest.raises(RuntimeError, match="tierkit::add_out: out: partially overlaps a"):
        ops.add_out(base[:10], base[:10].clone(), base[1:])


def test_refuses_autograd():
    a = torch.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="does not support automatic differentiation"):
        ops.add_out(a, a.detach(), torch.empty(3))
    with torch.no_grad():
        out = torch.empty(3)
        ops.add_out(a, a, out)
    torch.testing.assert_close(out, 2 * a.detach())
