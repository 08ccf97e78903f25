// The norms' casting modes for tierkit:: (the .casting overloads of every
// entry with `casting`: offset and casting_mode), as CompositeImplicitAutograd
// kernels in C++: the plain op with the weight and one product arranged, by
// the mode's data (op_table.h's kCastingModes). torch-common's casting.py is
// the same arrangement for tierkit_stable::, in Python; here it is C++
// because a decode step calls a norm 2 L + 1 times and a Python frame per call
// cost more than the kernel (docs/reductions.md). Being composites, autograd,
// fakes, DTensor, autocast, compile, export and AOTInductor are the plain
// op's; CUDA tensors take torch-cuda's plain kernels through the same code.
#include <ATen/TensorOperators.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <atomic>
#include <cmath>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>

#include "tierkit/op_table.h"
#include "tierkit_torch/op_handle.h"
#include "tierkit_torch/rows.h"

namespace tierkit_torch {
namespace {

const tierkit::CastingMode& mode_of(const char* op, c10::string_view name) {
  for (const tierkit::CastingMode& m : tierkit::kCastingModes)
    if (name == m.name) return m;
  TORCH_CHECK(false, op, ": casting_mode: expected ", tierkit::kCastingModeNames, ", got '",
              std::string(name), "'");
}

// Python's repr of a float (1.0, 0.5, 1e-06): the messages read as torch-common's.
std::string float_repr(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  std::string t = s.str();
  if (std::isfinite(v) && t.find_first_of(".e") == std::string::npos) t += ".0";
  return t;
}

// The weight the plain op gets, and the one that multiplies its result after (undefined: none).
struct Arranged {
  std::optional<at::Tensor> inner;
  at::Tensor after;
};

Arranged arrange(const char* op, const at::Tensor& x, const std::optional<at::Tensor>& weight, double offset,
                 c10::string_view name) {
  const tierkit::CastingMode& mode = mode_of(op, name);
  if (!defined(weight)) {
    TORCH_CHECK(offset == 0.0, op,
                ": offset: expected 0.0 without a weight (the offset is added to the weight), got ",
                float_repr(offset));
    return {};
  }
  at::Tensor w = *weight;
  if (mode.weight_in_compute) {
    const bool wide = x.scalar_type() == at::kDouble || w.scalar_type() == at::kDouble;
    w = w.to(wide ? at::kDouble : at::kFloat) + offset;
  } else if (offset != 0.0) {
    w = w + offset;
  }
  // Rounding x-hat to x's dtype is exact where x is in its compute type (float32,
  // float64): with a weight of x's dtype the mode is then aten's bit for bit, and
  // one pass instead of the norm and a product (torch-common's arrange() agrees).
  const bool exact =
      w.scalar_type() == x.scalar_type() && (x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble);
  if (mode.rounds_normalized && !exact) return {std::nullopt, w};
  return {w, at::Tensor()};
}

template <typename Info>
struct CastingRows {
  static_assert(Info::params.size() == 1, "casting modes are declared for weight-only norms");
  using E = RowEntry<Info, void, 1>;
  using Eps = typename E::Eps;
  using S = RowFunctionTypes<E>;

  static at::Tensor op(const at::Tensor& x, const std::optional<at::Tensor>& weight, Eps eps, double offset,
                       c10::string_view casting_mode) {
    const char* name = E::op_name();
    check_rows<E>(name, x, Params<1>{weight}, x.device().type());  // the plain op's checks and words first
    const Arranged a = arrange(name, x, weight, offset, casting_mode);
    static std::atomic<const c10::OperatorHandle*> slot{nullptr};
    const auto plain = op_handle<typename S::OpFn>(slot, name);
    at::Tensor y = plain.call(x, a.inner, eps);
    return a.after.defined() ? a.after * y : y;
  }

  static std::tuple<at::Tensor, at::Tensor> add(const at::Tensor& x, const at::Tensor& residual,
                                                const std::optional<at::Tensor>& weight, Eps eps,
                                                double offset, c10::string_view casting_mode) {
    const char* name = E::add_name();
    check_rows<E>(name, x, Params<1>{weight}, x.device().type());
    check_like(name, residual, "residual", x, "x");
    const Arranged a = arrange(name, x, weight, offset, casting_mode);
    static std::atomic<const c10::OperatorHandle*> slot{nullptr};
    const auto plain = op_handle<typename S::AddFn>(slot, name);
    auto [y, h] = plain.call(x, residual, a.inner, eps);
    return {a.after.defined() ? a.after * y : y, h};
  }

  static at::Tensor add_(const at::Tensor& x, const at::Tensor& residual,
                         const std::optional<at::Tensor>& weight, Eps eps, double offset,
                         c10::string_view casting_mode) {
    const char* name = E::add_inplace_name();
    check_rows<E>(name, x, Params<1>{weight}, x.device().type());
    check_like(name, residual, "residual", x, "x");
    Arranged a = arrange(name, x, weight, offset, casting_mode);
    // The call writes h into `residual` before the product reads the weight:
    // a weight that lives in it (residual[0]) is read as called, from a copy.
    if (a.after.defined() && a.after.is_alias_of(residual)) a.after = a.after.clone();
    static std::atomic<const c10::OperatorHandle*> slot{nullptr};
    const auto plain = op_handle<typename S::AddInplaceFn>(slot, name);
    at::Tensor y = plain.call(x, residual, a.inner, eps);
    return a.after.defined() ? a.after * y : y;
  }

  template <typename Library>
  static void register_with(Library& m) {
    m.impl((std::string(Info::name) + ".casting").c_str(), &op);
    if constexpr (Info::fused_add) {
      m.impl((std::string(Info::add_name) + ".casting").c_str(), &add);
      m.impl((std::string(Info::add_inplace_name) + ".casting").c_str(), &add_);
    }
  }
};

// A template, so that an entry without casting modes never instantiates CastingRows.
template <typename Info, typename Library>
void register_casting(Library& m) {
  if constexpr (Info::casting) CastingRows<Info>::register_with(m);
}

}  // namespace

TORCH_LIBRARY_IMPL(tierkit, CompositeImplicitAutograd, m) {
#define TIERKIT_REGISTER_CASTING(NAME, FUNCTOR, PARAMS, STATS) register_casting<tierkit::row_info::NAME>(m);
  TIERKIT_ROW_REDUCTIONS(TIERKIT_REGISTER_CASTING)
#undef TIERKIT_REGISTER_CASTING
}

}  // namespace tierkit_torch
