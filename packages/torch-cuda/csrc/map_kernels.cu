// CUDA kernels of the row maps (the op table's third kind: rotary
// embeddings): a thread per output element, grid-stride; its pair partner
// and table row found from the row's index (core's RowTables layout). The
// arithmetic is core's (tierkit/map_functors.h): two products rounded, then
// their sum (mul_rn/add_rn: no FMA), each output rounded once from the
// compute type with core's conversion (device_math.cuh), so every non-NaN
// output equals the CPU tiers' bit for bit, and columns past r are copied
// bits and all. A computed NaN is NaN where the CPU's is, not with its bits:
// the GPU's arithmetic returns its one canonical NaN (stored as bfloat16
// 0x7fff, float16 0x7e00, float 0x7fffffff) where the CPU's keeps an
// operand's sign and payload (tests/test_gpu_nan.py).
#include <c10/cuda/CUDAException.h>

#include <algorithm>
#include <cstdint>

#include "device_math.cuh"
#include "map_launch.h"

namespace tierkit_cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ int64_t table_offset(const tierkit::kernels::RowTables<2>& l, int t, int64_t row) {
  int64_t off = 0;
  for (int k = l.rank - 1; k >= 0; --k) {
    const int64_t i = row % l.shape[k];
    row /= l.shape[k];
    off += i * l.strides[t][k];
  }
  return off;
}

// The rotary map: y_j = x_j c_j + sign_j x_p s_j (forward), x_j c_j - sign_j x_p s_p (transpose), with p
// the pair partner of j and sign_j = -1 for a pair's first element, +1 for its second.
template <typename T>
__global__ void __launch_bounds__(kThreads) rotary_kernel(MapArgs a) {
  const T* x = static_cast<const T*>(a.x);
  const T* c = static_cast<const T*>(a.table0);
  const T* s = static_cast<const T*>(a.table1);
  T* y = static_cast<T*>(a.y);
  const int64_t n = a.rows * a.d, h = a.r / 2;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n; i += int64_t{gridDim.x} * kThreads) {
    const int64_t row = i / a.d, j = i - row * a.d;
    if (j >= a.r) {
      y[i] = x[i];
      continue;
    }
    const bool first = a.interleaved ? (j % 2 == 0) : (j < h);
    const int64_t p = a.interleaved ? (first ? j + 1 : j - 1) : (first ? j + h : j - h);
    const int64_t co = table_offset(a.layout, 0, row), so = table_offset(a.layout, 1, row);
    const auto xj = to_compute(x[i]), xp = to_compute(x[row * a.d + p]);
    const auto cj = to_compute(c[co + j]);
    const auto sv = to_compute(s[so + (a.transpose ? p : j)]);
    const auto prod = mul_rn(xp, sv);
    const bool minus = first != a.transpose;  // forward: first subtracts; transpose: second does
    y[i] = from_compute<T>(add_rn(mul_rn(xj, cj), minus ? -prod : prod));
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
      case MapKind::rotary_embedding: rotary_kernel<T><<<blocks, kThreads, 0, stream>>>(args); break;
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

}  // namespace tierkit_cuda
