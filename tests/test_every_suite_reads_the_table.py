"""Every suite exercises every entry of the op table, both kinds.

A new entry of ``tierkit_core.op_table.OPS`` (pointwise) or
``ROW_REDUCTIONS`` must be tested by each tier's suite without new test code; this guard makes that a fact, not a hope. Each
suite is collected (``pytest --collect-only``, in a subprocess, from the
suite's own directory, as nox runs it) and each of its table-driven tests
below must hold a case for every entry, and for every namespace where the
suite covers both. A suite that hard-codes its ops, or a filter that drops an
entry from one, fails here, naming the suite, the test and the entry.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
from tierkit_core.op_table import CASTING_MODES, OPS, ROW_IN_PLACE, ROW_MAPS, ROW_REDUCTIONS, Op, RowOp

ROOT = Path(__file__).resolve().parents[1]


Entry = Op | RowOp


def every(op: Entry) -> bool:
    return True


def binary(op: Entry) -> bool:
    return isinstance(op, Op) and len(op.tensors) == 2


def differentiable(op: Entry) -> bool:
    return bool(op.derivatives)


def fused(op: Entry) -> bool:
    return isinstance(op, RowOp) and op.fused_add


def casting(op: Entry) -> bool:
    return isinstance(op, RowOp) and op.casting


def with_params(op: Entry) -> bool:
    """A row op with per-column parameters (the norms): what mixed-dtype rules are about."""
    return isinstance(op, RowOp) and bool(op.params)


def along_a_dim(op: Entry) -> bool:
    """A row op with a dim argument (it runs along any dim)."""
    return isinstance(op, RowOp) and op.has_dim


# A casting test holds a case per entry with casting modes and per mode (its ids name both).
MODES = tuple(m.name for m in CASTING_MODES)


@dataclass(frozen=True)
class Aspect:
    """One table-driven test: ``file::test`` must hold a case per entry that
    `applies` to, with each of `also` (namespaces) among its parameters too.
    ``{op}`` in `test` stands for the entry's name in that suite (tests
    generated per entry under their own names)."""

    what: str
    file: str
    test: str
    applies: Callable[[Entry], bool] = every
    also: tuple[str, ...] = ()
    bridge_names: bool | None = None  # None: as the suite does
    rows: bool = False  # the row reductions' test (ROW_REDUCTIONS), not the pointwise entries'
    maps: bool = False  # the row maps' test (ROW_MAPS)
    in_place: bool = False  # the in-place row ops' test (ROW_IN_PLACE)


@dataclass(frozen=True)
class Suite:
    directory: str  # relative to the repository; pytest runs from there
    aspects: tuple[Aspect, ...]
    needs: str  # the module without which the suite cannot be collected here
    bridge_names: bool = False  # the suite calls the entries by their bridge names


BOTH = ("tierkit", "tierkit_stable")


def rows(
    what: str, file: str, test: str, applies: Callable[[Entry], bool] = every, also: tuple[str, ...] = ()
) -> Aspect:
    return Aspect(what, file, test, applies, also, rows=True)


def maps(what: str, file: str, test: str) -> Aspect:
    return Aspect(what, file, test, maps=True)


def in_place(what: str, file: str, test: str) -> Aspect:
    return Aspect(what, file, test, in_place=True)


def shared_suite(kind: Callable[..., Aspect], label: str, file: str, tests: tuple[tuple[str, str], ...]):
    """A torch-common suite as each torch tier collects it: (what, test) pairs of one kind."""
    return tuple(kind(f"{label}: {what}", file, test) for what, test in tests)


# The shared in-place suite (tierkit_torch_common.in_place_suite).
IN_PLACE_SUITE = shared_suite(
    in_place,
    "in place",
    "tests/test_row_in_place.py",
    (
        ("vLLM's formula", "test_matches_vllms_formula"),
        ("layouts", "test_layouts_vllm_passes_are_written_in_place"),
        ("errors", "test_errors_name_the_argument"),
        ("opcheck", "test_opcheck"),
        ("compile", "test_compile_functionalizes_the_write"),
    ),
)

# The shared map suite (tierkit_torch_common.map_suite).
MAP_SUITE = shared_suite(
    maps,
    "maps",
    "tests/test_row_maps.py",
    (
        ("values per dtype and layout", "test_map_matches_eager"),
        ("mixed dtypes", "test_map_mixed_dtypes_promote"),
        ("autograd, both modes", "test_map_gradcheck_gradgradcheck_and_forward_ad"),
        ("gradient accuracy", "test_map_gradients_as_accurate_as_eager"),
        ("vmap", "test_map_vmap_without_fallback"),
        ("compile", "test_map_compile_fullgraph_dynamic_forward_and_backward"),
        ("opcheck", "test_map_opcheck"),
        ("errors", "test_map_errors_name_the_argument"),
    ),
)

# The shared row suite (tierkit_torch_common.row_suite), as each torch tier collects it.
ROW_SUITE = (
    rows("rows: values and accuracy per dtype", "tests/test_rows.py", "test_at_least_as_accurate_as_aten"),
    rows("rows: mixed dtypes", "tests/test_rows.py", "test_parameters_of_another_dtype_as_aten", with_params),
    rows("rows: any dim", "tests/test_rows.py", "test_along_any_dim_as_aten", along_a_dim),
    rows(
        "rows: infinite and NaN rows", "tests/test_rows.py", "test_infinite_and_nan_rows_as_aten", along_a_dim
    ),
    rows(
        "rows: default eps, empty and strided",
        "tests/test_rows.py",
        "test_default_eps_empty_zero_and_strided_rows",
    ),
    rows("rows: errors", "tests/test_rows.py", "test_errors_name_the_argument"),
    rows("rows: autograd, both modes", "tests/test_rows.py", "test_gradcheck_gradgradcheck_and_forward_ad"),
    rows("rows: gradient accuracy", "tests/test_rows.py", "test_gradients_as_accurate_as_aten"),
    rows("rows: vmap", "tests/test_rows.py", "test_vmap_without_fallback"),
    rows("rows: compile", "tests/test_rows.py", "test_compile_fullgraph_dynamic_forward_and_backward"),
    rows("rows: opcheck", "tests/test_rows.py", "test_opcheck"),
    rows(
        "rows: the fused add", "tests/test_rows.py", "test_fused_add_is_the_add_then_the_norm", applies=fused
    ),
)

# The shared casting suite (tierkit_torch_common.casting_suite), as each torch tier collects it.
CASTING_SUITE = (
    rows(
        "casting: values per dtype",
        "tests/test_casting.py",
        "test_casting_matches_the_formula",
        casting,
        MODES,
    ),
    rows(
        "casting: gradient accuracy",
        "tests/test_casting.py",
        "test_casting_gradients_as_accurate_as_the_formula",
        casting,
        MODES,
    ),
    rows(
        "casting: autograd", "tests/test_casting.py", "test_casting_gradcheck_and_forward_ad", casting, MODES
    ),
    rows(
        "casting: vmap and compile", "tests/test_casting.py", "test_casting_vmap_and_compile", casting, MODES
    ),
    rows(
        "casting: the fused add",
        "tests/test_casting.py",
        "test_casting_fused_add_is_the_add_then_the_norm",
        casting,
        MODES,
    ),
    rows(
        "casting: autocast",
        "tests/test_casting.py",
        "test_casting_under_autocast_as_the_formula",
        casting,
        MODES,
    ),
    rows("casting: errors", "tests/test_casting.py", "test_casting_errors_name_the_argument", casting, MODES),
)

SUITES = {
    "torch-cpu": Suite(
        "packages/torch-cpu",
        (
            Aspect("values, dtypes and layouts", "tests/test_ops.py", "test_matches_torch_on_every_layout"),
            Aspect("out= overloads", "tests/test_layout_and_out.py", "test_beyond_core_rank_limit"),
            Aspect("autograd", "tests/test_autograd.py", "test_gradcheck", differentiable),
            Aspect(
                "forward-mode autograd",
                "tests/test_forward_ad.py",
                "test_jvp_matches_plain_torch",
                differentiable,
            ),
            Aspect("vmap", "tests/test_vmap.py", "test_batch_dim_zero"),
            Aspect("opcheck", "tests/test_opcheck.py", "test_opcheck"),
            Aspect(
                "compile",
                "tests/test_compile.py",
                "test_every_entry_compiles_fullgraph_dynamic_with_backward",
            ),
            *ROW_SUITE,
            *IN_PLACE_SUITE,
            rows("rows: export", "tests/test_rows.py", "test_export_with_a_dynamic_batch"),
            rows(
                "rows: the module",
                "tests/test_rows.py",
                "test_module_is_a_drop_in_for_torchs",
                lambda e: bool(e.module),
            ),
            *CASTING_SUITE,
            rows(
                "casting: the module",
                "tests/test_casting.py",
                "test_casting_module_is_the_models_norm",
                casting,
                MODES,
            ),
            # every mode in one exported module (one AOTInductor compile)
            rows(
                "casting: export and AOTI", "tests/test_casting.py", "test_casting_export_and_aoti", casting
            ),
        ),
        needs="tierkit_torch",
    ),
    "aten-semantics": Suite(
        "packages/torch-cpu",
        (
            Aspect("broadcasting", "tests/test_aten_semantics.py", "test_broadcasting", binary, BOTH),
            Aspect("type promotion", "tests/test_aten_semantics.py", "test_type_promotion", binary, BOTH),
            Aspect(
                "out= casting",
                "tests/test_aten_semantics.py",
                "test_out_of_a_wider_dtype_is_written_cast",
                also=BOTH,
            ),
            Aspect(
                "fakes",
                "tests/test_aten_semantics.py",
                "test_fake_tensors_agree_with_the_kernel",
                binary,
                BOTH,
            ),
            Aspect(
                "saved tensors",
                "tests/test_aten_semantics.py",
                "test_only_what_the_derivative_needs_is_saved",
                also=BOTH,
            ),
            rows(
                "rows: mixed dtypes",
                "tests/test_aten_semantics.py",
                "test_rows_with_parameters_of_another_dtype_are_aten",
                with_params,
                also=BOTH,
            ),
            rows(
                "rows: mixed-dtype gradients",
                "tests/test_aten_semantics.py",
                "test_row_gradients_with_parameters_of_another_dtype",
                with_params,
                also=BOTH,
            ),
            rows(
                "rows: autocast, fakes and compile",
                "tests/test_aten_semantics.py",
                "test_rows_mixed_dtypes_under_autocast_fakes_and_compile",
                with_params,
                also=BOTH,
            ),
        ),
        needs="tierkit_torch_stable",  # without it the suite covers one namespace
    ),
    "torch-stable": Suite(
        "packages/torch-stable",
        (
            Aspect("values, dtypes and layouts", "tests/test_ops.py", "test_matches_torch"),
            Aspect("out= overloads", "tests/test_ops.py", "test_out_overload_of_every_entry"),
            Aspect(
                "autograd", "tests/test_autograd.py", "test_gradcheck_reverse_and_forward", differentiable
            ),
            Aspect(
                "forward-mode autograd",
                "tests/test_autograd.py",
                "test_forward_ad_tangent_equals_torch",
                differentiable,
            ),
            Aspect("opcheck", "tests/test_compile.py", "test_opcheck"),
            Aspect("compile", "tests/test_compile.py", "test_compile_fullgraph_dynamic_every_entry"),
            Aspect(
                "compiled backward",
                "tests/test_compile.py",
                "test_compile_backward_every_entry",
                differentiable,
            ),
            *ROW_SUITE,
            *CASTING_SUITE,
            *MAP_SUITE,
            *IN_PLACE_SUITE,
        ),
        needs="tierkit_torch_stable",
    ),
    "bridge": Suite(
        "packages/pybind-bridge",
        (
            Aspect("values, dtypes and layouts", "tests/test_ops.py", "test_matches_numpy_on_every_layout"),
            Aspect("out=", "tests/test_ops.py", "test_out_writes_in_place_and_returns_out"),
            Aspect("torch tensors", "tests/test_ops.py", "test_torch_tensors_in_torch_tensors_out"),
            Aspect(
                "broadcasting", "tests/test_numpy_semantics.py", "test_broadcasting_every_operand", binary
            ),
            Aspect("promotion", "tests/test_numpy_semantics.py", "test_promotion_is_np_result_type", binary),
            Aspect(
                "layouts", "tests/test_numpy_semantics.py", "test_result_layout_is_numpys_k_order", binary
            ),
            rows("rows: values per dtype", "tests/test_rows.py", "test_matches_extended_precision"),
            rows(
                "rows: mixed dtypes",
                "tests/test_rows.py",
                "test_parameters_of_another_dtype_are_computed_in_xs_compute_type",
                with_params,
            ),
            in_place("in place: vLLM's formula", "tests/test_row_in_place.py", "test_matches_vllms_formula"),
            in_place(
                "in place: errors",
                "tests/test_row_in_place.py",
                "test_errors_name_the_argument_and_write_nothing",
            ),
            rows(
                "rows: any axis", "tests/test_rows.py", "test_along_any_axis_as_scipy_gives_it", along_a_dim
            ),
            rows("rows: layouts and out=", "tests/test_rows.py", "test_strided_input_and_out"),
            rows(
                "rows: torch tensors", "tests/test_rows.py", "test_torch_in_gives_torch_out_bfloat16_included"
            ),
            rows("rows: errors", "tests/test_rows.py", "test_errors_name_the_argument"),
            rows(
                "casting: values",
                "tests/test_casting.py",
                "test_casting_modes_match_the_formula",
                casting,
                MODES,
            ),
            rows(
                "casting: the torch ops'",
                "tests/test_casting.py",
                "test_casting_modes_equal_the_torch_ops",
                casting,
                MODES,
            ),
            rows(
                "casting: errors",
                "tests/test_casting.py",
                "test_casting_errors_name_the_argument",
                casting,
                MODES,
            ),
        ),
        needs="tierkit_bridge",
        bridge_names=True,
    ),
    "cross-tier": Suite(
        ".",
        (
            Aspect(
                "bridge properties", "tests/test_properties.py", "test_bridge_{op}_float32", bridge_names=True
            ),
            Aspect("torch properties", "tests/test_properties.py", "test_torch_{op}_bfloat16"),
            rows("rows: bridge properties", "tests/test_properties.py", "test_bridge_{op}_float32"),
            rows("rows: torch properties", "tests/test_properties.py", "test_torch_{op}_bfloat16"),
        ),
        needs="tierkit_torch",
    ),
    "cuda-gpu": Suite(
        "packages/torch-cuda",
        (
            Aspect("values, dtypes and layouts", "tests/test_gpu.py", "test_matches_torch"),
            Aspect("out= overloads", "tests/test_gpu.py", "test_out_overloads"),
            Aspect("autograd", "tests/test_gpu.py", "test_gradcheck_float64", differentiable),
            Aspect("opcheck", "tests/test_gpu.py", "test_opcheck"),
            Aspect("compile", "tests/test_gpu.py", "test_compile_dynamic_and_backward"),
            rows(
                "rows: values and gradients",
                "tests/test_gpu_rows.py",
                "test_forward_and_backward_match_the_cpu_and_float64",
            ),
            rows("rows: determinism", "tests/test_gpu_rows.py", "test_backward_is_deterministic"),
            rows(
                "rows: mixed dtypes",
                "tests/test_gpu_rows.py",
                "test_float32_parameters_with_bfloat16_input_match_the_cpu",
            ),
            rows("rows: compile", "tests/test_gpu_rows.py", "test_compile_fullgraph_dynamic"),
            rows(
                "rows: any dim and infinite rows",
                "tests/test_gpu_rows.py",
                "test_along_any_dim_and_infinite_rows_match_the_cpu",
                along_a_dim,
            ),
            maps(
                "maps: values and gradients",
                "tests/test_gpu_row_maps.py",
                "test_map_matches_the_cpu_and_the_models_code",
            ),
            maps("maps: compile", "tests/test_gpu_row_maps.py", "test_map_compile_fullgraph_dynamic"),
            in_place(
                "in place: the CPU's bits", "tests/test_gpu_in_place.py", "test_matches_the_cpu_bit_for_bit"
            ),
            rows(
                "casting: the CPU's",
                "tests/test_gpu_row_maps.py",
                "test_casting_modes_match_the_cpu",
                casting,
                MODES,
            ),
        ),
        needs="tierkit_cuda",  # the GPU tests are collected (and skipped) without a GPU
    ),
}


@cache
def collected(directory: str, files: tuple[str, ...]) -> tuple[str, ...]:
    """The node ids pytest collects from `files`, run from `directory`."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
        cwd=ROOT / directory,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"collecting {directory}: {proc.stdout[-2000:]}{proc.stderr[-2000:]}"
    # Node ids are relative to the rootdir (the repository): make them the suite's.
    prefix = "" if directory == "." else f"{directory}/"
    return tuple(line.strip().removeprefix(prefix) for line in proc.stdout.splitlines() if "::" in line)


def parameters(node: str) -> set[str]:
    """A node's parameter ids, and the op name of an `op.overload` id."""
    match = re.search(r"\[(.*)\]$", node)
    if not match:
        return set()
    parts = match.group(1).split("-")
    return {*parts, *(p.split(".")[0] for p in parts)}


def name_in(suite: str, aspect: Aspect, op: Entry) -> str:
    if isinstance(op, RowOp):
        return op.name  # one name in every tier
    bridge = SUITES[suite].bridge_names if aspect.bridge_names is None else aspect.bridge_names
    return op.bridge if bridge else op.name


def missing_cases(suite: str) -> list[str]:
    """What the suite's table-driven tests leave out: one line per gap."""
    spec = SUITES[suite]
    nodes = collected(spec.directory, tuple(sorted({a.file for a in spec.aspects})))
    gaps = []
    for aspect in spec.aspects:
        table: tuple[Entry, ...] = (
            ROW_IN_PLACE
            if aspect.in_place
            else ROW_MAPS
            if aspect.maps
            else ROW_REDUCTIONS
            if aspect.rows
            else OPS
        )
        for op in filter(aspect.applies, table):
            name = name_in(suite, aspect, op)
            test = aspect.test.format(op=name)
            cases = [
                n for n in nodes if n == f"{aspect.file}::{test}" or n.startswith(f"{aspect.file}::{test}[")
            ]
            if "{op}" not in aspect.test:
                cases = [n for n in cases if name in parameters(n)]
            if not cases:
                gaps.append(f"{suite}: {aspect.what} ({aspect.file}::{test}) has no case for {op.name}")
                continue
            for namespace in aspect.also:
                if not any(namespace in parameters(n) for n in cases):
                    gaps.append(
                        f"{suite}: {aspect.what} ({aspect.file}::{test}) has no case for {op.name} in {namespace}"
                    )
    return gaps


@pytest.mark.parametrize("suite", list(SUITES))
def test_every_entry_is_exercised(suite):
    module = SUITES[suite].needs
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed in this environment, so {suite}'s suite cannot be collected")
    gaps = missing_cases(suite)
    assert not gaps, "entries of the op table a suite does not exercise:\n" + "\n".join(gaps)


def test_the_guard_names_an_entry_a_suite_leaves_out(monkeypatch):
    # The check itself: a stable suite whose values test lost silu_mul, and
    # whose aten-semantics cases lost a namespace, are reported by name.
    real = collected("packages/torch-stable", ("tests/test_ops.py",)) if find("tierkit_torch_stable") else ()
    fake = tuple(n for n in real if "silu_mul" not in parameters(n) or "test_matches_torch[" not in n)
    fake = fake or ("tests/test_ops.py::test_matches_torch[custom_add-contiguous-torch.float32]",)
    monkeypatch.setattr(sys.modules[__name__], "collected", lambda directory, files: fake)
    gaps = missing_cases("torch-stable")
    assert (
        "torch-stable: values, dtypes and layouts (tests/test_ops.py::test_matches_torch) has no case for silu_mul"
        in gaps
    )
    monkeypatch.setattr(
        sys.modules[__name__],
        "collected",
        lambda directory, files: tuple(
            f"tests/test_aten_semantics.py::test_broadcasting[{c}-{op.name}-tierkit]"
            for op in OPS
            for c in "ab"
        ),
    )
    assert (
        "aten-semantics: broadcasting (tests/test_aten_semantics.py::test_broadcasting) has no case for mul in tierkit_stable"
        in missing_cases("aten-semantics")
    )


def test_the_guard_names_a_row_entry_a_suite_leaves_out(monkeypatch):
    # The stable suite's row tests without layer_norm, the aten-semantics
    # ones without tierkit_stable: each gap is named.
    real = collected("packages/torch-stable", ("tests/test_rows.py",)) if find("tierkit_torch_stable") else ()
    fake = tuple(n for n in real if "layer_norm" not in parameters(n))
    fake = fake or ("tests/test_rows.py::test_at_least_as_accurate_as_aten[rms_norm]",)
    monkeypatch.setattr(sys.modules[__name__], "collected", lambda directory, files: fake)
    gaps = missing_cases("torch-stable")
    assert (
        "torch-stable: rows: values and accuracy per dtype (tests/test_rows.py::test_at_least_as_accurate_as_aten) "
        "has no case for layer_norm" in gaps
    )
    assert not any("rms_norm" in g and "rows:" in g for g in gaps) or not real
    monkeypatch.setattr(
        sys.modules[__name__],
        "collected",
        lambda directory, files: tuple(
            f"tests/test_aten_semantics.py::test_rows_with_parameters_of_another_dtype_are_aten[x-{e.name}-tierkit]"
            for e in ROW_REDUCTIONS
        ),
    )
    assert (
        "aten-semantics: rows: mixed dtypes (tests/test_aten_semantics.py::"
        "test_rows_with_parameters_of_another_dtype_are_aten) has no case for layer_norm in tierkit_stable"
        in missing_cases("aten-semantics")
    )


def find(module: str) -> bool:
    return importlib.util.find_spec(module) is not None
