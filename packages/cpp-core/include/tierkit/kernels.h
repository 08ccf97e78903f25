// Elementwise kernels, templated on the element type.
//
// Two layers:
//  * contiguous range loops (`add(a, b, out, n)` ...) written so the compiler
//    vectorizes them for float/double: no loop-carried dependency, unit
//    stride, and `omp simd` because `out` may alias an input exactly;
//  * TensorView entry points that check shapes, dtypes and overlap, take the
//    contiguous loop when every operand is contiguous, walk strides
//    otherwise, and split the work over the shared ThreadPool.
// 16-bit floats compute in float and round once on store.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "tierkit/dtype.h"
#include "tierkit/error.h"
#include "tierkit/parallel.h"
#include "tierkit/view.h"

// `omp simd` asserts no loop-carried dependency (true even when out is an
// input: element i only reads element i) and, with -fopenmp-simd (which the
// tierkit::core CMake target adds), makes GCC vectorize at -O2 too, where its
// "very cheap" cost model would otherwise refuse loops that need a tail.
#if defined(__GNUC__) || defined(__clang__)
#define TIERKIT_VECTORIZE_LOOP _Pragma("omp simd")
#else
#define TIERKIT_VECTORIZE_LOOP
#endif

namespace tierkit::kernels {

// ---- contiguous loops ------------------------------------------------------

// The operations, written once over the compute type C.
struct AddOp {
  template <typename C>
  C operator()(C a, C b) const {
    return a + b;
  }
};
struct MulOp {
  template <typename C>
  C operator()(C a, C b) const {
    return a * b;
  }
};
template <typename C>
struct ScaleShiftOp {
  C alpha, beta;
  C operator()(C x) const { return alpha * x + beta; }
};
template <typename C>
struct MulAddOp {
  C c;
  C operator()(C a, C b) const { return a * b + c; }
};

#define TIERKIT_MAP_LOOP  \
  using C = compute_t<T>; \
  TIERKIT_VECTORIZE_LOOP  \
  for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(op(C(in[i])...));

// Builds for baseline x86-64 get SSE2 only; the same loop compiled for AVX2
// and picked at run time moves twice the bytes per instruction (measured on
// 1e6 in-cache floats: 392 us with SSE2, 198 us with AVX2). Only "avx2", not
// "fma": contracting a*x+b into one rounding would change results.
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__) && !defined(__AVX2__) && \
    !defined(__CUDACC__)
#define TIERKIT_AVX2_DISPATCH 1
namespace detail {
inline bool cpu_has_avx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}
template <typename T, typename Op, typename... In>
__attribute__((target("avx2"))) void map_contiguous_avx2(const Op& op, T* out, std::int64_t n,
                                                         const In*... in) {
  TIERKIT_MAP_LOOP
}
}  // namespace detail
#endif

// out[i] = op(in[i]...) over n contiguous elements.
template <typename T, typename Op, typename... In>
void map_contiguous(const Op& op, T* out, std::int64_t n, const In*... in) {
#ifdef TIERKIT_AVX2_DISPATCH
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    if (detail::cpu_has_avx2()) return detail::map_contiguous_avx2(op, out, n, in...);
  }
#endif
  TIERKIT_MAP_LOOP
}
#undef TIERKIT_MAP_LOOP

template <typename T>
void add(const T* a, const T* b, T* out, std::int64_t n) {
  map_contiguous(AddOp{}, out, n, a, b);
}
template <typename T>
void mul(const T* a, const T* b, T* out, std::int64_t n) {
  map_contiguous(MulOp{}, out, n, a, b);
}
template <typename T>
void scale_shift(const T* x, compute_t<T> alpha, compute_t<T> beta, T* out, std::int64_t n) {
  map_contiguous(ScaleShiftOp<compute_t<T>>{alpha, beta}, out, n, x);
}
template <typename T>
void muladd(const T* a, const T* b, compute_t<T> c, T* out, std::int64_t n) {
  map_contiguous(MulAddOp<compute_t<T>>{c}, out, n, a, b);
}

// ---- checks shared by every view entry point -------------------------------

namespace detail {

// Byte range [lo, hi) a view can touch; empty views touch nothing.
struct Span {
  const char* lo = nullptr;
  const char* hi = nullptr;
};
inline Span span_of(const TensorView& v) {
  if (v.numel() == 0) return {};
  const std::int64_t item = static_cast<std::int64_t>(dtype_size(v.dtype()));
  std::int64_t lo = 0, hi = 0;
  for (int i = 0; i < v.rank(); ++i) {
    const std::int64_t reach = (v.shape()[i] - 1) * v.strides()[i];
    (reach < 0 ? lo : hi) += reach;
  }
  const char* p = static_cast<const char*>(v.data());
  return {p + lo * item, p + (hi + 1) * item};
}

inline bool same_layout(const TensorView& a, const TensorView& b) {
  return a.data() == b.data() && a.dtype() == b.dtype() && a.shape() == b.shape() &&
         a.strides() == b.strides();
}

// `out` may be exactly an input (in place); any other sharing of bytes could
// read an element after it was overwritten, so it is refused.
inline void check_no_partial_overlap(const TensorView& out, const TensorView& in, const char* in_name) {
  const Span o = span_of(out), i = span_of(in);
  if (o.lo == nullptr || i.lo == nullptr) return;
  const bool disjoint = o.hi <= i.lo || i.hi <= o.lo;
  check(disjoint || same_layout(out, in), "out: overlaps input '", in_name,
        "' without being the same elements; only exact in-place (out is ", in_name, ") is allowed");
}

inline void check_operand(const TensorView& out, const TensorView& in, const char* in_name) {
  check<DTypeError>(in.dtype() == out.dtype(), in_name, ": expected dtype ", dtype_name(out.dtype()),
                    " (same as out), got ", dtype_name(in.dtype()));
  check(in.shape() == out.shape(), in_name, ": expected shape ", out.shape().str(), " (same as out), got ",
        in.shape().str());
  check_no_partial_overlap(out, in, in_name);
}

// A zero stride in a dimension of size > 1 makes several elements of `out`
// one address: writes would race and the result would depend on the order.
inline void check_writable_layout(const TensorView& out) {
  if (out.numel() == 0) return;  // nothing is written; numpy gives empty arrays zero strides
  for (int d = 0; d < out.rank(); ++d) {
    check(out.shape()[d] <= 1 || out.strides()[d] != 0, "out: has stride 0 in dimension ", d, " (size ",
          out.shape()[d], "), so several elements share one address; give a tensor with distinct elements");
  }
}

inline void check_floating(const TensorView& out) {
  check<DTypeError>(is_floating(out.dtype()),
                    "out: expected a floating dtype (float32, float64, float16, bfloat16), got ",
                    dtype_name(out.dtype()));
}

// Pointer to the element at row-major linear index `linear` of `v`.
template <typename T>
T* element_at(const TensorView& v, std::int64_t linear) {
  std::int64_t pos = 0;
  for (int d = v.rank() - 1; d >= 0; --d) {
    const std::int64_t size = v.shape()[d];
    pos += (linear % size) * v.strides()[d];
    linear /= size;
  }
  return static_cast<T*>(v.data()) + pos;
}

// Contiguous chunk [lo, hi): the vectorized loop on offset pointers.
template <typename T, typename Op, std::size_t N, std::size_t... K>
void map_chunk(const Op& op, const TensorView& out, const TensorView* const (&ins)[N], std::int64_t lo,
               std::int64_t hi, std::index_sequence<K...>) {
  map_contiguous(op, static_cast<T*>(out.data()) + lo, hi - lo,
                 (static_cast<const T*>(ins[K]->data()) + lo)...);
}

// Element-by-element over [begin, end) in row-major order of `out`, walking
// each operand's strides; runs along the innermost dimension step by stride.
template <typename T, typename Op, std::size_t N, std::size_t... K>
void map_strided(const Op& op, const TensorView& out, const TensorView* const (&ins)[N], std::int64_t begin,
                 std::int64_t end, std::index_sequence<K...>) {
  using C = compute_t<T>;
  const int rank = out.rank();
  const std::int64_t inner = rank == 0 ? 1 : out.shape()[rank - 1];
  const std::int64_t so = rank == 0 ? 0 : out.strides()[rank - 1];
  const std::int64_t si[N] = {(rank == 0 ? 0 : ins[K]->strides()[rank - 1])...};
  for (std::int64_t i = begin; i < end;) {
    const std::int64_t count = std::min(inner - i % inner, end - i);
    T* o = element_at<T>(out, i);
    const T* in[N] = {element_at<const T>(*ins[K], i)...};
    for (std::int64_t k = 0; k < count; ++k) o[k * so] = static_cast<T>(op(C(in[K][k * si[K]])...));
    i += count;
  }
}

// Roughly 64 KiB of float per chunk: big enough to amortise the hand-off,
// small enough to keep two cores busy on mid-size inputs.
inline constexpr std::int64_t kGrain = 16384;

// Calls fn(T{}) for the floating type matching `t`.
template <typename Fn>
void dispatch_floating(DType t, Fn&& fn) {
  switch (t) {
    case DType::Float32: fn(float{}); return;
    case DType::Float64: fn(double{}); return;
    case DType::Float16: fn(Half{}); return;
    case DType::BFloat16: fn(BFloat16{}); return;
    default:
      throw DTypeError(tierkit::detail::concat("dtype: expected float32, float64, float16 or bfloat16, got ",
                                               dtype_name(t)));
  }
}

// The one driver behind every view entry point: check, dispatch on dtype,
// pick the contiguous or strided loop, hand the range to `run`.
// `make_op(C{})` builds the operation for compute type C.
template <std::size_t N, typename Runner, typename MakeOp>
void map_views(const TensorView& out, const TensorView* const (&ins)[N], const char* const (&names)[N],
               const Runner& run, MakeOp make_op) {
  check_floating(out);
  check_writable_layout(out);
  for (std::size_t k = 0; k < N; ++k) check_operand(out, *ins[k], names[k]);
  dispatch_floating(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const auto op = make_op(compute_t<T>{});
    bool contiguous = out.is_contiguous();
    for (std::size_t k = 0; k < N; ++k) contiguous = contiguous && ins[k]->is_contiguous();
    const auto seq = std::make_index_sequence<N>{};
    run(out.numel(), kGrain, [&](std::int64_t lo, std::int64_t hi) {
      if (contiguous) {
        map_chunk<T>(op, out, ins, lo, hi, seq);
      } else {
        map_strided<T>(op, out, ins, lo, hi, seq);
      }
    });
  });
}

}  // namespace detail

// ---- view entry points ------------------------------------------------------
// `run(n, grain, fn)` decides how [0, n) is split; fn(lo, hi) does a chunk.
// The default is core's ThreadPool; a host framework passes its own (the
// torch tier passes at::parallel_for, so torch.set_num_threads governs it).

struct PoolRunner {
  unsigned max_threads = 0;  // 0: every pool thread; 1: the calling thread only
  template <typename Fn>
  void operator()(std::int64_t n, std::int64_t grain, const Fn& fn) const {
    ThreadPool::global().parallel_for(0, n, grain, fn, max_threads);
  }
};

template <typename Runner = PoolRunner>
void add(const TensorView& a, const TensorView& b, const TensorView& out, const Runner& run = {}) {
  detail::map_views(out, {&a, &b}, {"a", "b"}, run, [](auto) { return AddOp{}; });
}

template <typename Runner = PoolRunner>
void mul(const TensorView& a, const TensorView& b, const TensorView& out, const Runner& run = {}) {
  detail::map_views(out, {&a, &b}, {"a", "b"}, run, [](auto) { return MulOp{}; });
}

template <typename Runner = PoolRunner>
void scale_shift(const TensorView& x, double alpha, double beta, const TensorView& out,
                 const Runner& run = {}) {
  detail::map_views(out, {&x}, {"x"}, run, [=](auto c) {
    using C = decltype(c);
    return ScaleShiftOp<C>{static_cast<C>(alpha), static_cast<C>(beta)};
  });
}

template <typename Runner = PoolRunner>
void muladd(const TensorView& a, const TensorView& b, double c, const TensorView& out,
            const Runner& run = {}) {
  detail::map_views(out, {&a, &b}, {"a", "b"}, run, [=](auto z) {
    using C = decltype(z);
    return MulAddOp<C>{static_cast<C>(c)};
  });
}

}  // namespace tierkit::kernels
