// Autograd of the row reductions, in C++ like the pointwise ops' (see
// autograd.cpp for why): no graph and no tangent costs a few branches.
//
// rms_norm: the forward below autograd is _rms_norm_forward, whose rstd the
// node saves (with x and weight). Backward without create_graph calls the
// fused _rms_norm_backward; with create_graph (double backward, hessians)
// it recomputes the same formulas with aten's ops, which are differentiable
// (rstd recomputed from x, so its dependence on x is part of the graph).
// The forward-mode tangent is its formula on aten's ops, on the primals.
//
// add_rms_norm, when something needs a derivative, is x + residual (aten's
// add) then tierkit::rms_norm, so both derivatives come from those;
// otherwise the fused kernel. add_rms_norm_ mutates `residual` and, like
// aten's out= ops, refuses arguments that need a derivative.
#include <ATen/TensorOperators.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/mean.h>
#include <ATen/ops/rsqrt.h>
#include <ATen/ops/sum.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/library.h>

#include <initializer_list>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "tierkit_torch/rows.h"

namespace tierkit_torch {
namespace {

using torch::autograd::Node;
using torch::autograd::SavedVariable;
using torch::autograd::variable_list;

template <typename Sig>
c10::TypedOperatorHandle<Sig> op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Sig>();
}

using OptTensor = std::optional<at::Tensor>;
using Forward = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const OptTensor&, double);
using Backward = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, const OptTensor&,
                                                    const at::Tensor&);
using RmsNorm = at::Tensor(const at::Tensor&, const OptTensor&, std::optional<double>);
using RmsNorm2 = at::Tensor(const at::Tensor&, const at::Tensor&, const OptTensor&, std::optional<double>);
using AddRmsNorm = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, const OptTensor&,
                                                      std::optional<double>);

bool has(const OptTensor& t) { return t && t->defined(); }
bool requires_grad(const at::Tensor& t) { return t.defined() && t.requires_grad(); }

// t, or a normal copy of an inference tensor (which cannot be saved for backward).
at::Tensor saveable(const at::Tensor& t) { return t.is_inference() ? t.clone() : t; }

const at::Tensor& tangent(const at::Tensor& t) {
  static const at::Tensor none;
  if (!t.defined() || !c10::AutogradState::get_tls_state().get_fw_grad_mode()) return none;
  return t._fw_grad(/*level=*/0);
}
at::Tensor primal(const at::Tensor& t) { return t._fw_grad(0).defined() ? t._fw_primal(0) : t; }

// The compute type of a row: float for float32 and 16-bit inputs, double for float64.
at::Tensor wide(const at::Tensor& t) {
  return t.to(t.scalar_type() == at::kDouble ? at::kDouble : at::kFloat);
}

// 1 / sqrt(mean(x^2) + eps) per row, with aten's ops (differentiable).
at::Tensor rstd_of(const at::Tensor& xf, double eps) {
  return at::rsqrt(at::mean(xf * xf, {-1}, true) + eps);
}

// Both gradients by the formulas, on aten's ops: what double backward differentiates.
std::tuple<at::Tensor, at::Tensor> composite_backward(const at::Tensor& grad, const at::Tensor& x,
                                                      const at::Tensor& w, double eps) {
  const at::Tensor xf = wide(x), gf = wide(grad);
  const at::Tensor r = rstd_of(xf, eps);
  const at::Tensor xhat = xf * r;
  const at::Tensor gw = w.defined() ? gf * wide(w) : gf;
  const at::Tensor dx = (r * (gw - xhat * at::mean(gw * xhat, {-1}, true))).to(x.scalar_type());
  at::Tensor dw;
  if (w.defined()) {
    std::vector<int64_t> leading;
    for (int64_t i = 0; i + 1 < x.dim(); ++i) leading.push_back(i);
    dw = (leading.empty() ? gf * xhat : at::sum(gf * xhat, leading)).to(w.scalar_type());
  }
  return {dx, dw};
}

struct RmsNormBackward0 : Node {
  SavedVariable x_, w_, rstd_;
  bool has_weight = false;
  double eps = 0;
  std::string name() const override { return "RmsNormBackward0"; }
  void release_variables() override {
    x_.reset_data();
    w_.reset_data();
    rstd_.reset_data();
  }
  variable_list apply(variable_list&& grads) override {
    const at::Tensor& g = grads[0];
    if (!g.defined()) return variable_list(num_outputs());
    const at::Tensor x = x_.unpack();
    const at::Tensor w = has_weight ? w_.unpack() : at::Tensor();
    at::Tensor dx, dw;
    if (c10::GradMode::is_enabled()) {  // create_graph: a differentiable backward
      std::tie(dx, dw) = composite_backward(g, x, w, eps);
    } else {
      static const auto h = op<Backward>("tierkit::_rms_norm_backward");
      at::AutoDispatchBelowADInplaceOrView below;
      std::tie(dx, dw) = h.call(g, x, has_weight ? OptTensor(w) : std::nullopt, rstd_.unpack());
    }
    variable_list out{should_compute_output(0) ? dx : at::Tensor()};
    if (has_weight) out.push_back(should_compute_output(1) ? dw : at::Tensor());
    return out;
  }
};

// y's tangent from x's and weight's: d(x r w) with dr = -r^3 mean(x dx).
at::Tensor rms_norm_tangent(const at::Tensor& x, const OptTensor& weight, double eps, const at::Tensor& out) {
  const at::Tensor& tx = tangent(x);
  const at::Tensor& tw = has(weight) ? tangent(*weight) : at::Tensor();
  if (!tx.defined() && !tw.defined()) return at::Tensor();
  const at::Tensor xf = wide(primal(x));
  const at::Tensor r = rstd_of(xf, eps);
  const at::Tensor wf = has(weight) ? wide(primal(*weight)) : at::Tensor();
  at::Tensor t;
  if (tx.defined()) {
    const at::Tensor txf = wide(tx);
    const at::Tensor dr = -(r * r * r) * at::mean(xf * txf, {-1}, true);
    t = txf * r + xf * dr;
    if (wf.defined()) t = t * wf;
  }
  if (tw.defined()) {
    const at::Tensor u = xf * r * wide(tw);
    t = t.defined() ? t + u : u;
  }
  return t.to(out.scalar_type());
}

at::Tensor rms_norm_autograd(const at::Tensor& x, const OptTensor& weight, std::optional<double> eps_in) {
  const bool graph =
      c10::GradMode::is_enabled() && (requires_grad(x) || (has(weight) && requires_grad(*weight)));
  const bool forward_ad = tangent(x).defined() || (has(weight) && tangent(*weight).defined());
  if (!graph && !forward_ad) {
    static const auto h = op<RmsNorm>("tierkit::rms_norm");
    at::AutoDispatchBelowADInplaceOrView below;
    return h.call(x, weight, eps_in);
  }
  check_rows("tierkit::rms_norm", x, weight, x.device().type());  // errors name the op called
  const double eps = eps_or_default(x, eps_in);
  c10::intrusive_ptr<RmsNormBackward0> node;
  if (graph) {
    node = c10::make_intrusive<RmsNormBackward0>();
    node->set_next_edges(has(weight) ? torch::autograd::collect_next_edges(x, *weight)
                                     : torch::autograd::collect_next_edges(x));
    node->has_weight = has(weight);
    node->eps = eps;
  }
  static const auto h = op<Forward>("tierkit::_rms_norm_forward");
  at::Tensor y, rstd;
  {
    at::AutoDispatchBelowADInplaceOrView below;
    std::tie(y, rstd) = h.call(x, weight, eps);
  }
  if (node) {
    // An inference tensor cannot be saved for backward; aten's F.rms_norm
    // still differentiates an inference x against a weight that requires
    // grad (and the reverse), so such an argument is saved as a normal copy.
    node->x_ = SavedVariable(saveable(x), /*is_output=*/false);
    if (has(weight)) node->w_ = SavedVariable(saveable(*weight), /*is_output=*/false);
    node->rstd_ = SavedVariable(rstd, /*is_output=*/false);
    torch::autograd::set_history(y, node);
  }
  const at::Tensor t = forward_ad ? rms_norm_tangent(x, weight, eps, y) : at::Tensor();
  if (t.defined()) y._set_fw_grad(t, /*level=*/0, /*is_inplace_op=*/false);
  return y;
}

std::tuple<at::Tensor, at::Tensor> add_rms_norm_autograd(const at::Tensor& x, const at::Tensor& residual,
                                                         const OptTensor& weight, std::optional<double> eps) {
  const bool graph = c10::GradMode::is_enabled() &&
                     (requires_grad(x) || requires_grad(residual) || (has(weight) && requires_grad(*weight)));
  const bool forward_ad =
      tangent(x).defined() || tangent(residual).defined() || (has(weight) && tangent(*weight).defined());
  if (!graph && !forward_ad) {
    static const auto h = op<AddRmsNorm>("tierkit::add_rms_norm");
    at::AutoDispatchBelowADInplaceOrView below;
    return h.call(x, residual, weight, eps);
  }
  // Differentiated: x + residual, then rms_norm, each with its own autograd.
  const char* name = "tierkit::add_rms_norm";
  check_rows(name, x, std::nullopt, x.device().type());
  check_like(name, residual, "residual", x, "x");
  static const auto norm = op<RmsNorm>("tierkit::rms_norm");
  at::Tensor h = x + residual;
  return {norm.call(h, weight, eps), h};
}

at::Tensor add_rms_norm__autograd(const at::Tensor& x, const at::Tensor& residual, const OptTensor& weight,
                                  std::optional<double> eps) {
  const char* name = "tierkit::add_rms_norm_";
  for (const at::Tensor* t : {&x, &residual, has(weight) ? &*weight : &x}) {
    TORCH_CHECK(
        !(c10::GradMode::is_enabled() && requires_grad(*t)), name,
        ": writes into `residual` and does not support automatic differentiation (an argument requires "
        "grad); use tierkit::add_rms_norm, or call it under torch.no_grad()");
    TORCH_CHECK(
        !tangent(*t).defined(), name,
        ": writes into `residual` and does not support forward-mode AD (an argument carries a tangent); "
        "use tierkit::add_rms_norm");
  }
  static const auto h = op<RmsNorm2>("tierkit::add_rms_norm_");
  at::Tensor y;
  {
    c10::impl::ExcludeDispatchKeyGuard below(c10::autograd_dispatch_keyset_with_ADInplaceOrView);
    y = h.call(x, residual, weight, eps);
  }
  residual.unsafeGetTensorImpl()->bump_version();
  return y;
}

// The building blocks are called below autograd by the kernels above; a
// direct call that needs a derivative is refused rather than silently cut.
// Every tensor argument counts: a weight or rstd that requires grad would
// otherwise get outputs that silently do not. (Tangents are not refused
// here: torch.func's jacfwd over rms_norm's graph reaches these kernels
// with its own tangents, legitimately.)
void refuse_derivatives(const char* what, std::initializer_list<const at::Tensor*> args) {
  if (!c10::GradMode::is_enabled()) return;
  for (const at::Tensor* t : args) TORCH_CHECK(!(t && t->defined() && t->requires_grad()), what);
}

std::tuple<at::Tensor, at::Tensor> rms_norm_forward_autograd(const at::Tensor& x, const OptTensor& weight,
                                                             double eps) {
  refuse_derivatives(
      "tierkit::_rms_norm_forward: not differentiable (a building block of tierkit::rms_norm's autograd; an "
      "argument requires grad); call tierkit::rms_norm",
      {&x, has(weight) ? &*weight : nullptr});
  static const auto h = op<Forward>("tierkit::_rms_norm_forward");
  at::AutoDispatchBelowADInplaceOrView below;
  return h.call(x, weight, eps);
}

std::tuple<at::Tensor, at::Tensor> rms_norm_backward_autograd(const at::Tensor& grad, const at::Tensor& x,
                                                              const OptTensor& weight,
                                                              const at::Tensor& rstd) {
  refuse_derivatives(
      "tierkit::_rms_norm_backward: not differentiable (an argument requires grad; tierkit::rms_norm's "
      "double backward uses aten's ops instead)",
      {&grad, &x, has(weight) ? &*weight : nullptr, &rstd});
  static const auto h = op<Backward>("tierkit::_rms_norm_backward");
  at::AutoDispatchBelowADInplaceOrView below;
  return h.call(grad, x, weight, rstd);
}

}  // namespace

TORCH_LIBRARY_IMPL(tierkit, Autograd, m) {
  m.impl("rms_norm", &rms_norm_autograd);
  m.impl("add_rms_norm", &add_rms_norm_autograd);
  m.impl("add_rms_norm_", &add_rms_norm__autograd);
  m.impl("_rms_norm_forward", &rms_norm_forward_autograd);
  m.impl("_rms_norm_backward", &rms_norm_backward_autograd);
}

}  // namespace tierkit_torch
