"""tierkit ops on a 2-process CPU mesh (gloo on 127.0.0.1): DTensor placements
and values, and DDP training with tierkit ops in the model.

Workers are spawned (not forked), bound in time, talk only to 127.0.0.1 on a
free port, send what they computed back before teardown, and end with
os._exit(0): with torch 2.14.1 and gloo a worker occasionally aborts in
interpreter finalization after destroy_process_group() ("terminate called
without an active exception", seen with plain aten ops too). Judging the
results sent before teardown, and skipping finalization, keeps the tests
about tierkit and not about that.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import socket
import sys
import time
import traceback

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed unavailable")

WORLD = 2
TIMEOUT_S = 180


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(worker, *args) -> list:
    """Spawns WORLD workers running worker(rank, *args); returns what each sent."""
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_entry, args=(worker, rank, port, results, args)) for rank in range(WORLD)]
    for p in procs:
        p.start()
    got = {}
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(got) < WORLD:
            try:
                rank, ok, payload = results.get(timeout=1)
            except queue.Empty:
                dead = [p.exitcode for p in procs if p.exitcode is not None]
                if len(dead) == WORLD and results.empty():
                    pytest.fail(f"workers exited ({dead}) without reporting")
                if time.monotonic() > deadline:
                    pytest.fail(f"workers did not report within {TIMEOUT_S} s")
                continue
            assert ok, f"rank {rank} failed:\n{payload}"
            got[rank] = payload
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    return [got[r] for r in range(WORLD)]


def _entry(worker, rank, port, results, args):
    import torch.distributed as dist

    try:
        dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
            timeout=__import__("datetime").timedelta(seconds=TIMEOUT_S),
        )  # fmt: skip
        payload = worker(rank, *args)
        dist.barrier()
        results.put((rank, True, payload))
        dist.destroy_process_group()
    except BaseException:
        results.put((rank, False, traceback.format_exc()))
    results.close()
    results.join_thread()  # the queue's feeder thread must flush before os._exit
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # see the module docstring: skip the interpreter's finalization


# ---- DTensor ---------------------------------------------------------------------


def _dtensor_worker(rank):
    import tierkit_torch  # noqa: F401  (registers the sharding strategies on DTensor import)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

    ops = torch.ops.tierkit
    mesh = init_device_mesh("cpu", (WORLD,))
    gen = torch.Generator().manual_seed(0)  # the same full tensors on every rank
    a, b = torch.randn(8, 6, generator=gen), torch.randn(8, 6, generator=gen)
    out = {}

    def record(name, result, want):
        out[name] = (
            [str(p) for p in result.placements],
            bool(torch.allclose(result.full_tensor(), want, rtol=1e-6, atol=1e-6)),
        )

    for placement in (Shard(0), Shard(1), Replicate()):
        da, db = distribute_tensor(a, mesh, [placement]), distribute_tensor(b, mesh, [placement])
        record(f"custom_add {placement}", ops.custom_add(da, db), a + b)
        record(f"mul {placement}", ops.mul(da, db), a * b)
        record(f"scale_shift {placement}", ops.scale_shift(da, 2.0, 1.0), 2 * a + 1)
        record(f"muladd {placement}", ops.muladd(da, db, 0.5), a * b + 0.5)
        record(f"silu_mul {placement}", ops.silu_mul(da, db), torch.nn.functional.silu(a) * b)

    # Partial: each rank holds a share whose sum is the value.
    share_a, share_b = a * (rank + 1) / 3, b * (rank + 1) / 3  # shares 1/3 and 2/3
    pa = DTensor.from_local(share_a, mesh, [Partial()])
    pb = DTensor.from_local(share_b, mesh, [Partial()])
    ra = distribute_tensor(a, mesh, [Replicate()])
    record("custom_add P+P", ops.custom_add(pa, pb), a + b)
    record("mul P*P", ops.mul(pa, pb), a * b)
    record("mul P*R", ops.mul(pa, ra), a * a)
    record("scale_shift P beta=1", ops.scale_shift(pa, 2.0, 1.0), 2 * a + 1)
    record("scale_shift P beta=0", ops.scale_shift(pa, 2.0, 0.0), 2 * a)
    record("muladd P*R c=0.5", ops.muladd(pa, ra, 0.5), a * a + 0.5)
    # silu(a) * b: linear in b only.
    record("silu_mul R*P", ops.silu_mul(ra, pb), torch.nn.functional.silu(a) * b)
    record("silu_mul P*R", ops.silu_mul(pa, ra), torch.nn.functional.silu(a) * a)
    return out


def test_dtensor_placements_and_values():
    per_rank = _run(_dtensor_worker)
    assert per_rank[0] == per_rank[1]
    results = per_rank[0]
    wrong = {k: v for k, v in results.items() if not v[1]}
    assert not wrong, f"values differ from one process: {wrong}"
    # Matching Shard/Replicate placements pass through unchanged (no redistribution).
    for op in ("custom_add", "mul", "scale_shift", "muladd", "silu_mul"):
        for placement in ("S(0)", "S(1)", "R"):
            got = results[f"{op} {placement}"][0]
            assert got == [placement], (op, placement, got)
    # Linear cases stay partial, without communication. The others (values
    # checked above) were redistributed first: DTensor picks how by cost.
    assert results["custom_add P+P"][0] == ["P(sum)"]
    assert results["mul P*R"][0] == ["P(sum)"]
    assert results["scale_shift P beta=1"][0] != ["P(sum)"]
    assert results["muladd P*R c=0.5"][0] != ["P(sum)"]
    assert results["silu_mul R*P"][0] == ["P(sum)"]
    assert results["silu_mul P*R"][0] != ["P(sum)"]


def _rows_worker(rank):
    import tierkit_torch  # noqa: F401
    import torch.nn.functional as F
    from tierkit_core.op_table import ROW_REDUCTIONS
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    ops = torch.ops.tierkit
    mesh = init_device_mesh("cpu", (WORLD,))
    out = {}
    for entry in ROW_REDUCTIONS:  # every row reduction of the op table
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(4, 6, 8, generator=gen)
        params = [float(p == "weight") + 0.5 * torch.randn(8, generator=gen) for p in entry.params]
        op = getattr(ops, entry.name)
        if entry.has_dim:  # along dim 1: torch.<name>(x, 1)

            def aten(t, _shape, *_, _n=entry.name):
                return getattr(torch, _n)(t, 1)

        else:
            aten = getattr(F, entry.name)
        last = 1 if entry.has_dim else 1e-6
        for placement in (Shard(0), Shard(1), Shard(2), Replicate()):
            dx = distribute_tensor(x, mesh, [placement]).requires_grad_()
            dps = [distribute_tensor(p, mesh, [Replicate()]).requires_grad_() for p in params]
            y = op(dx, *dps, last)
            want = aten(x, (8,), *params, 1e-6)
            g = torch.randn(4, 6, 8, generator=gen)  # not all ones: a normalised row's sum has no gradient
            grads = torch.autograd.grad(y, (dx, *dps), distribute_tensor(g, mesh, [Replicate()]))
            xr, prs = x.clone().requires_grad_(), [p.clone().requires_grad_() for p in params]
            exact = torch.autograd.grad(aten(xr, (8,), *prs, 1e-6), (xr, *prs), g)
            out[f"{entry.name} {placement}"] = (
                [str(p) for p in y.placements],
                bool(torch.allclose(y.full_tensor(), want, rtol=1e-5, atol=1e-6)),
                [
                    bool(torch.allclose(g.full_tensor(), e, rtol=1e-4, atol=1e-5))
                    for g, e in zip(grads, exact)
                ],
                [[str(p) for p in g.placements] for g in grads[1:]],
            )
    # The row maps (rotary embeddings): shards of any dim but the last keep their placement.
    from tierkit_core.op_table import ROW_MAPS
    from tierkit_torch_common.map_suite import eager, rope_tables

    for entry in ROW_MAPS:
        gen = torch.Generator().manual_seed(0)
        q = torch.randn(2, 4, 6, 8, generator=gen)  # [batch, heads, seq, head_dim]
        cos, sin = (t.reshape(1, 1, 6, 8) for t in rope_tables(6, 8, torch.float32))
        for placement in (Shard(0), Shard(1), Shard(2), Shard(3), Replicate()):
            dq = distribute_tensor(q, mesh, [placement]).requires_grad_()
            dc, ds = (distribute_tensor(t, mesh, [Replicate()]) for t in (cos, sin))
            y = getattr(ops, entry.name)(dq, dc, ds, False)
            (g,) = torch.autograd.grad(y.sum(), (dq,))
            qr = q.clone().requires_grad_()
            want = eager(qr, cos, sin)
            (exact,) = torch.autograd.grad(want.sum(), (qr,))
            out[f"{entry.name} {placement}"] = (
                [str(p) for p in y.placements],
                bool(torch.allclose(y.full_tensor(), want, rtol=1e-6, atol=1e-6)),
                [bool(torch.allclose(g.full_tensor(), exact, rtol=1e-6, atol=1e-6))],
                [[str(p) for p in g.placements]],
            )
    # The casting modes (composites over the plain op): the same placements.
    from tierkit_core.op_table import CASTING_MODES
    from tierkit_torch_common.casting_suite import FORMULAS

    for entry in (e for e in ROW_REDUCTIONS if e.casting):
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(4, 6, 8, generator=gen)
        w = 0.5 * torch.randn(8, generator=gen)
        for mode in CASTING_MODES:
            kw = {"offset": 1.0, "casting_mode": mode.name}
            for placement in (Shard(0), Shard(1), Shard(2), Replicate()):
                dx = distribute_tensor(x, mesh, [placement]).requires_grad_()
                dw = distribute_tensor(w, mesh, [Replicate()]).requires_grad_()
                y = getattr(ops, entry.name)(dx, dw, 1e-6, **kw)
                xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
                want = FORMULAS[mode.name](xr, wr, 1e-6, 1.0)
                grads = torch.autograd.grad(y.sum(), (dx, dw))
                exact = torch.autograd.grad(want.sum(), (xr, wr))
                out[f"{entry.name}.{mode.name} {placement}"] = (
                    [str(p) for p in y.placements],
                    bool(torch.allclose(y.full_tensor(), want, rtol=1e-5, atol=1e-6)),
                    [
                        bool(torch.allclose(g.full_tensor(), e, rtol=1e-4, atol=1e-5))
                        for g, e in zip(grads, exact)
                    ],
                    [[str(p) for p in grads[1].placements]],
                )
    return out


def test_dtensor_row_reductions_shard_rows_without_communication():
    from tierkit_core.op_table import CASTING_MODES, ROW_MAPS, ROW_REDUCTIONS

    per_rank = _run(_rows_worker)
    assert per_rank[0] == per_rank[1]
    results = per_rank[0]
    for case, (_, values, grads, _) in results.items():
        assert values and all(grads), (case, results[case])
    for entry in (e for e in ROW_REDUCTIONS if e.has_dim):  # along dim 1: the others keep their shard
        n = entry.name
        assert results[f"{n} S(0)"][0] == ["S(0)"] and results[f"{n} S(2)"][0] == ["S(2)"]
        assert results[f"{n} S(1)"][0] != ["S(1)"]
    for entry in (e for e in ROW_REDUCTIONS if f"{e.name} S(0)" in results and not e.has_dim):
        n = entry.name
        # A batch dim keeps its shard; the normalised dim is made whole first.
        assert results[f"{n} S(0)"][0] == ["S(0)"] and results[f"{n} S(1)"][0] == ["S(1)"]
        assert results[f"{n} S(2)"][0] != ["S(2)"]
        # The parameters' gradients over sharded rows: partial sums, reduced only when read.
        assert all(g == ["P(sum)"] for g in results[f"{n} S(0)"][3]), results[f"{n} S(0)"]
    for entry in ROW_MAPS:  # the rotary maps: a leading dim's shard kept (values and gradients checked above)
        for k in range(3):
            case = results[f"{entry.name} S({k})"]
            assert case[0] == [f"S({k})"], case
        assert results[f"{entry.name} S(3)"][0] != ["S(3)"]
    modes = [f"{e.name}.{m.name}" for e in ROW_REDUCTIONS if e.casting for m in CASTING_MODES]
    assert modes and all(f"{n} S(0)" in results for n in modes)
    for n in modes:
        assert results[f"{n} S(0)"][0] == ["S(0)"] and results[f"{n} S(1)"][0] == ["S(1)"], n


# ---- DDP ---------------------------------------------------------------------------


class _Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        gen = torch.Generator().manual_seed(1)
        self.w = torch.nn.Parameter(torch.randn(16, generator=gen, dtype=torch.float64))
        self.v = torch.nn.Parameter(torch.randn(16, generator=gen, dtype=torch.float64))

    def forward(self, x):
        ops = torch.ops.tierkit
        h = ops.muladd(x, self.w.expand_as(x), 0.25)
        h = ops.custom_add(ops.mul(h, h), self.v.expand_as(x))
        return ops.scale_shift(h, 0.5, -1.0).sum(dim=1)


def _batch():
    gen = torch.Generator().manual_seed(2)
    return torch.randn(8, 16, generator=gen, dtype=torch.float64), torch.randn(
        8, generator=gen, dtype=torch.float64
    )


def _single_process_grads(steps):
    import tierkit_torch  # noqa: F401

    model = _Model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = _batch()
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def _ddp_worker(rank, steps):
    import tierkit_torch  # noqa: F401
    from torch.nn.parallel import DistributedDataParallel

    model = DistributedDataParallel(_Model())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = _batch()
    half = slice(rank * 4, rank * 4 + 4)  # each rank trains on its half of the same batch
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x[half]), y[half]).backward()
        opt.step()
    return [p.detach().tolist() for p in model.module.parameters()]  # plain data: survives os._exit


def test_ddp_training_matches_one_process():
    steps = 3
    per_rank = _run(_ddp_worker, steps)
    want = _single_process_grads(steps)
    for rank, params in enumerate(per_rank):
        for got, ref in zip(params, want):
            torch.testing.assert_close(
                torch.tensor(got, dtype=torch.float64), ref, rtol=1e-10, atol=1e-12, msg=f"rank {rank}"
            )
