// Autograd kernels for every tierkit op, in C++, written the way torch's
// generated VariableType kernels are: a graph node only when something
// needs a gradient, forward-mode tangents when an input carries one.
//
// Why C++ and not torch.library.register_autograd: the Autograd key is
// visited on *every* call, requires_grad or not; a Python kernel there made
// a 1-element custom_add cost 12.1 us against 5.1 us for aten.add.Tensor
// (measured side by side). Here the no-graph, no-tangent path is a few
// branches. Why Node subclasses and not torch::autograd::Function: the
// nodes get aten-style names (MulBackward0, which users see in grad_fn and
// error messages), and Function::apply has no forward AD in C++ at all.
//
// One node type and one kernel template serve every op of the op table:
// the derivative formulas are the table's (tierkit/op_table.h, written with
// aten's ops), so they are differentiable themselves: double backward,
// jacfwd, hessian (forward-over-reverse) all compose.
//
// out= overloads and add_out are not differentiable (like aten's): they
// refuse inputs that need a gradient or carry a tangent, bump `out`'s
// version counter and redispatch.
#include <ATen/ExpandUtils.h>
#include <ATen/TensorOperators.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/silu.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/library.h>

#include "autograd_support.h"
#include "tierkit/op_table.h"
#include "tierkit_torch/op_handle.h"
#include "tierkit_torch/op_signatures.h"

#include <algorithm>
#include <array>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace tierkit_torch {
namespace {

using namespace autograd_support;

// ---- when is there work beyond the kernel --------------------------------

// A backward graph is needed: grad mode on and some input requires grad.
template <std::size_t N>
bool needs_graph(const std::array<const at::Tensor*, N>& in) {
  if (!c10::GradMode::is_enabled()) return false;
  for (const at::Tensor* t : in)
    if (requires_grad(*t)) return true;
  return false;
}

// The input's forward-mode tangent at level 0 (torch.func.jvp, forward_ad,
// jacfwd), or an undefined tensor. Reading it costs a null check when the
// tensor has no autograd metadata, so the fast path stays fast.
const at::Tensor& tangent(const at::Tensor& t) {
  static const at::Tensor none;
  if (!t.defined() || !c10::AutogradState::get_tls_state().get_fw_grad_mode()) return none;
  return t._fw_grad(/*level=*/0);
}

// The value of `t` without its tangent, for tangent formulas (as generated
// code does), so the formula itself does not carry level-0 tangents along.
at::Tensor primal(const at::Tensor& t) { return t._fw_grad(0).defined() ? t._fw_primal(0) : t; }

void set_tangent(const at::Tensor& out, const at::Tensor& t) {
  if (t.defined()) out._set_fw_grad(t, /*level=*/0, /*is_inplace_op=*/false);
}

// Runs `forward` below autograd (the kernel of the next key down).
template <typename F>
at::Tensor below_autograd(const F& forward) {
  at::AutoDispatchBelowADInplaceOrView below;
  return forward();
}

template <typename N>
c10::intrusive_ptr<N> make_node(torch::autograd::edge_list&& edges) {
  auto node = c10::make_intrusive<N>();
  node->set_next_edges(std::move(edges));
  return node;
}

// ---- backward nodes ---------------------------------------------------------

// An undefined incoming gradient means zero: every input's gradient is then
// zero too, returned as undefined (what torch's own nodes do).
variable_list undefined_grads(const Node& node) { return variable_list(node.num_outputs()); }

// What an input's gradient must look like: the input's shape (a broadcast
// input's gradient is summed over the broadcast dims) and its dtype (an
// input promoted to a wider result dtype gets its gradient cast back), as
// aten's derivatives.yaml does. Symbolic sizes: compiled graphs trace this.
struct InputMeta {
  std::vector<c10::SymInt> sizes;
  c10::ScalarType dtype = c10::ScalarType::Float;
  static InputMeta of(const at::Tensor& t) { return {t.sym_sizes().vec(), t.scalar_type()}; }
  at::Tensor reduce(const at::Tensor& grad) const {
    at::Tensor g = grad.sym_sizes().equals(sizes) ? grad : at::sum_to(grad, c10::SymIntArrayRef(sizes));
    return g.scalar_type() == dtype ? g : g.to(dtype);
  }
};

// The backward node of an op of the op table: saves the inputs its
// derivatives read (Info::saved), every input's shape and dtype, and the
// float arguments; named like aten's (MulBackward0).
template <typename Info>
struct PointwiseBackward : Node {
  static constexpr std::size_t N = kTensors<Info>;
  std::array<SavedVariable, N> saved;
  std::array<InputMeta, N> meta;
  ScalarArgs<Info> scalars{};
  std::string name() const override { return Info::node_name; }
  void release_variables() override {
    for (auto& v : saved) v.reset_data();
  }
  variable_list apply(variable_list&& grads) override {
    const at::Tensor& g = grads[0];
    if (!g.defined()) return undefined_grads(*this);
    std::array<at::Tensor, N> in;
    for (std::size_t i = 0; i < N; ++i)
      if (Info::saved[i]) in[i] = saved[i].unpack();
    variable_list out(N);
    for (std::size_t i = 0; i < N; ++i) {
      if (Info::differentiable[i] && should_compute_output(i))
        out[i] = meta[i].reduce(Info::gradient(i, g, in, scalars));
    }
    return out;
  }
};

// The output's tangent: each input's tangent through its derivative
// (auto_element_wise), summed, then spanning the output's shape and dtype.
template <typename Info>
at::Tensor output_tangent(const TensorArgs<Info>& in, const ScalarArgs<Info>& s, const at::Tensor& out) {
  constexpr std::size_t N = kTensors<Info>;
  at::Tensor total;
  std::array<at::Tensor, N> primals;
  bool any = false;
  for (std::size_t i = 0; i < N; ++i) any = any || tangent(*in[i]).defined();
  if (!any) return total;
  for (std::size_t i = 0; i < N; ++i) primals[i] = primal(*in[i]);
  for (std::size_t i = 0; i < N; ++i) {
    const at::Tensor& t = tangent(*in[i]);
    if (!t.defined() || !Info::differentiable[i]) continue;
    at::Tensor term = Info::gradient(i, t, primals, s);
    total = total.defined() ? total + term : term;
  }
  if (!total.defined()) return total;
  // A tangent passed through unchanged (d(a + b)/da = 1) must not be the
  // input's own tensor; a broadcast or promoted one spans the output.
  const bool same = !total.sym_sizes().equals(out.sym_sizes()) || total.scalar_type() != out.scalar_type();
  bool aliased = false;
  for (std::size_t i = 0; i < N; ++i) aliased = aliased || total.is_same(tangent(*in[i]));
  if (same)
    total = total.expand_symint(out.sym_sizes()).to(out.scalar_type()).clone();
  else if (aliased)
    total = total.clone();
  return total;
}

// ---- the Autograd kernels ----------------------------------------------------

template <typename OpInfo>
struct AutogradPointwise {
  using Info = OpInfo;
  static constexpr std::size_t N = kTensors<Info>;

  // The op's functional kernel below autograd, called unboxed.
  static at::Tensor call_below(const TensorArgs<Info>& in, const ScalarArgs<Info>& s) {
    at::AutoDispatchBelowADInplaceOrView below;
    return TypedCall<Info>::functional(in, s);
  }

  static at::Tensor functional(const TensorArgs<Info>& in, const ScalarArgs<Info>& s) {
    c10::intrusive_ptr<PointwiseBackward<Info>> node;
    if (needs_graph(in)) {
      torch::autograd::edge_list edges;
      for (const at::Tensor* t : in) edges.push_back(torch::autograd::impl::gradient_edge(*t));
      node = make_node<PointwiseBackward<Info>>(std::move(edges));
      for (std::size_t i = 0; i < N; ++i) {
        if (Info::saved[i]) node->saved[i] = SavedVariable(*in[i], /*is_output=*/false);
        node->meta[i] = InputMeta::of(*in[i]);
      }
      node->scalars = s;
    }
    at::Tensor out = call_below(in, s);
    if (node) torch::autograd::set_history(out, node);
    set_tangent(out, output_tangent<Info>(in, s, out));
    return out;
  }

  // out= overloads and writers: not differentiable.
  static at::Tensor& out(const TensorArgs<Info>& in, const ScalarArgs<Info>& s, at::Tensor& out,
                         const char* op, bool resize);
};

// ---- writers: not differentiable ---------------------------------------------

void refuse_autodiff(const char* op, c10::ArrayRef<const at::Tensor*> tensors) {
  for (const at::Tensor* t : tensors) {
    TORCH_CHECK(!(c10::GradMode::is_enabled() && requires_grad(*t)), op,
                ": writes into `out` and does not support automatic differentiation (an argument requires "
                "grad); use the functional overload, or call it under torch.no_grad()");
    TORCH_CHECK(!tangent(*t).defined(), op,
                ": writes into `out` and does not support forward-mode AD (an argument carries a tangent); "
                "use the functional overload");
  }
}

// Redispatches below autograd, then bumps `out`'s version counter: autograd
// must see saved copies of `out` go stale.
template <typename F>
void write_out(const at::Tensor& out, const F& call) {
  {
    c10::impl::ExcludeDispatchKeyGuard below(c10::autograd_dispatch_keyset_with_ADInplaceOrView);
    call();
  }
  if (out.defined()) out.unsafeGetTensorImpl()->bump_version();
}

template <typename OpInfo>
at::Tensor& AutogradPointwise<OpInfo>::out(const TensorArgs<Info>& in, const ScalarArgs<Info>& s,
                                           at::Tensor& out, const char* op,
                                           bool /*resize: the kernel's to apply*/) {
  std::array<const at::Tensor*, N + 1> all;
  std::copy(in.begin(), in.end(), all.begin());
  all[N] = &out;
  refuse_autodiff(op, all);
  const auto typed = find_op(op).typed<typename TypedCall<Info>::Out>();  // op_handle.h
  write_out(out, [&] { TypedCall<Info>::out(typed, in, s, out); });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(tierkit, Autograd, m) {
#define TIERKIT_AUTOGRAD(name, Functor, n_tensors, n_scalars)                        \
  m.impl(#name, &Signatures<AutogradPointwise<tierkit::op_info::name>>::functional); \
  m.impl(#name ".out", &Signatures<AutogradPointwise<tierkit::op_info::name>>::out);
  TIERKIT_POINTWISE_OPS(TIERKIT_AUTOGRAD)
#undef TIERKIT_AUTOGRAD
#define TIERKIT_AUTOGRAD_WRITER(name, of, Functor) \
  m.impl(#name, &Signatures<AutogradPointwise<tierkit::op_info::of>>::writer<k_##name>);
  TIERKIT_OUT_WRITERS(TIERKIT_AUTOGRAD_WRITER)
#undef TIERKIT_AUTOGRAD_WRITER
}

}  // namespace tierkit_torch
