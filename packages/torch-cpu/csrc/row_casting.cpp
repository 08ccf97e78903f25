// The norms' casting modes for tierkit:: (the .casting overloads of every
// entry with `casting`: offset and casting_mode), as CompositeImplicitAutograd
// kernels in C++: the plain op with the weight and one product arranged, by
// the mode's data (op_table.h's kCastingModes). torch-common's casting.py is
// the same arrangement for tierkit_stable::, in Python; here it is C++
// because a decode step calls a norm 2 L + 1 times and a Python frame per call
// cost more than the kernel (docs/reductions.md). Being composites, autograd,
// fakes, DTensor, autocast, compile, export and AOTInductor are the plain
// op's; CUDA tensors take torch-cuda's plain kernels through the same code.
//
// One exception, for speed where models run: "llama" in 16 bits (x-hat
// rounded, then the product) on plain CPU tensors that need no gradient is
// computed in one pass (round_normalized.h) instead of the op and aten's
// product, which cost two passes and a fresh output (10x the op in bfloat16
// on [4096, 4096], an AVX-512 Xeon; with a float32 weight, whose product
// aten computes in a mixed-dtype loop, 20x: 43 ms against the op's 2). Anything else -- a gradient or tangent
// to record, a tensor subclass, fake, functional or batched tensor, a
// dispatch mode, autocast -- takes the composite, so every transform still
// sees the plain op and the product.
#include <ATen/TensorOperators.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/TorchDispatchModeTLS.h>
#include <torch/library.h>

#include <atomic>
#include <cmath>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>

#include "round_normalized.h"
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

// A dense CPU tensor with no other dispatch key (no subclass, conjugate or
// negative view, fake, functional or batched wrapper) that records nothing
// for autograd: no gradient in grad mode, no tangent at the default level.
bool plain_and_untracked(const at::Tensor& t) {
  static const c10::DispatchKeySet plain({c10::DispatchKey::CPU, c10::DispatchKey::ADInplaceOrView,
                                          c10::DispatchKey::AutogradCPU, c10::DispatchKey::AutocastCPU});
  if (!t.defined()) return true;
  if ((t.key_set() | plain) != plain) return false;
  if (at::GradMode::is_enabled() && t.requires_grad()) return false;
  return !t._fw_grad(/*level=*/0).defined();
}

// Whether a call arranged as `a` takes the one-pass "llama" form: the
// product after the op (x-hat rounded first) with a weight of x's 16-bit
// dtype or float32 (the product then float32, as aten's promotion gives),
// on plain untracked CPU tensors, outside any dispatch mode or autocast.
bool one_pass_rounded(const at::Tensor& x, const Arranged& a, const at::Tensor& residual = at::Tensor()) {
  const at::ScalarType t = x.scalar_type();
  return a.after.defined() && (a.after.scalar_type() == t || a.after.scalar_type() == at::kFloat) &&
         (t == at::kBFloat16 || t == at::kHalf) && x.device().is_cpu() && a.after.dim() == 1 &&
         plain_and_untracked(x) && plain_and_untracked(a.after) && plain_and_untracked(residual) &&
         !c10::impl::TorchDispatchModeTLS::any_modes_set() && !at::autocast::is_autocast_enabled(at::kCPU);
}

template <typename Info>
struct CastingRows {
  static_assert(Info::params.size() == 1, "casting modes are declared for weight-only norms");
  using E = RowEntry<Info, void, 1>;
  using Eps = typename E::Scalar;
  using S = RowFunctionTypes<E>;

  static at::Tensor op(const at::Tensor& x, const std::optional<at::Tensor>& weight, Eps eps, double offset,
                       c10::string_view casting_mode) {
    const char* name = E::op_name();
    check_rows<E>(name, x, Params<1>{weight}, x.device().type());  // the plain op's checks and words first
    const Arranged a = arrange(name, x, weight, offset, casting_mode);
    if (one_pass_rounded(x, a))
      return std::get<0>(
          round_normalized_forward<Info>(x, at::Tensor(), at::Tensor(), a.after, eps_or_default(x, eps)));
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
    if (one_pass_rounded(x, a, residual))
      return round_normalized_forward<Info>(x, residual, at::Tensor(), a.after, eps_or_default(x, eps));
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
    if (one_pass_rounded(x, a, residual)) {
      check_in_place_residual(name, x, residual);
      return std::get<0>(
          round_normalized_forward<Info>(x, residual, residual, a.after, eps_or_default(x, eps)));
    }
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
