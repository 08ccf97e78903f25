// The tierkit_stable operators: the same schemas and semantics as tierkit::
// (torch-cpu), with CPU kernels on core's kernels, written against torch's
// stable C ABI only (STABLE_TORCH_LIBRARY, torch::stable::Tensor). Built with
// TORCH_TARGET_VERSION, the compiler refuses any API newer than that torch.
// Fake kernels and autograd cannot be written in the stable C++ API; they are
// registered from Python (tierkit_torch_stable/_registrations.py).
#include <torch/csrc/stable/library.h>

#include <string>
#include <vector>

#include "stable_tensor.h"
#include "tierkit/op_schemas.h"

namespace tierkit_stable {
namespace {

// Binary ops: checks, then `kernel(view_a, view_b, view_out)` into `out`
// (a fresh tensor when `out` is null). Operands of one shape and dtype go
// straight to the kernel; others are resolved by aten's rules first
// (promotion, broadcasting: stable_tensor.h).
template <typename Kernel>
Tensor binary(const char* op, const Tensor& a, const Tensor& b, Tensor* out, const Kernel& kernel,
              bool float_scalar = false, bool resize_out = true) {
  if (!plain_call({&a, &b}) || (out && out->scalar_type() != a.scalar_type())) {
    auto p = resolve_pointwise<2>(op, {&a, &b}, {"a", "b"}, float_scalar, out, resize_out);
    run_views<3>(op, {p.in[0], p.in[1], p.target}, kernel);
    p.finish();
    return p.result;
  }
  check_first(op, a, "a");
  check_like(op, b, "b", a, "a");
  Tensor result = out ? *out : new_output({&a, &b});
  if (out) prepare_out(op, result, a, resize_out);
  run_views<3>(op, {a, b, result}, kernel);
  return result;
}

Tensor scale_shift_into(const char* op, const Tensor& x, double alpha, double beta, Tensor* out) {
  const auto kernel = [&](const auto& vx, const auto& vo) {
    tierkit::kernels::scale_shift(vx, alpha, beta, vo, StableRunner{});
  };
  if (!plain_call({&x}) || (out && out->scalar_type() != x.scalar_type())) {
    auto p = resolve_pointwise<1>(op, {&x}, {"x"}, /*float_scalar=*/true, out);
    run_views<2>(op, {p.in[0], p.target}, kernel);
    p.finish();
    return p.result;
  }
  check_first(op, x, "x");
  Tensor result = out ? *out : new_output({&x});
  if (out) prepare_out(op, result, x);
  run_views<2>(op, {x, result}, kernel);
  return result;
}

constexpr auto kAdd = [](const auto& a, const auto& b, const auto& o) {
  tierkit::kernels::add(a, b, o, StableRunner{});
};
constexpr auto kMul = [](const auto& a, const auto& b, const auto& o) {
  tierkit::kernels::mul(a, b, o, StableRunner{});
};
auto muladd_kernel(double c) {
  return [c](const auto& a, const auto& b, const auto& o) {
    tierkit::kernels::muladd(a, b, c, o, StableRunner{});
  };
}

Tensor custom_add(Tensor a, Tensor b) { return binary("tierkit_stable::custom_add", a, b, nullptr, kAdd); }
Tensor mul(Tensor a, Tensor b) { return binary("tierkit_stable::mul", a, b, nullptr, kMul); }
Tensor scale_shift(Tensor x, double alpha, double beta) {
  return scale_shift_into("tierkit_stable::scale_shift", x, alpha, beta, nullptr);
}
Tensor muladd(Tensor a, Tensor b, double c) {
  return binary("tierkit_stable::muladd", a, b, nullptr, muladd_kernel(c), /*float_scalar=*/true);
}

Tensor custom_add_out(Tensor a, Tensor b, Tensor out) {
  return binary("tierkit_stable::custom_add.out", a, b, &out, kAdd);
}
Tensor mul_out(Tensor a, Tensor b, Tensor out) { return binary("tierkit_stable::mul.out", a, b, &out, kMul); }
Tensor scale_shift_out(Tensor x, double alpha, double beta, Tensor out) {
  return scale_shift_into("tierkit_stable::scale_shift.out", x, alpha, beta, &out);
}
Tensor muladd_out(Tensor a, Tensor b, double c, Tensor out) {
  return binary("tierkit_stable::muladd.out", a, b, &out, muladd_kernel(c), /*float_scalar=*/true);
}

// add_out never resizes: `out` must already have the result's shape.
Tensor add_out(Tensor a, Tensor b, Tensor out) {
  return binary("tierkit_stable::add_out", a, b, &out, kAdd, /*float_scalar=*/false, /*resize_out=*/false);
}

}  // namespace

// The schemas are tierkit::'s (core's list, tierkit/op_schemas.h), in their
// own namespace: both tiers can be loaded in one process.
STABLE_TORCH_LIBRARY(tierkit_stable, m) {
  for (const char* schema : tierkit::kOpSchemas) m.def(schema);
}

STABLE_TORCH_LIBRARY_IMPL(tierkit_stable, CPU, m) {
  m.impl("custom_add", TORCH_BOX(&custom_add));
  m.impl("mul", TORCH_BOX(&mul));
  m.impl("scale_shift", TORCH_BOX(&scale_shift));
  m.impl("muladd", TORCH_BOX(&muladd));
  m.impl("add_out", TORCH_BOX(&add_out));
  m.impl("custom_add.out", TORCH_BOX(&custom_add_out));
  m.impl("mul.out", TORCH_BOX(&mul_out));
  m.impl("scale_shift.out", TORCH_BOX(&scale_shift_out));
  m.impl("muladd.out", TORCH_BOX(&muladd_out));
}

// A function of no tensors has no dispatch key to select a backend kernel.
STABLE_TORCH_LIBRARY_IMPL(tierkit_stable, CompositeExplicitAutograd, m) {
  m.impl("_accepted_dtypes", TORCH_BOX(&tierkit::accepted_dtype_list));
}

}  // namespace tierkit_stable
