// CPU kernels for every op of the op table (tierkit/op_table.h), one
// template instantiated per entry: checks, then core's kernels on views of
// the tensors' memory, split by at::parallel_for. Operands that share one
// dense layout (contiguous, channels_last, transposed...) are seen as flat
// memory and take core's vectorized loop in one pass; others are walked in
// place by their strides (no .contiguous() copy: measured slower here).
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <array>
#include <tuple>

#include "tierkit/op_table.h"
#include "tierkit_torch/checks.h"
#include "tierkit_torch/op_signatures.h"
#include "view.h"
#include "warm_allocator.h"

namespace tierkit_torch {
namespace {

constexpr auto kCPU = c10::DeviceType::CPU;

// The result of a plain call (inputs of one shape and dtype), laid out as
// new_output's, from warm memory (warm_allocator.h): a large fresh output
// would otherwise cost a page fault per 4 KiB, more than the kernel.
at::Tensor fresh_output(c10::ArrayRef<const at::Tensor*> inputs) {
  const at::Tensor& first = **inputs.begin();
  if (!same_dense_layout(inputs)) return new_output(inputs);
  if (first.dim() > 1 && !first.is_contiguous())
    return warm_empty_strided(first.sizes(), first.strides(), first.options());
  return warm_empty(first.sizes(), first.options());
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
                     [&](int64_t lo, int64_t hi) { kernel.flat(out + lo, hi - lo, (in[I] + lo)...); });
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
void run_views(const char* op, std::array<at::Tensor, N> t, const Kernel& kernel) {
  // One pass over all operands (each one's density computed once).
  const bool flat = std::apply([](const auto&... x) { return same_dense_layout({&x...}); }, t);
  if (flat) return run_flat(t, kernel, std::make_index_sequence<N - 1>{});
  const auto each = [&](auto view_of) {
    std::array<tierkit::TensorView, N> v;
    for (std::size_t i = 0; i < N; ++i) v[i] = view_of(t[i]);
    core_check(op, [&] { kernel.views(v); });  // core's overlap rule's message, the op named first
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

template <std::size_t N>
std::array<at::Tensor, N + 1> with_output(const std::array<at::Tensor, N>& in, const at::Tensor& out) {
  std::array<at::Tensor, N + 1> all;
  for (std::size_t i = 0; i < N; ++i) all[i] = in[i];
  all[N] = out;
  return all;
}

// An op's functor F (core's functors.h) with its float arguments, as core's
// view kernel and core's pointer loop (run_views picks).
template <template <typename> class F, std::size_t M>
struct FunctorKernel {
  std::array<double, M> scalars;
  template <std::size_t N>
  void views(const std::array<tierkit::TensorView, N>& v) const {
    std::array<const tierkit::TensorView*, N - 1> in;
    std::array<const char*, N - 1> names;
    for (std::size_t i = 0; i + 1 < N; ++i) {
      in[i] = &v[i];
      names[i] = "input";  // the checks ran on the tensors: core's repeat them and never fail
    }
    tierkit::kernels::pointwise<F>(in, names, scalars, v[N - 1], AtenRunner{});
  }
  template <typename T, typename... In>
  void flat(T* o, int64_t n, const In*... in) const {
    tierkit::kernels::map_contiguous(tierkit::kernels::make_functor<F, tierkit::compute_t<T>>(scalars), o, n,
                                     in...);
  }
};

// One op of the op table on the CPU: checks, then F into `out` (a fresh
// tensor when there is none). Operands of one shape and dtype go straight to
// the kernel; others are resolved by aten's rules first (promotion,
// broadcasting: checks.h) and the kernel runs on the result.
template <typename OpInfo, template <typename> class F>
struct CpuPointwise {
  using Info = OpInfo;
  static constexpr std::size_t N = kTensors<Info>, M = kScalars<Info>;

  static at::Tensor run(const char* op, const TensorArgs<Info>& in, const ScalarArgs<Info>& s,
                        const at::Tensor* out, bool resize_out) {
    const FunctorKernel<F, M> kernel{s};
    const bool float_scalar = M > 0;  // a Python float promotes integer tensors (aten's rule)
    if (!plain_call(in) || (out && out->scalar_type() != in[0]->scalar_type())) {
      const auto p = resolve_pointwise<N>(op, in, Info::tensors, float_scalar, out, kCPU, resize_out);
      run_views<N + 1>(op, with_output(p.in, p.target), kernel);
      p.finish();
      return p.result;
    }
    check_first(op, *in[0], Info::tensors[0], kCPU);
    for (std::size_t i = 1; i < N; ++i) check_like(op, *in[i], Info::tensors[i], *in[0], Info::tensors[0]);
    at::Tensor result;
    if (out) {
      prepare_out_for(op, *out, in[0]->scalar_type(), in[0]->sym_sizes(), in[0]->device(), resize_out);
      check_out<N>(op, *out, in, Info::tensors);
      result = *out;
    } else {
      result = fresh_output(in);
    }
    std::array<at::Tensor, N> values;
    for (std::size_t i = 0; i < N; ++i) values[i] = *in[i];
    run_views<N + 1>(op, with_output(values, result), kernel);
    return result;
  }
  static at::Tensor functional(const TensorArgs<Info>& in, const ScalarArgs<Info>& s) {
    return run(qualified_name<Info>(false), in, s, nullptr, true);
  }
  static at::Tensor& out(const TensorArgs<Info>& in, const ScalarArgs<Info>& s, at::Tensor& out,
                         const char* op, bool resize) {
    run(op, in, s, &out, resize);
    return out;
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(tierkit, CPU, m) {
#define TIERKIT_CPU_IMPL(name, Functor, n_tensors, n_scalars)                                           \
  m.impl(#name,                                                                                         \
         &Signatures<CpuPointwise<tierkit::op_info::name, tierkit::kernels::Functor##Op>>::functional); \
  m.impl(#name ".out", &Signatures<CpuPointwise<tierkit::op_info::name, tierkit::kernels::Functor##Op>>::out);
  TIERKIT_POINTWISE_OPS(TIERKIT_CPU_IMPL)
#undef TIERKIT_CPU_IMPL
#define TIERKIT_CPU_WRITER(name, of, Functor) \
  m.impl(#name,                               \
         &Signatures<CpuPointwise<tierkit::op_info::of, tierkit::kernels::Functor##Op>>::writer<k_##name>);
  TIERKIT_OUT_WRITERS(TIERKIT_CPU_WRITER)
#undef TIERKIT_CPU_WRITER
}

}  // namespace tierkit_torch
