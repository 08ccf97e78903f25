// CPU kernels for every tierkit op: checks, then core's kernels on views of
// the tensors' memory, split by at::parallel_for. Operands that share one
// dense layout (contiguous, channels_last, transposed...) are seen as flat
// memory and take core's vectorized loop in one pass; others are walked in
// place by their strides (no .contiguous() copy: measured slower here).
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <array>
#include <tuple>

#include "tierkit/huge_pages.h"
#include "tierkit_torch/checks.h"
#include "view.h"

namespace tierkit_torch {
namespace {

constexpr auto kCPU = c10::DeviceType::CPU;

at::Tensor fresh_output(std::initializer_list<const at::Tensor*> inputs) {
  at::Tensor out = new_output(inputs);
  // Fresh and untouched: for large outputs, page faults cost more than the
  // kernel; huge pages make them 512x fewer (see tierkit/huge_pages.h).
  tierkit::advise_huge_pages(out.data_ptr(), out.nbytes());
  return out;
}

// The dense fast path of run_views: kernel.flat(in..., out, n) on chunks.
template <std::size_t N, typename Kernel, std::size_t... I>
void run_flat(const std::array<at::Tensor, N>& t, const Kernel& kernel, std::index_sequence<I...>) {
  const int64_t n = t[N - 1].numel();
  tierkit::dispatch_accepted(to_core_dtype(t[0].scalar_type()), "a", [&](auto tag) {
    using T = decltype(tag);
    const std::array<const T*, N - 1> in = {static_cast<const T*>(t[I].const_data_ptr())...};
    T* out = static_cast<T*>(t[N - 1].mutable_data_ptr());
    at::parallel_for(0, n, kAtenGrain,
                     [&](int64_t lo, int64_t hi) { kernel.flat((in[I] + lo)..., out + lo, hi - lo); });
  });
}

// Runs `kernel` over `t` (the inputs, then the output last). Operands that
// share one dense layout are flat memory at any rank: core's pointer loop
// runs on chunks split by at::parallel_for, with no views to build and
// nothing to check twice (the checks above are the whole argument contract;
// core's view entry points would repeat them: measured 3.7k instructions a
// call at n=1e3 before, 1.2k after). Otherwise core's view kernels walk the
// strides, which core holds up to kMaxRank dims, so deeper operands go
// through contiguous copies (rare).
template <std::size_t N, typename Kernel>
void run_views(std::array<at::Tensor, N> t, const Kernel& kernel) {
  // One pass over all operands (each one's density computed once).
  const bool flat = std::apply([](const auto&... x) { return same_dense_layout({&x...}); }, t);
  if (flat) return run_flat(t, kernel, std::make_index_sequence<N - 1>{});
  const auto each = [&](auto view_of) {
    std::array<tierkit::TensorView, N> v;
    for (std::size_t i = 0; i < N; ++i) v[i] = view_of(t[i]);
    std::apply([&](const auto&... views) { kernel.views(views...); }, v);
  };
  at::Tensor& out = t[N - 1];
  if (out.dim() <= tierkit::kMaxRank) return each(as_view);
  const at::Tensor result = out;
  for (std::size_t i = 0; i + 1 < N; ++i) t[i] = t[i].contiguous();
  if (!out.is_contiguous())
    out = at::empty(out.sizes(), out.options().memory_format(c10::MemoryFormat::Contiguous));
  each(as_flat_view);
  if (!out.is_same(result)) result.copy_(out);
}

// Each op as core's view kernel and core's pointer loop (run_views picks).
struct AddKernel {
  void views(const tierkit::TensorView& a, const tierkit::TensorView& b, const tierkit::TensorView& o) const {
    tierkit::kernels::add(a, b, o, AtenRunner{});
  }
  template <typename T>
  void flat(const T* a, const T* b, T* o, int64_t n) const {
    tierkit::kernels::add(a, b, o, n);
  }
};
struct MulKernel {
  void views(const tierkit::TensorView& a, const tierkit::TensorView& b, const tierkit::TensorView& o) const {
    tierkit::kernels::mul(a, b, o, AtenRunner{});
  }
  template <typename T>
  void flat(const T* a, const T* b, T* o, int64_t n) const {
    tierkit::kernels::mul(a, b, o, n);
  }
};
struct MulAddKernel {
  double c;
  void views(const tierkit::TensorView& a, const tierkit::TensorView& b, const tierkit::TensorView& o) const {
    tierkit::kernels::muladd(a, b, c, o, AtenRunner{});
  }
  template <typename T>
  void flat(const T* a, const T* b, T* o, int64_t n) const {
    tierkit::kernels::muladd(a, b, static_cast<tierkit::compute_t<T>>(c), o, n);
  }
};
struct ScaleShiftKernel {
  double alpha, beta;
  void views(const tierkit::TensorView& x, const tierkit::TensorView& o) const {
    tierkit::kernels::scale_shift(x, alpha, beta, o, AtenRunner{});
  }
  template <typename T>
  void flat(const T* x, T* o, int64_t n) const {
    using C = tierkit::compute_t<T>;
    tierkit::kernels::scale_shift(x, static_cast<C>(alpha), static_cast<C>(beta), o, n);
  }
};
constexpr AddKernel kAdd;
constexpr MulKernel kMul;

// Binary ops: checks, then `kernel(view_a, view_b, view_out)` into `out`
// (a fresh tensor when `out` is null). Operands of one shape and dtype go
// straight to the kernel; others are resolved by aten's rules first
// (promotion, broadcasting: checks.h) and the kernel runs on the result.
template <typename Kernel>
at::Tensor binary(const char* op, const at::Tensor& a, const at::Tensor& b, const at::Tensor* out,
                  const Kernel& kernel, bool float_scalar = false, bool resize_out = true) {
  if (!plain_call({&a, &b}) || (out && out->scalar_type() != a.scalar_type())) {
    const auto p = resolve_pointwise<2>(op, {&a, &b}, {"a", "b"}, float_scalar, out, kCPU, resize_out);
    run_views<3>({p.in[0], p.in[1], p.target}, kernel);
    p.finish();
    return p.result;
  }
  check_first(op, a, "a", kCPU);
  check_like(op, b, "b", a, "a");
  at::Tensor result;
  if (out) {
    prepare_out_for(op, *out, a.scalar_type(), a.sym_sizes(), a.device(), resize_out);
    check_out(op, *out, {{&a, "a"}, {&b, "b"}});
    result = *out;
  } else {
    result = fresh_output({&a, &b});
  }
  run_views<3>({a, b, result}, kernel);
  return result;
}

at::Tensor scale_shift_into(const char* op, const at::Tensor& x, double alpha, double beta,
                            const at::Tensor* out) {
  const ScaleShiftKernel kernel{alpha, beta};
  if (!plain_call({&x}) || (out && out->scalar_type() != x.scalar_type())) {
    const auto p = resolve_pointwise<1>(op, {&x}, {"x"}, /*float_scalar=*/true, out, kCPU);
    run_views<2>({p.in[0], p.target}, kernel);
    p.finish();
    return p.result;
  }
  check_first(op, x, "x", kCPU);
  at::Tensor result;
  if (out) {
    prepare_out_for(op, *out, x.scalar_type(), x.sym_sizes(), x.device());
    check_out(op, *out, {{&x, "x"}});
    result = *out;
  } else {
    result = fresh_output({&x});
  }
  run_views<2>({x, result}, kernel);
  return result;
}

at::Tensor custom_add_cpu(const at::Tensor& a, const at::Tensor& b) {
  return binary("tierkit::custom_add", a, b, nullptr, kAdd);
}
at::Tensor mul_cpu(const at::Tensor& a, const at::Tensor& b) {
  return binary("tierkit::mul", a, b, nullptr, kMul);
}
at::Tensor scale_shift_cpu(const at::Tensor& x, double alpha, double beta) {
  return scale_shift_into("tierkit::scale_shift", x, alpha, beta, nullptr);
}
at::Tensor muladd_cpu(const at::Tensor& a, const at::Tensor& b, double c) {
  return binary("tierkit::muladd", a, b, nullptr, MulAddKernel{c}, /*float_scalar=*/true);
}

at::Tensor& custom_add_out_cpu(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  binary("tierkit::custom_add.out", a, b, &out, kAdd);
  return out;
}
at::Tensor& mul_out_cpu(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  binary("tierkit::mul.out", a, b, &out, kMul);
  return out;
}
at::Tensor& scale_shift_out_cpu(const at::Tensor& x, double alpha, double beta, at::Tensor& out) {
  scale_shift_into("tierkit::scale_shift.out", x, alpha, beta, &out);
  return out;
}
at::Tensor& muladd_out_cpu(const at::Tensor& a, const at::Tensor& b, double c, at::Tensor& out) {
  binary("tierkit::muladd.out", a, b, &out, MulAddKernel{c}, /*float_scalar=*/true);
  return out;
}

// add_out never resizes: `out` must already have the result's shape.
at::Tensor& add_out_cpu(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  binary("tierkit::add_out", a, b, &out, kAdd, /*float_scalar=*/false, /*resize_out=*/false);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(tierkit, CPU, m) {
  m.impl("custom_add", &custom_add_cpu);
  m.impl("mul", &mul_cpu);
  m.impl("scale_shift", &scale_shift_cpu);
  m.impl("muladd", &muladd_cpu);
  m.impl("add_out", &add_out_cpu);
  m.impl("custom_add.out", &custom_add_out_cpu);
  m.impl("mul.out", &mul_out_cpu);
  m.impl("scale_shift.out", &scale_shift_out_cpu);
  m.impl("muladd.out", &muladd_out_cpu);
}

}  // namespace tierkit_torch
