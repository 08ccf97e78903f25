// The in-place row ops' device side (TIERKIT_ROW_IN_PLACE): one thread a pair
// of columns of one head of one token, its table row gathered at the token's
// index. The arithmetic is the entry's CUDA functor (in_place_functors.cuh);
// the host side (in_place_ops.cpp) has checked every argument and every
// position.
#include <c10/cuda/CUDAException.h>

#include <algorithm>
#include <cstdint>

#include "device_math.cuh"
#include "in_place_functors.cuh"
#include "in_place_launch.h"
#include "sm_count.h"

namespace tierkit_cuda {
namespace {

constexpr int kThreads = 256;

// T: the tensors' element type; P: the table's (T or its compute type C).
// Each thread a pair of columns (j0, j1) of one head: the flag's pairs
// (the halves' where set, neighbours' otherwise), the table row's halves
// their two values.
template <template <typename> class F, typename T, typename P>
__global__ void __launch_bounds__(kThreads) in_place_kernel(InPlaceArgs a) {
  using C = decltype(to_compute(T{}));
  const int64_t half = a.width / 2;
  const int64_t heads = a.x_heads + a.x2_heads;
  const int64_t total = a.tokens * heads * half;
  const P* table = static_cast<const P*>(a.table);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t pair = i % half, head = (i / half) % heads, token = i / (half * heads);
    const bool first = head < a.x_heads;
    T* row = static_cast<T*>(first ? a.x : a.x2) + token * (first ? a.x_stride : a.x2_stride) +
             (first ? head : head - a.x_heads) * a.size;
    const P* t = table + a.index[token] * a.width;
    const int64_t j0 = a.flag ? pair : 2 * pair, j1 = a.flag ? pair + half : 2 * pair + 1;
    C y0, y1;
    F<C>::pair(to_compute(row[j0]), to_compute(row[j1]), to_compute(t[pair]), to_compute(t[pair + half]), y0,
               y1);
    row[j0] = from_compute<T>(y0);
    row[j1] = from_compute<T>(y1);
  }
}

template <template <typename> class F, typename T, typename P>
void launch(const InPlaceArgs& a, cudaStream_t stream) {
  const int64_t total = a.tokens * (a.x_heads + a.x2_heads) * (a.width / 2);
  if (total == 0) return;
  const int blocks =
      static_cast<int>(std::min<int64_t>((total + kThreads - 1) / kThreads, int64_t{sm_count()} * 8));
  in_place_kernel<F, T, P><<<blocks, kThreads, 0, stream>>>(a);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

void launch_in_place(InPlaceKind kind, tierkit::DType dtype, bool table_in_compute, const InPlaceArgs& args,
                     cudaStream_t stream) {
  tierkit::dispatch_accepted(dtype, "x", [&](auto host) {
    using T = typename DeviceType<decltype(host)>::type;
    using C = decltype(to_compute(T{}));
    switch (kind) {
#define TIERKIT_IN_PLACE_CASE(NAME, FUNCTOR) \
  case InPlaceKind::NAME:                    \
    return table_in_compute ? launch<FUNCTOR##F, T, C>(args, stream) : launch<FUNCTOR##F, T, T>(args, stream);
      TIERKIT_ROW_IN_PLACE(TIERKIT_IN_PLACE_CASE)
#undef TIERKIT_IN_PLACE_CASE
    }
  });
}

}  // namespace tierkit_cuda
