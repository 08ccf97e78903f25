// Argument checks shared by every tierkit kernel (CPU here, CUDA in the
// torch-cuda tier, which includes this header from the installed package).
// The rules and their wording are core's (tierkit/checks.h); this file only
// adapts torch's types to them and turns core's errors into TORCH_CHECK
// failures (RuntimeError in Python) prefixed with the op's name. Device
// checks are torch's own concern and live here.
#pragma once

#include <ATen/MemoryOverlap.h>
#include <ATen/TensorIterator.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "tierkit/checks.h"

namespace tierkit_torch {

// torch's ScalarType as core's DType, matched through the DLPack type code
// and width that core's dtype table records; null for types core lacks.
inline const tierkit::DTypeInfo* core_dtype_info(c10::ScalarType t) {
  std::uint8_t code;
  if (t == c10::kBFloat16) {
    code = 4;
  } else if (c10::isFloatingType(t)) {
    code = 2;
  } else if (c10::isIntegralType(t, /*includeBool=*/false) && c10::isSignedType(t)) {
    code = 0;
  } else {
    return nullptr;
  }
  return tierkit::dtype_from_dlpack(code, 8 * c10::elementSize(t));
}

// The spelling Python users see (torch.float8_e4m3fn prints float8_e4m3fn):
// core's name where core knows the type, else c10's name respelled (core).
inline std::string dtype_name(c10::ScalarType t) {
  if (const auto* d = core_dtype_info(t)) return std::string(d->name);
  return tierkit::python_dtype_name(c10::toString(t));
}

// Runs core's check `f`; its failure becomes "<op>: <core's message>".
template <typename F>
void core_check(const char* op, F&& f) {
  try {
    f();
  } catch (const tierkit::Error& e) {
    TORCH_CHECK(false, op, ": ", e.what());
  }
}

inline void check_defined(const char* op, const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.defined(), op, ": ", name, ": expected a defined tensor, got an undefined one");
}

// A dtype the kernels compute (core's wording: "expected dtype float32, ...").
inline void check_dtype(const char* op, const at::Tensor& t, const char* name) {
  core_check(op, [&] {
    const auto* d = core_dtype_info(t.scalar_type());
    if (!d) tierkit::checks::unknown_dtype(name, dtype_name(t.scalar_type()));
    tierkit::checks::accepted_dtype(name, d->dtype);
  });
}

// The first input fixes device, dtype and shape for the rest.
inline void check_first(const char* op, const at::Tensor& t, const char* name, c10::DeviceType device) {
  check_defined(op, t, name);
  TORCH_CHECK(t.device().type() == device, op, ": ", name, ": expected a ", c10::DeviceTypeName(device, true),
              " tensor, got one on ", t.device());
  check_dtype(op, t, name);
}

inline void check_like(const char* op, const at::Tensor& t, const char* name, const at::Tensor& ref,
                       const char* ref_name) {
  check_defined(op, t, name);
  TORCH_CHECK(t.device() == ref.device(), op, ": ", name, ": expected device ", ref.device(), " (same as ",
              ref_name, "), got ", t.device());
  core_check(op, [&] {
    tierkit::checks::same_dtype(name, dtype_name(t.scalar_type()), ref_name, dtype_name(ref.scalar_type()));
    tierkit::checks::same_shape(name, t.sizes(), ref_name, ref.sizes(), tierkit::ShapeStyle::List);
  });
}

// `out` may be exactly an input (in place), never a partial overlap, and
// must not write one address twice (an expanded tensor). aten's overlap
// analysis knows torch's storages, so it decides here.
inline void check_out(const char* op, const at::Tensor& out,
                      std::initializer_list<std::pair<const at::Tensor*, const char*>> inputs) {
  TORCH_CHECK(at::has_internal_overlap(out) != at::MemOverlap::Yes, op,
              ": out: has internal overlap (e.g. an expanded tensor), so several elements share one address");
  for (const auto& [in, name] : inputs) {
    TORCH_CHECK(at::get_overlap_status(out, *in) != at::MemOverlapStatus::Partial, op,
                ": out: partially overlaps ", name, "; only an exact alias (in place) is allowed");
  }
}

// The same for N named inputs (the op table's generic kernels).
template <std::size_t N>
void check_out(const char* op, const at::Tensor& out, const std::array<const at::Tensor*, N>& in,
               const std::array<const char*, N>& names) {
  TORCH_CHECK(at::has_internal_overlap(out) != at::MemOverlap::Yes, op,
              ": out: has internal overlap (e.g. an expanded tensor), so several elements share one address");
  for (std::size_t i = 0; i < N; ++i) {
    TORCH_CHECK(at::get_overlap_status(out, *in[i]) != at::MemOverlapStatus::Partial, op,
                ": out: partially overlaps ", names[i], "; only an exact alias (in place) is allowed");
  }
}

// ---- aten's semantics for the pointwise ops --------------------------------
// A call whose operands share one shape and one accepted dtype (the common
// case) takes the checks above and no more. Any other is resolved the way
// aten resolves an elementwise op: the result dtype by type promotion
// (torch.result_type: 0-d tensors rank below dimensioned ones; a Python
// float promotes integer tensors to the default dtype), the result shape by
// broadcasting, its layout by TensorIterator, and `out=` of another dtype
// written through a temporary, cast like aten's copy. The kernels then run on
// operands of one dtype and one shape (inputs cast, and expanded: stride 0).

template <std::size_t N>
struct Pointwise {
  std::array<at::Tensor, N> in;  // cast to the result dtype, broadcast to its shape
  at::Tensor target;             // what the kernel writes: `result`, or a temporary of the result dtype
  at::Tensor result;             // what the op returns
  // After the kernel: a temporary is copied (cast) into `out`.
  void finish() const {
    if (!target.is_same(result)) result.copy_(target);
  }
};

// A dtype the kernels compute.
inline bool accepted(c10::ScalarType t) {
  const auto* d = core_dtype_info(t);
  return d && d->accepted;
}

// True when the operands need nothing beyond the same-shape, same-dtype checks.
inline bool plain_call(c10::ArrayRef<const at::Tensor*> tensors) {
  const at::Tensor& first = **tensors.begin();
  if (!first.defined() || !accepted(first.scalar_type())) return false;
  for (const at::Tensor* t : tensors) {
    if (!t->defined() || t->scalar_type() != first.scalar_type() || t->sizes() != first.sizes()) return false;
  }
  return true;
}

// The shape every input broadcasts to, or an error naming the input that does not.
template <std::size_t N>
std::vector<int64_t> broadcast_shape(const char* op, const std::array<const at::Tensor*, N>& in,
                                     const std::array<const char*, N>& names) {
  std::vector<int64_t> shape(in[0]->sizes().begin(), in[0]->sizes().end());
  for (std::size_t i = 1; i < N; ++i) {
    const std::string ref = std::string(names[0]) + (i > 1 ? " and the others" : "");
    core_check(
        op, [&] { shape = tierkit::checks::broadcast_shape(names[i], shape, ref.c_str(), in[i]->sizes()); });
  }
  return shape;
}

// The result dtype by aten's promotion; refused, naming the first input that
// is not an accepted dtype, when the kernels do not compute it.
template <std::size_t N>
c10::ScalarType result_dtype(const char* op, const std::array<const at::Tensor*, N>& in,
                             const std::array<const char*, N>& names, bool float_scalar) {
  at::native::ResultTypeState state{};
  for (const at::Tensor* t : in) state = at::native::update_result_type_state(*t, state);
  if (float_scalar) state = at::native::update_result_type_state(c10::Scalar(1.0), state);
  const c10::ScalarType dtype = at::native::result_type(state);
  if (!accepted(dtype)) {
    std::size_t bad = 0;
    while (bad + 1 < N && accepted(in[bad]->scalar_type())) ++bad;
    const bool bad_is_accepted = accepted(in[bad]->scalar_type());
    core_check(op, [&] {
      tierkit::checks::unknown_dtype(
          names[bad], bad_is_accepted ? dtype_name(dtype) : dtype_name(in[bad]->scalar_type()));
    });
  }
  return dtype;
}

// `out`'s rules (aten's): same device; a dtype the result can be cast to
// (float -> float64 or complex, not -> int); an empty `out` is resized to
// the result's shape, a non-empty one of another shape is refused (aten
// warns, then resizes: a silent reallocation users rarely want) unless
// `resize` is false, when the shape must match exactly.
inline void prepare_out_for(const char* op, const at::Tensor& out, c10::ScalarType dtype,
                            c10::SymIntArrayRef shape, c10::Device device, bool resize = true) {
  check_defined(op, out, "out");
  // aten's own words: its ADInplaceOrView kernels refuse this; a custom op's
  // out= is reached with none on the way.
  TORCH_CHECK(
      !out.is_inference() || c10::InferenceMode::is_enabled(), op,
      ": out: Inplace update to inference tensor outside InferenceMode is not allowed. You can make a "
      "clone to get a normal tensor before doing inplace update.");
  TORCH_CHECK(out.device() == device, op, ": out: expected device ", device, " (the inputs'), got ",
              out.device());
  TORCH_CHECK(c10::canCast(dtype, out.scalar_type()), op, ": out: expected a dtype the result (",
              dtype_name(dtype), ") can be cast to, got ", dtype_name(out.scalar_type()));
  // Symbolic sizes: this also runs while torch.compile traces the .out
  // overloads' decomposition with dynamic shapes, where comparisons are guards.
  if (out.sym_sizes() != shape) {
    TORCH_CHECK(resize && out.sym_numel() == 0, op, ": out: expected shape ", shape, " (the result's), got ",
                out.sym_sizes());
    out.resize__symint(shape);
  }
}

// A fresh result laid out as aten lays out an elementwise result of `in`
// (TensorIterator's rule: the inputs' stride order, broadcast dims aside).
template <typename Inputs>
at::Tensor aten_result(const Inputs& in, c10::ScalarType dtype) {
  at::TensorIteratorConfig config;
  config.add_owned_output(at::Tensor()).check_all_same_dtype(false).declare_static_dtype(dtype);
  for (const at::Tensor* t : in) config.add_const_input(*t);
  return config.build().output();
}

// Resolves a pointwise call by aten's rules (see above); `float_scalar`: the
// op also takes a Python float. Device checks are the first input's.
template <std::size_t N>
Pointwise<N> resolve_pointwise(const char* op, const std::array<const at::Tensor*, N>& in,
                               const std::array<const char*, N>& names, bool float_scalar,
                               const at::Tensor* out, c10::DeviceType device, bool resize_out = true) {
  for (std::size_t i = 0; i < N; ++i) check_defined(op, *in[i], names[i]);
  TORCH_CHECK(in[0]->device().type() == device, op, ": ", names[0], ": expected a ",
              c10::DeviceTypeName(device, true), " tensor, got one on ", in[0]->device());
  for (std::size_t i = 1; i < N; ++i) {
    TORCH_CHECK(in[i]->device() == in[0]->device(), op, ": ", names[i], ": expected device ", in[0]->device(),
                " (same as ", names[0], "), got ", in[i]->device());
  }
  const c10::ScalarType dtype = result_dtype(op, in, names, float_scalar);
  const std::vector<int64_t> shape = broadcast_shape(op, in, names);
  Pointwise<N> p;
  for (std::size_t i = 0; i < N; ++i) p.in[i] = in[i]->to(dtype).expand(shape);
  if (out) {
    prepare_out_for(op, *out, dtype, c10::fromIntArrayRefSlow(shape), in[0]->device(), resize_out);
    check_out(op, *out, in, names);
    p.result = *out;
    p.target = out->scalar_type() == dtype ? *out : at::empty_like(*out, out->options().dtype(dtype));
  } else {
    p.result = p.target = aten_result(in, dtype);
  }
  return p;
}

// Every input non-overlapping and dense with the same strides (contiguous,
// channels_last, a transposed tensor...): aten's elementwise result then
// takes those strides, and the kernels may see the operands as flat memory.
inline bool same_dense_layout(c10::ArrayRef<const at::Tensor*> tensors) {
  const at::Tensor& first = **tensors.begin();
  for (const at::Tensor* t : tensors) {
    if (!t->is_non_overlapping_and_dense() || t->strides() != first.strides()) return false;
  }
  return true;
}

// The result of inputs of one shape and dtype, laid out as aten's. Inputs
// sharing one dense layout (the common case) give it without TensorIterator.
inline at::Tensor new_output(c10::ArrayRef<const at::Tensor*> inputs) {
  const at::Tensor& first = **inputs.begin();
  if (!same_dense_layout(inputs)) return aten_result(inputs, first.scalar_type());
  if (first.dim() > 1 && !first.is_contiguous()) {
    return at::empty_strided(first.sizes(), first.strides(), first.options());
  }
  return at::empty(first.sizes(), first.options().memory_format(c10::MemoryFormat::Contiguous));
}

}  // namespace tierkit_torch
