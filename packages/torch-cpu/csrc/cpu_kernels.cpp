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

// Runs `kernel(view...)` on core views of `t` (the inputs, then the output
// last). Operands sharing one dense layout are seen as flat memory, at any
// rank; otherwise they are walked by their strides, which core holds up to
// kMaxRank dims, so deeper ones go through contiguous copies (rare).
template <std::size_t N, typename Kernel>
void run_views(std::array<at::Tensor, N> t, const Kernel& kernel) {
  const auto each = [&](auto view_of) {
    std::array<tierkit::TensorView, N> v;
    for (std::size_t i = 0; i < N; ++i) v[i] = view_of(t[i]);
    std::apply([&](const auto&... views) { kernel(views...); }, v);
  };
  bool flat = true;
  for (const at::Tensor& x : t) flat = flat && same_dense_layout({&x, &t[0]});
  if (flat) return each(as_flat_view);
  at::Tensor& out = t[N - 1];
  if (out.dim() <= tierkit::kMaxRank) return each(as_view);
  const at::Tensor result = out;
  for (std::size_t i = 0; i + 1 < N; ++i) t[i] = t[i].contiguous();
  if (!out.is_contiguous())
    out = at::empty(out.sizes(), out.options().memory_format(c10::MemoryFormat::Contiguous));
  each(as_flat_view);
  if (!out.is_same(result)) result.copy_(out);
}

// Binary ops: checks, then `kernel(view_a, view_b, view_out)` into `out`
// (a fresh tensor when `out` is null).
template <typename Kernel>
at::Tensor binary(const char* op, const at::Tensor& a, const at::Tensor& b, const at::Tensor* out,
                  const Kernel& kernel) {
  check_first(op, a, "a", kCPU);
  check_like(op, b, "b", a, "a");
  at::Tensor result;
  if (out) {
    prepare_out(op, *out, a, "a");
    check_out(op, *out, {{&a, "a"}, {&b, "b"}});
    result = *out;
  } else {
    result = fresh_output({&a, &b});
  }
  run_views<3>({a, b, result}, kernel);
  return result;
}

at::Tensor scale_shift_into(const at::Tensor& x, double alpha, double beta, const at::Tensor* out) {
  constexpr const char* op = "tierkit::scale_shift";
  check_first(op, x, "x", kCPU);
  at::Tensor result;
  if (out) {
    prepare_out(op, *out, x, "x");
    check_out(op, *out, {{&x, "x"}});
    result = *out;
  } else {
    result = fresh_output({&x});
  }
  run_views<2>({x, result}, [&](const auto& vx, const auto& vo) {
    tierkit::kernels::scale_shift(vx, alpha, beta, vo, AtenRunner{});
  });
  return result;
}

constexpr auto kAdd = [](const auto& a, const auto& b, const auto& o) {
  tierkit::kernels::add(a, b, o, AtenRunner{});
};
constexpr auto kMul = [](const auto& a, const auto& b, const auto& o) {
  tierkit::kernels::mul(a, b, o, AtenRunner{});
};
auto muladd_kernel(double c) {
  return [c](const auto& a, const auto& b, const auto& o) {
    tierkit::kernels::muladd(a, b, c, o, AtenRunner{});
  };
}

at::Tensor custom_add_cpu(const at::Tensor& a, const at::Tensor& b) {
  return binary("tierkit::custom_add", a, b, nullptr, kAdd);
}
at::Tensor mul_cpu(const at::Tensor& a, const at::Tensor& b) {
  return binary("tierkit::mul", a, b, nullptr, kMul);
}
at::Tensor scale_shift_cpu(const at::Tensor& x, double alpha, double beta) {
  return scale_shift_into(x, alpha, beta, nullptr);
}
at::Tensor muladd_cpu(const at::Tensor& a, const at::Tensor& b, double c) {
  return binary("tierkit::muladd", a, b, nullptr, muladd_kernel(c));
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
  scale_shift_into(x, alpha, beta, &out);
  return out;
}
at::Tensor& muladd_out_cpu(const at::Tensor& a, const at::Tensor& b, double c, at::Tensor& out) {
  binary("tierkit::muladd.out", a, b, &out, muladd_kernel(c));
  return out;
}

void add_out_cpu(const at::Tensor& a, const at::Tensor& b, const at::Tensor& out) {
  check_add_out(a, b, out, kCPU);
  run_views<3>({a, b, out}, kAdd);
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
