"""Writes ``include/tierkit/op_table.h``, the C++ view of the op table
(op_table.py), and nothing outside core: each package generates its own
views of the table with the helpers here (the bridge its stub's op lines,
``packages/pybind-bridge/tools/op_stub.py``; torch-cpu its docs table,
``packages/torch-cpu/tools/op_docs.py``).

    python -m tierkit_core.op_codegen          # rewrite the header
    python -m tierkit_core.op_codegen --check  # fail if it is stale (a test runs this)

The header is committed, so a reader finds the code an op runs without a
build: its schema strings, an X-macro list the tiers expand into kernels and
registrations, and per op a struct of names and derivative formulas. The
formulas are templates over the tensor type, so core still includes no
torch: ``sigmoid(a)`` resolves to the tier's own function by
argument-dependent lookup (``at::sigmoid`` for ``at::Tensor``).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

from .op_table import (
    CASTING_MODES,
    OPS,
    OUT_WRITERS,
    ROW_IN_PLACE,
    ROW_MAPS,
    ROW_REDUCTIONS,
    Op,
    RowMap,
    RowOp,
    RowReduction,
    find,
)
from .op_testing import ROW_FUNCTIONS

HEADER = Path(__file__).resolve().parents[2] / "include" / "tierkit" / "op_table.h"


def _strs(items) -> str:
    return ", ".join(f'"{i}"' for i in items)


def _c_text(text: str) -> str:
    """`text` as the inside of a C++ string literal (a doc may hold quotes:
    gelu_tanh_mul's `approximate="tanh"`)."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _bools(items) -> str:
    return ", ".join("true" if i else "false" for i in items)


_BRIDGE_RULES = (
    ", with numpy's broadcasting, promotion (np.result_type) and scalars; masked arrays keep their mask. "
    "Writes into ``out`` when given and returns it (cast into it under same_kind); else returns a new "
    "array in numpy's K order presented like the first input: numpy for numpy, torch for torch, a Buffer "
    "otherwise (zero-copy each way)."
)


def _info(op: Op) -> str:
    n, m = len(op.tensors), len(op.scalars)
    params = ", ".join((*op.tensors, *op.scalars))
    if op.tangent != "auto_element_wise":
        raise NotImplementedError(f"{op.name}: only auto_element_wise tangents are generated so far")
    bind = [f"const T& {t} = in[{i}];" for i, t in enumerate(op.tensors)]
    bind += [f"const double {s} = sc[{i}];" for i, s in enumerate(op.scalars)]
    unused = " ".join(f"(void){x};" for x in (*op.tensors, *op.scalars))
    cases = "\n".join(
        f"      case {i}: return {op.derivatives[t]};"
        for i, t in enumerate(op.tensors)
        if t in op.derivatives
    )
    return f"""\
// {op.schema}: {op.doc}
struct {op.name} {{
  static constexpr const char* name = "{op.name}";
  static constexpr const char* node_name = "{op.node_name}";
  // The numpy bridge's function and its docstring (text signature first:
  // inspect.signature and stubtest read it), and its exact twin's.
  static constexpr const char* bridge_name = "{op.bridge}";
  static constexpr const char* bridge_exact_name = "_{op.bridge}_exact";
  static constexpr const char* bridge_doc = "{op.bridge}($module, {params}, *, out=None)\\n--\\n\\n{_c_text(op.doc)}{_BRIDGE_RULES}";
  static constexpr const char* bridge_exact_doc = "_{op.bridge}_exact($module, {params}, *, out=None)\\n--\\n\\n{op.bridge} without numpy's general path.";
  static constexpr std::array<const char*, {n}> tensors = {{{_strs(op.tensors)}}};
  static constexpr std::array<const char*, {m}> scalars = {{{_strs(op.scalars)}}};
  static constexpr std::array<bool, {n}> differentiable = {{{_bools(t in op.derivatives for t in op.tensors)}}};
  static constexpr std::array<bool, {n}> saved = {{{_bools(t in op.saved for t in op.tensors)}}};
  // Input i's gradient from the output's (before it is reduced to the
  // input's shape and dtype); with `grad` an input's tangent, that input's
  // term of the output's tangent (auto_element_wise).
  template <typename T>
  static T gradient(std::size_t i, const T& grad, const std::array<T, {n}>& in, const std::array<double, {m}>& sc) {{
    {" ".join(bind)}
    {unused} (void)sc;
    switch (i) {{
{cases}
      default: return T();
    }}
  }}
}};
"""


def _calls(formula: str) -> str:
    """A row formula's function calls as calls on the tier's functions object `f`."""
    return re.sub(rf"\b({'|'.join(ROW_FUNCTIONS)})\(", r"f.\1(", formula)


def _row_info(r: RowReduction) -> str:
    p, s = len(r.params), len(r.stats)
    stats = " ".join(f"const T& {n} = stats[{i}];" for i, n in enumerate(r.stats))
    eps = "0.0" if r.eps is None else repr(r.eps)
    # The terms in order; reference() leaves out those that read grad (there is none there).
    needs_grad: set[str] = set()
    for n, t in r.terms.items():
        if re.search(r"\bgrad\b", t) or any(re.search(rf"\b{m}\b", t) for m in needs_grad):
            needs_grad.add(n)
    ref_terms = "\n    ".join(
        f"const T {n} = {_calls(t)};" for n, t in r.terms.items() if n not in needs_grad
    )
    grad_terms = "\n    ".join(f"const T {n} = {_calls(t)};" for n, t in r.terms.items())
    ref_unused = " ".join(f"(void){n};" for n in r.terms if n not in needs_grad)
    grad_unused = " ".join(f"(void){n};" for n in r.terms)
    use = _calls
    inputs = ("x", *r.params)
    cases = "\n".join(
        f"      case {i}: return {use(r.derivatives[n])};" for i, n in enumerate(inputs) if n in r.derivatives
    )
    normalized = (
        f"""\
  // x-hat from x and the saved stats.
  template <typename T>
  static T normalized(const T& x, const std::array<T, {s}>& stats) {{
    {stats}
    return {r.normalized};
  }}
"""
        if r.normalized
        else ""
    )
    return f"""\
// {r.schema}: {r.doc}
struct {r.name} {{
  static constexpr const char* name = "{r.name}";
  static constexpr const char* forward_name = "{r.forward_name}";
  static constexpr const char* backward_name = "{r.backward_name}";
  static constexpr const char* add_name = "{r.add_name}";
  static constexpr const char* add_inplace_name = "{r.add_name}_";
  static constexpr const char* node_name = "{r.node_name}";
  static constexpr const char* doc = "{_c_text(r.doc)}";
  static constexpr std::array<const char*, {p}> params = {{{_strs(r.params)}}};
  static constexpr std::array<const char*, {s}> stats = {{{_strs(r.stats)}}};
  // eps: absent (has_eps false), optional in the schema (torch's default,
  // the compute type's machine epsilon) or this default. has_dim: the op
  // runs along an `int dim` (its building blocks along the last dim).
  static constexpr bool has_eps = {"true" if r.has_eps else "false"};
  static constexpr bool has_dim = {"true" if r.has_dim else "false"};
  static constexpr bool eps_optional = {"true" if r.has_eps and r.eps is None else "false"};
  static constexpr double eps_default = {eps};
  static constexpr bool fused_add = {"true" if r.fused_add else "false"};
  // Takes offset and casting_mode (kCastingModes) in its .casting overloads.
  static constexpr bool casting = {"true" if r.casting else "false"};
  // The value in the compute type (grad undefined) and input i's gradient
  // (0: x, then the parameters) from grad, over x, weight (1 when absent),
  // bias (0 when absent) and eps; f gives the row functions over T.
  template <typename F, typename T, typename W, typename B>
  static T reference(const F& f, const T& x, const W& weight, const B& bias, double eps) {{
    {ref_terms}
    (void)f; (void)weight; (void)bias; (void)eps; {ref_unused}
    return {use(r.reference)};
  }}
  template <typename F, typename T, typename W, typename B>
  static T gradient(const F& f, std::size_t i, const T& grad, const T& x, const W& weight, const B& bias, double eps) {{
    {grad_terms}
    (void)f; (void)weight; (void)bias; (void)eps; (void)grad; {grad_unused}
    switch (i) {{
{cases}
      default: return T();
    }}
  }}
{normalized}}};
"""


def _join_names(modes) -> str:
    names = [f'"{m.name}"' for m in modes]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def _map_calls(formula: str) -> str:
    """A row map's formula's function calls as calls on the tier's functions object `f`."""
    return re.sub(r"\b(mapped|rotate_t|rotate|sum_to)\(", r"f.\1(", formula)


def _map_info(m: RowMap) -> str:
    if len(m.flags) != 1:
        raise ValueError(
            f"{m.name}: a row map takes one flag (the kind's loops pass one bool), got {m.flags}"
        )
    ((flag, flag_default),) = m.flags
    tables = ", ".join(f"const T& {t}" for t in m.tables)
    unused = " ".join(f"(void){t};" for t in m.tables)
    inputs = ("x", *m.tables)
    cases = "\n".join(
        f"      case {i}: return {_map_calls(m.derivatives[n])};"
        for i, n in enumerate(inputs)
        if n in m.derivatives
    )
    return f"""\
// {m.schema}: {m.doc}
struct {m.name} {{
  static constexpr const char* name = "{m.name}";
  static constexpr const char* backward_name = "{m.backward_name}";
  static constexpr const char* node_name = "{m.node_name}";
  static constexpr const char* doc = "{_c_text(m.doc)}";
  static constexpr std::array<const char*, {len(m.tables)}> tables = {{{_strs(m.tables)}}};
  static constexpr const char* width_rule = "{_c_text(m.width_rule)}";
  // The entry's flag (the kind's one bool) and its default.
  static constexpr const char* flag = "{flag}";
  static constexpr bool flag_default = {str(flag_default).lower()};
  // The value on the first r columns and input i's gradient (0: x, then the
  // tables; x's on the first r columns) from grad; f gives mapped, rotate,
  // rotate_t and sum_to over T for the call's width and flags.
  template <typename F, typename T>
  static T reference(const F& f, const T& x, {tables}) {{
    (void)f; {unused}
    return {_map_calls(m.reference)};
  }}
  template <typename F, typename T>
  static T gradient(const F& f, std::size_t i, const T& grad, const T& x, {tables}) {{
    (void)f; (void)grad; (void)x; {unused}
    switch (i) {{
{cases}
      default: return T();
    }}
  }}
}};
"""


# The in-place kind's one layout of roles, in the schema's order: what the
# tiers' in-place adapters take (index, x, optional x, gathered table, size, flag).
_IN_PLACE_ROLES = ("index", "x", "x", "table", "size", "flag")


def _in_place_info(e: RowOp) -> str:
    roles = tuple(a.role for a in e.args)
    xs = [a for a in e.args if a.role == "x"]
    table_arg = next((a for a in e.args if a.role == "table"), None)
    index_arg = next((a for a in e.args if a.role == "index"), None)
    if (
        roles != _IN_PLACE_ROLES
        or not all(a.written for a in xs)
        or xs[0].optional
        or not xs[1].optional
        or table_arg is None
        or index_arg is None
        or table_arg.gathered_by != index_arg.name
        or next(a for a in e.args if a.role == "flag").default is not None
    ):
        raise ValueError(
            f"{e.name}: an in-place row op takes (index, x written, x written and optional, a table "
            f"gathered by the index, size, flag without a default), as the tiers' adapters do; got "
            f"{[(a.name, a.role) for a in e.args]}"
        )
    names = {r: [a.name for a in e.args if a.role == r] for r in set(_IN_PLACE_ROLES)}
    return f"""\
// {e.schema}: {e.doc}
struct {e.name} {{
  static constexpr const char* name = "{e.name}";
  static constexpr const char* doc = "{_c_text(e.doc)}";
  // The arguments' names by role, the messages' words: the index; the x
  // arguments written in place (the second optional); the table gathered
  // by the index; the size of a head; the flag.
  static constexpr const char* index = "{names["index"][0]}";
  static constexpr std::array<const char*, 2> written = {{{_strs(names["x"])}}};
  static constexpr const char* table = "{names["table"][0]}";
  static constexpr const char* size = "{names["size"][0]}";
  static constexpr const char* flag = "{names["flag"][0]}";
  static constexpr const char* width_rule = "{_c_text(e.width_rule)}";
}};
"""


def render() -> str:
    schemas = [op.schema for op in OPS] + [w.schema for w in OUT_WRITERS] + [op.out_schema for op in OPS]
    pointwise = [op for op in OPS if op.kind == "pointwise"]
    xs = " \\\n".join(
        f"  X({op.name}, {op.functor}, {len(op.tensors)}, {len(op.scalars)})" for op in pointwise
    )
    writers = " \\\n".join(f"  X({w.name}, {w.of}, {find(w.of).functor})" for w in OUT_WRITERS)
    infos = "\n".join(_info(op) for op in OPS)
    rows = " \\\n".join(
        f"  X({r.name}, {r.functor}, {len(r.params)}, {len(r.stats)})" for r in ROW_REDUCTIONS
    )
    row_infos = "\n".join(_row_info(r) for r in ROW_REDUCTIONS)
    maps = " \\\n".join(f"  X({m.name}, {m.functor}, {len(m.tables)})" for m in ROW_MAPS)
    map_infos = "\n".join(_map_info(m) for m in ROW_MAPS)
    in_place = " \\\n".join(f"  X({e.name}, {e.functor})" for e in ROW_IN_PLACE)
    in_place_infos = "\n".join(_in_place_info(e) for e in ROW_IN_PLACE)
    return f"""\
// Generated by `python -m tierkit_core.op_codegen` from src/tierkit_core/op_table.py: do not edit.
// The op table as C++: what every tier's generic code expands into one kernel,
// autograd node, composite and binding per operator (docs/adding-an-op.md).
// clang-format off
#pragma once

#include <array>
#include <cstddef>

namespace tierkit {{

// Every operator's schema, in torch's schema language: torch-cpu registers
// them in the `tierkit` namespace, torch-stable in `tierkit_stable`.
// The .out overloads are aten's convention (keyword-only `out`, returned)
// and not tagged `out`: with the tag, torch 2.14's inductor lowers the
// functional ops to them and, in AOTInductor's C++ wrapper, calls C shims
// that custom ops do not have. The writers return `out` too: torch's
// negative/conjugate-bit fallback writes a mutated argument back only
// through the op's return.
inline constexpr const char* kOpSchemas[] = {{
{chr(10).join(f'    "{s}",' for s in schemas)}
    // The accepted dtypes' names (core's dtype table), for the Python side's checks.
    "_accepted_dtypes() -> str[]",
}};

// The row reductions' overloads (each entry's op, fused forms and building
// blocks), registered by both torch tiers beside the pointwise ones.
inline constexpr const char* kRowReductionSchemas[] = {{
{chr(10).join(f'    "{_c_text(sc)}",' for r in ROW_REDUCTIONS for sc in r.schemas)}
}};

// The row maps' overloads (each entry's op and its transposed map, x's gradient).
inline constexpr const char* kRowMapSchemas[] = {{
{chr(10).join(f'    "{_c_text(sc)}",' for m in ROW_MAPS for sc in m.schemas)}
}};

// The in-place row ops' overloads (vLLM's serving ops: no building blocks, not differentiable).
inline constexpr const char* kRowInPlaceSchemas[] = {{
{chr(10).join(f'    "{_c_text(sc)}",' for e in ROW_IN_PLACE for sc in e.schemas)}
}};

// X(name, Functor): the in-place row ops, each written for its roles (an
// index, x arguments written in place, a table gathered by the index, a
// size, a flag). Functor: tierkit::kernels::<Functor> on the CPU
// (in_place_functors.h), <Functor>F on CUDA.
#define TIERKIT_ROW_IN_PLACE(X) \\
{in_place}

// X(name, Functor, tables): the row maps. Functor: tierkit::kernels::<Functor>
// on the CPU (map_functors.h), <Functor>MapF on CUDA; tables: the per-row
// tables the entry reads.
#define TIERKIT_ROW_MAPS(X) \\
{maps}

// The casting modes of the entries with `casting` (op_table.CASTING_MODES):
// where weight + offset is computed (in the weight's dtype, or in the compute
// type) and whether x-hat is rounded to x's dtype before the weight multiplies.
struct CastingMode {{
  const char* name;
  bool weight_in_compute;
  bool rounds_normalized;
}};
// Their names as the checks list them: "aten", "llama" or "gemma".
inline constexpr const char* kCastingModeNames = "{_c_text(_join_names(CASTING_MODES))}";
inline constexpr CastingMode kCastingModes[] = {{
{chr(10).join(f'    {{"{m.name}", {str(m.weight_in == "compute").lower()}, {str(m.rounds_normalized).lower()}}},' for m in CASTING_MODES)}
}};

// X(name, Functor, parameters, stats): the row reductions. Functor: the row
// kind tierkit::kernels::<Functor> on the CPU, <Functor>RowsF on CUDA;
// parameters: 0 (an op along a dim), 1 (weight) or 2 (weight, bias), in
// row_info::<name>::params; its eps or dim: row_info::<name>::has_eps, has_dim.
#define TIERKIT_ROW_REDUCTIONS(X) \\
{rows}

// X(name, Functor, tensor arguments, float arguments): the pointwise ops.
// Functor: tierkit::kernels::<Functor>Op<C> on the CPU, <Functor>F<C> on CUDA.
#define TIERKIT_POINTWISE_OPS(X) \\
{xs}

// X(name, functional op, its Functor): ops that write into a given `out`, never resized.
#define TIERKIT_OUT_WRITERS(X) \\
{writers}

namespace op_info {{

{infos}
}}  // namespace op_info

namespace row_info {{

{row_infos}
}}  // namespace row_info

namespace map_info {{

{map_infos}
}}  // namespace map_info

namespace in_place_info {{

{in_place_infos}
}}  // namespace in_place_info
}}  // namespace tierkit
// clang-format on
"""


def rewrite_section(current: str, begin: str, end: str, body: str) -> str:
    """`current` with what lies between its `begin` and `end` lines replaced
    by `body`: the generated part of a file that is otherwise hand-written."""
    if current.count(begin) != 1 or current.count(end) != 1:
        raise ValueError(f"expected one {begin.strip()!r} line and one {end.strip()!r} line")
    head, rest = current.split(begin)
    _, tail = rest.split(end)
    return head + begin + body + end + tail


def write_or_check(outputs: dict[Path, str], check: bool, command: str) -> int:
    """Write each stale file of `outputs` (path: its generated text) or, with
    `check`, name the stale ones and return 1: what every generator's
    ``--check`` (run by a test) does."""
    stale = [path for path, text in outputs.items() if path.read_text() != text]
    if check:
        for path in stale:
            print(f"{path} is stale: run `{command}`", file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        path.write_text(outputs[path])
    return 0


def generator_main(description: str, outputs: Callable[[], dict[Path, str]], command: str) -> int:
    """The command line of a generator: rewrite, or ``--check``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--check", action="store_true", help="fail if a generated file is stale")
    args = parser.parse_args()
    return write_or_check(outputs(), args.check, command)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the committed header is stale")
    args = parser.parse_args(argv)
    return write_or_check({HEADER: render()}, args.check, "python -m tierkit_core.op_codegen")


if __name__ == "__main__":
    raise SystemExit(main())
