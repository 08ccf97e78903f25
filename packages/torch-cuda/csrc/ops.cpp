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

// Fills the operands and calls `launch(dtype, operands, stream)` on a's device.
template <typename Launch>
void run(const at::Tensor& a, const at::Tensor* b, const at::Tensor& out, const Launch& launch) {
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
  launch(tierkit_torch::core_dtype_info(a.scalar_type())->dtype, o,
         c10::cuda::getCurrentCUDAStream(a.get_device()).stream());
}

at::Tensor new_output(const at::Tensor& like) {
  return at::empty(like.sizes(), like.options().memory_format(c10::MemoryFormat::Contiguous));
}

template <typename Launch>
at::Tensor binary(const char* name, const at::Tensor& a, const at::Tensor& b, const Launch& launch) {
  tierkit_torch::check_first(name, a, "a", kCUDA);
  tierkit_torch::check_like(name, b, "b", a, "a");
  at::Tensor out = new_output(a);
  run(a, &b, out, launch);
  return out;
}

at::Tensor custom_add_cuda(const at::Tensor& a, const at::Tensor& b) {
  return binary("tierkit::custom_add", a, b, launch_add);
}

at::Tensor mul_cuda(const at::Tensor& a, const at::Tensor& b) {
  return binary("tierkit::mul", a, b, launch_mul);
}

at::Tensor muladd_cuda(const at::Tensor& a, const at::Tensor& b, double c) {
  return binary("tierkit::muladd", a, b,
                [c](DType t, const Operands& o, cudaStream_t s) { launch_muladd(t, o, c, s); });
}

at::Tensor scale_shift_cuda(const at::Tensor& x, double alpha, double beta) {
  tierkit_torch::check_first("tierkit::scale_shift", x, "x", kCUDA);
  at::Tensor out = new_output(x);
  run(x, nullptr, out,
      [=](DType t, const Operands& o, cudaStream_t s) { launch_scale_shift(t, o, alpha, beta, s); });
  return out;
}

void add_out_cuda(const at::Tensor& a, const at::Tensor& b, const at::Tensor& out) {
  tierkit_torch::check_add_out(a, b, out, kCUDA);
  if (out.dim() > kMaxRank && !out.is_contiguous()) {
    out.copy_(custom_add_cuda(a, b));
    return;
  }
  run(a, &b, out, launch_add);
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
