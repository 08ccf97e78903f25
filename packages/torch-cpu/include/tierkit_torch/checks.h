// Argument checks shared by every tierkit kernel (CPU here, CUDA in the
// torch-cuda tier, which includes this header from the installed package).
// The rules and their wording are core's (tierkit/checks.h); this file only
// adapts torch's types to them and turns core's errors into TORCH_CHECK
// failures (RuntimeError in Python) prefixed with the op's name. Device
// checks are torch's own concern and live here.
#pragma once

#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <c10/util/Exception.h>

#include <string_view>

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

// The spelling Python users see ("float32", not c10's "Float"): core's name
// where core knows the type, torch's Python name otherwise.
inline std::string_view dtype_name(c10::ScalarType t) {
  if (const auto* d = core_dtype_info(t)) return d->name;
  switch (t) {
    case c10::kShort: return "int16";
    case c10::kChar: return "int8";
    case c10::kByte: return "uint8";
    case c10::kBool: return "bool";
    case c10::kComplexFloat: return "complex64";
    case c10::kComplexDouble: return "complex128";
    default: return c10::toString(t);
  }
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

// The first input fixes device, dtype and shape for the rest.
inline void check_first(const char* op, const at::Tensor& t, const char* name, c10::DeviceType device) {
  check_defined(op, t, name);
  TORCH_CHECK(t.device().type() == device, op, ": ", name, ": expected a ", c10::DeviceTypeName(device, true),
              " tensor, got one on ", t.device());
  core_check(op, [&] {
    const auto* d = core_dtype_info(t.scalar_type());
    if (!d) tierkit::checks::unknown_dtype(name, dtype_name(t.scalar_type()));
    tierkit::checks::accepted_dtype(name, d->dtype);
  });
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

// The out= overloads' rules, aten's: an empty `out` is resized to the
// result's shape; a non-empty one of another shape is refused (aten only
// warns, then resizes: a silent reallocation users rarely want); dtype and
// device must match the inputs (no type promotion here).
inline void prepare_out(const char* op, const at::Tensor& out, const at::Tensor& like,
                        const char* like_name) {
  check_defined(op, out, "out");
  TORCH_CHECK(out.device() == like.device(), op, ": out: expected device ", like.device(), " (same as ",
              like_name, "), got ", out.device());
  core_check(op, [&] {
    tierkit::checks::same_dtype("out", dtype_name(out.scalar_type()), like_name,
                                dtype_name(like.scalar_type()));
  });
  // Symbolic sizes: this also runs while torch.compile traces the .out
  // overloads' decomposition with dynamic shapes, where comparisons are guards.
  if (out.sym_sizes() != like.sym_sizes()) {
    TORCH_CHECK(out.sym_numel() == 0, op, ": out: expected shape ", like.sym_sizes(), " (same as ", like_name,
                "), got ", out.sym_sizes());
    out.resize__symint(like.sym_sizes());
  }
}

// Every check add_out needs, for the kernels of any device.
inline void check_add_out(const at::Tensor& a, const at::Tensor& b, const at::Tensor& out,
                          c10::DeviceType device) {
  constexpr const char* op = "tierkit::add_out";
  check_first(op, a, "a", device);
  check_like(op, b, "b", a, "a");
  check_like(op, out, "out", a, "a");
  check_out(op, out, {{&a, "a"}, {&b, "b"}});
}

// aten's layout rule for an elementwise result (TensorIterator): when every
// input is non-overlapping and dense with the same strides (channels_last,
// a transposed tensor...), the output takes those strides; otherwise it is
// C-contiguous. The fake kernels apply the same rule (_registrations.py).
inline bool same_dense_layout(std::initializer_list<const at::Tensor*> tensors) {
  const at::Tensor& first = **tensors.begin();
  for (const at::Tensor* t : tensors) {
    if (!t->is_non_overlapping_and_dense() || t->strides() != first.strides()) return false;
  }
  return true;
}

inline at::Tensor new_output(std::initializer_list<const at::Tensor*> inputs) {
  const at::Tensor& first = **inputs.begin();
  if (first.dim() > 1 && !first.is_contiguous() && same_dense_layout(inputs)) {
    return at::empty_strided(first.sizes(), first.strides(), first.options());
  }
  return at::empty(first.sizes(), first.options().memory_format(c10::MemoryFormat::Contiguous));
}

}  // namespace tierkit_torch
