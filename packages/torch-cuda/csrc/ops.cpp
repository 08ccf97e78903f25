// CUDA kernels for the tierkit ops (schemas are defined by tierkit-torch).
// Host side: the same argument checks as the CPU kernels, a device guard for
// the inputs' GPU, the current stream, the output, then the launcher.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "launch.h"
#include "tierkit_torch/checks.h"

namespace tierkit_cuda {
namespace {

constexpr auto kCUDA = c10::DeviceType::CUDA;

DType to_dtype(c10::ScalarType t) {
  switch (t) {
    case c10::kFloat: return DType::Float32;
    case c10::kDouble: return DType::Float64;
    case c10::kHalf: return DType::Float16;
    case c10::kBFloat16: return DType::BFloat16;
    default: TORCH_CHECK(false, "tierkit (CUDA): unsupported dtype ", t);
  }
}

Layout layout_of(const at::Tensor& t) {
  Layout l{};
  l.rank = static_cast<int>(t.dim());
  for (int d = 0; d < l.rank; ++d) {
    l.sizes[d] = t.size(d);
    l.strides[d] = t.stride(d);
  }
  return l;
}

// Tensors deeper than the kernels' layout limit are made contiguous once.
at::Tensor shallow(const at::Tensor& t) { return t.dim() > kMaxRank ? t.contiguous() : t; }

void run(Op op, const at::Tensor& a, const at::Tensor* b, const at::Tensor& out, double p0, double p1) {
  const c10::cuda::CUDAGuard guard(a.device());
  const at::Tensor ca = shallow(a);
  const at::Tensor cb = b ? shallow(*b) : at::Tensor();
  Operands o{};
  o.a = ca.data_ptr();
  o.b = b ? cb.data_ptr() : nullptr;
  o.out = out.data_ptr();
  o.numel = out.numel();
  o.contiguous = ca.is_contiguous() && out.is_contiguous() && (!b || cb.is_contiguous());
  if (!o.contiguous) {
    TORCH_CHECK(out.dim() <= kMaxRank, "tierkit (CUDA): out: at most ", kMaxRank,
                " dimensions when not contiguous, got ", out.dim());
    o.la = layout_of(ca);
    if (b) o.lb = layout_of(cb);
    o.lout = layout_of(out);
  }
  launch(op, to_dtype(a.scalar_type()), o, p0, p1, c10::cuda::getCurrentCUDAStream(a.get_device()).stream());
}

at::Tensor new_output(const at::Tensor& like) {
  return at::empty(like.sizes(), like.options().memory_format(c10::MemoryFormat::Contiguous));
}

at::Tensor binary(const char* name, Op op, const at::Tensor& a, const at::Tensor& b, double p0) {
  tierkit_torch::check_first(name, a, "a", kCUDA);
  tierkit_torch::check_like(name, b, "b", a, "a");
  at::Tensor out = new_output(a);
  run(op, a, &b, out, p0, 0.0);
  return out;
}

at::Tensor custom_add_cuda(const at::Tensor& a, const at::Tensor& b) {
  return binary("tierkit::custom_add", Op::Add, a, b, 0.0);
}

at::Tensor mul_cuda(const at::Tensor& a, const at::Tensor& b) {
  return binary("tierkit::mul", Op::Mul, a, b, 0.0);
}

at::Tensor muladd_cuda(const at::Tensor& a, const at::Tensor& b, double c) {
  return binary("tierkit::muladd", Op::MulAdd, a, b, c);
}

at::Tensor scale_shift_cuda(const at::Tensor& x, double alpha, double beta) {
  tierkit_torch::check_first("tierkit::scale_shift", x, "x", kCUDA);
  at::Tensor out = new_output(x);
  run(Op::ScaleShift, x, nullptr, out, alpha, beta);
  return out;
}

void add_out_cuda(const at::Tensor& a, const at::Tensor& b, const at::Tensor& out) {
  tierkit_torch::check_add_out(a, b, out, kCUDA);
  if (out.dim() > kMaxRank && !out.is_contiguous()) {
    out.copy_(custom_add_cuda(a, b));
    return;
  }
  run(Op::Add, a, &b, out, 0.0, 0.0);
}

}  // namespace

TORCH_LIBRARY_IMPL(tierkit, CUDA, m) {
  m.impl("custom_add", &custom_add_cuda);
  m.impl("mul", &mul_cuda);
  m.impl("scale_shift", &scale_shift_cuda);
  m.impl("muladd", &muladd_cuda);
  m.impl("add_out", &add_out_cuda);
}

}  // namespace tierkit_cuda
