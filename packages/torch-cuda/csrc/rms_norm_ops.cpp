// Host side of the row reductions on CUDA (rms_norm.cu is the device side;
// the base names differ, or the two objects would collide in the build):
// the CPU kernels' checks (tierkit_torch/rows.h, with the CUDA device),
// contiguous operands, a device guard, the current stream, fresh outputs
// from torch's CUDA caching allocator, then rms_launch.h's launchers.
// Autograd is torch-cpu's (its Autograd kernel calls _rms_norm_forward and
// _rms_norm_backward, which dispatch here for CUDA tensors).
#include <ATen/core/Tensor.h>
#include <ATen/ops/add.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

#include "rms_launch.h"
#include "tierkit_torch/rows.h"

namespace tierkit_cuda {
namespace {

using tierkit_torch::Rows;
using OptTensor = std::optional<at::Tensor>;

constexpr auto kCUDA = c10::DeviceType::CUDA;

bool has(const OptTensor& t) { return t && t->defined(); }
const void* ptr(const OptTensor& t) { return has(t) ? t->const_data_ptr() : nullptr; }
OptTensor contiguous(const OptTensor& t) { return has(t) ? OptTensor(t->contiguous()) : std::nullopt; }

at::Tensor fresh_like(const at::Tensor& x) {
  return at::empty(x.sizes(), x.options().memory_format(c10::MemoryFormat::Contiguous));
}

tierkit::DType dtype_of(const at::Tensor& x) {
  return tierkit_torch::core_dtype_info(x.scalar_type())->dtype;
}

cudaStream_t stream_of(const at::Tensor& x) {
  return c10::cuda::getCurrentCUDAStream(x.get_device()).stream();
}

std::tuple<at::Tensor, at::Tensor> forward(const char* op, const at::Tensor& x_in, const OptTensor& weight_in,
                                           std::optional<double> eps_in) {
  tierkit_torch::check_rows(op, x_in, weight_in, kCUDA);
  if (const tierkit_torch::MixedRows mixed(x_in, weight_in); mixed.active) {  // a weight of another dtype
    auto [y, rstd] =
        forward(op, mixed.in(x_in), mixed.in(weight_in), tierkit_torch::eps_or_default(x_in, eps_in));
    return {mixed.result(y), mixed.rstd_out(rstd)};
  }
  const c10::cuda::CUDAGuard guard(x_in.device());
  const Rows r = tierkit_torch::rows_of(x_in);
  const at::Tensor x = x_in.contiguous();
  const OptTensor w = contiguous(weight_in);
  at::Tensor y = fresh_like(x);
  at::Tensor rstd = at::empty(tierkit_torch::rstd_shape(x), x.options().dtype(tierkit_torch::rstd_dtype(x)));
  RmsForward a{x.const_data_ptr(),
               nullptr,
               ptr(w),
               y.mutable_data_ptr(),
               nullptr,
               rstd.mutable_data_ptr(),
               r.rows,
               r.d,
               tierkit_torch::eps_or_default(x, eps_in)};
  launch_rms_forward(dtype_of(x), a, stream_of(x));
  return {y, rstd};
}

at::Tensor rms_norm_cuda(const at::Tensor& x, const OptTensor& weight, std::optional<double> eps) {
  return std::get<0>(forward("tierkit::rms_norm", x, weight, eps));
}

std::tuple<at::Tensor, at::Tensor> rms_norm_forward_cuda(const at::Tensor& x, const OptTensor& weight,
                                                         double eps) {
  return forward("tierkit::_rms_norm_forward", x, weight, eps);
}

std::tuple<at::Tensor, at::Tensor> rms_norm_backward_cuda(const at::Tensor& grad_in, const at::Tensor& x_in,
                                                          const OptTensor& weight_in,
                                                          const at::Tensor& rstd_in) {
  const char* op = "tierkit::_rms_norm_backward";
  tierkit_torch::check_rows(op, x_in, weight_in, kCUDA);
  const Rows r = tierkit_torch::rows_of(x_in);
  tierkit_torch::check_like(op, grad_in, "grad", x_in, "x");
  const auto wide = tierkit_torch::rstd_dtype(x_in);
  TORCH_CHECK(rstd_in.scalar_type() == wide && rstd_in.numel() == r.rows && rstd_in.device() == x_in.device(),
              op, ": rstd: expected ", r.rows, " values of dtype ", tierkit_torch::dtype_name(wide), " on ",
              x_in.device(), " (from _rms_norm_forward), got ", rstd_in.numel(), " of ",
              tierkit_torch::dtype_name(rstd_in.scalar_type()), " on ", rstd_in.device());
  if (const tierkit_torch::MixedRows mixed(x_in, weight_in); mixed.active) {
    auto [dx, dw] = rms_norm_backward_cuda(mixed.in(grad_in), mixed.in(x_in), mixed.in(weight_in),
                                           mixed.rstd_in(rstd_in));
    return {mixed.result(dx), dw.to(weight_in->scalar_type())};  // each gradient in its input's dtype
  }
  const c10::cuda::CUDAGuard guard(x_in.device());
  const at::Tensor x = x_in.contiguous(), grad = grad_in.contiguous(), rstd = rstd_in.contiguous();
  const OptTensor w = contiguous(weight_in);
  at::Tensor dx = fresh_like(x);
  // No weight: an empty grad_weight (the schema returns a Tensor, never None).
  at::Tensor dw = has(w) ? at::empty({r.d}, w->options()) : at::empty({0}, x.options());
  at::Tensor partial;
  if (has(w)) partial = at::empty({rms_backward_slots(r.rows, r.d), r.d}, x.options().dtype(wide));
  RmsBackward a{grad.const_data_ptr(),
                x.const_data_ptr(),
                ptr(w),
                rstd.const_data_ptr(),
                dx.mutable_data_ptr(),
                has(w) ? dw.mutable_data_ptr() : nullptr,
                has(w) ? partial.mutable_data_ptr() : nullptr,
                r.rows,
                r.d};
  launch_rms_backward(dtype_of(x), a, stream_of(x));
  return {dx, dw};
}

// h = x + residual rounded to the dtype, then rms_norm(h), in one pass per
// row; `h_out` is a fresh tensor (add_rms_norm) or residual itself.
at::Tensor add_forward(const char* op, const at::Tensor& x_in, const at::Tensor& residual_in,
                       const OptTensor& weight_in, std::optional<double> eps_in, const at::Tensor& h_out) {
  tierkit_torch::check_rows(op, x_in, weight_in, kCUDA);
  tierkit_torch::check_like(op, residual_in, "residual", x_in, "x");
  if (const tierkit_torch::MixedRows mixed(x_in, weight_in); mixed.active) {
    const at::Tensor h = at::add(x_in, residual_in);  // rounded to the dtype, as the fused pass rounds it
    at::Tensor y = std::get<0>(forward(op, h, weight_in, eps_in));
    h_out.copy_(h);
    return y;
  }
  const c10::cuda::CUDAGuard guard(x_in.device());
  const Rows r = tierkit_torch::rows_of(x_in);
  const at::Tensor x = x_in.contiguous(), residual = residual_in.contiguous();
  const OptTensor w = contiguous(weight_in);
  at::Tensor y = fresh_like(x);
  at::Tensor rstd = at::empty(tierkit_torch::rstd_shape(x), x.options().dtype(tierkit_torch::rstd_dtype(x)));
  at::Tensor h = h_out.is_contiguous() ? h_out : fresh_like(x);
  RmsForward a{x.const_data_ptr(),
               residual.const_data_ptr(),
               ptr(w),
               y.mutable_data_ptr(),
               h.mutable_data_ptr(),
               rstd.mutable_data_ptr(),
               r.rows,
               r.d,
               tierkit_torch::eps_or_default(x, eps_in)};
  launch_rms_forward(dtype_of(x), a, stream_of(x));
  if (!h.is_same(h_out)) h_out.copy_(h);
  return y;
}

std::tuple<at::Tensor, at::Tensor> add_rms_norm_cuda(const at::Tensor& x, const at::Tensor& residual,
                                                     const OptTensor& weight, std::optional<double> eps) {
  at::Tensor h = fresh_like(x);
  at::Tensor y = add_forward("tierkit::add_rms_norm", x, residual, weight, eps, h);
  return {y, h};
}

at::Tensor add_rms_norm__cuda(const at::Tensor& x, const at::Tensor& residual, const OptTensor& weight,
                              std::optional<double> eps) {
  const char* op = "tierkit::add_rms_norm_";
  tierkit_torch::check_in_place_residual(op, x, residual);
  return add_forward(op, x, residual, tierkit_torch::weight_as_called(weight, residual), eps, residual);
}

}  // namespace

TORCH_LIBRARY_IMPL(tierkit, CUDA, m) {
  m.impl("rms_norm", &rms_norm_cuda);
  m.impl("add_rms_norm", &add_rms_norm_cuda);
  m.impl("add_rms_norm_", &add_rms_norm__cuda);
  m.impl("_rms_norm_forward", &rms_norm_forward_cuda);
  m.impl("_rms_norm_backward", &rms_norm_backward_cuda);
}

}  // namespace tierkit_cuda
