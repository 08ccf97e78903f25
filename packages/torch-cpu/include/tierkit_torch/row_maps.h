// What the row maps' kernels share (torch-cpu's CPU kernels, torch-cuda's
// CUDA ones), for every entry of the kind (TIERKIT_ROW_MAPS): the argument
// checks (the roles' shape rules and wording are core's, tierkit/row_rules.h;
// torch-common's row_maps.map_checks says the same for the fakes), the
// result dtype, and each table's strides over x's leading dims (core's
// RowTables: 0 where it broadcasts).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <array>
#include <cstddef>
#include <utility>

#include "tierkit/row_rules.h"
#include "tierkit/row_tables.h"
#include "tierkit_torch/checks.h"

namespace tierkit_torch {

// A map kernel's table argument, one per index of an index sequence over the
// entry's tables: name(x, MapTable<I>... tables, bool flag) is the schema's
// signature for any count.
template <std::size_t>
using MapTable = const at::Tensor&;
// The same tables as one argument: the kernels' Impl receives them so.
template <std::size_t N>
using MapTables = std::array<const at::Tensor*, N>;

// An entry's two kernels under one dispatch key, for any count of tables:
// name(x, <N tables>, bool flag) calls Impl::forward(x, tables, flag) and
// _name_backward(grad, <N tables>, bool flag) Impl::backward, the tables as
// an array (torch-cpu's CPU and Autograd kernels).
template <typename Info, typename Impl, typename Seq>
struct MapKernels;
template <typename Info, typename Impl, std::size_t... I>
struct MapKernels<Info, Impl, std::index_sequence<I...>> {
  static constexpr std::size_t N = sizeof...(I);
  static at::Tensor op(const at::Tensor& x, MapTable<I>... tables, bool flag) {
    return Impl::forward(x, MapTables<N>{&tables...}, flag);
  }
  static at::Tensor backward(const at::Tensor& grad, MapTable<I>... tables, bool flag) {
    return Impl::backward(grad, MapTables<N>{&tables...}, flag);
  }
  static void register_into(torch::Library& m) {
    m.impl(Info::name, &op);
    m.impl(Info::backward_name, &backward);
  }
};
template <typename Info, typename Impl, std::size_t N>
void register_map_kernels(torch::Library& m) {
  MapKernels<Info, Impl, std::make_index_sequence<N>>::register_into(m);
}

template <typename Info, std::size_t N>
void check_map(const char* op, const at::Tensor& x, const MapTables<N>& tables, c10::DeviceType device) {
  namespace rules = tierkit::row_rules;
  check_defined(op, x, "x");
  core_check(op, [&] { rules::x_rank(x.dim(), nullptr, rules::kTorchWords); });
  check_first(op, x, "x", device);
  for (std::size_t i = 0; i < N; ++i) {
    const at::Tensor& t = *tables[i];
    const char* name = Info::tables[i];
    check_defined(op, t, name);
    TORCH_CHECK(t.device() == x.device(), op, ": ", name, ": expected device ", x.device(),
                " (same as x), got ", t.device());
    check_dtype(op, t, name);
    core_check(op, [&] { rules::table_rank(name, t.dim(), rules::kTorchWords); });
  }
  std::array<c10::SymIntArrayRef, N> sizes;
  for (std::size_t i = 0; i < N; ++i) sizes[i] = tables[i]->sym_sizes();
  core_check(op, [&] {
    rules::tables_fit(x.sym_sizes(), sizes, Info::tables, Info::width_rule, rules::kTorchWords);
  });
}

// torch's promotion of x and the tables.
template <std::size_t N>
at::ScalarType map_dtype(const at::Tensor& x, const MapTables<N>& tables) {
  at::ScalarType t = x.scalar_type();
  for (const at::Tensor* p : tables) t = c10::promoteTypes(t, p->scalar_type());
  return t;
}

// Each table (contiguous, of x's leading dims' broadcast) as the kernel
// reads it: core merges x's leading dims, so x of any rank fits.
template <std::size_t N>
tierkit::kernels::RowTables<N> map_layout(const char* op, const at::Tensor& x,
                                          const std::array<at::Tensor, N>& tables) {
  tierkit::kernels::RowTables<N> l;
  int rank[N];
  const int64_t *sizes[N], *strides[N];
  for (std::size_t i = 0; i < N; ++i) {
    rank[i] = static_cast<int>(tables[i].dim());
    sizes[i] = tables[i].sizes().data();
    strides[i] = tables[i].strides().data();
  }
  TORCH_CHECK(l.broadcast(x.sizes().data(), static_cast<int>(x.dim()) - 1, rank, sizes, strides), op,
              ": x: expected leading dims that the tables' broadcast leaves in at most ", tierkit::kMaxRank,
              " runs, got shape ", x.sizes());
  return l;
}

// A call's operands as both backends' kernels read them: checked (naming
// `op`), in the inputs' promotion, contiguous, with the tables' layout and
// the rows' sizes.
template <typename Info, std::size_t N>
struct MapOperands {
  at::ScalarType dtype;
  at::Tensor x;
  std::array<at::Tensor, N> tables;
  tierkit::kernels::RowTables<N> layout;
  int64_t rows = 0, d = 0, r = 0;

  MapOperands(const char* op, const at::Tensor& x_in, const std::array<const at::Tensor*, N>& in,
              c10::DeviceType device) {
    check_map<Info>(op, x_in, in, device);
    dtype = map_dtype(x_in, in);
    x = x_in.to(dtype).contiguous();
    for (std::size_t i = 0; i < N; ++i) tables[i] = in[i]->to(dtype).contiguous();
    layout = map_layout(op, x, tables);
    d = x.size(-1);
    rows = d == 0 ? 0 : x.numel() / d;
    r = tables[0].size(-1);
  }
};

}  // namespace tierkit_torch
