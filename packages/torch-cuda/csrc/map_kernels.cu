// CUDA kernels of the row maps (the op table's third kind), one template for
// every entry: a thread per output element, grid-stride; its row's table
// rows found from the row's index (core's RowTables layout), columns past r
// copied bits and all. The arithmetic is the entry's functor's
// (map_functors.cuh), core's in core's order, so every non-NaN output
// equals the CPU tiers' bit for bit. A computed NaN is NaN where the CPU's
// is, not with its bits: the GPU's arithmetic returns its one canonical NaN
// (stored as bfloat16 0x7fff, float16 0x7e00, float 0x7fffffff) where the
// CPU's keeps an operand's sign and payload (tests/test_gpu_nan.py).
#include <c10/cuda/CUDAException.h>

#include <algorithm>
#include <cstdint>

#include "device_math.cuh"
#include "map_functors.cuh"
#include "map_launch.h"

namespace tierkit_cuda {
namespace {

constexpr int kThreads = 256;

// Table t's element offset of x's row `row` (its strides over x's leading dims).
__device__ __forceinline__ int64_t table_offset(const tierkit::kernels::RowTables<kMapTables>& l, int t,
                                                int64_t row) {
  int64_t off = 0;
  for (int k = l.rank - 1; k >= 0; --k) {
    const int64_t i = row % l.shape[k];
    row /= l.shape[k];
    off += i * l.strides[t][k];
  }
  return off;
}

template <template <typename> class F, typename T>
__global__ void __launch_bounds__(kThreads) map_kernel(MapArgs a) {
  constexpr int kTables = F<T>::kTables;
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
  const int64_t n = a.rows * a.d;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += int64_t{gridDim.x} * kThreads) {
    const int64_t row = i / a.d, j = i - row * a.d;
    if (j >= a.r) {
      y[i] = x[i];
      continue;
    }
    const T* t[kTables];
    for (int k = 0; k < kTables; ++k)
      t[k] = static_cast<const T*>(a.tables[k]) + table_offset(a.layout, k, row);
    y[i] = F<T>::element(x + row * a.d, t, j, a.r, a.flag, a.transpose);
  }
}

template <typename Fn>
void dispatch(tierkit::DType dtype, const Fn& f) {
  tierkit::dispatch_accepted(dtype, "x", [&](auto host) { f(typename DeviceType<decltype(host)>::type{}); });
}

}  // namespace

void launch_row_map(MapKind kind, tierkit::DType dtype, const MapArgs& args, cudaStream_t stream) {
  const int64_t n = args.rows * args.d;
  if (n == 0) return;  // an empty grid is a launch error; there is nothing to do
  const int blocks = static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535));
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    switch (kind) {
#define TIERKIT_MAP_CASE(NAME, FUNCTOR, TABLES)                                              \
  case MapKind::NAME:                                                                        \
    static_assert(FUNCTOR##MapF<T>::kTables == TABLES, "the entry's tables, the functor's"); \
    map_kernel<FUNCTOR##MapF, T><<<blocks, kThreads, 0, stream>>>(args);                     \
    break;
      TIERKIT_ROW_MAPS(TIERKIT_MAP_CASE)
#undef TIERKIT_MAP_CASE
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

}  // namespace tierkit_cuda
