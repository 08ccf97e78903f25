// What the out= overloads mean in terms of the functional ops: compute, then
// copy into `out` (after aten's out= rules). Registered as
// CompositeImplicitAutograd, which eager calls never reach (the CPU, CUDA,
// Meta and Autograd kernels are registered directly and take precedence):
// torch.compile's functionalization uses it to turn a mutating .out call
// into the functional op plus a copy it knows how to handle.
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include "tierkit/op_table.h"
#include "tierkit_torch/checks.h"
#include "tierkit_torch/op_signatures.h"

namespace tierkit_torch {
namespace {

// aten's out= rules against the functional result (its dtype, broadcast
// shape and device), then a copy that casts like aten's.
at::Tensor& copy_into(const char* op, at::Tensor& out, const at::Tensor& result, bool resize) {
  prepare_out_for(op, out, result.scalar_type(), result.sym_sizes(), result.device(), resize);
  out.copy_(result);
  return out;
}

// The functional op is called through the dispatcher with the .out call's
// arguments minus `out`.
template <typename OpInfo>
struct Composite {
  using Info = OpInfo;
  static at::Tensor& out(const TensorArgs<Info>& in, const ScalarArgs<Info>& s, at::Tensor& out,
                         const char* op, bool resize) {
    return copy_into(op, out, TypedCall<Info>::functional(in, s), resize);
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(tierkit, CompositeImplicitAutograd, m) {
#define TIERKIT_COMPOSITE(name, Functor, n_tensors, n_scalars) \
  m.impl(#name ".out", &Signatures<Composite<tierkit::op_info::name>>::out);
  TIERKIT_POINTWISE_OPS(TIERKIT_COMPOSITE)
#undef TIERKIT_COMPOSITE
#define TIERKIT_COMPOSITE_WRITER(name, of, Functor) \
  m.impl(#name, &Signatures<Composite<tierkit::op_info::of>>::writer<k_##name>);
  TIERKIT_OUT_WRITERS(TIERKIT_COMPOSITE_WRITER)
#undef TIERKIT_COMPOSITE_WRITER
}

}  // namespace tierkit_torch
