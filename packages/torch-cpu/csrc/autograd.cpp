// Autograd key for the one op whose autograd is not a formula: add_out.
// Like aten's out= overloads it is not differentiable, so it refuses inputs
// that need a gradient, bumps `out`'s version counter (it mutates `out`, and
// autograd must see saved copies of it go stale) and redispatches below
// autograd. The functional ops get their formulas in Python
// (torch.library.register_autograd), see src/tierkit_torch/_registrations.py.
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

namespace tierkit_torch {
namespace {

void add_out_autograd(const at::Tensor& a, const at::Tensor& b, const at::Tensor& out) {
  const bool wants_grad = c10::GradMode::is_enabled() &&
                          ((a.defined() && a.requires_grad()) || (b.defined() && b.requires_grad()) ||
                           (out.defined() && out.requires_grad()));
  TORCH_CHECK(!wants_grad,
              "tierkit::add_out: writes into `out` and does not support automatic differentiation "
              "(an input requires grad); use tierkit::custom_add, or call it under torch.no_grad()");
  static const auto handle = c10::Dispatcher::singleton()
                                 .findSchemaOrThrow("tierkit::add_out", "")
                                 .typed<void(const at::Tensor&, const at::Tensor&, const at::Tensor&)>();
  {
    c10::impl::ExcludeDispatchKeyGuard below(c10::autograd_dispatch_keyset_with_ADInplaceOrView);
    handle.call(a, b, out);
  }
  if (out.defined()) out.unsafeGetTensorImpl()->bump_version();
}

}  // namespace

TORCH_LIBRARY_IMPL(tierkit, Autograd, m) {
  m.impl("add_out", &add_out_autograd);
}

}  // namespace tierkit_torch
