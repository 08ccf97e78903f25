// The adapters between torch's stable ABI and core: a torch::stable::Tensor
// seen as a tierkit::TensorView (no copy), torch::stable::parallel_for as the
// runner that splits core's kernels (so torch.set_num_threads governs them),
// and the argument checks every op shares. Only torch/csrc/stable and
// torch/headeronly are included: this library loads on every torch from the
// TORCH_TARGET_VERSION it was built for onwards.
#pragma once

#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include <algorithm>
#include <array>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "tierkit/checks.h"
#include "tierkit/huge_pages.h"
#include "tierkit/kernels.h"

namespace tierkit_stable {

using torch::stable::Tensor;
using ScalarType = torch::headeronly::ScalarType;
using DeviceType = torch::headeronly::DeviceType;

// torch's ScalarType as core's DType; false for types core lacks.
inline bool core_dtype(ScalarType t, tierkit::DType* out) {
  switch (t) {
    case ScalarType::Float: *out = tierkit::DType::Float32; return true;
    case ScalarType::Double: *out = tierkit::DType::Float64; return true;
    case ScalarType::Half: *out = tierkit::DType::Float16; return true;
    case ScalarType::BFloat16: *out = tierkit::DType::BFloat16; return true;
    case ScalarType::Int: *out = tierkit::DType::Int32; return true;
    case ScalarType::Long: *out = tierkit::DType::Int64; return true;
    default: return false;
  }
}

// The spelling Python users see (torch.float8_e4m3fn prints float8_e4m3fn):
// core's name where core knows the type, else torch's enum name respelled (core).
inline std::string dtype_name(ScalarType t) {
  tierkit::DType d;
  if (core_dtype(t, &d)) return std::string(tierkit::dtype_name(d));
  return tierkit::python_dtype_name(torch::headeronly::toString(t));
}

inline std::string device_str(const torch::stable::Device& d) {
  std::string s;
  switch (d.type()) {
    case DeviceType::CPU: s = "cpu"; break;
    case DeviceType::CUDA: s = "cuda"; break;
    case DeviceType::Meta: s = "meta"; break;
    default: s = "device type " + std::to_string(static_cast<int>(d.type()));
  }
  return d.index() >= 0 ? s + ":" + std::to_string(d.index()) : s;
}

[[noreturn]] inline void fail(const char* op, const std::string& what) {
  throw std::runtime_error(std::string(op) + ": " + what);
}

// Runs core's check `f`; its failure becomes "<op>: <core's message>", the
// same text the tierkit:: ops give.
template <typename F>
void core_check(const char* op, F&& f) {
  try {
    f();
  } catch (const tierkit::Error& e) {
    fail(op, e.what());
  }
}

inline void check_defined(const char* op, const Tensor& t, const char* name) {
  if (!t.defined()) fail(op, std::string(name) + ": expected a defined tensor, got an undefined one");
}

// The first input fixes device, dtype and shape for the rest.
// A dtype the kernels compute (core's wording: "expected dtype float32, ...").
inline void check_dtype(const char* op, const Tensor& t, const char* name) {
  core_check(op, [&] {
    tierkit::DType d;
    if (!core_dtype(t.scalar_type(), &d)) tierkit::checks::unknown_dtype(name, dtype_name(t.scalar_type()));
    tierkit::checks::accepted_dtype(name, d);
  });
}

inline void check_first(const char* op, const Tensor& t, const char* name) {
  check_defined(op, t, name);
  if (t.device().type() != DeviceType::CPU)
    fail(op, std::string(name) + ": expected a CPU tensor, got one on " + device_str(t.device()));
  check_dtype(op, t, name);
}

// Rows split by torch's parallel_for (so torch.set_num_threads governs
// them); core sized the grain in rows. The row kinds' runner (rows.cpp, row_maps.cpp).
struct RowRunner {
  template <typename Fn>
  void operator()(int64_t n, int64_t grain, const Fn& fn) const {
    torch::stable::parallel_for(0, n, grain, fn);
  }
};

inline std::vector<std::int64_t> sizes_of(const Tensor& t) {
  const auto s = t.sizes();
  return {s.begin(), s.end()};
}
inline std::vector<std::int64_t> strides_of(const Tensor& t) {
  const auto s = t.strides();
  return {s.begin(), s.end()};
}

// The bytes a tensor's elements span, [first, past the last) (a tensor of
// no element spans nothing from its data pointer).
inline std::pair<const char*, const char*> byte_span(const Tensor& t) {
  const auto* p = static_cast<const char*>(t.data_ptr());
  if (t.numel() == 0) return {p, p};
  std::int64_t lo = 0, hi = 0;
  const auto sz = sizes_of(t), st = strides_of(t);
  for (std::size_t i = 0; i < sz.size(); ++i) (st[i] < 0 ? lo : hi) += (sz[i] - 1) * st[i];
  return {p + lo * t.element_size(), p + (hi + 1) * t.element_size()};
}

inline void check_like(const char* op, const Tensor& t, const char* name, const Tensor& ref,
                       const char* ref_name) {
  check_defined(op, t, name);
  if (!(t.device() == ref.device()))
    fail(op, std::string(name) + ": expected device " + device_str(ref.device()) + " (same as " + ref_name +
                 "), got " + device_str(t.device()));
  core_check(op, [&] {
    tierkit::checks::same_dtype(name, dtype_name(t.scalar_type()), ref_name, dtype_name(ref.scalar_type()));
    tierkit::checks::same_shape(name, sizes_of(t), ref_name, sizes_of(ref), tierkit::ShapeStyle::List);
  });
}

// Non-overlapping and dense: some permutation of the dimensions makes the
// strides C-contiguous (size-1 dimensions may have any stride), so the
// elements cover exactly numel() slots from data_ptr().
inline bool dense(const Tensor& t) {
  const auto sizes = sizes_of(t), strides = strides_of(t);
  std::vector<std::size_t> order;
  for (std::size_t d = 0; d < sizes.size(); ++d)
    if (sizes[d] != 1) order.push_back(d);
  std::sort(order.begin(), order.end(),
            [&](std::size_t x, std::size_t y) { return strides[x] < strides[y]; });
  std::int64_t expected = 1;
  for (std::size_t d : order) {
    if (strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

// aten's layout rule for an elementwise result (TensorIterator): when every
// input is dense with the same strides (channels_last, transposed...), the
// output takes those strides; otherwise it is C-contiguous.
inline bool same_dense_layout(std::initializer_list<const Tensor*> tensors) {
  const Tensor& first = **tensors.begin();
  for (const Tensor* t : tensors)
    if (!dense(*t) || strides_of(*t) != strides_of(first)) return false;
  return true;
}

inline Tensor new_output(std::initializer_list<const Tensor*> inputs) {
  const Tensor& first = **inputs.begin();
  // empty_like keeps a dense input's strides (preserve_format).
  Tensor out = first.dim() > 1 && !first.is_contiguous() && same_dense_layout(inputs)
                   ? torch::stable::empty_like(first)
                   : torch::stable::new_empty(first, first.sizes());
  // Fresh and untouched: huge pages make large outputs' page faults 512x fewer.
  tierkit::advise_huge_pages(out.mutable_data_ptr(), out.numel() * out.element_size());
  return out;
}

// The out= rules (tierkit::'s words) for operands of `like`'s shape and
// dtype: same device and dtype; an empty `out` is resized to the result's
// shape (unless `resize` is false), a non-empty one of another shape is refused.
inline void prepare_out(const char* op, Tensor& out, const Tensor& like, bool resize = true) {
  check_defined(op, out, "out");
  if (!(out.device() == like.device()))
    fail(op, "out: expected device " + device_str(like.device()) + " (the inputs'), got " +
                 device_str(out.device()));
  if (sizes_of(out) != sizes_of(like)) {
    if (!resize || out.numel() != 0)
      fail(op, "out: expected shape " + tierkit::shape_str(sizes_of(like), tierkit::ShapeStyle::List) +
                   " (the result's), got " + tierkit::shape_str(sizes_of(out), tierkit::ShapeStyle::List));
    // aten::resize_ through the dispatcher: part of the stable C ABI.
    const auto size = like.sizes();
    std::array<StableIValue, 3> stack{torch::stable::detail::from(out), torch::stable::detail::from(size),
                                      torch::stable::detail::from(std::nullopt)};
    STABLE_TORCH_ERROR_CODE_CHECK(
        torch_call_dispatcher("aten::resize_", "", stack.data(), TORCH_ABI_VERSION));
  }
}

// ---- aten's semantics for the pointwise ops (as torch-cpu's checks.h) ------
// Operands of one shape and one accepted dtype take the checks above. Any
// other call is resolved by aten's rules: the dtype by type promotion
// (aten::result_type), the shape by broadcasting, the result's layout by
// aten's own elementwise op run on meta tensors (no data: TensorIterator's
// rule is not in the stable API), `out=` of another dtype through a
// temporary. Everything goes through the dispatcher, part of the stable ABI.

// ns::op.overload(args...) through the dispatcher; the first return value.
template <typename... Args>
StableIValue dispatch(const char* name, const char* overload, const Args&... args) {
  std::array<StableIValue, std::max<std::size_t>(sizeof...(Args), 1)> stack{
      torch::stable::detail::from(args)...};
  STABLE_TORCH_ERROR_CODE_CHECK(torch_call_dispatcher(name, overload, stack.data(), TORCH_ABI_VERSION));
  return stack[0];
}

inline bool accepted(ScalarType t) {
  tierkit::DType d;
  return core_dtype(t, &d) && tierkit::is_accepted(d);
}

inline bool plain_call(std::initializer_list<const Tensor*> tensors) {
  const Tensor& first = **tensors.begin();
  if (!first.defined() || !accepted(first.scalar_type())) return false;
  for (const Tensor* t : tensors)
    if (!t->defined() || t->scalar_type() != first.scalar_type() || sizes_of(*t) != sizes_of(first))
      return false;
  return true;
}

inline bool is_integral_or_bool(ScalarType t) {
  switch (t) {
    case ScalarType::Bool:
    case ScalarType::Byte:
    case ScalarType::Char:
    case ScalarType::Short:
    case ScalarType::Int:
    case ScalarType::Long:
    case ScalarType::UInt16:
    case ScalarType::UInt32:
    case ScalarType::UInt64: return true;
    default: return false;
  }
}

inline std::string shape_list(const std::vector<std::int64_t>& shape) {
  return tierkit::shape_str(shape, tierkit::ShapeStyle::List);
}

template <std::size_t N>
struct Pointwise {
  std::array<Tensor, N> in;  // cast to the result dtype, broadcast to its shape
  Tensor target;             // what the kernel writes
  Tensor result;             // what the op returns
  void finish() {
    if (target.data_ptr() != result.data_ptr() || target.scalar_type() != result.scalar_type())
      torch::stable::copy_(result, target);
  }
};

template <std::size_t N>
Pointwise<N> resolve_pointwise(const char* op, const std::array<const Tensor*, N>& in,
                               const std::array<const char*, N>& names, bool float_scalar, Tensor* out,
                               bool resize_out = true) {
  for (std::size_t i = 0; i < N; ++i) check_defined(op, *in[i], names[i]);
  if (in[0]->device().type() != DeviceType::CPU)
    fail(op, std::string(names[0]) + ": expected a CPU tensor, got one on " + device_str(in[0]->device()));
  for (std::size_t i = 1; i < N; ++i)
    if (!(in[i]->device() == in[0]->device()))
      fail(op, std::string(names[i]) + ": expected device " + device_str(in[0]->device()) + " (same as " +
                   names[0] + "), got " + device_str(in[i]->device()));
  // dtype
  ScalarType dtype = in[0]->scalar_type();
  if (N > 1)
    dtype = torch::stable::detail::to<ScalarType>(dispatch("aten::result_type", "Tensor", *in[0], *in[1]));
  if (float_scalar && is_integral_or_bool(dtype))
    dtype = torch::stable::empty({0}).scalar_type();  // the default
  if (!accepted(dtype)) {
    std::size_t bad = 0;
    while (bad + 1 < N && accepted(in[bad]->scalar_type())) ++bad;
    const ScalarType shown = accepted(in[bad]->scalar_type()) ? dtype : in[bad]->scalar_type();
    core_check(op, [&] { tierkit::checks::unknown_dtype(names[bad], dtype_name(shown)); });
  }
  // shape
  std::vector<std::int64_t> shape = sizes_of(*in[0]);
  for (std::size_t i = 1; i < N; ++i) {
    const std::string ref = std::string(names[0]) + (i > 1 ? " and the others" : "");
    core_check(op, [&] {
      shape = tierkit::checks::broadcast_shape(names[i], shape, ref.c_str(), sizes_of(*in[i]));
    });
  }
  Pointwise<N> p;
  const torch::headeronly::IntHeaderOnlyArrayRef shape_ref(shape.data(), shape.size());
  for (std::size_t i = 0; i < N; ++i) {
    const Tensor cast = in[i]->scalar_type() == dtype ? *in[i] : torch::stable::to(*in[i], dtype);
    p.in[i] = torch::stable::detail::to<Tensor>(dispatch("aten::expand", "", cast, shape_ref, false));
  }
  if (out) {
    check_defined(op, *out, "out");
    if (!(out->device() == in[0]->device()))
      fail(op, "out: expected device " + device_str(in[0]->device()) + " (the inputs'), got " +
                   device_str(out->device()));
    if (!torch::stable::detail::to<bool>(dispatch("aten::can_cast", "", dtype, out->scalar_type())))
      fail(op, "out: expected a dtype the result (" + dtype_name(dtype) + ") can be cast to, got " +
                   dtype_name(out->scalar_type()));
    if (sizes_of(*out) != shape) {
      if (!resize_out || out->numel() != 0)
        fail(op, "out: expected shape " + shape_list(shape) + " (the result's), got " +
                     shape_list(sizes_of(*out)));
      dispatch("aten::resize_", "", *out, shape_ref, std::nullopt);
    }
    p.result = *out;
    p.target = out->scalar_type() == dtype ? *out : torch::stable::new_empty(*out, shape_ref, dtype);
  } else {
    // aten's elementwise op on meta tensors of the inputs' layouts: its result
    // has aten's layout, which the real result copies.
    const torch::stable::Device meta(DeviceType::Meta);
    std::array<Tensor, N> m;
    for (std::size_t i = 0; i < N; ++i) {
      const auto sz = sizes_of(*in[i]), st = strides_of(*in[i]);
      m[i] = torch::stable::detail::to<Tensor>(
          dispatch("aten::empty_strided", "", torch::headeronly::IntHeaderOnlyArrayRef(sz.data(), sz.size()),
                   torch::headeronly::IntHeaderOnlyArrayRef(st.data(), st.size()),
                   std::optional<ScalarType>(dtype), std::optional<torch::headeronly::Layout>(),
                   std::optional<torch::stable::Device>(meta), std::optional<bool>()));
    }
    const Tensor proto = torch::stable::detail::to<Tensor>(dispatch("aten::mul", "Tensor", m[0], m[N - 1]));
    const auto sz = sizes_of(proto), st = strides_of(proto);
    p.result = p.target = torch::stable::detail::to<Tensor>(
        dispatch("aten::empty_strided", "", torch::headeronly::IntHeaderOnlyArrayRef(sz.data(), sz.size()),
                 torch::headeronly::IntHeaderOnlyArrayRef(st.data(), st.size()),
                 std::optional<ScalarType>(dtype), std::optional<torch::headeronly::Layout>(),
                 std::optional<torch::stable::Device>(in[0]->device()), std::optional<bool>()));
  }
  return p;
}

// Only called after check_first accepted the dtype.
inline tierkit::DType dtype_of(const Tensor& t) {
  tierkit::DType d{};
  core_dtype(t.scalar_type(), &d);
  return d;
}

// A core view of t's elements, strided (at most kMaxRank dims: run_views
// passes deeper tensors contiguous, seen flat). Torch strides are never negative.
inline tierkit::TensorView as_view(const Tensor& t) {
  tierkit::Shape shape, strides;
  if (t.dim() > tierkit::kMaxRank) {
    shape.push_back(t.numel());
    strides.push_back(1);
  } else {
    for (int64_t d = 0; d < t.dim(); ++d) {
      shape.push_back(t.sizes()[d]);
      strides.push_back(t.strides()[d]);
    }
  }
  int64_t extent = t.numel() == 0 ? 0 : 1;
  for (int d = 0; d < shape.rank() && t.numel() != 0; ++d) extent += (shape[d] - 1) * strides[d];
  return tierkit::TensorView(t.mutable_data_ptr(), extent, dtype_of(t), shape, strides);
}

inline tierkit::TensorView as_flat_view(const Tensor& t) {
  tierkit::Shape shape, strides;
  shape.push_back(t.numel());
  strides.push_back(1);
  return tierkit::TensorView(t.mutable_data_ptr(), t.numel(), dtype_of(t), shape, strides);
}

// torch's own elementwise kernels split at 32768 elements (GRAIN_SIZE).
inline constexpr int64_t kTorchGrain = 32768;

struct StableRunner {
  template <typename Fn>
  void operator()(int64_t n, int64_t grain, const Fn& fn) const {
    torch::stable::parallel_for(0, n, std::max<int64_t>(grain, kTorchGrain), fn);
  }
};

// Runs `kernel(view...)` on core views of `t` (the inputs, then the output
// last). Operands sharing one dense layout are seen as flat memory, at any
// rank; otherwise they are walked by their strides, which core holds up to
// kMaxRank dims, so deeper ones go through contiguous copies (rare).
template <std::size_t N, typename Kernel>
void run_views(const char* op, std::array<Tensor, N> t, const Kernel& kernel) {
  const auto each = [&](auto view_of) {
    std::array<tierkit::TensorView, N> v;
    for (std::size_t i = 0; i < N; ++i) v[i] = view_of(t[i]);
    core_check(op, [&] { std::apply([&](const auto&... views) { kernel(views...); }, v); });
  };
  // One pass over all operands (each one's density computed once).
  const bool flat = std::apply([](const auto&... x) { return same_dense_layout({&x...}); }, t);
  if (flat) return each(as_flat_view);
  Tensor& out = t[N - 1];
  if (out.dim() <= tierkit::kMaxRank) return each(as_view);
  Tensor result = out;
  for (std::size_t i = 0; i + 1 < N; ++i) t[i] = torch::stable::contiguous(t[i]);
  const bool direct = out.is_contiguous();
  if (!direct) out = torch::stable::new_empty(result, result.sizes());
  each(as_flat_view);
  if (!direct) torch::stable::copy_(result, out);
}

}  // namespace tierkit_stable
