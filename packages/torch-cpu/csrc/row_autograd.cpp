// Autograd of the row reductions, in C++ like the pointwise ops' (see
// autograd.cpp for why), one template for every entry of the kind.
//
// The op: the forward below autograd is _<name>_forward, whose stats the
// node saves (with x and the parameters). Backward without create_graph
// calls the fused _<name>_backward; with create_graph (double backward,
// hessians) it computes the entry's gradient formulas (row_info::<name>::
// gradient, the op table's, which torch-stable uses too) with aten's ops,
// which are differentiable, so the stats' dependence on x is part of the
// graph. The forward-mode tangent is the reference formula's, on the dual
// inputs.
//
// The fused residual form, when something needs a derivative, is x +
// residual (aten's add) then the op, so every derivative comes from those;
// otherwise the fused kernel. The in-place one mutates `residual` and, like
// aten's out= ops, refuses arguments that need a derivative.
#include <ATen/TensorOperators.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/amax.h>
#include <ATen/ops/exp.h>
#include <ATen/ops/log.h>
#include <ATen/ops/mean.h>
#include <ATen/ops/rsqrt.h>
#include <ATen/ops/sum.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/library.h>

#include <array>
#include <atomic>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "autograd_support.h"
#include "tierkit/op_table.h"
#include "tierkit_torch/op_handle.h"
#include "tierkit_torch/rows.h"

namespace tierkit_torch {
namespace {

using namespace autograd_support;

// The compute type of a row: float for float32 and 16-bit inputs, double
// where x or a parameter is double (the mixed-dtype rule).
at::ScalarType compute_of(const at::Tensor& x, const std::vector<at::Tensor>& params) {
  bool wide = x.scalar_type() == at::kDouble;
  for (const at::Tensor& p : params) wide = wide || (p.defined() && p.scalar_type() == at::kDouble);
  return wide ? at::kDouble : at::kFloat;
}

// The op table's row formulas' functions over at::Tensor.
struct AtenRowFunctions {
  at::Tensor row_mean(const at::Tensor& t) const { return at::mean(t, {-1}, /*keepdim=*/true); }
  at::Tensor row_total(const at::Tensor& t) const { return at::sum(t, {-1}, /*keepdim=*/true); }
  at::Tensor row_max(const at::Tensor& t) const { return at::amax(t, {-1}, /*keepdim=*/true); }
  at::Tensor rsqrt(const at::Tensor& t) const { return at::rsqrt(t); }
  at::Tensor exp(const at::Tensor& t) const { return at::exp(t); }
  at::Tensor log(const at::Tensor& t) const { return at::log(t); }
  // Over every leading dim: a parameter's shape.
  at::Tensor row_sum(const at::Tensor& t) const {
    std::vector<int64_t> leading;
    for (int64_t i = 0; i + 1 < t.dim(); ++i) leading.push_back(i);
    return leading.empty() ? t : at::sum(t, leading);
  }
};

// fn(f, x, weight, bias) in the compute type, with aten's (differentiable)
// ops: an absent weight is 1, an absent bias 0.
template <typename Fn>
at::Tensor with_params(const at::Tensor& x, const std::vector<at::Tensor>& params, const Fn& fn) {
  const at::ScalarType c = compute_of(x, params);
  const at::Tensor xf = x.to(c);
  const at::Tensor w = !params.empty() && params[0].defined() ? params[0].to(c) : at::Tensor();
  const at::Tensor b = params.size() > 1 && params[1].defined() ? params[1].to(c) : at::Tensor();
  const AtenRowFunctions f;
  if (w.defined() && b.defined()) return fn(f, xf, w, b);
  if (w.defined()) return fn(f, xf, w, 0.0);
  if (b.defined()) return fn(f, xf, 1.0, b);
  return fn(f, xf, 1.0, 0.0);
}

// The entry's reference value (row_info::<name>::reference).
template <typename E>
at::Tensor reference(const at::Tensor& x, const std::vector<at::Tensor>& params, double eps) {
  return with_params(x, params, [&](const auto& f, const at::Tensor& xf, const auto& w, const auto& b) {
    return E::Info::reference(f, xf, w, b, eps);
  });
}

// Input i's gradient (0: x, then the parameters) by the entry's formula,
// in its input's dtype: what double backward differentiates.
template <typename E>
at::Tensor gradient(std::size_t i, const at::Tensor& grad, const at::Tensor& x,
                    const std::vector<at::Tensor>& params, double eps) {
  const at::ScalarType c = compute_of(x, params);
  const at::Tensor g = grad.to(c);
  const at::Tensor d =
      with_params(x, params, [&](const auto& f, const at::Tensor& xf, const auto& w, const auto& b) {
        return E::Info::gradient(f, i, g, xf, w, b, eps);
      });
  return d.to(i == 0 ? x.scalar_type() : params[i - 1].scalar_type());
}

template <typename E>
struct RowNode : Node {
  static constexpr std::size_t P = E::kParams;
  SavedVariable x_, stats_;
  std::array<SavedVariable, P> params_;
  std::array<bool, P> has_param{};
  double eps = 0;
  std::string name() const override { return E::Info::node_name; }
  void release_variables() override {
    x_.reset_data();
    stats_.reset_data();
    for (auto& p : params_) p.reset_data();
  }
  variable_list apply(variable_list&& grads) override {
    const at::Tensor& g = grads[0];
    if (!g.defined()) return variable_list(num_outputs());
    const at::Tensor x = x_.unpack();
    std::vector<at::Tensor> params(P);
    Params<P> opt;
    for (std::size_t i = 0; i < P; ++i)
      if (has_param[i]) {
        params[i] = params_[i].unpack();
        opt[i] = params[i];
      }
    std::array<at::Tensor, P + 1> d;
    if (c10::GradMode::is_enabled()) {  // create_graph: the formulas on aten's ops, differentiable
      d[0] = should_compute_output(0) ? gradient<E>(0, g, x, params, eps) : at::Tensor();
      std::size_t edge = 1;
      for (std::size_t i = 0; i < P; ++i)
        if (has_param[i] && should_compute_output(edge++)) d[i + 1] = gradient<E>(i + 1, g, x, params, eps);
    } else {
      static std::atomic<const c10::OperatorHandle*> slot{nullptr};
      const auto h = op_handle<typename RowFunctionTypes<E>::BackwardFn>(slot, E::backward_name());
      at::AutoDispatchBelowADInplaceOrView below;
      d = tuple_to_array(
          std::apply([&](const auto&... p) { return h.call(g, x, p..., stats_.unpack()); }, opt));
    }
    variable_list out{should_compute_output(0) ? d[0] : at::Tensor()};
    std::size_t edge = 1;
    for (std::size_t i = 0; i < P; ++i)
      if (has_param[i]) out.push_back(should_compute_output(edge++) ? d[i + 1] : at::Tensor());
    return out;
  }
};

template <typename E>
struct AutogradRows {
  using Entry = E;
  static constexpr std::size_t P = E::kParams;
  using Ps = Params<P>;
  using S = RowSignatures<AutogradRows>;

  template <typename Fn, typename... A>
  static auto below(const char* name, A&&... args) {
    static std::atomic<const c10::OperatorHandle*> slot{nullptr};  // one name per Fn
    const auto h = op_handle<Fn>(slot, name);
    at::AutoDispatchBelowADInplaceOrView guard;
    return h.call(std::forward<A>(args)...);
  }

  static bool graph_needed(std::initializer_list<const at::Tensor*> ts, const Ps& params) {
    if (!c10::GradMode::is_enabled()) return false;
    for (const at::Tensor* t : ts)
      if (requires_grad(*t)) return true;
    for (const OptTensor& p : params)
      if (defined(p) && requires_grad(*p)) return true;
    return false;
  }
  static bool tangent_needed(std::initializer_list<const at::Tensor*> ts, const Ps& params) {
    for (const at::Tensor* t : ts)
      if (has_tangent(*t)) return true;
    for (const OptTensor& p : params)
      if (defined(p) && has_tangent(*p)) return true;
    return false;
  }

  static at::Tensor op(const at::Tensor& x, const Ps& params, typename E::Scalar s) {
    if (!graph_needed({&x}, params) && !tangent_needed({&x}, params))
      return std::apply([&](const auto&... p) { return below<typename S::OpFn>(E::op_name(), x, p..., s); },
                        params);
    if constexpr (E::Info::has_dim) {
      // Along the last dim of x moved: aten's movedim carries the derivatives through the move.
      return along_dim(E::op_name(), x, s, [&](const at::Tensor& rows) {
        check_rows<E>(E::op_name(), rows, params, rows.device().type());
        return std::get<0>(differentiated(rows, params, 0.0));
      });
    } else {
      check_rows<E>(E::op_name(), x, params, x.device().type());  // errors name the op called
      return std::get<0>(differentiated(x, params, eps_or_default(x, s)));
    }
  }

  // The forward building block below autograd.
  static std::tuple<at::Tensor, at::Tensor> forward_below(const at::Tensor& x, const Ps& params, double eps) {
    static std::atomic<const c10::OperatorHandle*> slot{nullptr};
    const auto h = op_handle<typename S::ForwardFn>(slot, E::forward_name());
    at::AutoDispatchBelowADInplaceOrView guard;
    return S::call_forward(h, x, params, eps);
  }

  // The forward below autograd, y with a RowNode and the reference's
  // tangent where a derivative is wanted. The stats are not differentiable
  // (as aten's native_layer_norm's mean and rstd are not): only the nodes'
  // fused backward reads them, and a graph of the backward (create_graph)
  // recomputes them from x by the formulas.
  static std::tuple<at::Tensor, at::Tensor> differentiated(const at::Tensor& x, const Ps& params,
                                                           double eps) {
    const bool graph = graph_needed({&x}, params);
    const bool forward_ad = tangent_needed({&x}, params);
    c10::intrusive_ptr<RowNode<E>> node;
    if (graph) {
      node = c10::make_intrusive<RowNode<E>>();
      std::vector<at::Tensor> edges{x};
      for (const OptTensor& p : params)
        if (defined(p)) edges.push_back(*p);
      node->set_next_edges(torch::autograd::collect_next_edges(edges));
      for (std::size_t i = 0; i < P; ++i) node->has_param[i] = defined(params[i]);
      node->eps = eps;
    }
    at::Tensor y, stats;
    std::tie(y, stats) = forward_below(x, params, eps);
    if (node) {
      // An inference tensor cannot be saved for backward; aten's norms
      // still differentiate an inference x against a weight that requires
      // grad (and the reverse), so such an argument is saved as a normal copy.
      node->x_ = SavedVariable(saveable(x), /*is_output=*/false);
      for (std::size_t i = 0; i < P; ++i)
        if (defined(params[i])) node->params_[i] = SavedVariable(saveable(*params[i]), /*is_output=*/false);
      node->stats_ = SavedVariable(stats, /*is_output=*/false);
      torch::autograd::set_history(y, node);
    }
    if (forward_ad) {
      // The reference's tangent, on the dual inputs, computed with grad mode
      // as it is: under torch.func an outer reverse level (jacrev of jacfwd)
      // differentiates this tangent, and no_grad here would cut it.
      std::vector<at::Tensor> ps(P);
      for (std::size_t i = 0; i < P; ++i)
        if (defined(params[i])) ps[i] = *params[i];
      const at::Tensor t = reference<E>(x, ps, eps)._fw_grad(/*level=*/0);
      if (t.defined()) y._set_fw_grad(t.to(y.scalar_type()), /*level=*/0, /*is_inplace_op=*/false);
    }
    return {y, stats};
  }

  static std::tuple<at::Tensor, at::Tensor> add(const at::Tensor& x, const at::Tensor& residual,
                                                const Ps& params, typename E::Scalar eps) {
    if (!graph_needed({&x, &residual}, params) && !tangent_needed({&x, &residual}, params))
      return std::apply(
          [&](const auto&... p) { return below<typename S::AddFn>(E::add_name(), x, residual, p..., eps); },
          params);
    // Differentiated: x + residual, then the op, each with its own autograd.
    check_rows<E>(E::add_name(), x, Ps{}, x.device().type());
    check_like(E::add_name(), residual, "residual", x, "x");
    static std::atomic<const c10::OperatorHandle*> slot{nullptr};
    const auto norm = op_handle<typename S::OpFn>(slot, E::op_name());
    at::Tensor h = x + residual;
    return {std::apply([&](const auto&... p) { return norm.call(h, p..., eps); }, params), h};
  }

  static at::Tensor add_(const at::Tensor& x, const at::Tensor& residual, const Ps& params,
                         typename E::Scalar eps) {
    const char* name = E::add_inplace_name();
    std::vector<const at::Tensor*> args{&x, &residual};
    for (const OptTensor& p : params)
      if (defined(p)) args.push_back(&*p);
    for (const at::Tensor* t : args) {
      TORCH_CHECK(
          !(c10::GradMode::is_enabled() && requires_grad(*t)), name,
          ": writes into `residual` and does not support automatic differentiation (an argument requires "
          "grad); use ",
          E::add_name(), ", or call it under torch.no_grad()");
      TORCH_CHECK(
          !has_tangent(*t), name,
          ": writes into `residual` and does not support forward-mode AD (an argument carries a tangent); "
          "use ",
          E::add_name());
    }
    static std::atomic<const c10::OperatorHandle*> slot{nullptr};
    const auto h = op_handle<typename S::AddInplaceFn>(slot, E::add_inplace_name());
    at::Tensor y;
    {
      c10::impl::ExcludeDispatchKeyGuard guard(c10::autograd_dispatch_keyset_with_ADInplaceOrView);
      y = std::apply([&](const auto&... p) { return h.call(x, residual, p..., eps); }, params);
    }
    residual.unsafeGetTensorImpl()->bump_version();
    return y;
  }

  // The building blocks are called below autograd by the kernels above.
  // torch.func nests levels: the op's kernel at the inner level calls the
  // forward, which the outer level then sees with its own derivatives to
  // take (hessian, jacrev of jacrev), so the forward differentiates y as the
  // op does. The backward refuses a direct call that needs a derivative
  // rather than silently cut it (the nodes' double backward uses the
  // formulas, never it). Tangents are not refused: torch.func's jacfwd over
  // the op's graph reaches the backward with its own, legitimately.
  static void refuse(const std::string& what, std::initializer_list<const at::Tensor*> ts, const Ps& params) {
    if (!c10::GradMode::is_enabled()) return;
    for (const at::Tensor* t : ts) TORCH_CHECK(!requires_grad(*t), what);
    for (const OptTensor& p : params) TORCH_CHECK(!(defined(p) && requires_grad(*p)), what);
  }

  static std::tuple<at::Tensor, at::Tensor> forward(const at::Tensor& x, const Ps& params, double eps) {
    if (!graph_needed({&x}, params) && !tangent_needed({&x}, params)) return forward_below(x, params, eps);
    check_rows<E>(E::forward_name(), x, params, x.device().type());
    return differentiated(x, params, eps);
  }

  static Grads<P> backward(const at::Tensor& grad, const at::Tensor& x, const Ps& params,
                           const at::Tensor& stats) {
    refuse(std::string(E::backward_name()) + ": not differentiable (an argument requires grad; " +
               E::op_name() + "'s double backward differentiates its reference with aten's ops instead)",
           {&grad, &x, &stats}, params);
    return std::apply(
        [&](const auto&... p) {
          return below<typename S::BackwardFn>(E::backward_name(), grad, x, p..., stats);
        },
        params);
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(tierkit, Autograd, m) {
#define TIERKIT_REGISTER_ROWS(NAME, FUNCTOR, PARAMS, STATS) \
  register_row_entry<AutogradRows, RowEntry<tierkit::row_info::NAME, void, PARAMS>>(m);
  TIERKIT_ROW_REDUCTIONS(TIERKIT_REGISTER_ROWS)
#undef TIERKIT_REGISTER_ROWS
}

}  // namespace tierkit_torch
