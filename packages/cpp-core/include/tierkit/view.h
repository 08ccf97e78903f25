// TensorView: a non-owning, strided window onto typed memory. It records
// where the elements are (pointer + offset + shape + strides, strides in
// elements) and checks at construction that every element it can address
// lies inside the memory it was given. It never frees anything.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <sstream>
#include <string>
#include <type_traits>

#include "tierkit/dtype.h"
#include "tierkit/error.h"

namespace tierkit {

inline constexpr int kMaxRank = 8;

// int64 arithmetic on sizes, strides and offsets that come from outside
// (producers, users): an overflow is an InvalidArgument naming `what`,
// never signed-overflow undefined behaviour.
inline std::int64_t checked_mul(std::int64_t a, std::int64_t b, const char* what) {
  std::int64_t r;
  if (__builtin_mul_overflow(a, b, &r))
    throw InvalidArgument(detail::concat(what, ": ", a, " * ", b, " overflows int64"));
  return r;
}
inline std::int64_t checked_add(std::int64_t a, std::int64_t b, const char* what) {
  std::int64_t r;
  if (__builtin_add_overflow(a, b, &r))
    throw InvalidArgument(detail::concat(what, ": ", a, " + ", b, " overflows int64"));
  return r;
}

// How a shape is spelled in a message: "(2, 3)" for the bridge (numpy's
// tuples), "[2, 3]" for torch tiers (torch.Size's list).
enum class ShapeStyle { Tuple, List };

// Sizes of any integer type, or of any type that streams (torch's SymInt).
template <typename Sizes>
std::string shape_str(const Sizes& sizes, ShapeStyle style = ShapeStyle::Tuple) {
  std::string s = style == ShapeStyle::Tuple ? "(" : "[";
  std::size_t n = 0;
  for (const auto& d : sizes) {
    if (n++) s += ", ";
    if constexpr (std::is_integral_v<std::decay_t<decltype(d)>>) {
      s += std::to_string(d);
    } else {
      std::ostringstream out;
      out << d;
      s += out.str();
    }
  }
  if (style == ShapeStyle::Tuple) return s + (n == 1 ? ",)" : ")");
  return s + "]";
}

// Shape and strides of up to kMaxRank dimensions, stored inline so a view
// costs no heap allocation.
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<std::int64_t> sizes) {
    check(sizes.size() <= static_cast<std::size_t>(kMaxRank), "shape: expected rank <= ", kMaxRank,
          ", got rank ", sizes.size());
    for (std::int64_t s : sizes) push_back(s);
  }
  template <typename It>
  static Shape from_range(It first, It last) {
    Shape s;
    for (; first != last; ++first) s.push_back(static_cast<std::int64_t>(*first));
    return s;
  }

  void push_back(std::int64_t size) {
    check(rank_ < kMaxRank, "shape: expected rank <= ", kMaxRank, ", got more");
    dims_[rank_++] = size;
  }
  int rank() const { return rank_; }
  std::int64_t operator[](int i) const { return dims_[i]; }
  std::int64_t& operator[](int i) { return dims_[i]; }
  const std::int64_t* begin() const { return dims_.data(); }
  const std::int64_t* end() const { return dims_.data() + rank_; }
  std::size_t size() const { return static_cast<std::size_t>(rank_); }

  // Zero if any size is zero (whatever the others), else the checked product.
  std::int64_t numel() const {
    for (int i = 0; i < rank_; ++i)
      if (dims_[i] == 0) return 0;
    std::int64_t n = 1;
    for (int i = 0; i < rank_; ++i) n = checked_mul(n, dims_[i], "shape: element count");
    return n;
  }
  bool operator==(const Shape& o) const {
    if (rank_ != o.rank_) return false;
    for (int i = 0; i < rank_; ++i)
      if (dims_[i] != o.dims_[i]) return false;
    return true;
  }
  bool operator!=(const Shape& o) const { return !(*this == o); }

  // "(2, 3)" — the form error messages use.
  std::string str() const { return shape_str(*this); }

  // Row-major (C-order) strides for these sizes.
  Shape contiguous_strides() const {
    Shape st;
    st.rank_ = rank_;
    std::int64_t acc = 1;
    for (int i = rank_ - 1; i >= 0; --i) {
      st.dims_[i] = acc;
      acc = checked_mul(acc, dims_[i] > 1 ? dims_[i] : 1, "shape: contiguous stride");
    }
    return st;
  }

 private:
  std::array<std::int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

// How far a strided layout reaches from its element (0, ..., 0), in
// elements: the lowest and highest offsets any element has. The one bounds
// helper every tier uses (views, overlap checks, borrowed buffers).
struct Reach {
  std::int64_t lo = 0;
  std::int64_t hi = 0;
};
inline Reach reach(const Shape& shape, const Shape& strides) {
  Reach r;
  if (shape.numel() == 0) return r;
  for (int i = 0; i < shape.rank(); ++i) {
    const std::int64_t step = checked_mul(shape[i] - 1, strides[i], "strides: reach");
    std::int64_t& end = step < 0 ? r.lo : r.hi;
    end = checked_add(end, step, "strides: reach");
  }
  return r;
}

class TensorView {
 public:
  TensorView() = default;

  // `base` points at element 0 of the memory; `capacity` is how many elements
  // of `dtype` it holds. Element i0..in lives at base[offset + sum(i_k * stride_k)].
  TensorView(void* base, std::int64_t capacity, DType dtype, Shape shape, Shape strides,
             std::int64_t offset = 0)
      : base_(base), dtype_(dtype), shape_(shape), strides_(strides), offset_(offset) {
    if (shape.rank() != strides.rank()) {
      fail("strides: expected rank ", shape.rank(), " to match shape ", shape.str(), ", got rank ",
           strides.rank());
    }
    for (int i = 0; i < shape.rank(); ++i)
      if (shape[i] < 0) fail("shape: expected non-negative sizes, got ", shape.str());
    check(capacity >= 0, "capacity: expected >= 0, got ", capacity);
    check(offset >= 0, "offset: expected >= 0, got ", offset);
    if (numel() == 0) return;  // addresses nothing; any strides are fine
    check(base != nullptr, "data: expected non-null pointer for ", numel(), " elements");
    const Reach r = reach(shape, strides);
    const std::int64_t lo = checked_add(offset, r.lo, "offset"), hi = checked_add(offset, r.hi, "offset");
    if (lo < 0 || hi >= capacity) {
      fail("view: shape ", shape.str(), " strides ", strides.str(), " offset ", offset, " reaches elements [",
           lo, ", ", hi, "] outside the ", capacity, " available");
    }
  }

  // A C-contiguous view over the first shape.numel() elements.
  static TensorView contiguous(void* base, std::int64_t capacity, DType dtype, Shape shape) {
    return TensorView(base, capacity, dtype, shape, shape.contiguous_strides());
  }

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  std::int64_t offset() const { return offset_; }
  int rank() const { return shape_.rank(); }
  std::int64_t numel() const { return shape_.numel(); }
  void* base() const { return base_; }
  // Address of element (0, ..., 0).
  void* data() const {
    return static_cast<char*>(base_) + offset_ * static_cast<std::int64_t>(dtype_size(dtype_));
  }

  // C-contiguous: strides equal the row-major ones, ignoring size-1 dims.
  bool is_contiguous() const {
    std::int64_t expected = 1;
    for (int i = rank() - 1; i >= 0; --i) {
      if (shape_[i] == 1) continue;
      if (strides_[i] != expected) return false;
      expected *= shape_[i];
    }
    return true;
  }

  // Typed element access; T must match dtype() and the rank must match.
  template <typename T>
  T& at(std::initializer_list<std::int64_t> index) const {
    check<DTypeError>(dtype_of_v<T> == dtype_, "at: view holds ", dtype_name(dtype_), ", accessed as ",
                      dtype_name(dtype_of_v<T>));
    check(static_cast<int>(index.size()) == rank(), "index: expected ", rank(), " indices, got ",
          index.size());
    std::int64_t pos = offset_;
    int d = 0;
    for (std::int64_t i : index) {
      check(i >= 0 && i < shape_[d], "index: ", i, " out of range for dimension ", d, " of size ", shape_[d]);
      pos += i * strides_[d++];
    }
    return static_cast<T*>(base_)[pos];
  }

 private:
  void* base_ = nullptr;
  DType dtype_ = DType::Float32;
  Shape shape_;
  Shape strides_;
  std::int64_t offset_ = 0;
};

}  // namespace tierkit
