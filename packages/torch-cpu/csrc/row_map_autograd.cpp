// Autograd of the row maps (TIERKIT_ROW_MAPS) for tierkit::, in C++ like the
// row reductions' (row_autograd.cpp), one template for every entry of the
// kind: a call that needs no derivative pays no Python frame (a decode step
// makes two a layer), and torch.func's transforms see a C++ node.
// torch-common's row_maps.py is the same for tierkit_stable::, in Python.
//
// The map is linear in x: x's gradient is the transposed map (the
// _<name>_backward kernel) or, under create_graph, the entry's formula on
// aten's ops (map_info::<name>::gradient, the op table's); the tables'
// gradients (rare: cos and sin are usually buffers) are the formulas, and
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
#include <string>

#include "autograd_support.h"
#include "tierkit/op_table.h"
#include "tierkit_torch/op_handle.h"
#include "tierkit_torch/row_maps.h"

namespace tierkit_torch {
namespace {

using namespace autograd_support;

using MapFn = at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, bool);

// The op table's map formulas' functions over at::Tensor, for width r.
struct AtenMapFunctions {
  int64_t r;
  bool interleaved;
  at::Tensor mapped(const at::Tensor& t) const { return t.narrow(-1, 0, r); }
  at::Tensor rotate(const at::Tensor& v) const {  // [-x2, x1] per pair
    if (interleaved) {
      const at::Tensor p = v.unflatten(-1, {-1, 2});
      return at::stack({-p.select(-1, 1), p.select(-1, 0)}, -1).flatten(-2);
    }
    const int64_t h = v.size(-1) / 2;
    return at::cat({-v.narrow(-1, h, h), v.narrow(-1, 0, h)}, -1);
  }
  at::Tensor rotate_t(const at::Tensor& u) const {  // the transpose: [x2, -x1]
    if (interleaved) {
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

template <typename Info>
struct AutogradMap;

template <typename Info>
struct MapNode : Node {
  SavedVariable x_, cos_, sin_;
  bool x_saved = false, interleaved = false;
  at::ScalarType x_dtype = at::kFloat, cos_dtype = at::kFloat, sin_dtype = at::kFloat;
  std::string name() const override { return Info::node_name; }
  void release_variables() override {
    x_.reset_data();
    cos_.reset_data();
    sin_.reset_data();
  }
  variable_list apply(variable_list&& grads) override {
    const at::Tensor& g = grads[0];
    if (!g.defined()) return variable_list(num_outputs());
    const at::Tensor cos = cos_.unpack(), sin = sin_.unpack();
    const at::Tensor x = x_saved ? x_.unpack() : at::Tensor();
    const AtenMapFunctions f{cos.size(-1), interleaved};
    variable_list out(3);
    if (should_compute_output(0)) {
      if (c10::GradMode::is_enabled()) {  // create_graph: the formula on aten's ops, differentiable
        out[0] = whole(Info::gradient(f, 0, g, x, cos, sin), g, f.r).to(x_dtype);
      } else {
        static std::atomic<const c10::OperatorHandle*> slot{nullptr};
        const auto backward = op_handle<MapFn>(slot, AutogradMap<Info>::backward_name());
        at::AutoDispatchBelowADInplaceOrView below;
        out[0] = backward.call(g, cos, sin, interleaved).to(x_dtype);
      }
    }
    if (should_compute_output(1)) out[1] = Info::gradient(f, 1, g, x, cos, sin).to(cos_dtype);
    if (should_compute_output(2)) out[2] = Info::gradient(f, 2, g, x, cos, sin).to(sin_dtype);
    return out;
  }
};

template <typename Info>
struct AutogradMap {
  // Built while the library loads (op_handle.h: no guarded statics).
  static inline const std::string kName = std::string("tierkit::") + Info::name;
  static inline const std::string kBackwardName = std::string("tierkit::") + Info::backward_name;
  static const char* op_name() { return kName.c_str(); }
  static const char* backward_name() { return kBackwardName.c_str(); }

  static at::Tensor below(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                          bool interleaved) {
    static std::atomic<const c10::OperatorHandle*> slot{nullptr};
    const auto h = op_handle<MapFn>(slot, op_name());
    at::AutoDispatchBelowADInplaceOrView guard;
    return h.call(x, cos, sin, interleaved);
  }

  static at::Tensor op(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, bool interleaved) {
    const bool graph =
        c10::GradMode::is_enabled() && (requires_grad(x) || requires_grad(cos) || requires_grad(sin));
    const bool forward_ad = has_tangent(x) || has_tangent(cos) || has_tangent(sin);
    if (!graph && !forward_ad) return below(x, cos, sin, interleaved);
    check_map<Info>(op_name(), x, std::array<const at::Tensor*, 2>{&cos, &sin}, x.device().type());
    at::Tensor y = below(x, cos, sin, interleaved);
    if (graph) {
      auto node = c10::make_intrusive<MapNode<Info>>();
      node->set_next_edges(torch::autograd::collect_next_edges(x, cos, sin));
      node->interleaved = interleaved;
      node->x_dtype = x.scalar_type();
      node->cos_dtype = cos.scalar_type();
      node->sin_dtype = sin.scalar_type();
      node->x_saved = requires_grad(cos) || requires_grad(sin);  // the tables' gradients read x
      if (node->x_saved) node->x_ = SavedVariable(saveable(x), /*is_output=*/false);
      node->cos_ = SavedVariable(saveable(cos), /*is_output=*/false);
      node->sin_ = SavedVariable(saveable(sin), /*is_output=*/false);
      torch::autograd::set_history(y, node);
    }
    if (forward_ad) {
      // The reference's tangent, on the dual inputs, with grad mode as it is:
      // under torch.func an outer reverse level differentiates it.
      const AtenMapFunctions f{cos.size(-1), interleaved};
      const at::Tensor t = whole(Info::reference(f, x, cos, sin), x, f.r)._fw_grad(/*level=*/0);
      if (t.defined()) y._set_fw_grad(t.to(y.scalar_type()), /*level=*/0, /*is_inplace_op=*/false);
    }
    return y;
  }

  // The building block is called below autograd by the node; a direct call
  // that needs a derivative is refused rather than silently cut.
  static at::Tensor backward(const at::Tensor& grad, const at::Tensor& cos, const at::Tensor& sin,
                             bool interleaved) {
    TORCH_CHECK(
        !(c10::GradMode::is_enabled() && (requires_grad(grad) || requires_grad(cos) || requires_grad(sin))),
        backward_name(), ": not differentiable (a building block of ", op_name(),
        "'s autograd; an argument requires grad); its double backward differentiates the formulas instead");
    static std::atomic<const c10::OperatorHandle*> slot{nullptr};
    const auto h = op_handle<MapFn>(slot, backward_name());
    at::AutoDispatchBelowADInplaceOrView guard;
    return h.call(grad, cos, sin, interleaved);
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(tierkit, Autograd, m) {
#define TIERKIT_REGISTER_MAP(NAME, FUNCTOR, TABLES)                                 \
  m.impl(tierkit::map_info::NAME::name, &AutogradMap<tierkit::map_info::NAME>::op); \
  m.impl(tierkit::map_info::NAME::backward_name, &AutogradMap<tierkit::map_info::NAME>::backward);
  TIERKIT_ROW_MAPS(TIERKIT_REGISTER_MAP)
#undef TIERKIT_REGISTER_MAP
}

}  // namespace tierkit_torch
