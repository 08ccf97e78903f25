// The in-place row ops (TIERKIT_ROW_IN_PLACE: vLLM's serving forms), each
// entry's CPU kernel and Autograd kernel. The arguments' rules, the values
// read as called and the token rows are every backend's
// (tierkit_torch/row_in_place.h); the arithmetic and the check of every
// index before anything is written are core's functor's. Not
// differentiable: vLLM calls them under inference, and the Autograd kernel
// says so rather than leave a graph that would not see the write.
#include <ATen/core/Tensor.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "tierkit/in_place_functors.h"
#include "tierkit/op_table.h"
#include "tierkit_torch/op_handle.h"
#include "tierkit_torch/row_in_place.h"
#include "view.h"

namespace tierkit_torch {
namespace {

using in_place::OptTensor;
using in_place::present;

// One entry's kernels: Info is the op table's (tierkit::in_place_info: its
// arguments' names by role), F core's functor. The schema's arguments by
// role: the index, the x written in place and the optional second, the
// table gathered by the index, the size of a head, the flag.
template <typename Info, typename F>
struct CpuInPlace {
  // Built while the library loads (op_handle.h: no guarded statics).
  static inline const std::string kName = std::string("tierkit::") + Info::name;
  static const char* name() { return kName.c_str(); }

  static void op(const at::Tensor& index, const at::Tensor& x, const OptTensor& x2, const at::Tensor& table,
                 int64_t size, bool flag) {
    const char* op = name();
    in_place::Prepared p = in_place::prepare<Info>(op, index, x, x2, table, size, c10::DeviceType::CPU);
    core_check(op, [&] {
      tierkit::dispatch_accepted(to_core_dtype(x.scalar_type()), Info::written[0], [&](auto tag) {
        using T = decltype(tag);
        const auto heads = [](in_place::Heads& h) {
          return tierkit::kernels::TokenHeads<T>{
              h.rows.defined() ? static_cast<T*>(h.rows.mutable_data_ptr()) : nullptr, h.stride, h.heads};
        };
        const auto run = [&](const auto* t) {
          F::run(p.index.const_data_ptr<int64_t>(), p.tokens, heads(p.x), heads(p.x2), size, t,
                 p.table.size(0), p.table.size(1), flag, AtenRowRunner{});
        };
        if (p.table.scalar_type() == x.scalar_type())
          run(static_cast<const T*>(p.table.const_data_ptr()));
        else
          run(static_cast<const tierkit::compute_t<T>*>(p.table.const_data_ptr()));
      });
    });
    p.write_back(x, x2);
  }
};

// Below autograd, refusing a derivative it cannot give, and marking the
// written tensors changed (their version counters) as aten's in-place ops do.
template <typename Info>
struct AutogradInPlace {
  static inline const std::string kName = std::string("tierkit::") + Info::name;
  static inline const std::string kRefusal = std::string(": writes ") + Info::written[0] + " and " +
                                             Info::written[1] +
                                             " in place and is not differentiable (an argument requires "
                                             "grad); call it under torch.no_grad() or torch.inference_mode()";
  static inline std::atomic<const c10::OperatorHandle*> slot{nullptr};

  static void op(const at::Tensor& index, const at::Tensor& x, const OptTensor& x2, const at::Tensor& table,
                 int64_t size, bool flag) {
    const char* op = kName.c_str();
    for (const at::Tensor* t : {&x, present(x2) ? &*x2 : nullptr, &table})
      TORCH_CHECK(!(t && c10::GradMode::is_enabled() && t->requires_grad()), op, kRefusal);
    using Fn = void(const at::Tensor&, const at::Tensor&, const OptTensor&, const at::Tensor&, int64_t, bool);
    const auto h = op_handle<Fn>(slot, op);
    {
      c10::impl::ExcludeDispatchKeyGuard guard(c10::autograd_dispatch_keyset_with_ADInplaceOrView);
      h.call(index, x, x2, table, size, flag);
    }
    x.unsafeGetTensorImpl()->bump_version();
    if (present(x2)) x2->unsafeGetTensorImpl()->bump_version();
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(tierkit, CPU, m) {
#define TIERKIT_REGISTER_IN_PLACE(NAME, FUNCTOR) \
  m.impl(#NAME, &CpuInPlace<tierkit::in_place_info::NAME, tierkit::kernels::FUNCTOR>::op);
  TIERKIT_ROW_IN_PLACE(TIERKIT_REGISTER_IN_PLACE)
#undef TIERKIT_REGISTER_IN_PLACE
}

TORCH_LIBRARY_IMPL(tierkit, Autograd, m) {
#define TIERKIT_REGISTER_IN_PLACE(NAME, FUNCTOR) \
  m.impl(#NAME, &AutogradInPlace<tierkit::in_place_info::NAME>::op);
  TIERKIT_ROW_IN_PLACE(TIERKIT_REGISTER_IN_PLACE)
#undef TIERKIT_REGISTER_IN_PLACE
}

}  // namespace tierkit_torch
