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

template <typename Info>
struct CpuInPlace {
  static const char* name() {
    static const std::string n = std::string("tierkit::") + Info::name;
    return n.c_str();
  }

  static void op(const at::Tensor& positions_in, const at::Tensor& query, const OptTensor& key,
                 const at::Tensor& cache_in, int64_t head_size, bool is_neox) {
    const char* op = name();
    in_place::Prepared p =
        in_place::prepare(op, positions_in, query, key, cache_in, head_size, c10::DeviceType::CPU);
    core_check(op, [&] {
      tierkit::dispatch_accepted(to_core_dtype(query.scalar_type()), "query", [&](auto tag) {
        using T = decltype(tag);
        const auto heads = [](in_place::Heads& h) {
          return tierkit::kernels::TokenHeads<T>{
              h.rows.defined() ? static_cast<T*>(h.rows.mutable_data_ptr()) : nullptr, h.stride, h.heads};
        };
        const auto run = [&](const auto* table) {
          Info::Functor::run(p.positions.const_data_ptr<int64_t>(), p.tokens, heads(p.query), heads(p.key),
                             head_size, table, p.cache.size(0), p.cache.size(1), is_neox, AtenRowRunner{});
        };
        if (p.cache.scalar_type() == query.scalar_type())
          run(static_cast<const T*>(p.cache.const_data_ptr()));
        else
          run(static_cast<const tierkit::compute_t<T>*>(p.cache.const_data_ptr()));
      });
    });
    p.write_back(query, key);
  }
};

// Below autograd, refusing a derivative it cannot give, and marking the
// written tensors changed (their version counters) as aten's in-place ops do.
template <typename Info>
struct AutogradInPlace {
  static void op(const at::Tensor& positions, const at::Tensor& query, const OptTensor& key,
                 const at::Tensor& cache, int64_t head_size, bool is_neox) {
    const char* op = CpuInPlace<Info>::name();
    for (const at::Tensor* t : {&query, present(key) ? &*key : nullptr, &cache})
      TORCH_CHECK(
          !(t && c10::GradMode::is_enabled() && t->requires_grad()), op,
          ": writes query and key in place and is not differentiable (an argument requires grad); call "
          "it under torch.no_grad() or torch.inference_mode(), as vLLM does");
    static std::atomic<const c10::OperatorHandle*> slot{nullptr};
    using Fn = void(const at::Tensor&, const at::Tensor&, const OptTensor&, const at::Tensor&, int64_t, bool);
    const auto h = op_handle<Fn>(slot, op);
    {
      c10::impl::ExcludeDispatchKeyGuard guard(c10::autograd_dispatch_keyset_with_ADInplaceOrView);
      h.call(positions, query, key, cache, head_size, is_neox);
    }
    query.unsafeGetTensorImpl()->bump_version();
    if (present(key)) key->unsafeGetTensorImpl()->bump_version();
  }
};

// The entries' info: the name and core's functor.
#define TIERKIT_IN_PLACE_INFO(NAME, FUNCTOR)   \
  struct NAME##_info {                         \
    static constexpr const char* name = #NAME; \
    using Functor = tierkit::kernels::FUNCTOR; \
  };
TIERKIT_ROW_IN_PLACE(TIERKIT_IN_PLACE_INFO)
#undef TIERKIT_IN_PLACE_INFO

}  // namespace

TORCH_LIBRARY_IMPL(tierkit, CPU, m) {
#define TIERKIT_REGISTER_IN_PLACE(NAME, FUNCTOR) m.impl(#NAME, &CpuInPlace<NAME##_info>::op);
  TIERKIT_ROW_IN_PLACE(TIERKIT_REGISTER_IN_PLACE)
#undef TIERKIT_REGISTER_IN_PLACE
}

TORCH_LIBRARY_IMPL(tierkit, Autograd, m) {
#define TIERKIT_REGISTER_IN_PLACE(NAME, FUNCTOR) m.impl(#NAME, &AutogradInPlace<NAME##_info>::op);
  TIERKIT_ROW_IN_PLACE(TIERKIT_REGISTER_IN_PLACE)
#undef TIERKIT_REGISTER_IN_PLACE
}

}  // namespace tierkit_torch
