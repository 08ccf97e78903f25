// The row ops' argument rules by role (op_table.RowArg: x, per-column
// parameters, per-row tables, the saved stats), written once with their
// wording: what each role's rank and shape must be. Every tier reads its own
// tensors' sizes (int64, or torch's SymInt, which these templates compare
// and print without asking for a concrete value, so a symbolic batch size
// stays symbolic) and asks these; failures throw core's InvalidArgument,
// which the bindings turn into their own errors prefixed with the op's name.
// Overlap of the roles an op writes is judged and worded here too, from
// what each binding's own overlap test found, the dtype a call of mixed
// dtypes computes in, and the in-place kind's dtype and device rules
// between its roles. Which dtypes are accepted is checks.h's. `Words`
// is how a binding names things: torch's tensors and [2, 3], or numpy's
// arrays and (2, 3).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tierkit/error.h"
#include "tierkit/view.h"

namespace tierkit::row_rules {

struct Words {
  const char* noun;      // "tensor" / "array"
  const char* zero_d;    // how a 0-d one is named after "got"
  const char* last_dim;  // how Python spells a table's last size
  ShapeStyle style;
};
inline constexpr Words kTorchWords{"tensor", "a 0-d tensor", ".size(-1)", ShapeStyle::List};
inline constexpr Words kNumpyWords{"array", "a 0-d one", ".shape[-1]", ShapeStyle::Tuple};

namespace detail {
template <typename Sizes>
auto last(const Sizes& s) {
  return s[s.size() - 1];
}
inline const char* article(const Words& w) { return w.noun[0] == 'a' ? "an " : "a "; }
template <typename Int>
std::string one(const Int& n, ShapeStyle style) {
  const Int sizes[1] = {n};
  return shape_str(sizes, style);
}
}  // namespace detail

// x: the rows, along its last dim. `why` (or nullptr): what that dim is for.
inline void x_rank(std::int64_t rank, const char* why, const Words& w) {
  if (rank >= 1) return;
  fail("x: expected ", detail::article(w), w.noun, " with at least one dimension",
       why ? std::string(" (") + why + ")" : std::string(), ", got ", w.zero_d);
}

// The dim an op runs along (the `dim` role): in [-rank, rank), as torch
// wraps a dim, a 0-d x's as a 1-d one's (-1 or 0: aten's ops along a dim
// take a scalar so); returns it in [0, max(rank, 1)). `name`: the argument's ("dim", or
// numpy's "axis").
inline std::int64_t dim(const char* name, std::int64_t dim, std::int64_t rank, const Words& w) {
  (void)w;  // every rule takes the caller's words; a dim reads the same in both
  const std::int64_t n = rank > 0 ? rank : 1;
  if (dim >= -n && dim < n) return dim < 0 ? dim + n : dim;
  fail(name, ": expected a dim in [", -n, ", ", n, ") for x of ", rank, " dimension", rank == 1 ? "" : "s",
       ", got ", dim);
}

// A per-column parameter (weight, bias): shape [x.size(-1)].
template <typename Sizes, typename Int>
void param_shape(const char* name, const Sizes& got, const Int& d, const Words& w) {
  if (got.size() == 1 && got[0] == d) return;
  fail(name, ": expected shape ", detail::one(d, w.style), " (x's last dimension), got ",
       shape_str(got, w.style));
}

// Per-row tables [..., r], broadcast against x[..., :r]: each has a dim,
// the first's last dim is the width r (`rule`: the entry's width_rule; even
// is checked), every table has it, and each broadcasts against x's leading
// dims without enlarging x. `names[i]` names tables[i].
inline void table_rank(const char* name, std::int64_t rank, const Words& w) {
  if (rank >= 1) return;
  fail(name, ": expected ", detail::article(w), w.noun,
       " with at least one dimension (its last is the width r), got ", w.zero_d);
}
template <typename Sizes, typename TableSizes, std::size_t N>
void tables_fit(const Sizes& x, const std::array<TableSizes, N>& tables,
                const std::array<const char*, N>& names, const char* rule, const Words& w) {
  const auto r = detail::last(tables[0]);
  const auto d = detail::last(x);
  if (!(r % 2 == 0 && r <= d))
    fail(names[0], ": expected a width r = ", names[0], w.last_dim, " that is ", rule, " (", d, "), got ", r);
  for (std::size_t i = 0; i < N; ++i) {
    const TableSizes& t = tables[i];
    if (!(detail::last(t) == r))
      fail(names[i], ": expected a last dimension of ", r, " (the width, ", names[0], "'s), got ",
           detail::last(t));
    bool ok = t.size() <= x.size();
    for (std::size_t k = 2; ok && k <= t.size(); ++k) {
      const auto s = t[t.size() - k];
      ok = s == 1 || s == x[x.size() - k];
    }
    if (!ok) {
      std::vector<std::decay_t<decltype(r)>> want(x.begin(), x.end());
      want.back() = r;
      fail(names[i], ": shape ", shape_str(t, w.style), " does not broadcast against x[..., :", r,
           "] of shape ", shape_str(want, w.style));
    }
  }
}

// An x indexed row by row (the index role: vLLM's positions, one per
// token): its leading dims are the index's shape `index` (named
// `index_name`), and each token's row after them holds whole heads of
// `size` elements (the size role, named `size_name`: vLLM's head_size).
template <typename Sizes, typename IndexSizes>
void indexed_heads(const char* name, const Sizes& x, const IndexSizes& index, const char* index_name,
                   std::int64_t size, const char* size_name, const Words& w) {
  bool lead = x.size() > index.size();
  for (std::size_t k = 0; lead && k < index.size(); ++k) lead = x[k] == index[k];
  if (!lead)
    fail(name, ": expected ", index_name, "'s shape ", shape_str(index, w.style),
         " as its leading dims and a token's heads after them, got shape ", shape_str(x, w.style));
  std::int64_t per_token = 1;
  for (std::size_t k = index.size(); k < x.size(); ++k) per_token *= static_cast<std::int64_t>(x[k]);
  if (!(size > 0 && per_token % size == 0))
    fail(name, ": expected whole heads of ", size_name, " (", size, ") a token, got ", per_token,
         " elements a token");
}

// A table gathered by an index (one row per position): [rows, r], its
// width r even and 0 < r <= the size role's value.
template <typename Sizes>
void gathered_table(const char* name, const Sizes& t, std::int64_t size, const char* size_name,
                    const Words& w) {
  if (t.size() == 2 && t[1] > 0 && t[1] % 2 == 0 && t[1] <= size) return;
  fail(name, ": expected shape [rows, r] with r even, at most ", size_name, " (", size, "), got ",
       shape_str(t, w.style));
}

// The index role's dtype (`integer`: it is int64 or int32), and the
// dtypes and device of the roles beside the first x written in place
// (named `x`): a gathered table of x's dtype or, beside a narrower x, of
// its compute type (`compute`: that type's name, empty where x is its own
// compute type: a float32 cache beside bfloat16 activations); another x
// of x's dtype; every tensor on x's device (the torch tiers'). Dtypes and
// devices by name: each binding spells its own.
inline void index_dtype(const char* name, bool integer, std::string_view got) {
  if (!integer) fail<DTypeError>(name, ": expected dtype int64 or int32, got ", got);
}
inline void gathered_dtype(const char* name, const char* x, bool ok, std::string_view x_dtype,
                           std::string_view compute, std::string_view got) {
  if (ok) return;
  if (compute.empty()) fail<DTypeError>(name, ": expected dtype ", x_dtype, " (", x, "'s), got ", got);
  fail<DTypeError>(name, ": expected dtype ", x_dtype, " or ", compute, " (", x,
                   "'s or its compute type), got ", got);
}
inline void same_dtype(const char* name, const char* x, bool ok, std::string_view want,
                       std::string_view got) {
  if (!ok) fail<DTypeError>(name, ": expected dtype ", want, " (same as ", x, "), got ", got);
}
inline void same_device(const char* name, const char* x, bool ok, std::string_view want,
                        std::string_view got) {
  if (!ok) fail(name, ": expected device ", want, " (same as ", x, "), got ", got);
}

// Each value of the index role (named `index`; t its place in the flat
// index): a row of the gathered table (named `table`) of `rows` rows.
inline void index_row(const char* index, std::int64_t t, std::int64_t value, const char* table,
                      std::int64_t rows) {
  if (value < 0 || value >= rows)
    fail(index, "[", t, "]: expected a row of ", table, ", in [0, ", rows, "), got ", value);
}

// A role the op writes in place (the fused add's residual, the in-place
// kind's x arguments): each element needs an address of its own, or
// one write lands on several elements and threads race on it. A dim of size
// > 1 and stride 0 (an expanded tensor, a broadcast array) is the case
// aten's has_internal_overlap finds; the bindings pass sizes and strides.
template <typename Sizes, typename Strides>
void written_alone(const char* name, const Sizes& sizes, const Strides& strides, const Words& w) {
  for (std::size_t i = 0; i < sizes.size(); ++i)
    if (sizes[i] > 1 && strides[i] == 0)
      fail(name, ": has internal overlap (e.g. an expanded ", w.noun,
           "), so several elements share one address");
}
// A written role and an input it may alias only exactly (residual and x:
// each element is read before it is written). `partial`: the binding's
// overlap test found shared memory that is not the same elements.
inline void written_beside(const char* name, const char* other, bool partial) {
  if (partial) fail(name, ": partially overlaps ", other);
}
// Two written roles that may share no element (key and query): one that
// lies in both would be computed from a half-written value and written twice.
inline void written_apart(const char* name, const char* other, bool shared) {
  if (shared) fail(name, ": shares memory with ", other, " (its elements would be written twice)");
}

// An in-place entry's roles (tierkit::in_place_info: its names for the
// index, the written xs, the gathered table and the size), each rule above
// asked in one order for every binding. `A` reads the binding's arguments:
// dtype(a) (compared with ==), indexes(t) (int64 or int32), compute(t)
// (float64 for float64, else float32), name(t) in the binding's words,
// sizes(a), strides(a), and for the tiers with devices device_differs(a, x)
// and device(a). `x2`: null where the second x is absent.
template <typename Info, typename A, typename Arg>
void in_place_roles(const A& a, const Arg& index, const Arg& x, const Arg* x2, const Arg& table,
                    std::int64_t size, const Words& w) {
  const char* x_name = Info::written[0];
  const auto device = [&](const Arg& t, const char* name) {
    if (a.device_differs(t, x)) same_device(name, x_name, false, a.device(x), a.device(t));
  };
  device(index, Info::index);
  device(table, Info::table);
  if (x2) device(*x2, Info::written[1]);
  const auto xt = a.dtype(x), it = a.dtype(index), tt = a.dtype(table), ct = a.compute(xt);
  index_dtype(Info::index, a.indexes(it), a.name(it));
  gathered_dtype(Info::table, x_name, tt == xt || tt == ct, a.name(xt), xt == ct ? std::string() : a.name(ct),
                 a.name(tt));
  indexed_heads(x_name, a.sizes(x), a.sizes(index), Info::index, size, Info::size, w);
  gathered_table(Info::table, a.sizes(table), size, Info::size, w);
  if (x2) {
    const char* x2_name = Info::written[1];
    same_dtype(x2_name, x_name, a.dtype(*x2) == xt, a.name(xt), a.name(a.dtype(*x2)));
    indexed_heads(x2_name, a.sizes(*x2), a.sizes(index), Info::index, size, Info::size, w);
  }
  // Before anything is computed: a layout that is copied and written back
  // would race, or fail after the other x was written.
  written_alone(x_name, a.sizes(x), a.strides(x), w);
  if (x2) written_alone(Info::written[1], a.sizes(*x2), a.strides(*x2), w);
}

// The mixed-dtype rule (aten's norms'): parameters of another float dtype
// than x's are computed in x's compute type (float32 for 16-bit x), or in
// float64 where x or a parameter is float64; the result is rounded to x's
// dtype, each gradient to its input's. Core's rows take the parameters in
// that type beside x as it is (RowParams), so a call converts its
// parameters (d elements each) and only a float64 parameter beside a
// narrower x converts x as well. `params`: each parameter's dtype, nullopt
// where it is absent.
struct MixedDtypes {
  bool active = false;             // some parameter's dtype is not x's
  DType compute = DType::Float32;  // what the call computes in (float32 or float64)
  bool converts_x = false;         // x itself goes to `compute` (and the result back)
};
template <std::size_t P>
MixedDtypes mixed_dtypes(DType x, const std::array<std::optional<DType>, P>& params) {
  MixedDtypes m;
  bool wide = x == DType::Float64;
  for (const std::optional<DType>& p : params) {
    if (!p) continue;
    m.active = m.active || *p != x;
    wide = wide || *p == DType::Float64;
  }
  m.compute = wide ? DType::Float64 : DType::Float32;
  m.converts_x = m.active && wide && x != DType::Float64;
  return m;
}

// The stats a backward receives: `want` values of dtype `want_dtype`, as
// the forward `from` saved them.
template <typename Int>
void stats(const Int& got, std::string_view got_dtype, const Int& want, std::string_view want_dtype,
           const char* from) {
  if (got == want && got_dtype == want_dtype) return;
  fail("stats: expected ", want, " values of dtype ", want_dtype, " (from ", from, "), got ", got, " of ",
       got_dtype);
}

}  // namespace tierkit::row_rules
