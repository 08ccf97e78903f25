// Autograd of the row maps (TIERKIT_ROW_MAPS) for tierkit::, in C++ like the
// row reductions' (row_autograd.cpp), one template for every entry of the
// kind: a call that needs no derivative pays no Python frame (a decode step
// makes two a layer), and torch.func's transforms see a C++ node.
// torch-common's row_maps.py is the same for tierkit_stable::, in Python.
//
// The map is linear in x: x's gradient is the transposed map (the
// _<name>_backward kernel) or, under create_graph, the entry's formula on
// aten's ops (map_info::<name>::gradient, the op table's); the tables'
// gradients (rare: the tables are usually buffers) are the formulas, and
// only then is x saved. The forward-mode tangent is the reference formula's
// on the dual inputs.
#include <ATen/ExpandUtils.h>
#include <ATen/TensorOperators.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros_like.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/library.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <string>
#include <utility>

#include "autograd_support.h"
#include "tierkit/op_table.h"
#include "tierkit_torch/op_handle.h"
#include "tierkit_torch/row_maps.h"

namespace tierkit_torch {
namespace {

using namespace autograd_support;

// The map's and its backward's schema, name(x, <N tables>, bool flag), as a function type.
template <typename Seq>
struct MapFnOf;
template <std::size_t... I>
struct MapFnOf<std::index_sequence<I...>> {
  using type = at::Tensor(const at::Tensor&, MapTable<I>..., bool);
};
template <std::size_t N>
using MapFn = typename MapFnOf<std::make_index_sequence<N>>::type;

// The op table's map formulas' functions over at::Tensor, for width r.
struct AtenMapFunctions {
  int64_t r;
  bool flag;  // the entry's flag: rotate's pairs (i, i + 1) where set, the halves' otherwise
  at::Tensor mapped(const at::Tensor& t) const { return t.narrow(-1, 0, r); }
  at::Tensor rotate(const at::Tensor& v) const {  // [-x2, x1] per pair
    if (flag) {
      const at::Tensor p = v.unflatten(-1, {-1, 2});
      return at::stack({-p.select(-1, 1), p.select(-1, 0)}, -1).flatten(-2);
    }
    const int64_t h = v.size(-1) / 2;
    return at::cat({-v.narrow(-1, h, h), v.narrow(-1, 0, h)}, -1);
  }
  at::Tensor rotate_t(const at::Tensor& u) const {  // the transpose: [x2, -x1]
    if (flag) {
      const at::Tensor p = u.unflatten(-1, {-1, 2});
      return at::stack({p.select(-1, 1), -p.select(-1, 0)}, -1).flatten(-2);
    }
    const int64_t h = u.size(-1) / 2;
    return at::cat({u.narrow(-1, h, h), -u.narrow(-1, 0, h)}, -1);
  }
  at::Tensor sum_to(const at::Tensor& t, const at::Tensor& like) const { return at::sum_to(t, like.sizes()); }
};

// The first r columns computed, the rest passed through.
at::Tensor whole(const at::Tensor& mapped, const at::Tensor& full, int64_t r) {
  const int64_t rest = full.size(-1) - r;
  return rest == 0 ? mapped : at::cat({mapped, full.narrow(-1, r, rest).to(mapped.scalar_type())}, -1);
}

template <typename Info, std::size_t N>
struct AutogradMap;

// The tables as held values (a formula's arguments, the node's) and back.
template <std::size_t N>
MapTables<N> pointers(const std::array<at::Tensor, N>& t) {
  MapTables<N> p;
  for (std::size_t i = 0; i < N; ++i) p[i] = &t[i];
  return p;
}
template <std::size_t N>
std::array<at::Tensor, N> held(const MapTables<N>& p) {
  std::array<at::Tensor, N> t;
  for (std::size_t i = 0; i < N; ++i) t[i] = *p[i];
  return t;
}

// Info::gradient / Info::reference with the tables spread as arguments.
template <typename Info, std::size_t N, std::size_t... I>
at::Tensor gradient_of(const AtenMapFunctions& f, std::size_t i, const at::Tensor& g, const at::Tensor& x,
                       const std::array<at::Tensor, N>& t, std::index_sequence<I...>) {
  return Info::gradient(f, i, g, x, t[I]...);
}
template <typename Info, std::size_t N, std::size_t... I>
at::Tensor reference_of(const AtenMapFunctions& f, const at::Tensor& x, const std::array<at::Tensor, N>& t,
                        std::index_sequence<I...>) {
  return Info::reference(f, x, t[I]...);
}

template <typename Info, std::size_t N>
struct MapNode : Node {
  static constexpr auto kSeq = std::make_index_sequence<N>{};
  SavedVariable x_;
  std::array<SavedVariable, N> tables_;
  bool x_saved = false, flag = false;
  at::ScalarType x_dtype = at::kFloat;
  std::array<at::ScalarType, N> table_dtypes{};
  std::string name() const override { return Info::node_name; }
  void release_variables() override {
    x_.reset_data();
    for (SavedVariable& t : tables_) t.reset_data();
  }
  variable_list apply(variable_list&& grads) override {
    const at::Tensor& g = grads[0];
    if (!g.defined()) return variable_list(num_outputs());
    std::array<at::Tensor, N> t;
    for (std::size_t i = 0; i < N; ++i) t[i] = tables_[i].unpack();
    const at::Tensor x = x_saved ? x_.unpack() : at::Tensor();
    const AtenMapFunctions f{t[0].size(-1), flag};
    variable_list out(N + 1);
    if (should_compute_output(0)) {
      if (c10::GradMode::is_enabled()) {  // create_graph: the formula on aten's ops, differentiable
        out[0] = whole(gradient_of<Info>(f, 0, g, x, t, kSeq), g, f.r).to(x_dtype);
      } else {
        out[0] = AutogradMap<Info, N>::call_below(/*backward=*/true, g, pointers(t), flag, kSeq).to(x_dtype);
      }
    }
    for (std::size_t i = 0; i < N; ++i)
      if (should_compute_output(i + 1))
        out[i + 1] = gradient_of<Info>(f, i + 1, g, x, t, kSeq).to(table_dtypes[i]);
    return out;
  }
};

template <typename Info, std::size_t N>
struct AutogradMap {
  static constexpr auto kSeq = std::make_index_sequence<N>{};
  // Built while the library loads (op_handle.h: no guarded statics).
  static inline const std::string kName = std::string("tierkit::") + Info::name;
  static inline const std::string kBackwardName = std::string("tierkit::") + Info::backward_name;
  static const char* op_name() { return kName.c_str(); }
  static const char* backward_name() { return kBackwardName.c_str(); }

  // Each schema's operator handle, found on first use (op_handle.h).
  static inline std::atomic<const c10::OperatorHandle*> op_slot{nullptr}, backward_slot{nullptr};
  // The map (or its backward: `backward`) below autograd, the tables spread as arguments.
  template <std::size_t... I>
  static at::Tensor call_below(bool backward, const at::Tensor& x, const MapTables<N>& t, bool flag,
                               std::index_sequence<I...>) {
    const auto h = backward ? op_handle<MapFn<N>>(backward_slot, backward_name())
                            : op_handle<MapFn<N>>(op_slot, op_name());
    at::AutoDispatchBelowADInplaceOrView guard;
    return h.call(x, *t[I]..., flag);
  }

  static bool any_requires_grad(const MapTables<N>& t) {
    for (const at::Tensor* v : t)
      if (requires_grad(*v)) return true;
    return false;
  }

  // The no-derivative path touches the caller's tables only through `t`: no
  // reference count moves until a node saves them.
  static at::Tensor forward(const at::Tensor& x, const MapTables<N>& t, bool flag) {
    const bool tables_grad = any_requires_grad(t);
    const bool graph = c10::GradMode::is_enabled() && (requires_grad(x) || tables_grad);
    bool forward_ad = has_tangent(x);
    for (const at::Tensor* v : t) forward_ad = forward_ad || has_tangent(*v);
    if (!graph && !forward_ad) return call_below(/*backward=*/false, x, t, flag, kSeq);
    check_map<Info>(op_name(), x, t, x.device().type());
    at::Tensor y = call_below(/*backward=*/false, x, t, flag, kSeq);
    if (graph) {
      auto node = c10::make_intrusive<MapNode<Info, N>>();
      node->set_next_edges(next_edges(x, t, kSeq));
      node->flag = flag;
      node->x_dtype = x.scalar_type();
      node->x_saved = tables_grad;  // the tables' gradients read x
      if (node->x_saved) node->x_ = SavedVariable(saveable(x), /*is_output=*/false);
      for (std::size_t i = 0; i < N; ++i) {
        node->table_dtypes[i] = t[i]->scalar_type();
        node->tables_[i] = SavedVariable(saveable(*t[i]), /*is_output=*/false);
      }
      torch::autograd::set_history(y, node);
    }
    if (forward_ad) {
      // The reference's tangent, on the dual inputs, with grad mode as it is:
      // under torch.func an outer reverse level differentiates it.
      const AtenMapFunctions f{t[0]->size(-1), flag};
      const at::Tensor tangent = whole(reference_of<Info>(f, x, held(t), kSeq), x, f.r)._fw_grad(/*level=*/0);
      if (tangent.defined())
        y._set_fw_grad(tangent.to(y.scalar_type()), /*level=*/0, /*is_inplace_op=*/false);
    }
    return y;
  }
  template <std::size_t... I>
  static torch::autograd::edge_list next_edges(const at::Tensor& x, const MapTables<N>& t,
                                               std::index_sequence<I...>) {
    return torch::autograd::collect_next_edges(x, *t[I]...);
  }

  // The building block is called below autograd by the node; a direct call
  // that needs a derivative is refused rather than silently cut.
  static at::Tensor backward(const at::Tensor& grad, const MapTables<N>& t, bool flag) {
    TORCH_CHECK(!(c10::GradMode::is_enabled() && (requires_grad(grad) || any_requires_grad(t))),
                backward_name(), ": not differentiable (a building block of ", op_name(),
                "'s autograd; an argument requires grad); its double backward differentiates the formulas "
                "instead");
    return call_below(/*backward=*/true, grad, t, flag, kSeq);
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(tierkit, Autograd, m) {
#define TIERKIT_REGISTER_MAP(NAME, FUNCTOR, TABLES) \
  register_map_kernels<tierkit::map_info::NAME, AutogradMap<tierkit::map_info::NAME, TABLES>, TABLES>(m);
  TIERKIT_ROW_MAPS(TIERKIT_REGISTER_MAP)
#undef TIERKIT_REGISTER_MAP
}

}  // namespace tierkit_torch
