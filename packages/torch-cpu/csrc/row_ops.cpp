// CPU kernels of the row reductions, one template for every entry of the op
// table's kind (TIERKIT_ROW_REDUCTIONS): the op, its fused residual forms
// where the entry has them, and the two building blocks its autograd uses
// (_<name>_forward: y and the per-row stats; _<name>_backward). The
// arithmetic is core's row kind (tierkit/row_functors.h through
// row_kernels.h): one fixed reduction order per row, float accumulation
// for 16-bit inputs, rows split by at::parallel_for.
#include <ATen/core/Tensor.h>
#include <ATen/ops/add.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <array>
#include <optional>
#include <tuple>

#include "round_normalized.h"
#include "tierkit/row_functors.h"
#include "tierkit_torch/rows.h"
#include "view.h"
#include "warm_allocator.h"

namespace tierkit_torch {
namespace {

// A fresh contiguous output like x, from warm memory (warm_allocator.h):
// page faults on a fresh 64 MiB output cost more than the kernel (measured:
// RMSNorm over [4096, 4096] float32 took 32 ms in the bench beside eager's
// 45 ms; core's kernel alone, on one thread, 13 ms).
at::Tensor fresh_like(const at::Tensor& x) { return warm_empty(x.sizes(), x.options()); }

template <typename F>
void dispatch(const at::Tensor& x, const F& f) {
  tierkit::dispatch_accepted(to_core_dtype(x.scalar_type()), "x", [&](auto tag) { f(tag); });
}

template <std::size_t P>
Params<P> contiguous(const Params<P>& params) {
  Params<P> out;
  for (std::size_t i = 0; i < P; ++i)
    if (defined(params[i])) out[i] = params[i]->contiguous();
  return out;
}

// The kernel's parameters, of element type T: x's dtype, or x's compute
// type where the call mixes dtypes (MixedRows: converted to it, d elements).
template <typename T, std::size_t P>
tierkit::kernels::RowParams<T> row_params(const Params<P>& params) {
  std::array<const void*, P> data{};
  for (std::size_t i = 0; i < P; ++i)
    if (defined(params[i])) data[i] = params[i]->const_data_ptr();
  return tierkit::kernels::row_params_of<T>(data);
}

template <typename T>
T* data(const at::Tensor& t) {
  return static_cast<T*>(t.mutable_data_ptr());
}

// Calls f(row_params<T or compute_t<T>>(params)): the parameters in x's dtype, or, in a
// mixed call, in its compute type (params already converted by MixedRows::in);
// `round_normalized`: core's RowParams flag (round_normalized.h).
template <typename T, std::size_t P, typename F>
void with_params(const MixedRows& mixed, const Params<P>& params, const F& f, bool round_normalized = false) {
  const auto call = [&](auto p) {
    p.round_normalized = round_normalized;
    f(p);
  };
  if (mixed.active)
    call(row_params<tierkit::compute_t<T>>(params));
  else
    call(row_params<T>(params));
}

template <typename E>
struct CpuRows {
  using Entry = E;
  using K = typename E::Kind;
  static constexpr std::size_t P = E::kParams;
  using Ps = Params<P>;
  static constexpr c10::DeviceType kCpu = c10::DeviceType::CPU;

  // A forward's fresh outputs: y like x, the per-row stats in the compute type.
  static std::tuple<at::Tensor, at::Tensor> outputs_like(const at::Tensor& x) {
    return {fresh_like(x), at::empty(stats_shape(x, E::kStats), x.options().dtype(stats_dtype(x)))};
  }

  // fn(tag, p): a forward kernel's call for x's dtype (the tag's type) with
  // the parameters as the kernel takes them (with_params).
  template <typename Fn>
  static void for_rows(const at::Tensor& x, const MixedRows& mixed, const Ps& params, bool round_normalized,
                       const Fn& fn) {
    dispatch(x, [&](auto tag) {
      with_params<decltype(tag)>(mixed, params, [&](auto p) { fn(tag, p); }, round_normalized);
    });
  }

  // `round_normalized`: x-hat rounded to x's dtype before the weight (round_normalized.h).
  static std::tuple<at::Tensor, at::Tensor> forward_as(const char* op, const at::Tensor& x_in,
                                                       const Ps& params_in, double eps,
                                                       bool round_normalized = false) {
    check_rows<E>(op, x_in, params_in, kCpu);
    const MixedRows mixed(x_in, params_in);
    if (mixed.converts_x()) {
      auto [y, stats] = forward_as(op, mixed.in(x_in), mixed.in(params_in), eps, round_normalized);
      return {mixed.result(y), mixed.stats_out(stats)};
    }
    const Rows r = rows_of(x_in);
    const at::Tensor x = x_in.contiguous();
    const Ps params = contiguous(mixed.active ? mixed.in(params_in) : params_in);
    auto [y, stats] = outputs_like(x);
    for_rows(x, mixed, params, round_normalized, [&](auto tag, auto p) {
      using T = decltype(tag);
      tierkit::kernels::row_forward<K>(static_cast<const T*>(x.const_data_ptr()), p, eps, r.rows, r.d,
                                       data<T>(y), data<tierkit::compute_t<T>>(stats), AtenRowRunner{});
    });
    return {y, stats};
  }

  static at::Tensor op(const at::Tensor& x, const Ps& params, typename E::Scalar s) {
    if constexpr (E::Info::has_dim)
      return along_dim(E::op_name(), x, s, [&](const at::Tensor& rows) {
        return std::get<0>(forward_as(E::op_name(), rows, params, 0.0));
      });
    else
      return std::get<0>(forward_as(E::op_name(), x, params, eps_or_default(x, s)));
  }
  static std::tuple<at::Tensor, at::Tensor> forward(const at::Tensor& x, const Ps& params, double eps) {
    return forward_as(E::forward_name(), x, params, eps);
  }

  static Grads<P> backward(const at::Tensor& grad_in, const at::Tensor& x_in, const Ps& params_in,
                           const at::Tensor& stats_in) {
    const char* op = E::backward_name();
    check_rows<E>(op, x_in, params_in, kCpu);
    const Rows r = rows_of(x_in);
    check_like(op, grad_in, "grad", x_in, "x");
    check_stats<E>(op, stats_in, x_in, r);
    std::array<at::Tensor, P + 1> out;
    const MixedRows mixed(x_in, params_in);
    if (mixed.converts_x()) {
      const auto wide = tuple_to_array(
          backward(mixed.in(grad_in), mixed.in(x_in), mixed.in(params_in), mixed.stats_in(stats_in)));
      out[0] = mixed.result(wide[0]);
      for (std::size_t i = 0; i < P; ++i)  // each gradient in its input's dtype
        out[i + 1] = defined(params_in[i]) ? wide[i + 1].to(params_in[i]->scalar_type()) : wide[i + 1];
      return tuple_of(out);
    }
    const at::Tensor x = x_in.contiguous(), grad = grad_in.contiguous(), stats = stats_in.contiguous();
    const Ps params = contiguous(mixed.active ? mixed.in(params_in) : params_in);
    out[0] = fresh_like(x);
    std::array<at::Tensor, P> acc;  // accumulated in the compute type, then cast to the parameter's dtype
    for (std::size_t i = 0; i < P; ++i)
      if (defined(params[i])) acc[i] = at::empty({r.d}, x.options().dtype(stats_dtype(x)));
    dispatch(x, [&](auto tag) {
      using T = decltype(tag);
      using C = tierkit::compute_t<T>;
      C* dp[2] = {nullptr, nullptr};
      for (std::size_t i = 0; i < P; ++i)
        if (acc[i].defined()) dp[i] = data<C>(acc[i]);
      with_params<T>(mixed, params, [&](auto p) {
        tierkit::kernels::row_backward<K>(static_cast<const T*>(grad.const_data_ptr()),
                                          static_cast<const T*>(x.const_data_ptr()), p,
                                          static_cast<const C*>(stats.const_data_ptr()), r.rows, r.d,
                                          data<T>(out[0]), dp[0], dp[1], AtenRowRunner{});
      });
    });
    // Each gradient in its input's dtype; an absent parameter: an empty
    // gradient (the schema returns a Tensor, never None).
    for (std::size_t i = 0; i < P; ++i)
      out[i + 1] = acc[i].defined() ? acc[i].to(params_in[i]->scalar_type()) : at::empty({0}, x.options());
    return tuple_of(out);
  }

  // h = x + residual rounded to the dtype, then the forward on h: one pass
  // per row. `h_out` is a fresh tensor (add_<name>) or residual itself (add_<name>_).
  static at::Tensor add_forward(const char* op, const at::Tensor& x_in, const at::Tensor& residual_in,
                                const Ps& params_in, double eps, const at::Tensor& h_out,
                                bool round_normalized = false) {
    check_rows<E>(op, x_in, params_in, kCpu);
    check_like(op, residual_in, "residual", x_in, "x");
    const MixedRows mixed(x_in, params_in);
    if (mixed.converts_x()) {
      const at::Tensor h = at::add(x_in, residual_in);  // rounded to the dtype, as the fused pass rounds it
      at::Tensor y = std::get<0>(forward_as(op, h, params_in, eps, round_normalized));
      h_out.copy_(h);
      return y;
    }
    const Rows r = rows_of(x_in);
    const at::Tensor x = x_in.contiguous(), residual = residual_in.contiguous();
    const Ps params = contiguous(mixed.active ? mixed.in(params_in) : params_in);
    auto [y, stats] = outputs_like(x);
    // A non-contiguous h_out (the in-place form's residual) is written through a contiguous temporary.
    at::Tensor h = h_out.is_contiguous() ? h_out : at::empty(x.sizes(), x.options());
    for_rows(x, mixed, params, round_normalized, [&](auto tag, auto p) {
      using T = decltype(tag);
      tierkit::kernels::row_add_forward<K>(
          static_cast<const T*>(x.const_data_ptr()), static_cast<const T*>(residual.const_data_ptr()), p, eps,
          r.rows, r.d, data<T>(y), data<T>(h), data<tierkit::compute_t<T>>(stats), AtenRowRunner{});
    });
    if (!h.is_same(h_out)) h_out.copy_(h);
    return y;
  }

  // "llama" with a float32 weight over 16-bit x (round_normalized.h): y =
  // float(T(x-hat)) * w in float32, the composite's dtype, in one pass
  // (core's kWideOutput), with the fused residual's h in x's dtype. The
  // caller (row_casting.cpp's one_pass_rounded) admits contiguous-able
  // plain CPU tensors of a 16-bit x and a one-dimensional float32 weight.
  static std::tuple<at::Tensor, at::Tensor> wide_rounded_forward(const char* op, const at::Tensor& x_in,
                                                                 const at::Tensor& residual_in,
                                                                 const at::Tensor& h_out, const Ps& params_in,
                                                                 double eps) {
    check_rows<E>(op, x_in, params_in, kCpu);
    const MixedRows mixed(x_in, params_in);
    TORCH_CHECK(mixed.active && !mixed.converts_x(), op,
                ": a float32 output needs 16-bit x and float32 parameters");
    const Rows r = rows_of(x_in);
    const at::Tensor x = x_in.contiguous();
    const Ps params = contiguous(mixed.in(params_in));
    at::Tensor y = warm_empty(x.sizes(), x.options().dtype(at::kFloat));
    at::Tensor stats = at::empty(stats_shape(x, E::kStats), x.options().dtype(stats_dtype(x)));
    at::Tensor residual, h;
    if (residual_in.defined()) {
      check_like(op, residual_in, "residual", x_in, "x");
      residual = residual_in.contiguous();
      // A non-contiguous h_out (the in-place form's residual) is written through a contiguous temporary.
      h = h_out.defined() && h_out.is_contiguous() ? h_out : fresh_like(x);
    }
    for_rows(x, mixed, params, /*round_normalized=*/true, [&](auto tag, auto p) {
      using T = decltype(tag);
      if constexpr (sizeof(T) == 2 && K::kWideOutput) {
        const T* xp = static_cast<const T*>(x.const_data_ptr());
        float* stats_p = data<float>(stats);
        if (residual.defined())
          tierkit::kernels::row_add_forward<K>(xp, static_cast<const T*>(residual.const_data_ptr()), p, eps,
                                               r.rows, r.d, data<float>(y), data<T>(h), stats_p,
                                               AtenRowRunner{});
        else
          tierkit::kernels::row_forward<K>(xp, p, eps, r.rows, r.d, data<float>(y), stats_p, AtenRowRunner{});
      } else {
        TORCH_CHECK(false, op, ": a float32 output is for 16-bit x of a norm that has one, got ",
                    x.scalar_type());
      }
    });
    if (h_out.defined() && !h.is_same(h_out)) h_out.copy_(h);
    return {y, h_out.defined() ? h_out : h};
  }

  static std::tuple<at::Tensor, at::Tensor> add(const at::Tensor& x, const at::Tensor& residual,
                                                const Ps& params, typename E::Scalar eps) {
    at::Tensor h = fresh_like(x);
    at::Tensor y = add_forward(E::add_name(), x, residual, params, eps_or_default(x, eps), h);
    return {y, h};
  }

  static at::Tensor add_(const at::Tensor& x, const at::Tensor& residual, const Ps& params,
                         typename E::Scalar eps) {
    const char* op = E::add_inplace_name();
    check_in_place_residual(op, x, residual);
    return add_forward(op, x, residual, params, eps_or_default(x, eps), residual);
  }
};

// round_normalized.h's forward over one entry's CpuRows (R): the op's own
// forms with core's round_normalized flag set.
template <typename R>
std::tuple<at::Tensor, at::Tensor> round_normalized_rows(const at::Tensor& x, const at::Tensor& residual,
                                                         const at::Tensor& h_out, const at::Tensor& weight,
                                                         double eps) {
  using E = typename R::Entry;
  if constexpr (R::P == 0) {  // never called: only the weight-only norms have casting modes
    TORCH_CHECK(false, E::op_name(), ": has no weight to round after");
  } else {
    typename R::Ps params;
    params[0] = weight;
    if (weight.scalar_type() != x.scalar_type()) {  // a float32 weight: y in float32
      const char* op = !residual.defined() ? E::op_name()
                       : h_out.defined()   ? E::add_inplace_name()
                                           : E::add_name();
      auto [y, h] = R::wide_rounded_forward(op, x, residual, h_out, params, eps);
      if (h_out.defined() && h_out.is_contiguous()) h_out.unsafeGetTensorImpl()->bump_version();
      return {y, residual.defined() ? h : at::Tensor()};
    }
    if (!residual.defined())
      return {std::get<0>(R::forward_as(E::op_name(), x, params, eps, true)), at::Tensor()};
    const at::Tensor h = h_out.defined() ? h_out : fresh_like(x);
    at::Tensor y = R::add_forward(h_out.defined() ? E::add_inplace_name() : E::add_name(), x, residual,
                                  params, eps, h, true);
    // A contiguous h_out is written below the dispatcher (a non-contiguous one through copy_): autograd
    // must see it.
    if (h_out.defined() && h_out.is_contiguous()) h_out.unsafeGetTensorImpl()->bump_version();
    return {y, h};
  }
}

}  // namespace

#define TIERKIT_ROUND_NORMALIZED(NAME, FUNCTOR, PARAMS, STATS)                                             \
  template <>                                                                                              \
  std::tuple<at::Tensor, at::Tensor> round_normalized_forward<tierkit::row_info::NAME>(                    \
      const at::Tensor& x, const at::Tensor& residual, const at::Tensor& h_out, const at::Tensor& weight,  \
      double eps) {                                                                                        \
    return round_normalized_rows<                                                                          \
        CpuRows<RowEntry<tierkit::row_info::NAME, tierkit::kernels::FUNCTOR, PARAMS>>>(x, residual, h_out, \
                                                                                       weight, eps);       \
  }
TIERKIT_ROW_REDUCTIONS(TIERKIT_ROUND_NORMALIZED)
#undef TIERKIT_ROUND_NORMALIZED

TORCH_LIBRARY_IMPL(tierkit, CPU, m) {
#define TIERKIT_REGISTER_ROWS(NAME, FUNCTOR, PARAMS, STATS) \
  register_row_entry<CpuRows, RowEntry<tierkit::row_info::NAME, tierkit::kernels::FUNCTOR, PARAMS>>(m);
  TIERKIT_ROW_REDUCTIONS(TIERKIT_REGISTER_ROWS)
#undef TIERKIT_REGISTER_ROWS
}

}  // namespace tierkit_torch
