// What the row reductions' kernels share (torch-cpu's CPU and Autograd ones,
// torch-cuda's CUDA ones): their argument checks, torch's default eps, and
// rstd's shape and dtype.
#pragma once

#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <c10/core/InferenceMode.h>

#include <limits>
#include <optional>
#include <vector>

#include "tierkit_torch/checks.h"

namespace tierkit_torch {

// The arguments' rules (no size is read but the last dim's, so symbolic
// batch sizes stay symbolic when torch.compile or export traces the
// Autograd kernel).
// `device`: the backend's (the Autograd kernel passes x's own: any backend's
// kernel then checks its device).
inline void check_rows(const char* op, const at::Tensor& x, const std::optional<at::Tensor>& weight,
                       c10::DeviceType device) {
  check_defined(op, x, "x");
  TORCH_CHECK(
      x.dim() >= 1, op,
      ": x: expected a tensor with at least one dimension (the last is normalised), got a 0-d tensor");
  check_first(op, x, "x", device);
  if (weight && weight->defined()) {
    const at::Tensor& w = *weight;
    TORCH_CHECK(w.device() == x.device(), op, ": weight: expected device ", x.device(), " (same as x), got ",
                w.device());
    // Any float dtype, as aten's F.rms_norm: the output keeps x's (mixed_rows below).
    check_dtype(op, w, "weight");
    TORCH_CHECK(w.dim() == 1 && w.sym_size(0) == x.sym_size(-1), op, ": weight: expected shape [",
                x.sym_size(-1), "] (x's last dimension), got ", w.sym_sizes());
  }
}

// add_rms_norm_ writes h into `residual`: refused when several of its
// elements share an address, or when it partly overlaps x (exactly x is fine:
// each element is read before it is written).
inline void check_in_place_residual(const char* op, const at::Tensor& x, const at::Tensor& residual) {
  // aten's in-place ops raise this outside inference mode (r.add_(x)): the
  // write would change a tensor autograd treats as never changing.
  TORCH_CHECK(!residual.is_inference() || c10::InferenceMode::is_enabled(), op,
              ": residual: Inplace update to inference tensor outside InferenceMode is not allowed (an "
              "inference tensor); make a normal copy with residual.clone() outside InferenceMode first");
  TORCH_CHECK(
      at::has_internal_overlap(residual) != at::MemOverlap::Yes, op,
      ": residual: has internal overlap (e.g. an expanded tensor), so several elements share one address");
  TORCH_CHECK(at::get_overlap_status(residual, x) != at::MemOverlapStatus::Partial, op,
              ": residual: partially overlaps x");
}

// The weight as every row reads it: the values it had at the call. A weight
// that shares memory with `written` (add_rms_norm_(x, r, r[0])) is copied
// first; the CUDA kernels' blocks would otherwise read it while other rows
// rewrite it. (The CPU kernels go through core, which makes the same copy.)
inline std::optional<at::Tensor> weight_as_called(const std::optional<at::Tensor>& weight,
                                                  const at::Tensor& written) {
  if (!weight || !weight->defined()) return weight;
  if (at::get_overlap_status(*weight, written) == at::MemOverlapStatus::No) return weight;
  return weight->clone(at::MemoryFormat::Contiguous);
}

// A weight of another float dtype than x's (a float32 weight with bfloat16
// activations: the mixed-precision block of every model trained under
// autocast), computed as aten's F.rms_norm computes it: in x's compute type
// (float for 16-bit x), or in double where the weight is double (aten then
// multiplies and reduces the weight's gradient in double), the result rounded
// to x's dtype and each gradient to its input's. The kernels take one dtype,
// so such a call becomes a same-dtype call in that compute type: `in` gives
// the tensors to pass (converted where their dtype differs), `result` narrows
// an output back to x's dtype, `rstd_out`/`rstd_in` keep rstd in the dtype
// the schema promises for x. Costs the conversions' passes over memory; a
// call with matching dtypes never takes it.
struct MixedRows {
  bool active = false;
  at::ScalarType x_dtype = at::kFloat, compute = at::kFloat;

  MixedRows(const at::Tensor& x, const std::optional<at::Tensor>& weight) : x_dtype(x.scalar_type()) {
    active = weight && weight->defined() && weight->scalar_type() != x.scalar_type();
    const bool wide = x_dtype == at::kDouble || (active && weight->scalar_type() == at::kDouble);
    compute = wide ? at::kDouble : at::kFloat;
  }
  at::Tensor in(const at::Tensor& t) const { return t.to(compute); }
  std::optional<at::Tensor> in(const std::optional<at::Tensor>& t) const {
    if (!t || !t->defined()) return t;
    return t->to(compute);
  }
  at::Tensor result(const at::Tensor& t) const { return t.to(x_dtype); }
  at::Tensor rstd_out(const at::Tensor& rstd) const {
    return rstd.to(x_dtype == at::kDouble ? at::kDouble : at::kFloat);
  }
  at::Tensor rstd_in(const at::Tensor& rstd) const { return rstd.to(compute); }
};

// x's rows (every leading dim) and their length d (the last dim), for the kernels.
struct Rows {
  int64_t rows = 0, d = 0;
};

inline Rows rows_of(const at::Tensor& x) {
  int64_t rows = 1;
  for (int64_t i = 0; i + 1 < x.dim(); ++i) rows *= x.size(i);
  return {rows, x.size(-1)};
}

// torch's default: the compute type's machine epsilon (F.rms_norm's opmath).
inline double eps_or_default(const at::Tensor& x, std::optional<double> eps) {
  if (eps) return *eps;
  return x.scalar_type() == at::kDouble ? std::numeric_limits<double>::epsilon()
                                        : std::numeric_limits<float>::epsilon();
}

// rstd's shape: x's leading dims and a 1 (aten's _fused_rms_norm keeps the dim).
inline std::vector<int64_t> rstd_shape(const at::Tensor& x) {
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = 1;
  return shape;
}

inline at::ScalarType rstd_dtype(const at::Tensor& x) {
  return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

}  // namespace tierkit_torch
