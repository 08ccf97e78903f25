// The row reductions on torch's stable ABI: rms_norm, add_rms_norm,
// add_rms_norm_ and the two building blocks their autograd uses,
// _rms_norm_forward (y and the per-row rstd) and _rms_norm_backward. The
// schemas are the op table's (kRowReductionSchemas, defined in ops.cpp),
// the checks say what tierkit::'s say, and the arithmetic is core's
// (tierkit/rms_norm.h), so results equal tierkit::'s bit for bit. Autograd,
// fakes and vmap come from Python (tierkit_torch_stable/_norms.py).
#include <torch/csrc/stable/library.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "stable_tensor.h"
#include "tierkit/checks.h"
#include "tierkit/rms_norm.h"

namespace tierkit_stable {
namespace {

using OptTensor = std::optional<Tensor>;

bool has(const OptTensor& t) { return t.has_value() && t->defined(); }

// x's rows (every leading dim) and their length d (the last dim).
struct Rows {
  int64_t rows = 1, d = 0;
};

Rows rows_of(const Tensor& x) {
  Rows r;
  for (int64_t i = 0; i + 1 < x.dim(); ++i) r.rows *= x.sizes()[i];
  r.d = x.sizes()[x.dim() - 1];
  return r;
}

void check_rows(const char* op, const Tensor& x, const OptTensor& weight) {
  check_defined(op, x, "x");
  if (x.dim() < 1)
    fail(op, "x: expected a tensor with at least one dimension (the last is normalised), got a 0-d tensor");
  check_first(op, x, "x");
  if (!has(weight)) return;
  const Tensor& w = *weight;
  if (!(w.device() == x.device()))
    fail(op,
         "weight: expected device " + device_str(x.device()) + " (same as x), got " + device_str(w.device()));
  check_dtype(op, w, "weight");  // any float dtype, as aten's F.rms_norm: the output keeps x's (MixedRows)
  const int64_t d = x.sizes()[x.dim() - 1];
  if (w.dim() != 1 || w.sizes()[0] != d)
    fail(op, "weight: expected shape [" + std::to_string(d) + "] (x's last dimension), got " +
                 shape_list(sizes_of(w)));
}

// torch's default eps: the compute type's machine epsilon (F.rms_norm's opmath).
double eps_or_default(const Tensor& x, std::optional<double> eps) {
  if (eps) return *eps;
  return x.scalar_type() == ScalarType::Double ? std::numeric_limits<double>::epsilon()
                                               : std::numeric_limits<float>::epsilon();
}

ScalarType rstd_dtype(const Tensor& x) {
  return x.scalar_type() == ScalarType::Double ? ScalarType::Double : ScalarType::Float;
}

// rstd's shape: x's leading dims and a 1 (aten's _fused_rms_norm keeps the dim).
std::vector<int64_t> rstd_shape(const Tensor& x) {
  std::vector<int64_t> s = sizes_of(x);
  s.back() = 1;
  return s;
}

Tensor as_contiguous(const Tensor& t) { return t.is_contiguous() ? t : torch::stable::contiguous(t); }
OptTensor as_contiguous(const OptTensor& t) { return has(t) ? OptTensor(as_contiguous(*t)) : std::nullopt; }

Tensor fresh_like(const Tensor& x, std::optional<ScalarType> dtype = std::nullopt) {
  Tensor out = torch::stable::new_empty(x, x.sizes(), dtype);
  tierkit::advise_huge_pages(out.mutable_data_ptr(), out.numel() * out.element_size());
  return out;
}

Tensor new_rstd(const Tensor& x) {
  const auto shape = rstd_shape(x);
  return torch::stable::new_empty(x, torch::headeronly::IntHeaderOnlyArrayRef(shape.data(), shape.size()),
                                  rstd_dtype(x));
}

template <typename T>
const T* ptr(const OptTensor& t) {
  return has(t) ? static_cast<const T*>(t->data_ptr()) : nullptr;
}

// Rows split by torch's parallel_for; core sized the grain in rows.
struct RowRunner {
  template <typename Fn>
  void operator()(int64_t n, int64_t grain, const Fn& fn) const {
    torch::stable::parallel_for(0, n, grain, fn);
  }
};

// A weight of another float dtype than x's, computed as aten's F.rms_norm
// computes it (torch-cpu's include/tierkit_torch/rows.h says why and how):
// a same-dtype call in x's compute type (double where the weight is double),
// the result narrowed to x's dtype, rstd kept in the dtype the schema gives x.
struct MixedRows {
  bool active = false;
  ScalarType x_dtype, compute;

  MixedRows(const Tensor& x, const OptTensor& weight) : x_dtype(x.scalar_type()), compute(ScalarType::Float) {
    active = has(weight) && weight->scalar_type() != x_dtype;
    if (x_dtype == ScalarType::Double || (active && weight->scalar_type() == ScalarType::Double))
      compute = ScalarType::Double;
  }
  Tensor in(const Tensor& t) const { return t.scalar_type() == compute ? t : torch::stable::to(t, compute); }
  OptTensor in(const OptTensor& t) const { return has(t) ? OptTensor(in(*t)) : t; }
  Tensor result(const Tensor& t) const { return torch::stable::to(t, x_dtype); }
  Tensor rstd_out(const Tensor& rstd) const {
    const ScalarType want = x_dtype == ScalarType::Double ? ScalarType::Double : ScalarType::Float;
    return rstd.scalar_type() == want ? rstd : torch::stable::to(rstd, want);
  }
};

template <typename F>
void dispatch(const char* op, const Tensor& x, const F& f) {
  core_check(op, [&] { tierkit::dispatch_accepted(dtype_of(x), "x", [&](auto tag) { f(tag); }); });
}

std::tuple<Tensor, Tensor> forward(const char* op, const Tensor& x_in, const OptTensor& weight,
                                   std::optional<double> eps_in) {
  check_rows(op, x_in, weight);
  const Rows r = rows_of(x_in);
  const double eps = eps_or_default(x_in, eps_in);
  if (const MixedRows mixed(x_in, weight); mixed.active) {
    auto [y, rstd] = forward(op, mixed.in(x_in), mixed.in(weight), eps);
    return {mixed.result(y), mixed.rstd_out(rstd)};
  }
  const Tensor x = as_contiguous(x_in);
  const OptTensor w = as_contiguous(weight);
  Tensor y = fresh_like(x);
  Tensor rstd = new_rstd(x);
  dispatch(op, x, [&](auto tag) {
    using T = decltype(tag);
    using C = tierkit::compute_t<T>;
    tierkit::kernels::rms_norm_forward(static_cast<const T*>(x.data_ptr()), ptr<T>(w), eps, r.rows, r.d,
                                       static_cast<T*>(y.mutable_data_ptr()),
                                       static_cast<C*>(rstd.mutable_data_ptr()), RowRunner{});
  });
  return {y, rstd};
}

Tensor rms_norm(Tensor x, OptTensor weight, std::optional<double> eps) {
  return std::get<0>(forward("tierkit_stable::rms_norm", x, weight, eps));
}

std::tuple<Tensor, Tensor> rms_norm_forward(Tensor x, OptTensor weight, double eps) {
  return forward("tierkit_stable::_rms_norm_forward", x, weight, eps);
}

std::tuple<Tensor, Tensor> rms_norm_backward(Tensor grad_in, Tensor x_in, OptTensor weight, Tensor rstd_in) {
  const char* op = "tierkit_stable::_rms_norm_backward";
  check_rows(op, x_in, weight);
  const Rows r = rows_of(x_in);
  check_like(op, grad_in, "grad", x_in, "x");
  if (rstd_in.scalar_type() != rstd_dtype(x_in) || rstd_in.numel() != r.rows)
    fail(op, "rstd: expected " + std::to_string(r.rows) + " values of dtype " + dtype_name(rstd_dtype(x_in)) +
                 " (from _rms_norm_forward), got " + std::to_string(rstd_in.numel()) + " of " +
                 dtype_name(rstd_in.scalar_type()));
  if (const MixedRows mixed(x_in, weight); mixed.active) {
    auto [dx, dw] = rms_norm_backward(mixed.in(grad_in), mixed.in(x_in), mixed.in(weight), mixed.in(rstd_in));
    return {mixed.result(dx), torch::stable::to(dw, weight->scalar_type())};  // each in its input's dtype
  }
  const Tensor x = as_contiguous(x_in), grad = as_contiguous(grad_in), rstd = as_contiguous(rstd_in);
  const OptTensor w = as_contiguous(weight);
  Tensor dx = fresh_like(x);
  Tensor dw_acc;  // accumulated in the compute type, then cast to weight's dtype
  if (has(w)) dw_acc = torch::stable::new_empty(x, {r.d}, rstd_dtype(x));
  dispatch(op, x, [&](auto tag) {
    using T = decltype(tag);
    using C = tierkit::compute_t<T>;
    tierkit::kernels::rms_norm_backward(
        static_cast<const T*>(grad.data_ptr()), static_cast<const T*>(x.data_ptr()), ptr<T>(w),
        static_cast<const C*>(rstd.data_ptr()), r.rows, r.d, static_cast<T*>(dx.mutable_data_ptr()),
        has(w) ? static_cast<C*>(dw_acc.mutable_data_ptr()) : nullptr, RowRunner{});
  });
  // No weight: an empty grad_weight (the schema returns a Tensor, never None).
  Tensor dw = !has(w)                                    ? torch::stable::new_empty(x, {0})
              : dw_acc.scalar_type() == w->scalar_type() ? dw_acc
                                                         : torch::stable::to(dw_acc, w->scalar_type());
  return {dx, dw};
}

// h = x + residual rounded to the dtype, then rms_norm(h): one pass per row.
// `h_out` is a fresh tensor (add_rms_norm) or residual itself (add_rms_norm_).
Tensor add_forward(const char* op, const Tensor& x_in, const Tensor& residual_in, const OptTensor& weight,
                   std::optional<double> eps_in, Tensor h_out) {
  check_rows(op, x_in, weight);
  const Rows r = rows_of(x_in);
  check_like(op, residual_in, "residual", x_in, "x");
  const double eps = eps_or_default(x_in, eps_in);
  if (const MixedRows mixed(x_in, weight); mixed.active) {
    // h = x + residual rounded to the dtype (the fused pass without a weight), then the mixed rms_norm.
    add_forward(op, x_in, residual_in, std::nullopt, eps, h_out);
    return std::get<0>(forward(op, h_out, weight, eps));
  }
  const Tensor x = as_contiguous(x_in), residual = as_contiguous(residual_in);
  const OptTensor w = as_contiguous(weight);
  Tensor y = fresh_like(x);
  Tensor rstd = new_rstd(x);
  // A non-contiguous h_out (add_rms_norm_'s residual) is written through a contiguous temporary.
  Tensor h = h_out.is_contiguous() ? h_out : fresh_like(x);
  dispatch(op, x, [&](auto tag) {
    using T = decltype(tag);
    using C = tierkit::compute_t<T>;
    tierkit::kernels::add_rms_norm_forward(
        static_cast<const T*>(x.data_ptr()), static_cast<const T*>(residual.data_ptr()), ptr<T>(w), eps,
        r.rows, r.d, static_cast<T*>(y.mutable_data_ptr()), static_cast<T*>(h.mutable_data_ptr()),
        static_cast<C*>(rstd.mutable_data_ptr()), RowRunner{});
  });
  if (!h_out.is_contiguous()) torch::stable::copy_(h_out, h);
  return y;
}

std::tuple<Tensor, Tensor> add_rms_norm(Tensor x, Tensor residual, OptTensor weight,
                                        std::optional<double> eps) {
  check_defined("tierkit_stable::add_rms_norm", x, "x");
  Tensor h = fresh_like(x);
  Tensor y = add_forward("tierkit_stable::add_rms_norm", x, residual, weight, eps, h);
  return {y, h};
}

// Overlap rules of an in-place residual (aten's has_internal_overlap and
// get_overlap_status are not in the stable API): a residual whose elements
// share addresses (an expanded tensor: a stride of 0 over a size > 1) is
// refused, and so is one that shares an element with x without being x
// exactly. Core's rule decides (tierkit/checks.h, the one the pointwise
// ops' out= follows), so interleaved views (x = base[:, ::2], residual =
// base[:, 1::2]) are computed, as tierkit:: computes them.
void check_residual_overlap(const char* op, const Tensor& x, const Tensor& residual) {
  const auto sizes = sizes_of(residual), strides = strides_of(residual);
  for (std::size_t i = 0; i < sizes.size(); ++i)
    if (sizes[i] > 1 && strides[i] == 0)
      fail(op,
           "residual: has internal overlap (e.g. an expanded tensor), so several elements share one address");
  if (x.numel() == 0 || residual.numel() == 0) return;
  const auto span = [](const Tensor& t) {
    const auto* p = static_cast<const char*>(t.data_ptr());
    int64_t extent = 1;
    const auto sz = sizes_of(t), st = strides_of(t);
    for (std::size_t i = 0; i < sz.size(); ++i) extent += (sz[i] - 1) * st[i];
    return std::make_pair(p, p + extent * t.element_size());
  };
  const auto [x0, x1] = span(x);
  const auto [r0, r1] = span(residual);
  if (!(x0 < r1 && r0 < x1)) return;                                         // apart
  if (x0 == r0 && sizes == sizes_of(x) && strides == strides_of(x)) return;  // exactly x: in place
  // Deeper than core's views: the byte spans decide (a refusal at worst).
  const bool shared = x.dim() > tierkit::kMaxRank || residual.dim() > tierkit::kMaxRank ||
                      (!tierkit::checks::same_layout(as_view(residual), as_view(x)) &&
                       tierkit::checks::shares_other_element(as_view(residual), as_view(x)));
  if (shared) fail(op, "residual: partially overlaps x");
}

Tensor add_rms_norm_(Tensor x, Tensor residual, OptTensor weight, std::optional<double> eps) {
  const char* op = "tierkit_stable::add_rms_norm_";
  check_defined(op, residual, "residual");
  check_rows(op, x, weight);  // dtypes and shapes first: the overlap rule reads them
  check_like(op, residual, "residual", x, "x");
  check_residual_overlap(op, x, residual);
  return add_forward(op, x, residual, weight, eps, residual);
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(tierkit_stable, CPU, m) {
  m.impl("rms_norm", TORCH_BOX(&rms_norm));
  m.impl("add_rms_norm", TORCH_BOX(&add_rms_norm));
  m.impl("add_rms_norm_", TORCH_BOX(&add_rms_norm_));
  m.impl("_rms_norm_forward", TORCH_BOX(&rms_norm_forward));
  m.impl("_rms_norm_backward", TORCH_BOX(&rms_norm_backward));
}

}  // namespace tierkit_stable
