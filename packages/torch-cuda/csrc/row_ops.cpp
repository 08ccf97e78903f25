// Host side of the row reductions on CUDA, one template for every entry of
// the op table's kind (row_kernels.cu is the device side; the base names
// differ, or the two objects would collide in the build): the CPU kernels'
// checks (tierkit_torch/rows.h, with the CUDA device), contiguous operands, a
// device guard, the current stream, fresh outputs from torch's CUDA caching
// allocator, then row_launch.h's launchers. Autograd is torch-cpu's (its
// Autograd kernel calls _<name>_forward and _<name>_backward, which dispatch
// here for CUDA tensors).
#include <ATen/core/Tensor.h>
#include <ATen/ops/add.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <array>
#include <optional>
#include <tuple>
#include <type_traits>

#include "row_launch.h"
#include "tierkit_torch/rows.h"

namespace tierkit_cuda {
namespace {

namespace tt = tierkit_torch;
constexpr auto kCUDA = c10::DeviceType::CUDA;

at::Tensor fresh_like(const at::Tensor& x) {
  return at::empty(x.sizes(), x.options().memory_format(c10::MemoryFormat::Contiguous));
}

tierkit::DType dtype_of(const at::Tensor& x) { return tt::core_dtype_info(x.scalar_type())->dtype; }

cudaStream_t stream_of(const at::Tensor& x) {
  return c10::cuda::getCurrentCUDAStream(x.get_device()).stream();
}

template <std::size_t P>
tt::Params<P> contiguous(const tt::Params<P>& params) {
  tt::Params<P> out;
  for (std::size_t i = 0; i < P; ++i)
    if (tt::defined(params[i])) out[i] = params[i]->contiguous();
  return out;
}

template <std::size_t P>
const void* param_ptr(const tt::Params<P>& params, std::size_t i) {
  return i < P && tt::defined(params[i]) ? params[i]->const_data_ptr() : nullptr;
}

// E::Kind: std::integral_constant<RowKind, ...>, the entry's index for the launchers.
template <typename E>
struct CudaRows {
  using Entry = E;
  static constexpr std::size_t P = E::kParams;
  using Ps = tt::Params<P>;
  static constexpr RowKind kKind = E::Kind::value;

  static std::tuple<at::Tensor, at::Tensor> forward_as(const char* op, const at::Tensor& x_in,
                                                       const Ps& params_in, double eps) {
    tt::check_rows<E>(op, x_in, params_in, kCUDA);
    if (const tt::MixedRows mixed(x_in, params_in); mixed.active) {  // parameters of another dtype
      auto [y, stats] = forward_as(op, mixed.in(x_in), mixed.in(params_in), eps);
      return {mixed.result(y), mixed.stats_out(stats)};
    }
    const c10::cuda::CUDAGuard guard(x_in.device());
    const tt::Rows r = tt::rows_of(x_in);
    const at::Tensor x = x_in.contiguous();
    const Ps params = contiguous(params_in);
    at::Tensor y = fresh_like(x);
    at::Tensor stats = at::empty(tt::stats_shape(x, E::kStats), x.options().dtype(tt::stats_dtype(x)));
    const RowForward a{x.const_data_ptr(),
                       nullptr,
                       param_ptr(params, 0),
                       param_ptr(params, 1),
                       y.mutable_data_ptr(),
                       nullptr,
                       stats.mutable_data_ptr(),
                       r.rows,
                       r.d,
                       eps};
    launch_row_forward(kKind, dtype_of(x), a, stream_of(x));
    return {y, stats};
  }

  static at::Tensor op(const at::Tensor& x, const Ps& params, typename E::Scalar s) {
    if constexpr (E::Info::has_dim)
      return tt::along_dim(E::op_name(), x, s, [&](const at::Tensor& rows) {
        return std::get<0>(forward_as(E::op_name(), rows, params, 0.0));
      });
    else
      return std::get<0>(forward_as(E::op_name(), x, params, tt::eps_or_default(x, s)));
  }
  static std::tuple<at::Tensor, at::Tensor> forward(const at::Tensor& x, const Ps& params, double eps) {
    return forward_as(E::forward_name(), x, params, eps);
  }

  static tt::Grads<P> backward(const at::Tensor& grad_in, const at::Tensor& x_in, const Ps& params_in,
                               const at::Tensor& stats_in) {
    const char* op = E::backward_name();
    tt::check_rows<E>(op, x_in, params_in, kCUDA);
    const tt::Rows r = tt::rows_of(x_in);
    tt::check_like(op, grad_in, "grad", x_in, "x");
    tt::check_stats<E>(op, stats_in, x_in, r);
    TORCH_CHECK(stats_in.device() == x_in.device(), op, ": stats: expected device ", x_in.device(),
                " (same as x), got ", stats_in.device());
    std::array<at::Tensor, P + 1> out;
    if (const tt::MixedRows mixed(x_in, params_in); mixed.active) {
      const auto wide = tt::tuple_to_array(
          backward(mixed.in(grad_in), mixed.in(x_in), mixed.in(params_in), mixed.stats_in(stats_in)));
      out[0] = mixed.result(wide[0]);
      for (std::size_t i = 0; i < P; ++i)  // each gradient in its input's dtype
        out[i + 1] = tt::defined(params_in[i]) ? wide[i + 1].to(params_in[i]->scalar_type()) : wide[i + 1];
      return tt::tuple_of(out);
    }
    const c10::cuda::CUDAGuard guard(x_in.device());
    const at::Tensor x = x_in.contiguous(), grad = grad_in.contiguous(), stats = stats_in.contiguous();
    const Ps params = contiguous(params_in);
    out[0] = fresh_like(x);
    std::array<at::Tensor, 2> partial;
    void* grads[2] = {nullptr, nullptr};
    const int64_t slots = row_backward_slots(r.rows, r.d);
    for (std::size_t i = 0; i < P; ++i) {
      // An absent parameter: an empty gradient (the schema returns a Tensor, never None).
      out[i + 1] =
          tt::defined(params[i]) ? at::empty({r.d}, params[i]->options()) : at::empty({0}, x.options());
      if (!tt::defined(params[i])) continue;
      partial[i] = at::empty({slots, r.d}, x.options().dtype(tt::stats_dtype(x)));
      grads[i] = out[i + 1].mutable_data_ptr();
    }
    const RowBackward a{grad.const_data_ptr(),
                        x.const_data_ptr(),
                        param_ptr(params, 0),
                        param_ptr(params, 1),
                        stats.const_data_ptr(),
                        out[0].mutable_data_ptr(),
                        grads[0],
                        grads[1],
                        partial[0].defined() ? partial[0].mutable_data_ptr() : nullptr,
                        partial[1].defined() ? partial[1].mutable_data_ptr() : nullptr,
                        r.rows,
                        r.d};
    launch_row_backward(kKind, dtype_of(x), a, stream_of(x));
    return tt::tuple_of(out);
  }

  // h = x + residual rounded to the dtype, then the forward on h; `h_out`
  // is a fresh tensor (add_<name>) or residual itself (add_<name>_).
  static at::Tensor add_forward(const char* op, const at::Tensor& x_in, const at::Tensor& residual_in,
                                const Ps& params_in, double eps, const at::Tensor& h_out) {
    tt::check_rows<E>(op, x_in, params_in, kCUDA);
    tt::check_like(op, residual_in, "residual", x_in, "x");
    if (const tt::MixedRows mixed(x_in, params_in); mixed.active) {
      const at::Tensor h = at::add(x_in, residual_in);  // rounded to the dtype, as the fused pass rounds it
      at::Tensor y = std::get<0>(forward_as(op, h, params_in, eps));
      h_out.copy_(h);
      return y;
    }
    const c10::cuda::CUDAGuard guard(x_in.device());
    const tt::Rows r = tt::rows_of(x_in);
    const at::Tensor x = x_in.contiguous(), residual = residual_in.contiguous();
    const Ps params = contiguous(params_in);
    at::Tensor y = fresh_like(x);
    at::Tensor stats = at::empty(tt::stats_shape(x, E::kStats), x.options().dtype(tt::stats_dtype(x)));
    at::Tensor h = h_out.is_contiguous() ? h_out : fresh_like(x);
    const RowForward a{x.const_data_ptr(),
                       residual.const_data_ptr(),
                       param_ptr(params, 0),
                       param_ptr(params, 1),
                       y.mutable_data_ptr(),
                       h.mutable_data_ptr(),
                       stats.mutable_data_ptr(),
                       r.rows,
                       r.d,
                       eps};
    launch_row_forward(kKind, dtype_of(x), a, stream_of(x));
    if (!h.is_same(h_out)) h_out.copy_(h);
    return y;
  }

  static std::tuple<at::Tensor, at::Tensor> add(const at::Tensor& x, const at::Tensor& residual,
                                                const Ps& params, typename E::Scalar eps) {
    at::Tensor h = fresh_like(x);
    at::Tensor y = add_forward(E::add_name(), x, residual, params, tt::eps_or_default(x, eps), h);
    return {y, h};
  }

  static at::Tensor add_(const at::Tensor& x, const at::Tensor& residual, const Ps& params,
                         typename E::Scalar eps) {
    const char* op = E::add_inplace_name();
    tt::check_in_place_residual(op, x, residual);
    // A parameter inside residual is read as it was at the call (the blocks would otherwise race with the
    // writes).
    Ps as_called;
    for (std::size_t i = 0; i < P; ++i) as_called[i] = tt::param_as_called(params[i], residual);
    return add_forward(op, x, residual, as_called, tt::eps_or_default(x, eps), residual);
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(tierkit, CUDA, m) {
#define TIERKIT_REGISTER_ROWS(NAME, FUNCTOR, PARAMS, STATS)              \
  tt::register_row_entry<CudaRows, tt::RowEntry<tierkit::row_info::NAME, \
                                                std::integral_constant<RowKind, RowKind::NAME>, PARAMS>>(m);
  TIERKIT_ROW_REDUCTIONS(TIERKIT_REGISTER_ROWS)
#undef TIERKIT_REGISTER_ROWS
}

}  // namespace tierkit_cuda
