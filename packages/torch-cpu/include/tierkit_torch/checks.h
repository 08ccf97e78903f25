// Argument checks shared by every tierkit kernel (CPU here, CUDA in the
// torch-cuda tier, which includes this header from the installed package).
// Each failure is a TORCH_CHECK (-> RuntimeError in Python) whose message
// names the op, the argument, what was expected and what came.
#pragma once

#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

namespace tierkit_torch {

inline bool is_supported_dtype(c10::ScalarType t) {
  return t == c10::kFloat || t == c10::kDouble || t == c10::kHalf || t == c10::kBFloat16;
}

// "float32" rather than c10's "Float": the spelling Python users see.
inline const char* dtype_name(c10::ScalarType t) {
  switch (t) {
    case c10::kFloat: return "float32";
    case c10::kDouble: return "float64";
    case c10::kHalf: return "float16";
    case c10::kBFloat16: return "bfloat16";
    case c10::kInt: return "int32";
    case c10::kLong: return "int64";
    case c10::kShort: return "int16";
    case c10::kChar: return "int8";
    case c10::kByte: return "uint8";
    case c10::kBool: return "bool";
    case c10::kComplexFloat: return "complex64";
    case c10::kComplexDouble: return "complex128";
    default: return c10::toString(t);
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
  TORCH_CHECK(is_supported_dtype(t.scalar_type()), op, ": ", name,
              ": expected dtype float32, float64, float16 or bfloat16, got ", dtype_name(t.scalar_type()));
}

inline void check_like(const char* op, const at::Tensor& t, const char* name, const at::Tensor& ref,
                       const char* ref_name) {
  check_defined(op, t, name);
  TORCH_CHECK(t.device() == ref.device(), op, ": ", name, ": expected device ", ref.device(), " (same as ",
              ref_name, "), got ", t.device());
  TORCH_CHECK(t.scalar_type() == ref.scalar_type(), op, ": ", name, ": expected dtype ",
              dtype_name(ref.scalar_type()), " (same as ", ref_name, "), got ", dtype_name(t.scalar_type()));
  TORCH_CHECK(t.sizes() == ref.sizes(), op, ": ", name, ": expected shape ", ref.sizes(), " (same as ",
              ref_name, "), got ", t.sizes());
}

// `out` may be exactly an input (in place), never a partial overlap, and
// must not write one address twice (an expanded tensor).
inline void check_out(const char* op, const at::Tensor& out,
                      std::initializer_list<std::pair<const at::Tensor*, const char*>> inputs) {
  TORCH_CHECK(at::has_internal_overlap(out) != at::MemOverlap::Yes, op,
              ": out: has internal overlap (e.g. an expanded tensor), so several elements share one address");
  for (const auto& [in, name] : inputs) {
    TORCH_CHECK(at::get_overlap_status(out, *in) != at::MemOverlapStatus::Partial, op,
                ": out: partially overlaps ", name, "; only an exact alias (in place) is allowed");
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

}  // namespace tierkit_torch
