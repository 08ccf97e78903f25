// CUDA kernels for every op of the op table (schemas are defined by
// tierkit-torch), one template instantiated per entry.
// Host side: the same argument checks as the CPU kernels, a device guard for
// the inputs' GPU, the current stream, the output, then the launcher.
#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "launch.h"
#include "tierkit/op_table.h"
#include "tierkit_torch/checks.h"
#include "tierkit_torch/op_signatures.h"

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

// One op of the op table on CUDA: checks, then its launcher into `out` (a
// fresh tensor laid out like aten's result when there is none). Operands of
// other shapes or dtypes are first resolved by aten's rules (promotion,
// broadcasting: tierkit_torch/checks.h), as on the CPU, and the kernel runs
// on the resolved operands directly.
template <typename OpInfo, OpId Id>
struct CudaPointwise {
  using Info = OpInfo;
  static constexpr std::size_t N = tierkit_torch::kTensors<Info>;
  static_assert(N == 1 || N == 2, "the CUDA kernels take one or two inputs");

  static void launch(const tierkit_torch::TensorArgs<Info>& in, const tierkit_torch::ScalarArgs<Info>& s,
                     const at::Tensor& result) {
    const auto go = [&](DType t, const Operands& o, cudaStream_t stream) {
      launch_pointwise(Id, t, o, s.data(), stream);
    };
    if (result.dim() > kMaxRank && !result.is_contiguous()) {  // rare: compute contiguous, then copy in
      at::Tensor tmp = contiguous_like(result);
      run(*in[0], N == 2 ? in[N - 1] : nullptr, tmp, go);
      result.copy_(tmp);
      return;
    }
    run(*in[0], N == 2 ? in[N - 1] : nullptr, result, go);
  }

  static at::Tensor compute(const char* name, const tierkit_torch::TensorArgs<Info>& in,
                            const tierkit_torch::ScalarArgs<Info>& s, const at::Tensor* out,
                            bool resize_out) {
    const bool float_scalar = tierkit_torch::kScalars<Info> > 0;  // a Python float promotes integers
    if (!tierkit_torch::plain_call(in) || (out && out->scalar_type() != in[0]->scalar_type())) {
      const auto p =
          tierkit_torch::resolve_pointwise<N>(name, in, Info::tensors, float_scalar, out, kCUDA, resize_out);
      tierkit_torch::TensorArgs<Info> resolved;
      for (std::size_t i = 0; i < N; ++i) resolved[i] = &p.in[i];
      launch(resolved, s, p.target);
      p.finish();
      return p.result;
    }
    tierkit_torch::check_first(name, *in[0], Info::tensors[0], kCUDA);
    for (std::size_t i = 1; i < N; ++i)
      tierkit_torch::check_like(name, *in[i], Info::tensors[i], *in[0], Info::tensors[0]);
    at::Tensor result;
    if (out) {
      tierkit_torch::prepare_out_for(name, *out, in[0]->scalar_type(), in[0]->sym_sizes(), in[0]->device(),
                                     resize_out);
      tierkit_torch::check_out<N>(name, *out, in, Info::tensors);
      result = *out;
    } else {
      result = tierkit_torch::new_output(in);
    }
    launch(in, s, result);
    return result;
  }
  static at::Tensor functional(const tierkit_torch::TensorArgs<Info>& in,
                               const tierkit_torch::ScalarArgs<Info>& s) {
    return compute(tierkit_torch::qualified_name<Info>(false), in, s, nullptr, true);
  }
  static at::Tensor& out(const tierkit_torch::TensorArgs<Info>& in, const tierkit_torch::ScalarArgs<Info>& s,
                         at::Tensor& out, const char* name, bool resize) {
    compute(name, in, s, &out, resize);
    return out;
  }
};

#define TIERKIT_CUDA_KERNEL(name, Functor, n_tensors, n_scalars) \
  using name##_kernel = tierkit_torch::Signatures<CudaPointwise<tierkit::op_info::name, OpId::name>>;
TIERKIT_POINTWISE_OPS(TIERKIT_CUDA_KERNEL)
#undef TIERKIT_CUDA_KERNEL

}  // namespace

TORCH_LIBRARY_IMPL(tierkit, CUDA, m) {
#define TIERKIT_CUDA_IMPL(name, Functor, n_tensors, n_scalars) \
  m.impl(#name, &name##_kernel::functional);                   \
  m.impl(#name ".out", &name##_kernel::out);
  TIERKIT_POINTWISE_OPS(TIERKIT_CUDA_IMPL)
#undef TIERKIT_CUDA_IMPL
#define TIERKIT_CUDA_WRITER(name, of, Functor) m.impl(#name, &of##_kernel::writer<tierkit_torch::k_##name>);
  TIERKIT_OUT_WRITERS(TIERKIT_CUDA_WRITER)
#undef TIERKIT_CUDA_WRITER
}

}  // namespace tierkit_cuda
