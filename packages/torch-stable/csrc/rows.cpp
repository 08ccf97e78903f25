// The row reductions on torch's stable ABI, one template for every entry of
// the op table's kind (TIERKIT_ROW_REDUCTIONS): the op, its fused residual
// forms where the entry has them, and the two building blocks its autograd
// uses (_<name>_forward: y and the per-row stats; _<name>_backward). The
// schemas are the op table's (kRowReductionSchemas, defined in ops.cpp), the
// checks say what tierkit::'s say, and the arithmetic is core's row kinds
// (tierkit/row_functors.h), so results equal tierkit::'s bit for bit.
// Autograd, fakes and vmap come from Python (tierkit_torch_stable/_rows.py).
#include <torch/csrc/stable/library.h>

#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "stable_tensor.h"
#include "tierkit/checks.h"
#include "tierkit/op_table.h"
#include "tierkit/row_functors.h"
#include "tierkit/row_rules.h"

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

void check_x(const char* op, const Tensor& x) {
  check_defined(op, x, "x");
  core_check(op, [&] {
    tierkit::row_rules::x_rank(x.dim(), "the last is normalised", tierkit::row_rules::kTorchWords);
  });
  check_first(op, x, "x");
}

// A parameter (weight, bias): on x's device, any float dtype (as aten's
// norms: the output keeps x's, MixedRows), shape [x.size(-1)].
void check_param(const char* op, const Tensor& x, const OptTensor& param, const char* name) {
  if (!has(param)) return;
  const Tensor& p = *param;
  const std::string n = name;
  if (!(p.device() == x.device()))
    fail(op,
         n + ": expected device " + device_str(x.device()) + " (same as x), got " + device_str(p.device()));
  check_dtype(op, p, name);
  core_check(op, [&] {
    tierkit::row_rules::param_shape(name, sizes_of(p), x.sizes()[x.dim() - 1],
                                    tierkit::row_rules::kTorchWords);
  });
}

// The dim role (Info::has_dim): the op runs along `dim`, as the last-dim op
// `f` on x with `dim` permuted last, the result permuted back and made
// contiguous (torch-cpu's along_dim; the stable API has permute, not movedim);
// a 0-d x as one row of one element.
template <typename F>
Tensor along_dim(const char* op, const Tensor& x, int64_t dim, const F& f) {
  check_defined(op, x, "x");
  int64_t d = 0;
  core_check(op, [&] { d = tierkit::row_rules::dim("dim", dim, x.dim(), tierkit::row_rules::kTorchWords); });
  if (x.dim() == 0) return torch::stable::squeeze(f(torch::stable::unsqueeze(x, 0)), 0);
  const int64_t n = x.dim();
  if (d == n - 1) return f(x);
  std::vector<int64_t> to_last, back(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    if (i != d) to_last.push_back(i);
  to_last.push_back(d);
  for (int64_t i = 0; i < n; ++i) back[static_cast<std::size_t>(to_last[static_cast<std::size_t>(i)])] = i;
  using Ref = torch::headeronly::IntHeaderOnlyArrayRef;
  const Tensor y = f(torch::stable::permute(x, Ref(to_last.data(), to_last.size())));
  return torch::stable::contiguous(torch::stable::permute(y, Ref(back.data(), back.size())));
}

template <typename Info, std::size_t P>
void check_rows(const char* op, const Tensor& x, const std::array<OptTensor, P>& params) {
  check_x(op, x);
  for (std::size_t i = 0; i < P; ++i) check_param(op, x, params[i], Info::params[i]);
}

// The eps a call computes with: its own, or the entry's default (torch's
// where the schema leaves eps optional: the compute type's machine epsilon, as
// aten's RMSNorm in its opmath type).
double eps_or_default(const Tensor& x, std::optional<double> eps) {
  if (eps) return *eps;
  return x.scalar_type() == ScalarType::Double ? std::numeric_limits<double>::epsilon()
                                               : std::numeric_limits<float>::epsilon();
}
double eps_or_default(const Tensor&, double eps) { return eps; }

ScalarType stats_dtype(const Tensor& x) {
  return x.scalar_type() == ScalarType::Double ? ScalarType::Double : ScalarType::Float;
}

Tensor as_contiguous(const Tensor& t) { return t.is_contiguous() ? t : torch::stable::contiguous(t); }
template <std::size_t P>
std::array<OptTensor, P> as_contiguous(const std::array<OptTensor, P>& ps) {
  std::array<OptTensor, P> out;
  for (std::size_t i = 0; i < P; ++i)
    if (has(ps[i])) out[i] = as_contiguous(*ps[i]);
  return out;
}

Tensor fresh_like(const Tensor& x, std::optional<ScalarType> dtype = std::nullopt) {
  Tensor out = torch::stable::new_empty(x, x.sizes(), dtype);
  tierkit::advise_huge_pages(out.mutable_data_ptr(), out.numel() * out.element_size());
  return out;
}

// The stats: x's leading dims and the entry's count (aten's fused RMSNorm
// keeps the dim: [..., 1] for its rstd).
Tensor new_stats(const Tensor& x, std::size_t count) {
  std::vector<int64_t> shape = sizes_of(x);
  shape.back() = static_cast<int64_t>(count);
  return torch::stable::new_empty(x, torch::headeronly::IntHeaderOnlyArrayRef(shape.data(), shape.size()),
                                  stats_dtype(x));
}

template <typename T, std::size_t P>
tierkit::kernels::RowParams<T> row_params(const std::array<OptTensor, P>& ps) {
  std::array<const void*, P> data{};
  for (std::size_t i = 0; i < P; ++i)
    if (has(ps[i])) data[i] = ps[i]->data_ptr();
  return tierkit::kernels::row_params_of<T>(data);
}

// Parameters of another float dtype than x's, computed as aten's norms
// compute them (torch-cpu's include/tierkit_torch/rows.h says why and how):
// the parameters in x's compute type beside x as it is (core's RowParams:
// one pass); only a double parameter beside a narrower x makes it a call in
// double (converts_x: the result narrowed to x's dtype, the stats kept in
// the dtype the schema gives x).
class MixedRows {
 public:
  bool active = false;
  ScalarType x_dtype, compute;

  // The rule is core's (row_rules::mixed_dtypes); the conversions are the stable API's.
  template <std::size_t P>
  MixedRows(const Tensor& x, const std::array<OptTensor, P>& params)
      : x_dtype(x.scalar_type()), compute(ScalarType::Float) {
    std::array<std::optional<tierkit::DType>, P> dtypes;
    for (std::size_t i = 0; i < P; ++i)
      if (has(params[i])) dtypes[i] = dtype_of(*params[i]);
    const tierkit::row_rules::MixedDtypes m = tierkit::row_rules::mixed_dtypes(dtype_of(x), dtypes);
    active = m.active;
    if (m.compute == tierkit::DType::Float64) compute = ScalarType::Double;
    converts_x_ = m.converts_x;
  }
  bool converts_x() const { return converts_x_; }
  Tensor in(const Tensor& t) const { return t.scalar_type() == compute ? t : torch::stable::to(t, compute); }
  template <std::size_t P>
  std::array<OptTensor, P> in(const std::array<OptTensor, P>& ps) const {
    std::array<OptTensor, P> out;
    for (std::size_t i = 0; i < P; ++i)
      if (has(ps[i])) out[i] = in(*ps[i]);
    return out;
  }
  Tensor result(const Tensor& t) const { return torch::stable::to(t, x_dtype); }
  Tensor stats_out(const Tensor& stats) const {
    const ScalarType want = x_dtype == ScalarType::Double ? ScalarType::Double : ScalarType::Float;
    return stats.scalar_type() == want ? stats : torch::stable::to(stats, want);
  }

 private:
  bool converts_x_ = false;
};

// Calls f(row_params<T or compute_t<T>>(params)): in x's dtype, or, in a
// mixed call, in its compute type (params already converted by MixedRows::in).
template <typename T, std::size_t P, typename F>
void with_params(const MixedRows& mixed, const std::array<OptTensor, P>& params, const F& f) {
  if (mixed.active)
    f(row_params<tierkit::compute_t<T>>(params));
  else
    f(row_params<T>(params));
}

template <typename F>
void dispatch(const char* op, const Tensor& x, const F& f) {
  core_check(op, [&] { tierkit::dispatch_accepted(dtype_of(x), "x", [&](auto tag) { f(tag); }); });
}

// Overlap rules of an in-place residual (aten's has_internal_overlap and
// get_overlap_status are not in the stable API): a residual whose elements
// share addresses (an expanded tensor: a stride of 0 over a size > 1) is
// refused, and so is one that shares an element with x without being x
// exactly (core's row_rules judge and word both). Core's views decide the
// partial overlap (tierkit/checks.h, the pointwise ops' out= rule), so interleaved views (x = base[:, ::2],
// residual = base[:, 1::2]) are computed, as tierkit:: computes them.
bool partly_overlaps(const Tensor& residual, const Tensor& x) {
  if (x.numel() == 0 || residual.numel() == 0) return false;
  const auto [x0, x1] = byte_span(x);
  const auto [r0, r1] = byte_span(residual);
  if (!(x0 < r1 && r0 < x1)) return false;  // apart
  if (x0 == r0 && sizes_of(residual) == sizes_of(x) && strides_of(residual) == strides_of(x))
    return false;  // exactly x: in place
  // Deeper than core's views: the byte spans decide (a refusal at worst).
  return x.dim() > tierkit::kMaxRank || residual.dim() > tierkit::kMaxRank ||
         (!tierkit::checks::same_layout(as_view(residual), as_view(x)) &&
          tierkit::checks::shares_other_element(as_view(residual), as_view(x)));
}

void check_residual_overlap(const char* op, const Tensor& x, const Tensor& residual) {
  namespace rules = tierkit::row_rules;
  core_check(op, [&] {
    rules::written_alone("residual", sizes_of(residual), strides_of(residual), rules::kTorchWords);
    rules::written_beside("residual", "x", partly_overlaps(residual, x));
  });
}

// One entry's kernels: Info its row_info, K its core row kind, P its parameters.
template <typename Info, typename K, std::size_t P>
struct StableRows {
  using Ps = std::array<OptTensor, P>;
  // The op's trailing scalar: its eps (optional: torch's default) or its dim.
  using Scalar = std::conditional_t<Info::has_dim, int64_t,
                                    std::conditional_t<Info::eps_optional, std::optional<double>, double>>;

  static const char* named(int k) {
    static const std::string names[5] = {std::string("tierkit_stable::") + Info::name,
                                         std::string("tierkit_stable::") + Info::add_name,
                                         std::string("tierkit_stable::") + Info::add_inplace_name,
                                         std::string("tierkit_stable::") + Info::forward_name,
                                         std::string("tierkit_stable::") + Info::backward_name};
    return names[k].c_str();
  }

  static std::tuple<Tensor, Tensor> forward_as(const char* op, const Tensor& x_in, const Ps& params_in,
                                               double eps) {
    check_rows<Info>(op, x_in, params_in);
    const MixedRows mixed(x_in, params_in);
    if (mixed.converts_x()) {
      auto [y, stats] = forward_as(op, mixed.in(x_in), mixed.in(params_in), eps);
      return {mixed.result(y), mixed.stats_out(stats)};
    }
    const Rows r = rows_of(x_in);
    const Tensor x = as_contiguous(x_in);
    const Ps params = as_contiguous(mixed.active ? mixed.in(params_in) : params_in);
    Tensor y = fresh_like(x);
    Tensor stats = new_stats(x, Info::stats.size());
    dispatch(op, x, [&](auto tag) {
      using T = decltype(tag);
      using C = tierkit::compute_t<T>;
      with_params<T>(mixed, params, [&](auto p) {
        tierkit::kernels::row_forward<K>(static_cast<const T*>(x.data_ptr()), p, eps, r.rows, r.d,
                                         static_cast<T*>(y.mutable_data_ptr()),
                                         static_cast<C*>(stats.mutable_data_ptr()), RowRunner{});
      });
    });
    return {y, stats};
  }

  static Tensor op(Tensor x, const Ps& params, Scalar s) {
    if constexpr (Info::has_dim)
      return along_dim(named(0), x, s, [&](const Tensor& rows) {
        return std::get<0>(forward_as(named(0), rows, params, 0.0));
      });
    else
      return std::get<0>(forward_as(named(0), x, params, eps_or_default(x, s)));
  }
  static std::tuple<Tensor, Tensor> forward(Tensor x, const Ps& params, double eps) {
    return forward_as(named(3), x, params, eps);
  }

  static std::array<Tensor, P + 1> backward(Tensor grad_in, Tensor x_in, const Ps& params_in,
                                            Tensor stats_in) {
    const char* op = named(4);
    check_rows<Info>(op, x_in, params_in);
    const Rows r = rows_of(x_in);
    check_like(op, grad_in, "grad", x_in, "x");
    const int64_t want = r.rows * static_cast<int64_t>(Info::stats.size());
    core_check(op, [&] {
      tierkit::row_rules::stats(stats_in.numel(), dtype_name(stats_in.scalar_type()), want,
                                dtype_name(stats_dtype(x_in)), named(3));
    });
    std::array<Tensor, P + 1> out;
    const MixedRows mixed(x_in, params_in);
    if (mixed.converts_x()) {
      const auto wide = backward(mixed.in(grad_in), mixed.in(x_in), mixed.in(params_in), mixed.in(stats_in));
      out[0] = mixed.result(wide[0]);
      for (std::size_t i = 0; i < P; ++i)  // each gradient in its input's dtype
        out[i + 1] =
            has(params_in[i]) ? torch::stable::to(wide[i + 1], params_in[i]->scalar_type()) : wide[i + 1];
      return out;
    }
    const Tensor x = as_contiguous(x_in), grad = as_contiguous(grad_in), stats = as_contiguous(stats_in);
    const Ps params = as_contiguous(mixed.active ? mixed.in(params_in) : params_in);
    out[0] = fresh_like(x);
    std::array<Tensor, P> acc;  // accumulated in the compute type, then cast to the parameter's dtype
    std::array<bool, P> wanted{};
    for (std::size_t i = 0; i < P; ++i)
      if ((wanted[i] = has(params[i]))) acc[i] = torch::stable::new_empty(x, {r.d}, stats_dtype(x));
    dispatch(op, x, [&](auto tag) {
      using T = decltype(tag);
      using C = tierkit::compute_t<T>;
      C* dp[2] = {nullptr, nullptr};
      for (std::size_t i = 0; i < P; ++i)
        if (wanted[i]) dp[i] = static_cast<C*>(acc[i].mutable_data_ptr());
      with_params<T>(mixed, params, [&](auto p) {
        tierkit::kernels::row_backward<K>(
            static_cast<const T*>(grad.data_ptr()), static_cast<const T*>(x.data_ptr()), p,
            static_cast<const C*>(stats.data_ptr()), r.rows, r.d, static_cast<T*>(out[0].mutable_data_ptr()),
            dp[0], dp[1], RowRunner{});
      });
    });
    // Each gradient in its input's dtype; an absent parameter: an empty
    // gradient (the schema returns a Tensor, never None).
    for (std::size_t i = 0; i < P; ++i)
      out[i + 1] = !wanted[i] ? torch::stable::new_empty(x, {0})
                   : acc[i].scalar_type() == params_in[i]->scalar_type()
                       ? acc[i]
                       : torch::stable::to(acc[i], params_in[i]->scalar_type());
    return out;
  }

  // h = x + residual rounded to the dtype, then the forward on h: one pass
  // per row. `h_out` is a fresh tensor (add_<name>) or residual itself (add_<name>_).
  static Tensor add_forward(const char* op, const Tensor& x_in, const Tensor& residual_in,
                            const Ps& params_in, double eps, Tensor h_out) {
    check_rows<Info>(op, x_in, params_in);
    const Rows r = rows_of(x_in);
    check_like(op, residual_in, "residual", x_in, "x");
    const MixedRows mixed(x_in, params_in);
    if (mixed.converts_x()) {
      // h = x + residual rounded to the dtype (the fused pass without parameters), then the mixed forward.
      add_forward(op, x_in, residual_in, Ps{}, eps, h_out);
      return std::get<0>(forward_as(op, h_out, params_in, eps));
    }
    const Tensor x = as_contiguous(x_in), residual = as_contiguous(residual_in);
    const Ps params = as_contiguous(mixed.active ? mixed.in(params_in) : params_in);
    Tensor y = fresh_like(x);
    Tensor stats = new_stats(x, Info::stats.size());
    // A non-contiguous h_out (the in-place form's residual) is written through a contiguous temporary.
    Tensor h = h_out.is_contiguous() ? h_out : fresh_like(x);
    dispatch(op, x, [&](auto tag) {
      using T = decltype(tag);
      using C = tierkit::compute_t<T>;
      with_params<T>(mixed, params, [&](auto p) {
        tierkit::kernels::row_add_forward<K>(
            static_cast<const T*>(x.data_ptr()), static_cast<const T*>(residual.data_ptr()), p, eps, r.rows,
            r.d, static_cast<T*>(y.mutable_data_ptr()), static_cast<T*>(h.mutable_data_ptr()),
            static_cast<C*>(stats.mutable_data_ptr()), RowRunner{});
      });
    });
    if (!h_out.is_contiguous()) torch::stable::copy_(h_out, h);
    return y;
  }

  static std::tuple<Tensor, Tensor> add(Tensor x, Tensor residual, const Ps& params, Scalar eps) {
    check_defined(named(1), x, "x");
    Tensor h = fresh_like(x);
    Tensor y = add_forward(named(1), x, residual, params, eps_or_default(x, eps), h);
    return {y, h};
  }

  static Tensor add_(Tensor x, Tensor residual, const Ps& params, Scalar eps) {
    const char* op = named(2);
    check_defined(op, residual, "residual");
    check_rows<Info>(op, x, params);  // dtypes and shapes first: the overlap rule reads them
    check_like(op, residual, "residual", x, "x");
    check_residual_overlap(op, x, residual);
    return add_forward(op, x, residual, params, eps_or_default(x, eps), residual);
  }
};

// The boxed signatures of one entry's overloads (P parameters).
template <typename R, typename Seq>
struct StableSignatures;
template <typename R, std::size_t... I>
struct StableSignatures<R, std::index_sequence<I...>> {
  template <std::size_t>
  using Opt = OptTensor;
  template <std::size_t>
  using Out = Tensor;
  using Scalar = typename R::Scalar;
  static Tensor op(Tensor x, Opt<I>... p, Scalar s) { return R::op(x, {p...}, s); }
  static std::tuple<Tensor, Tensor> add(Tensor x, Tensor residual, Opt<I>... p, Scalar s) {
    return R::add(x, residual, {p...}, s);
  }
  static Tensor add_(Tensor x, Tensor residual, Opt<I>... p, Scalar s) {
    return R::add_(x, residual, {p...}, s);
  }
  static std::tuple<Tensor, Tensor> forward(Tensor x, Opt<I>... p, double eps) {
    return R::forward(x, {p...}, eps);
  }
  static std::tuple<Tensor, Tensor> forward_no_eps(Tensor x, Opt<I>... p) {
    return R::forward(x, {p...}, 0.0);
  }
  static std::tuple<Tensor, Out<I>...> backward(Tensor grad, Tensor x, Opt<I>... p, Tensor stats) {
    const auto a = R::backward(grad, x, {p...}, stats);
    return {a[0], a[I + 1]...};
  }
};

// Registers one entry's overloads (a template, so that `if constexpr`
// leaves out the forms an entry does not have).
template <typename Info, typename K, std::size_t P, typename Library>
void register_rows(Library& m) {
  using S = StableSignatures<StableRows<Info, K, P>, std::make_index_sequence<P>>;
  m.impl(Info::name, TORCH_BOX(&S::op));
  if constexpr (Info::fused_add) {
    m.impl(Info::add_name, TORCH_BOX(&S::add));
    m.impl(Info::add_inplace_name, TORCH_BOX(&S::add_));
  }
  if constexpr (Info::has_eps)
    m.impl(Info::forward_name, TORCH_BOX(&S::forward));
  else
    m.impl(Info::forward_name, TORCH_BOX(&S::forward_no_eps));
  m.impl(Info::backward_name, TORCH_BOX(&S::backward));
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(tierkit_stable, CPU, m) {
#define TIERKIT_REGISTER_ROWS(NAME, FUNCTOR, PARAMS, STATS) \
  register_rows<tierkit::row_info::NAME, tierkit::kernels::FUNCTOR, PARAMS>(m);
  TIERKIT_ROW_REDUCTIONS(TIERKIT_REGISTER_ROWS)
#undef TIERKIT_REGISTER_ROWS
}

}  // namespace tierkit_stable
