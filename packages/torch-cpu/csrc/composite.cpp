// What the out= overloads mean in terms of the functional ops: compute, then
// copy into `out` (after aten's out= rules). Registered as
// CompositeImplicitAutograd, which eager calls never reach (the CPU, CUDA,
// Meta and Autograd kernels are registered directly and take precedence):
// torch.compile's functionalization uses it to turn a mutating .out call
// into the functional op plus a copy it knows how to handle.
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include "tierkit_torch/checks.h"

namespace tierkit_torch {
namespace {

template <typename Sig>
c10::TypedOperatorHandle<Sig> functional(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Sig>();
}

using Binary = at::Tensor(const at::Tensor&, const at::Tensor&);

// aten's out= rules against the functional result (its dtype, broadcast
// shape and device), then a copy that casts like aten's.
at::Tensor& copy_into(const char* op, at::Tensor& out, const at::Tensor& result, bool resize = true) {
  prepare_out_for(op, out, result.scalar_type(), result.sym_sizes(), result.device(), resize);
  out.copy_(result);
  return out;
}

at::Tensor& custom_add_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  static const auto h = functional<Binary>("tierkit::custom_add");
  return copy_into("tierkit::custom_add.out", out, h.call(a, b));
}
at::Tensor& mul_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  static const auto h = functional<Binary>("tierkit::mul");
  return copy_into("tierkit::mul.out", out, h.call(a, b));
}
at::Tensor& scale_shift_out(const at::Tensor& x, double alpha, double beta, at::Tensor& out) {
  static const auto h = functional<at::Tensor(const at::Tensor&, double, double)>("tierkit::scale_shift");
  return copy_into("tierkit::scale_shift.out", out, h.call(x, alpha, beta));
}
at::Tensor& muladd_out(const at::Tensor& a, const at::Tensor& b, double c, at::Tensor& out) {
  static const auto h =
      functional<at::Tensor(const at::Tensor&, const at::Tensor&, double)>("tierkit::muladd");
  return copy_into("tierkit::muladd.out", out, h.call(a, b, c));
}

// add_out never resizes: `out` must already have the result's shape.
at::Tensor& add_out(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  static const auto h = functional<Binary>("tierkit::custom_add");
  return copy_into("tierkit::add_out", out, h.call(a, b), /*resize=*/false);
}

}  // namespace

TORCH_LIBRARY_IMPL(tierkit, CompositeImplicitAutograd, m) {
  m.impl("add_out", &add_out);
  m.impl("custom_add.out", &custom_add_out);
  m.impl("mul.out", &mul_out);
  m.impl("scale_shift.out", &scale_shift_out);
  m.impl("muladd.out", &muladd_out);
}

}  // namespace tierkit_torch
