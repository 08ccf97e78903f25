// The CUDA kernels: one elementwise template, two loops, running the op
// table's functors (functors.cuh, the arithmetic a contributor writes).
//  * contiguous: 16-byte vector loads/stores when every pointer is 16-byte
//    aligned (4 float, 2 double, 8 half/bfloat16 per access), then a scalar
//    tail; a grid-stride loop with 64-bit indices so tensors past 2^31
//    elements work with a bounded grid;
//  * strided: per element, the linear index unravelled against the output's
//    sizes and dotted with each operand's strides (transposed, sliced,
//    expanded inputs; strided outputs).
// 16-bit types compute in float, like ATen's opmath.
#include <c10/cuda/CUDAException.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstddef>
#include <utility>

#include "device_math.cuh"
#include "functors.cuh"
#include "launch.h"
#include "sm_count.h"

namespace tierkit_cuda {
namespace {

template <typename T, int N>
struct alignas(16) Vec {
  T v[N];
};

template <typename T, bool Binary, typename F>
__global__ void contiguous_kernel(F f, const T* a, const T* b, T* out, int64_t n, bool vectorize) {
  constexpr int N = 16 / sizeof(T);
  using V = Vec<T, N>;
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t done = 0;
  if (vectorize) {
    const int64_t nvec = n / N;
    for (int64_t i = first; i < nvec; i += step) {
      const V va = reinterpret_cast<const V*>(a)[i];
      V vb;
      if constexpr (Binary) vb = reinterpret_cast<const V*>(b)[i];
      V vo;
#pragma unroll
      for (int k = 0; k < N; ++k) {
        vo.v[k] = from_compute<T>(f(to_compute(va.v[k]), Binary ? to_compute(vb.v[k]) : to_compute(va.v[k])));
      }
      reinterpret_cast<V*>(out)[i] = vo;
    }
    done = nvec * N;
  }
  for (int64_t i = done + first; i < n; i += step) {  // the scalar tail (or everything)
    out[i] = from_compute<T>(f(to_compute(a[i]), Binary ? to_compute(b[i]) : to_compute(a[i])));
  }
}

template <typename T, bool Binary, typename F>
__global__ void strided_kernel(F f, const T* a, const T* b, T* out, int64_t n, Layout la, Layout lb,
                               Layout lo) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t rest = i, oa = 0, ob = 0, oo = 0;
    for (int d = lo.rank - 1; d >= 0; --d) {
      const int64_t idx = rest % lo.sizes[d];
      rest /= lo.sizes[d];
      oa += idx * la.strides[d];
      if constexpr (Binary) ob += idx * lb.strides[d];
      oo += idx * lo.strides[d];
    }
    const auto x = to_compute(a[oa]);
    out[oo] = from_compute<T>(f(x, Binary ? to_compute(b[ob]) : x));
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Enough blocks to fill every SM several times over; the grid-stride loops
// cover the rest, so the grid never depends on n beyond that.
int grid_for(int64_t work, int threads) {
  const int sms = sm_count();
  const int64_t wanted = (work + threads - 1) / threads;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(wanted, int64_t{sms} * 32)));
}

template <typename T, bool Binary, typename F>
void run(const F& f, const Operands& o, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const T* a = static_cast<const T*>(o.a);
  const T* b = static_cast<const T*>(o.b);
  T* out = static_cast<T*>(o.out);
  if (o.contiguous) {
    const bool vectorize = aligned16(a) && aligned16(out) && (!Binary || aligned16(b));
    const int64_t work = vectorize ? (o.numel + (16 / sizeof(T)) - 1) / (16 / sizeof(T)) : o.numel;
    contiguous_kernel<T, Binary>
        <<<grid_for(work, kThreads), kThreads, 0, stream>>>(f, a, b, out, o.numel, vectorize);
  } else {
    strided_kernel<T, Binary>
        <<<grid_for(o.numel, kThreads), kThreads, 0, stream>>>(f, a, b, out, o.numel, o.la, o.lb, o.lout);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// Runs the functor `make(C{})` builds for the dtype's compute type C.
template <bool Binary, typename MakeF>
void dispatch(DType dtype, const Operands& o, cudaStream_t stream, MakeF make) {
  if (o.numel == 0) return;  // an empty grid is a launch error; there is nothing to do
  tierkit::dispatch_accepted(dtype, "dtype", [&](auto host) {
    using Host = decltype(host);
    using T = typename DeviceType<Host>::type;
    run<T, Binary>(make(tierkit::compute_t<Host>{}), o, stream);
  });
}

// F<C> from the op's float arguments, in schema order.
template <template <typename> class F, typename C, std::size_t... J>
F<C> make_functor(const double* scalars, std::index_sequence<J...>) {
  return F<C>{static_cast<C>(scalars[J])...};
}

}  // namespace

void launch_pointwise(OpId id, DType dtype, const Operands& o, const double* scalars, cudaStream_t stream) {
  switch (id) {
#define TIERKIT_LAUNCH(name, Functor, n_tensors, n_scalars)                                                \
  case OpId::name:                                                                                         \
    static_assert(n_tensors == 1 || n_tensors == 2, "the CUDA kernels take one or two inputs");            \
    return dispatch < n_tensors ==                                                                         \
           2 > (dtype, o, stream, [&](auto c) {                                                            \
             return make_functor<Functor##F, decltype(c)>(scalars, std::make_index_sequence<n_scalars>{}); \
           });
    TIERKIT_POINTWISE_OPS(TIERKIT_LAUNCH)
#undef TIERKIT_LAUNCH
  }
}

}  // namespace tierkit_cuda
