// CUDA kernels for the tierkit ops (schemas are defined by tierkit-torch).
// Host side: the same argument checks as the CPU kernels, a device guard for
// the inputs' GPU, the current stream, the output, then the launcher.
#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "launch.h"
#include "tierkit_torch/checks.h"

namespace tierkit_cuda {
namespace {

constexpr auto kCUDA = c10::DeviceType::CUDA;

Layout layout_of(const at::Tensor& t) {
  Layout l{};
  l.rank = static_cast<int>(t.dim());
  for (int d = 0; d < l.rank; ++d) {
    l.sizes[d] = t.size(d);
    l.strides[d] = t.stride(d);
  }
  return l;
}

// Tensors deeper than the kernels' layout limit are made contiguous once.
at::Tensor shallow(const at::Tensor& t) { return t.dim() > kMaxRank ? t.contiguous() : t; }

// Fills the operands and calls `launch(dtype, operands, stream)` on a's device.
template <typename Launch>
void run(const at::Tensor& a, const at::Tensor* b, const at::Tensor& out, const Launch& launch) {
  const c10::cuda::CUDAGuard guard(a.device());
  const at::Tensor ca = shallow(a);
  const at::Tensor cb = b ? shallow(*b) : at::Tensor();
  Operands o{};
  o.a = ca.data_ptr();
  o.b = b ? cb.data_ptr() : nullptr;
  o.out = out.data_ptr();
  o.numel = out.numel();
  // Operands sharing one dense layout (contiguous, channels_last, transposed)
  // are flat memory for an elementwise op: the vectorized contiguous loop.
  o.contiguous =
      b ? tierkit_torch::same_dense_layout({&ca, &cb, &out}) : tierkit_torch::same_dense_layout({&ca, &out});
  if (!o.contiguous) {
    TORCH_CHECK(out.dim() <= kMaxRank, "tierkit (CUDA): out: at most ", kMaxRank,
                " dimensions when not contiguous, got ", out.dim());
    o.la = layout_of(ca);
    if (b) o.lb = layout_of(cb);
    o.lout = layout_of(out);
  }
  launch(tierkit_torch::core_dtype_info(a.scalar_type())->dtype, o,
         c10::cuda::getCurrentCUDAStream(a.get_device()).stream());
}

// A deep non-contiguous result is computed into this, then copied: a fresh
// output keeps aten's layout, which at that rank the kernels cannot walk.
at::Tensor contiguous_like(const at::Tensor& t) {
  return at::empty(t.sizes(), t.options().memory_format(c10::MemoryFormat::Contiguous));
}

// Checks, then `launch` into `out` (a fresh tensor laid out like aten's
// result when `out` is null). `name` prefixes every error.
// Operands of other shapes or dtypes are first resolved by aten's rules
// (promotion, broadcasting: tierkit_torch/checks.h), as on the CPU.
template <typename Launch>
at::Tensor binary(const char* name, const at::Tensor& a, const at::Tensor& b, const at::Tensor* out,
                  const Launch& launch, bool float_scalar = false, bool resize_out = true) {
  if (!tierkit_torch::plain_call({&a, &b}) || (out && out->scalar_type() != a.scalar_type())) {
    const auto p =
        tierkit_torch::resolve_pointwise<2>(name, {&a, &b}, {"a", "b"}, float_scalar, out, kCUDA, resize_out);
    at::Tensor target = p.target;
    binary(name, p.in[0], p.in[1], &target, launch, float_scalar, false);
    p.finish();
    return p.result;
  }
  tierkit_torch::check_first(name, a, "a", kCUDA);
  tierkit_torch::check_like(name, b, "b", a, "a");
  at::Tensor result;
  if (out) {
    tierkit_torch::prepare_out_for(name, *out, a.scalar_type(), a.sym_sizes(), a.device(), resize_out);
    tierkit_torch::check_out(name, *out, {{&a, "a"}, {&b, "b"}});
    result = *out;
  } else {
    result = tierkit_torch::new_output({&a, &b});
  }
  if (result.dim() > kMaxRank && !result.is_contiguous()) {  // rare: compute contiguous, then copy in
    at::Tensor tmp = contiguous_like(result);
    binary(name, a, b, &tmp, launch);
    result.copy_(tmp);
    return result;
  }
  run(a, &b, result, launch);
  return result;
}

at::Tensor scale_shift_into(const at::Tensor& x, double alpha, double beta, const at::Tensor* out) {
  const char* name = out ? "tierkit::scale_shift.out" : "tierkit::scale_shift";
  if (!tierkit_torch::plain_call({&x}) || (out && out->scalar_type() != x.scalar_type())) {
    const auto p = tierkit_torch::resolve_pointwise<1>(name, {&x}, {"x"}, /*float_scalar=*/true, out, kCUDA);
    at::Tensor target = p.target;
    scale_shift_into(p.in[0], alpha, beta, &target);
    p.finish();
    return p.result;
  }
  tierkit_torch::check_first(name, x, "x", kCUDA);
  at::Tensor result;
  if (out) {
    tierkit_torch::prepare_out_for(name, *out, x.scalar_type(), x.sym_sizes(), x.device());
    tierkit_torch::check_out(name, *out, {{&x, "x"}});
    result = *out;
  } else {
    result = tierkit_torch::new_output({&x});
  }
  if (result.dim() > kMaxRank && !result.is_contiguous()) {
    at::Tensor tmp = contiguous_like(result);
    scale_shift_into(x, alpha, beta, &tmp);
    result.copy_(tmp);
    return result;
  }
  run(x, nullptr, result,
      [=](DType t, const Operands& o, cudaStream_t s) { launch_scale_shift(t, o, alpha, beta, s); });
  return result;
}

auto muladd_launch(double c) {
  return [c](DType t, const Operands& o, cudaStream_t s) { launch_muladd(t, o, c, s); };
}

at::Tensor custom_add_cuda(const at::Tensor& a, const at::Tensor& b) {
  return binary("tierkit::custom_add", a, b, nullptr, launch_add);
}
at::Tensor mul_cuda(const at::Tensor& a, const at::Tensor& b) {
  return binary("tierkit::mul", a, b, nullptr, launch_mul);
}
at::Tensor muladd_cuda(const at::Tensor& a, const at::Tensor& b, double c) {
  return binary("tierkit::muladd", a, b, nullptr, muladd_launch(c), /*float_scalar=*/true);
}
at::Tensor scale_shift_cuda(const at::Tensor& x, double alpha, double beta) {
  return scale_shift_into(x, alpha, beta, nullptr);
}

at::Tensor& custom_add_out_cuda(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  binary("tierkit::custom_add.out", a, b, &out, launch_add);
  return out;
}
at::Tensor& mul_out_cuda(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  binary("tierkit::mul.out", a, b, &out, launch_mul);
  return out;
}
at::Tensor& muladd_out_cuda(const at::Tensor& a, const at::Tensor& b, double c, at::Tensor& out) {
  binary("tierkit::muladd.out", a, b, &out, muladd_launch(c), /*float_scalar=*/true);
  return out;
}
at::Tensor& scale_shift_out_cuda(const at::Tensor& x, double alpha, double beta, at::Tensor& out) {
  scale_shift_into(x, alpha, beta, &out);
  return out;
}

// add_out never resizes: `out` must already have the result's shape.
at::Tensor& add_out_cuda(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  binary("tierkit::add_out", a, b, &out, launch_add, /*float_scalar=*/false, /*resize_out=*/false);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(tierkit, CUDA, m) {
  m.impl("custom_add", &custom_add_cuda);
  m.impl("mul", &mul_cuda);
  m.impl("scale_shift", &scale_shift_cuda);
  m.impl("muladd", &muladd_cuda);
  m.impl("add_out", &add_out_cuda);
  m.impl("custom_add.out", &custom_add_out_cuda);
  m.impl("mul.out", &mul_out_cuda);
  m.impl("scale_shift.out", &scale_shift_out_cuda);
  m.impl("muladd.out", &muladd_out_cuda);
}

}  // namespace tierkit_cuda
