// What the row reductions' kernels share (torch-cpu's CPU and Autograd
// kernels, torch-cuda's CUDA ones), for every entry of the kind: the
// argument checks (the roles' shape rules and wording are core's,
// tierkit/row_rules.h), the eps default, the stats' shape and dtype, and the
// mixed-dtype rule.
#pragma once

#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <c10/core/InferenceMode.h>

#include <array>
#include <cstddef>
#include <limits>
#include <optional>
#include <vector>

#include "tierkit/row_rules.h"
#include "tierkit_torch/checks.h"
#include "tierkit_torch/row_entry.h"

namespace tierkit_torch {

inline bool defined(const OptTensor& t) { return t && t->defined(); }

// The arguments' rules (no size is read but the last dim's, so symbolic
// batch sizes stay symbolic when torch.compile or export traces the
// Autograd kernel). `device`: the backend's (the Autograd kernel passes x's
// own: any backend's kernel then checks its device).
inline void check_x(const char* op, const at::Tensor& x, c10::DeviceType device) {
  check_defined(op, x, "x");
  core_check(op, [&] {
    tierkit::row_rules::x_rank(x.dim(), "the last is normalised", tierkit::row_rules::kTorchWords);
  });
  check_first(op, x, "x", device);
}

// The dim role (row_info::<name>::has_dim): the op runs along `dim`, as the
// last-dim op `f` on x.movedim(dim, -1), the result moved back and made
// contiguous (as aten's ops along a dim return one for a contiguous
// x); a 0-d x as one row of one element (aten's ops along a dim take a
// scalar). The dim is wrapped by core's rule and words; no size is read.
template <typename F>
at::Tensor along_dim(const char* op, const at::Tensor& x, int64_t dim, const F& f) {
  check_defined(op, x, "x");
  int64_t d = 0;
  core_check(op, [&] { d = tierkit::row_rules::dim("dim", dim, x.dim(), tierkit::row_rules::kTorchWords); });
  if (x.dim() == 0) return f(x.unsqueeze(0)).squeeze(0);
  if (d == x.dim() - 1) return f(x);
  return f(x.movedim(d, -1)).movedim(-1, d).contiguous();
}

// A parameter (weight, bias): on x's device, any float dtype (as aten's
// norms: the output keeps x's, MixedRows below), shape [x.size(-1)].
inline void check_param(const char* op, const at::Tensor& x, const OptTensor& param, const char* name) {
  if (!defined(param)) return;
  const at::Tensor& p = *param;
  TORCH_CHECK(p.device() == x.device(), op, ": ", name, ": expected device ", x.device(),
              " (same as x), got ", p.device());
  check_dtype(op, p, name);
  core_check(op, [&] {
    tierkit::row_rules::param_shape(name, p.sym_sizes(), x.sym_size(-1), tierkit::row_rules::kTorchWords);
  });
}

template <typename E>
void check_rows(const char* op, const at::Tensor& x, const Params<E::kParams>& params,
                c10::DeviceType device) {
  check_x(op, x, device);
  for (std::size_t i = 0; i < E::kParams; ++i) check_param(op, x, params[i], E::Info::params[i]);
}

// The in-place fused form writes h into `residual`: refused when several of
// its elements share an address, or when it partly overlaps x (exactly x is
// fine: each element is read before it is written).
inline void check_in_place_residual(const char* op, const at::Tensor& x, const at::Tensor& residual) {
  // aten's in-place ops raise this outside inference mode (r.add_(x)): the
  // write would change a tensor autograd treats as never changing.
  TORCH_CHECK(!residual.is_inference() || c10::InferenceMode::is_enabled(), op,
              ": residual: Inplace update to inference tensor outside InferenceMode is not allowed (an "
              "inference tensor); make a normal copy with residual.clone() outside InferenceMode first");
  core_check(op, [&] {
    tierkit::row_rules::written_alone("residual", residual.sizes(), residual.strides(),
                                      tierkit::row_rules::kTorchWords);
    tierkit::row_rules::written_beside("residual", "x",
                                       at::get_overlap_status(residual, x) == at::MemOverlapStatus::Partial);
  });
}

// A parameter as every row reads it: the values it had at the call. One
// that shares memory with `written` (the in-place fused add given r[0] as its weight) is copied
// first; the CUDA kernels' blocks would otherwise read it while other rows
// rewrite it. (The CPU kernels go through core, which makes the same copy.)
inline OptTensor param_as_called(const OptTensor& param, const at::Tensor& written) {
  if (!defined(param)) return param;
  if (at::get_overlap_status(*param, written) == at::MemOverlapStatus::No) return param;
  return param->clone(at::MemoryFormat::Contiguous);
}

// Parameters of another float dtype than x's (float32 weights with bfloat16
// activations: the mixed-precision block of every model trained under
// autocast), computed as aten's norms compute them: in x's compute type
// (float for 16-bit x), or in double where a parameter is double (aten then
// multiplies and reduces its gradient in double), the result rounded to x's
// dtype and each gradient to its input's. The kernels take one dtype, so
// such a call becomes a same-dtype call in that compute type: `in` gives the
// tensors to pass (converted where their dtype differs), `result` narrows an
// output back to x's dtype, `stats_out`/`stats_in` keep the stats in the
// dtype the schema promises for x (stats_dtype). Costs the conversions'
// passes over memory; a call with matching dtypes never takes it.
struct MixedRows {
  bool active = false;
  at::ScalarType x_dtype = at::kFloat, compute = at::kFloat;

  // The rule is core's (row_rules::mixed_dtypes); the conversions are torch's.
  template <std::size_t P>
  MixedRows(const at::Tensor& x, const Params<P>& params) : x_dtype(x.scalar_type()) {
    std::array<std::optional<tierkit::DType>, P> dtypes;
    for (std::size_t i = 0; i < P; ++i)
      if (defined(params[i])) dtypes[i] = core_dtype_of(params[i]->scalar_type());
    const tierkit::row_rules::MixedDtypes m =
        tierkit::row_rules::mixed_dtypes(core_dtype_of(x_dtype), dtypes);
    active = m.active;
    compute = m.compute == tierkit::DType::Float64 ? at::kDouble : at::kFloat;
    converts_x_ = m.converts_x;
  }
  // Whether x itself must be converted: only where a double parameter
  // makes the compute type double for a float or 16-bit x. Core's CPU rows
  // otherwise take the parameters in x's compute type beside x as it is
  // (row_kernels.h's RowParams), so bfloat16 x with float32 weights is one
  // pass; the CUDA kernels take one dtype and convert (in, result).
  bool converts_x() const { return converts_x_; }
  at::Tensor in(const at::Tensor& t) const { return t.to(compute); }
  template <std::size_t P>
  Params<P> in(const Params<P>& params) const {
    Params<P> out;
    for (std::size_t i = 0; i < P; ++i)
      if (defined(params[i])) out[i] = params[i]->to(compute);
    return out;
  }
  at::Tensor result(const at::Tensor& t) const { return t.to(x_dtype); }
  at::Tensor stats_out(const at::Tensor& stats) const {
    return stats.to(x_dtype == at::kDouble ? at::kDouble : at::kFloat);
  }
  at::Tensor stats_in(const at::Tensor& stats) const { return stats.to(compute); }

 private:
  bool converts_x_ = false;
  // Only called on dtypes check_rows accepted (a float dtype core knows).
  static tierkit::DType core_dtype_of(at::ScalarType t) { return core_dtype_info(t)->dtype; }
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

// The eps a call computes with: its own, or the entry's default (torch's
// where the schema leaves eps optional: the compute type's machine epsilon, as
// aten's RMSNorm in its opmath type).
inline double eps_or_default(const at::Tensor& x, std::optional<double> eps) {
  if (eps) return *eps;
  return x.scalar_type() == at::kDouble ? std::numeric_limits<double>::epsilon()
                                        : std::numeric_limits<float>::epsilon();
}
inline double eps_or_default(const at::Tensor&, double eps) { return eps; }

// The stats' shape: x's leading dims and the entry's count (aten's
// fused RMSNorm keeps the dim: [..., 1] for its rstd).
inline std::vector<int64_t> stats_shape(const at::Tensor& x, std::size_t stats) {
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = static_cast<int64_t>(stats);
  return shape;
}

inline at::ScalarType stats_dtype(const at::Tensor& x) {
  return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

// The stats a backward receives: the forward's shape and dtype for x.
template <typename E>
void check_stats(const char* op, const at::Tensor& stats, const at::Tensor& x, const Rows& r) {
  if (stats.scalar_type() == stats_dtype(x) && stats.numel() == r.rows * static_cast<int64_t>(E::kStats))
    return;
  core_check(op, [&] {
    tierkit::row_rules::stats(stats.numel(), dtype_name(stats.scalar_type()),
                              r.rows * static_cast<int64_t>(E::kStats), dtype_name(stats_dtype(x)),
                              E::forward_name());
  });
}

}  // namespace tierkit_torch
