// The argument rules every tier applies, written once: which dtypes the
// kernels accept, "same dtype / same shape as the first argument", how far a
// strided layout reaches, and the overlap and writability rules for `out`.
// Failures throw core's DTypeError / InvalidArgument with the project's
// message format, "b: expected shape (2, 3) (same as a), got (3, 2)";
// bindings map them to their own exception types (ValueError/TypeError in
// the bridge, TORCH_CHECK in the torch tiers) and may prefix the op name.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

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

// The shape `shape` (of `ref_name`: the operands so far) and `sizes` (of
// `name`) broadcast to, by numpy's and aten's rule (dims aligned from the
// right; each pair equal or one of them 1); else "b: expected a shape that
// broadcasts with [3] (a), got [4]".
template <typename Sizes>
std::vector<std::int64_t> broadcast_shape(const char* name, const std::vector<std::int64_t>& shape,
                                          const char* ref_name, const Sizes& sizes,
                                          ShapeStyle style = ShapeStyle::List) {
  const std::size_t n = static_cast<std::size_t>(sizes.size());
  const std::size_t rank = std::max(shape.size(), n);
  std::vector<std::int64_t> joined(rank);
  for (std::size_t k = 0; k < rank; ++k) {
    const std::int64_t x = k < rank - shape.size() ? 1 : shape[k - (rank - shape.size())];
    const std::int64_t y = k < rank - n ? 1 : static_cast<std::int64_t>(sizes[k - (rank - n)]);
    if (x != y && x != 1 && y != 1) {
      fail(name, ": expected a shape that broadcasts with ", shape_str(shape, style), " (", ref_name,
           "), got ", shape_str(sizes, style));
    }
    joined[k] = x == 1 ? y : x;
  }
  return joined;
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

// Whether some element of `out` and some element of `in` at another index
// are one address: the only sharing an elementwise op cannot allow (element
// i of out may be element i of in: it is read before it is written).
// Exact, not "the byte ranges meet": interleaved layouts (out = base[::2],
// in = base[1::2]) or column blocks of one matrix share no element.
inline bool shares_other_element(const TensorView& out, const TensorView& in) {
  const std::int64_t item = static_cast<std::int64_t>(dtype_size(out.dtype()));
  const std::int64_t diff = static_cast<const char*>(in.data()) - static_cast<const char*>(out.data());
  if (in.dtype() != out.dtype() || diff % item != 0) return true;  // items that meet off-grid
  // Element offsets from out's element 0: out at sum(i*so), in at d + sum(j*si).
  // No solution unless gcd(strides) divides d.
  const std::int64_t d = diff / item;
  std::int64_t g = 0;
  auto gcd = [](std::int64_t a, std::int64_t b) {
    a = a < 0 ? -a : a;
    b = b < 0 ? -b : b;
    while (b) {
      const std::int64_t t = a % b;
      a = b;
      b = t;
    }
    return a;
  };
  for (int k = 0; k < out.rank(); ++k) {
    if (out.shape()[k] > 1) g = gcd(g, out.strides()[k]);
    if (in.shape()[k] > 1) g = gcd(g, in.strides()[k]);
  }
  if (g == 0 ? d != 0 : d % g != 0) return false;
  // Otherwise enumerate: out's offsets that fall inside in's reach, sorted,
  // then each element of in looked up there (memory: one int64 per element
  // of out in the window). Only layouts whose byte ranges meet without being
  // the same get here.
  const Reach ro = reach(out.shape(), out.strides());
  const Reach ri = reach(in.shape(), in.strides());
  const std::int64_t lo = std::max(ro.lo, d + ri.lo), hi = std::min(ro.hi, d + ri.hi);
  if (lo > hi) return false;
  std::vector<std::int64_t> offsets;
  auto each = [](const TensorView& v, std::int64_t base, auto&& fn) {
    const int rank = v.rank();
    std::int64_t index[kMaxRank] = {};
    std::int64_t pos = base;
    for (std::int64_t linear = 0, n = v.numel(); linear < n; ++linear) {
      fn(pos, linear);
      for (int k = rank - 1; k >= 0; --k) {
        if (++index[k] < v.shape()[k]) {
          pos += v.strides()[k];
          break;
        }
        pos -= (v.shape()[k] - 1) * v.strides()[k];
        index[k] = 0;
      }
    }
  };
  each(out, 0, [&](std::int64_t pos, std::int64_t) {
    if (pos >= lo && pos <= hi) offsets.push_back(pos);
  });
  std::sort(offsets.begin(), offsets.end());
  bool shared = false;
  const bool same_shape = out.shape() == in.shape();
  each(in, d, [&](std::int64_t pos, std::int64_t linear) {
    if (shared || pos < lo || pos > hi || !std::binary_search(offsets.begin(), offsets.end(), pos)) return;
    // Out has this address; harmless only if it is out's element `linear`.
    std::int64_t at = 0, rest = linear;
    for (int k = out.rank() - 1; k >= 0; --k) {
      at += (rest % out.shape()[k]) * out.strides()[k];
      rest /= out.shape()[k];
    }
    shared = !same_shape || at != pos;
  });
  return shared;
}

// `out` may be exactly an input (in place) or share no element with it; any
// other sharing could read an element after it was overwritten, so it is
// refused (before anything is written).
inline void no_partial_overlap(const TensorView& out, const TensorView& in, const char* in_name) {
  const Span o = span_of(out), i = span_of(in);
  if (o.lo == nullptr || i.lo == nullptr) return;
  const bool disjoint = o.hi <= i.lo || i.hi <= o.lo;
  if (disjoint || same_layout(out, in)) return;
  check(!shares_other_element(out, in), "out: overlaps input '", in_name,
        "' without being the same elements; only exact in-place (out is ", in_name,
        ") or layouts that share no element (e.g. out=x[::2] with ", in_name, "=x[1::2]) are allowed");
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
