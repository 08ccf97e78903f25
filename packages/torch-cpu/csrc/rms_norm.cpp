// CPU kernels of the row reductions (the op table's RowReduction entries):
// rms_norm, add_rms_norm, add_rms_norm_, and the two building blocks their
// autograd uses, _rms_norm_forward (y and the per-row rstd it saves) and
// _rms_norm_backward. The arithmetic is core's (tierkit/rms_norm.h): one
// fixed reduction order per row, float accumulation for 16-bit inputs, rows
// split by at::parallel_for. Checks name the argument, as every op's do.
#include <ATen/core/Tensor.h>
#include <ATen/ops/add.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <limits>
#include <optional>
#include <tuple>
#include <vector>

#include "tierkit/rms_norm.h"
#include "tierkit_torch/rows.h"
#include "view.h"
#include "warm_allocator.h"

namespace tierkit_torch {
namespace {

// A fresh contiguous output like x, from warm memory (warm_allocator.h):
// page faults on a fresh 64 MiB output cost more than the kernel (measured:
// rms_norm over [4096, 4096] float32 took 32 ms in the bench beside eager's
// 45 ms; core's kernel alone, on one thread, 13 ms).
at::Tensor fresh_like(const at::Tensor& x) { return warm_empty(x.sizes(), x.options()); }

template <typename F>
void dispatch(const at::Tensor& x, const F& f) {
  tierkit::dispatch_accepted(to_core_dtype(x.scalar_type()), "x", [&](auto tag) { f(tag); });
}

template <typename T>
const T* ptr(const std::optional<at::Tensor>& t) {
  return t && t->defined() ? static_cast<const T*>(t->const_data_ptr()) : nullptr;
}

std::optional<at::Tensor> contiguous(const std::optional<at::Tensor>& t) {
  if (!t || !t->defined()) return std::nullopt;
  return t->contiguous();
}

std::tuple<at::Tensor, at::Tensor> forward(const char* op, const at::Tensor& x_in,
                                           const std::optional<at::Tensor>& weight_in,
                                           std::optional<double> eps_in) {
  check_rows(op, x_in, weight_in, c10::DeviceType::CPU);
  const Rows r = rows_of(x_in);
  const double eps = eps_or_default(x_in, eps_in);
  if (const MixedRows mixed(x_in, weight_in); mixed.active) {
    auto [y, rstd] = forward(op, mixed.in(x_in), mixed.in(weight_in), eps);
    return {mixed.result(y), mixed.rstd_out(rstd)};
  }
  const at::Tensor x = x_in.contiguous();
  const auto w = contiguous(weight_in);
  at::Tensor y = fresh_like(x);
  at::Tensor rstd = at::empty(rstd_shape(x), x.options().dtype(rstd_dtype(x)));
  dispatch(x, [&](auto tag) {
    using T = decltype(tag);
    using C = tierkit::compute_t<T>;
    tierkit::kernels::rms_norm_forward(static_cast<const T*>(x.const_data_ptr()), ptr<T>(w), eps, r.rows, r.d,
                                       static_cast<T*>(y.mutable_data_ptr()),
                                       static_cast<C*>(rstd.mutable_data_ptr()), AtenRowRunner{});
  });
  return {y, rstd};
}

at::Tensor rms_norm_cpu(const at::Tensor& x, const std::optional<at::Tensor>& weight,
                        std::optional<double> eps) {
  return std::get<0>(forward("tierkit::rms_norm", x, weight, eps));
}

std::tuple<at::Tensor, at::Tensor> rms_norm_forward_cpu(const at::Tensor& x,
                                                        const std::optional<at::Tensor>& weight, double eps) {
  return forward("tierkit::_rms_norm_forward", x, weight, eps);
}

std::tuple<at::Tensor, at::Tensor> rms_norm_backward_cpu(const at::Tensor& grad_in, const at::Tensor& x_in,
                                                         const std::optional<at::Tensor>& weight_in,
                                                         const at::Tensor& rstd_in) {
  const char* op = "tierkit::_rms_norm_backward";
  check_rows(op, x_in, weight_in, c10::DeviceType::CPU);
  const Rows r = rows_of(x_in);
  check_like(op, grad_in, "grad", x_in, "x");
  TORCH_CHECK(rstd_in.scalar_type() == rstd_dtype(x_in) && rstd_in.numel() == r.rows, op, ": rstd: expected ",
              r.rows, " values of dtype ", dtype_name(rstd_dtype(x_in)), " (from _rms_norm_forward), got ",
              rstd_in.numel(), " of ", dtype_name(rstd_in.scalar_type()));
  if (const MixedRows mixed(x_in, weight_in); mixed.active) {
    auto [dx, dw] =
        rms_norm_backward_cpu(mixed.in(grad_in), mixed.in(x_in), mixed.in(weight_in), mixed.rstd_in(rstd_in));
    return {mixed.result(dx), dw.to(weight_in->scalar_type())};  // each gradient in its input's dtype
  }
  const at::Tensor x = x_in.contiguous(), grad = grad_in.contiguous(), rstd = rstd_in.contiguous();
  const auto w = contiguous(weight_in);
  at::Tensor dx = fresh_like(x);
  at::Tensor dw, dw_acc;  // accumulated in the compute type, then cast to weight's dtype
  if (w) dw_acc = at::empty({r.d}, x.options().dtype(rstd_dtype(x)));
  dispatch(x, [&](auto tag) {
    using T = decltype(tag);
    using C = tierkit::compute_t<T>;
    tierkit::kernels::rms_norm_backward(
        static_cast<const T*>(grad.const_data_ptr()), static_cast<const T*>(x.const_data_ptr()), ptr<T>(w),
        static_cast<const C*>(rstd.const_data_ptr()), r.rows, r.d, static_cast<T*>(dx.mutable_data_ptr()),
        w ? static_cast<C*>(dw_acc.mutable_data_ptr()) : nullptr, AtenRowRunner{});
  });
  // No weight: an empty grad_weight (the schema returns a Tensor, never None).
  dw = w ? dw_acc.to(w->scalar_type()) : at::empty({0}, x.options());
  return {dx, dw};
}

// h = x + residual rounded to the dtype, then rms_norm(h): one pass per row.
// `h_out` is a fresh tensor (add_rms_norm) or residual itself (add_rms_norm_).
at::Tensor add_forward(const char* op, const at::Tensor& x_in, const at::Tensor& residual_in,
                       const std::optional<at::Tensor>& weight_in, std::optional<double> eps_in,
                       const at::Tensor& h_out) {
  check_rows(op, x_in, weight_in, c10::DeviceType::CPU);
  const Rows r = rows_of(x_in);
  check_like(op, residual_in, "residual", x_in, "x");
  const double eps = eps_or_default(x_in, eps_in);
  if (const MixedRows mixed(x_in, weight_in); mixed.active) {
    const at::Tensor h = at::add(x_in, residual_in);  // rounded to the dtype, as the fused pass rounds it
    at::Tensor y = std::get<0>(forward(op, h, weight_in, eps));
    h_out.copy_(h);
    return y;
  }
  const at::Tensor x = x_in.contiguous(), residual = residual_in.contiguous();
  const auto w = contiguous(weight_in);
  at::Tensor y = fresh_like(x);
  at::Tensor rstd = at::empty(rstd_shape(x), x.options().dtype(rstd_dtype(x)));
  // A non-contiguous h_out (add_rms_norm_'s residual) is written through a contiguous temporary.
  at::Tensor h = h_out.is_contiguous() ? h_out : at::empty(x.sizes(), x.options());
  dispatch(x, [&](auto tag) {
    using T = decltype(tag);
    using C = tierkit::compute_t<T>;
    tierkit::kernels::add_rms_norm_forward(
        static_cast<const T*>(x.const_data_ptr()), static_cast<const T*>(residual.const_data_ptr()),
        ptr<T>(w), eps, r.rows, r.d, static_cast<T*>(y.mutable_data_ptr()),
        static_cast<T*>(h.mutable_data_ptr()), static_cast<C*>(rstd.mutable_data_ptr()), AtenRowRunner{});
  });
  if (!h.is_same(h_out)) h_out.copy_(h);
  return y;
}

std::tuple<at::Tensor, at::Tensor> add_rms_norm_cpu(const at::Tensor& x, const at::Tensor& residual,
                                                    const std::optional<at::Tensor>& weight,
                                                    std::optional<double> eps) {
  at::Tensor h = fresh_like(x);
  at::Tensor y = add_forward("tierkit::add_rms_norm", x, residual, weight, eps, h);
  return {y, h};
}

at::Tensor add_rms_norm__cpu(const at::Tensor& x, const at::Tensor& residual,
                             const std::optional<at::Tensor>& weight, std::optional<double> eps) {
  const char* op = "tierkit::add_rms_norm_";
  check_in_place_residual(op, x, residual);
  return add_forward(op, x, residual, weight, eps, residual);
}

}  // namespace

TORCH_LIBRARY_IMPL(tierkit, CPU, m) {
  m.impl("rms_norm", &rms_norm_cpu);
  m.impl("add_rms_norm", &add_rms_norm_cpu);
  m.impl("add_rms_norm_", &add_rms_norm__cpu);
  m.impl("_rms_norm_forward", &rms_norm_forward_cpu);
  m.impl("_rms_norm_backward", &rms_norm_backward_cpu);
}

}  // namespace tierkit_torch
