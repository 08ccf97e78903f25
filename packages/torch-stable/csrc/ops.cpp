// The tierkit_stable operators, one template instantiated per entry of the op
// table (tierkit/op_table.h): the same schemas and semantics as tierkit::
// (torch-cpu), with CPU kernels on core's kernels, written against torch's
// stable C ABI only (STABLE_TORCH_LIBRARY, torch::stable::Tensor). Built with
// TORCH_TARGET_VERSION, the compiler refuses any API newer than that torch.
// Fake kernels and autograd cannot be written in the stable C++ API; they are
// registered from Python (tierkit_torch_stable/_registrations.py).
#include <torch/csrc/stable/library.h>

#include <array>
#include <cstddef>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "stable_tensor.h"
#include "tierkit/op_table.h"
#include "tierkit/op_tags.h"

namespace tierkit_stable {
namespace {

template <typename Info>
inline constexpr std::size_t kTensors = std::tuple_size_v<std::decay_t<decltype(Info::tensors)>>;
template <typename Info>
inline constexpr std::size_t kScalars = std::tuple_size_v<std::decay_t<decltype(Info::scalars)>>;

// "tierkit_stable::<op>" and "tierkit_stable::<op>.out", built once per op.
template <typename Info>
const char* qualified_name(bool out_overload) {
  static const std::string functional = std::string("tierkit_stable::") + Info::name;
  static const std::string out = functional + ".out";
  return out_overload ? out.c_str() : functional.c_str();
}

// One op of the op table (tierkit/op_table.h): checks, then core's functor
// F into `out` (a fresh tensor when null). Operands of one shape and dtype
// go straight to the kernel; others are resolved by aten's rules first
// (promotion, broadcasting: stable_tensor.h).
template <typename Info, template <typename> class F,
          typename Tensors = std::make_index_sequence<kTensors<Info>>,
          typename Scalars = std::make_index_sequence<kScalars<Info>>>
struct StablePointwise;

template <typename Info, template <typename> class F, std::size_t... I, std::size_t... J>
struct StablePointwise<Info, F, std::index_sequence<I...>, std::index_sequence<J...>> {
  static constexpr std::size_t N = sizeof...(I);
  template <std::size_t>
  using TensorArg = Tensor;
  template <std::size_t>
  using Double = double;

  static Tensor run(const char* op, const std::array<const Tensor*, N>& in,
                    const std::array<double, sizeof...(J)>& s, Tensor* out, bool resize_out) {
    const auto kernel = [&](const auto&... v) {
      const std::array<const tierkit::TensorView*, N + 1> all{&v...};
      const std::array<const tierkit::TensorView*, N> ins{all[I]...};
      tierkit::kernels::pointwise<F>(ins, Info::tensors, s, *all[N], StableRunner{});
    };
    const bool float_scalar = sizeof...(J) > 0;  // a Python float promotes integer tensors (aten's rule)
    if (!plain_call({in[I]...}) || (out && out->scalar_type() != in[0]->scalar_type())) {
      auto p = resolve_pointwise<N>(op, in, Info::tensors, float_scalar, out, resize_out);
      run_views<N + 1>(op, {p.in[I]..., p.target}, kernel);
      p.finish();
      return p.result;
    }
    check_first(op, *in[0], Info::tensors[0]);
    for (std::size_t i = 1; i < N; ++i) check_like(op, *in[i], Info::tensors[i], *in[0], Info::tensors[0]);
    Tensor result = out ? *out : new_output({in[I]...});
    if (out) prepare_out(op, result, *in[0], resize_out);
    run_views<N + 1>(op, {*in[I]..., result}, kernel);
    return result;
  }

  static Tensor functional(TensorArg<I>... t, Double<J>... s) {
    return run(qualified_name<Info>(false), {&t...}, {s...}, nullptr, true);
  }
  static Tensor out(TensorArg<I>... t, Double<J>... s, Tensor out) {
    return run(qualified_name<Info>(true), {&t...}, {s...}, &out, true);
  }
  // A writer (add_out): never resizes, `out` must have the result's shape.
  template <const char* Name>
  static Tensor writer(TensorArg<I>... t, Double<J>... s, Tensor out) {
    return run(Name, {&t...}, {s...}, &out, false);
  }
};

#define TIERKIT_WRITER_NAME(name, of, Functor) constexpr char k_##name[] = "tierkit_stable::" #name;
TIERKIT_OUT_WRITERS(TIERKIT_WRITER_NAME)
#undef TIERKIT_WRITER_NAME

}  // namespace

// The schemas are tierkit::'s (core's list, tierkit/op_schemas.h), in their
// own namespace: both tiers can be loaded in one process.
// core's flags for a schema as torch's tags (tierkit/op_tags.h says why;
// the stable ABI takes tags since torch 2.12).
static std::vector<at::Tag> tags_of(const char* schema, bool pointwise_kind) {
  const tierkit::OpTags t = tierkit::op_tags(schema, pointwise_kind);
  std::vector<at::Tag> tags;
  if (t.pointwise) tags.push_back(at::Tag::pointwise);
  if (t.flexible_layout) tags.push_back(at::Tag::flexible_layout);
  return tags;
}

STABLE_TORCH_LIBRARY(tierkit_stable, m) {
  for (const char* schema : tierkit::kOpSchemas) m.def(schema, tags_of(schema, true));
  for (const char* schema : tierkit::kRowReductionSchemas) m.def(schema, tags_of(schema, false));  // rows.cpp
  for (const char* schema : tierkit::kRowMapSchemas) m.def(schema, tags_of(schema, false));  // row_maps.cpp
  for (const char* schema : tierkit::kRowInPlaceSchemas)
    m.def(schema, tags_of(schema, false));  // row_in_place.cpp
}

// One kernel type per op (a name, so TORCH_BOX's argument holds no comma).
#define TIERKIT_STABLE_KERNEL(name, Functor, n_tensors, n_scalars) \
  using name##_kernel = StablePointwise<tierkit::op_info::name, tierkit::kernels::Functor##Op>;
TIERKIT_POINTWISE_OPS(TIERKIT_STABLE_KERNEL)
#undef TIERKIT_STABLE_KERNEL

STABLE_TORCH_LIBRARY_IMPL(tierkit_stable, CPU, m) {
#define TIERKIT_STABLE_IMPL(name, Functor, n_tensors, n_scalars) \
  m.impl(#name, TORCH_BOX(&name##_kernel::functional));          \
  m.impl(#name ".out", TORCH_BOX(&name##_kernel::out));
  TIERKIT_POINTWISE_OPS(TIERKIT_STABLE_IMPL)
#undef TIERKIT_STABLE_IMPL
#define TIERKIT_STABLE_WRITER(name, of, Functor) m.impl(#name, TORCH_BOX(&of##_kernel::writer<k_##name>));
  TIERKIT_OUT_WRITERS(TIERKIT_STABLE_WRITER)
#undef TIERKIT_STABLE_WRITER
}

// A function of no tensors has no dispatch key to select a backend kernel.
STABLE_TORCH_LIBRARY_IMPL(tierkit_stable, CompositeExplicitAutograd, m) {
  m.impl("_accepted_dtypes", TORCH_BOX(&tierkit::accepted_dtype_list));
}

}  // namespace tierkit_stable
