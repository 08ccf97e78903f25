// The argument rules every tier applies, written once: which dtypes the
// kernels accept, "same dtype / same shape as the first argument", how far a
// strided layout reaches, and the overlap and writability rules for `out`.
// Failures throw core's DTypeError / InvalidArgument with the project's
// message format, "b: expected shape (2, 3) (same as a), got (3, 2)";
// bindings map them to their own exception types (ValueError/TypeError in
// the bridge, TORCH_CHECK in the torch tiers) and may prefix the op name.
#pragma once

#include <cstdint>
#include <string>

#include "tierkit/dtype.h"
#include "tierkit/error.h"
#include "tierkit/view.h"

namespace tierkit::checks {

// `name` holds a dtype the kernels accept.
inline void accepted_dtype(const char* name, DType got) {
  if (!is_accepted(got))
    fail<DTypeError>(name, ": expected dtype ", accepted_dtype_names(), ", got ", dtype_name(got));
}
// Same, for a dtype core does not know at all (spelled by the caller).
[[noreturn]] inline void unknown_dtype(const char* name, std::string_view got) {
  throw DTypeError(detail::concat(name, ": expected dtype ", accepted_dtype_names(), ", got ", got));
}

// `name`'s dtype equals `ref_name`'s; the names are what users see.
inline void same_dtype(const char* name, std::string_view got, const char* ref_name,
                       std::string_view expected) {
  check<DTypeError>(got == expected, name, ": expected dtype ", expected, " (same as ", ref_name, "), got ",
                    got);
}
inline void same_dtype(const char* name, DType got, const char* ref_name, DType expected) {
  same_dtype(name, dtype_name(got), ref_name, dtype_name(expected));
}

// `name`'s shape equals `ref_name`'s.
template <typename Sizes>
void same_shape(const char* name, const Sizes& got, const char* ref_name, const Sizes& expected,
                ShapeStyle style = ShapeStyle::Tuple) {
  bool equal = got.size() == expected.size();
  for (std::size_t i = 0; equal && i < got.size(); ++i) equal = got[i] == expected[i];
  if (!equal) {
    fail(name, ": expected shape ", shape_str(expected, style), " (same as ", ref_name, "), got ",
         shape_str(got, style));
  }
}

// The byte range [lo, hi) a view can touch; empty views touch nothing.
struct Span {
  const char* lo = nullptr;
  const char* hi = nullptr;
};
inline Span span_of(const TensorView& v) {
  if (v.numel() == 0) return {};
  const std::int64_t item = static_cast<std::int64_t>(dtype_size(v.dtype()));
  const Reach r = reach(v.shape(), v.strides());
  const char* p = static_cast<const char*>(v.data());
  return {p + r.lo * item, p + (r.hi + 1) * item};
}

inline bool same_layout(const TensorView& a, const TensorView& b) {
  return a.data() == b.data() && a.dtype() == b.dtype() && a.shape() == b.shape() &&
         a.strides() == b.strides();
}

// `out` may be exactly an input (in place); any other sharing of bytes could
// read an element after it was overwritten, so it is refused.
inline void no_partial_overlap(const TensorView& out, const TensorView& in, const char* in_name) {
  const Span o = span_of(out), i = span_of(in);
  if (o.lo == nullptr || i.lo == nullptr) return;
  const bool disjoint = o.hi <= i.lo || i.hi <= o.lo;
  check(disjoint || same_layout(out, in), "out: overlaps input '", in_name,
        "' without being the same elements; only exact in-place (out is ", in_name, ") is allowed");
}

inline void operand(const TensorView& out, const TensorView& in, const char* in_name) {
  same_dtype(in_name, in.dtype(), "out", out.dtype());
  same_shape(in_name, in.shape(), "out", out.shape());
  no_partial_overlap(out, in, in_name);
}

// A zero stride in a dimension of size > 1 makes several elements of `out`
// one address: writes would race and the result would depend on the order.
inline void writable_layout(const TensorView& out) {
  if (out.numel() == 0) return;  // nothing is written; numpy gives empty arrays zero strides
  for (int d = 0; d < out.rank(); ++d) {
    check(out.shape()[d] <= 1 || out.strides()[d] != 0, "out: has stride 0 in dimension ", d, " (size ",
          out.shape()[d], "), so several elements share one address; give a tensor with distinct elements");
  }
}

}  // namespace tierkit::checks
