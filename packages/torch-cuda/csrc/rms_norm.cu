// CUDA kernels of the row reductions (rms_norm and its family): a row per
// warp when d <= 1024, a row per 256-thread block beyond; 16-byte vector
// loads and stores when every row is 16-byte aligned (d a multiple of the
// vector width and every pointer aligned), a scalar loop otherwise; sums in
// the compute type (float; double for double) reduced by warp shuffles and,
// per block, through shared memory. The formulas and roundings are core's
// (tierkit/rms_norm.h): rstd = 1 / sqrt(sum / d + eps), y = (x * rstd) * w
// rounded once; the sums' order differs from the CPU's (lanes, then a
// shuffle tree), so results agree with the CPU tiers within the compute
// type's rounding, not bit for bit.
//
// Backward: dx per row from the row's sum c = sum(g * x_hat) / d; dw[j] =
// sum over rows of dy * x_hat, accumulated per "slot" (a warp or a block,
// each owning rows slot, slot + slots, ... and one row of `partial`, so no
// atomics), then added over the slots in order by a second kernel: the
// same result on every run for a given shape and device.
#include <c10/cuda/CUDAException.h>

#include <algorithm>
#include <cstdint>

#include "device_math.cuh"
#include "rms_launch.h"

namespace tierkit_cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpRowMaxD = 1024;
// Blocks an SM must hold at once: 4 x 256 threads caps a kernel at 64
// registers (65536 / 1024), enough occupancy for a memory-bound row loop;
// with no minimum ptxas spent up to 147 registers on unrolling (and, at
// its default heuristic of 32, spilled).
constexpr int kMinBlocks = 4;

// rstd = 1 / sqrt(sum / d + eps) as core computes it, each operation IEEE
// round-to-nearest (spelled as intrinsics: the same whatever -prec-div and
// -prec-sqrt say; their slow paths for rare operands are called as
// functions, which kMinBlocks leaves room for without spilling).
__device__ __forceinline__ float div_rn(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ double div_rn(double a, double b) { return __ddiv_rn(a, b); }
__device__ __forceinline__ float rstd_of(float v) { return __frcp_rn(__fsqrt_rn(v)); }
__device__ __forceinline__ double rstd_of(double v) { return __drcp_rn(__dsqrt_rn(v)); }

template <typename C>
__device__ __forceinline__ C warp_sum(C v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = add_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The sum over the row's threads: a warp (kWarpRow) or the whole block.
template <bool kWarpRow, typename C>
__device__ __forceinline__ C row_sum(C v, C* shared) {
  v = warp_sum(v);
  if constexpr (kWarpRow) {
    return v;
  } else {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    C total = lane < kThreads / 32 ? shared[lane] : C(0);
    total = warp_sum(total);  // every warp sums the partials, in the same order
    __syncthreads();          // shared is free again for the next row
    return total;
  }
}

template <typename T, int N>
struct alignas(16) Pack {
  T v[N];
};

// Rows and the thread's place in its row, for either mapping.
template <bool kWarpRow>
struct RowMap {
  static constexpr int kRowsPerBlock = kWarpRow ? kThreads / 32 : 1;
  static constexpr int kWidth = kWarpRow ? 32 : kThreads;
  __device__ static int lane() { return kWarpRow ? (threadIdx.x & 31) : threadIdx.x; }
  __device__ static int64_t first_row() {
    return static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + (kWarpRow ? (threadIdx.x >> 5) : 0);
  }
  __device__ static int64_t row_step() { return static_cast<int64_t>(gridDim.x) * kRowsPerBlock; }
};

// y = rms_norm(x or h = x + residual) * w; rstd per row.
template <typename T, bool kWarpRow, bool kAdd>
__global__ void __launch_bounds__(kThreads, kMinBlocks) rms_forward_kernel(RmsForward a, bool vectorize) {
  using C = decltype(to_compute(T{}));
  using Map = RowMap<kWarpRow>;
  constexpr int N = 16 / sizeof(T);
  using P = Pack<T, N>;
  __shared__ C shared[kThreads / 32];
  const T* x = static_cast<const T*>(a.x);
  const T* res = static_cast<const T*>(a.residual);
  const T* w = static_cast<const T*>(a.weight);
  T* y = static_cast<T*>(a.y);
  T* h = static_cast<T*>(a.h);
  const int64_t d = a.d;
  const C eps = static_cast<C>(a.eps);
  // Block per row: the loop bound is the same for the whole block (its
  // __syncthreads are reached by all); warp per row: the same for the warp.
  for (int64_t row = Map::first_row(); row < a.rows; row += Map::row_step()) {
    const T* xr = x + row * d;
    const T* rr = kAdd ? res + row * d : nullptr;
    T* hr = kAdd ? h + row * d : nullptr;
    const T* src = kAdd ? hr : xr;  // what the norm reads: h, written in the first pass
    C ss = 0;
    if (vectorize) {
      for (int64_t k = Map::lane(); k < d / N; k += Map::kWidth) {
        P px = reinterpret_cast<const P*>(xr)[k];
        if constexpr (kAdd) {
          const P pr = reinterpret_cast<const P*>(rr)[k];
#pragma unroll
          for (int i = 0; i < N; ++i)
            px.v[i] = from_compute<T>(add_rn(to_compute(px.v[i]), to_compute(pr.v[i])));
          reinterpret_cast<P*>(hr)[k] = px;
        }
#pragma unroll
        for (int i = 0; i < N; ++i) {
          const C v = to_compute(px.v[i]);
          ss = add_rn(ss, mul_rn(v, v));
        }
      }
    } else {
      for (int64_t j = Map::lane(); j < d; j += Map::kWidth) {
        T v = xr[j];
        if constexpr (kAdd) {
          v = from_compute<T>(add_rn(to_compute(v), to_compute(rr[j])));
          hr[j] = v;
        }
        const C c = to_compute(v);
        ss = add_rn(ss, mul_rn(c, c));
      }
    }
    // (h is read back below by the very threads that wrote each element: no barrier needed.)
    const C total = row_sum<kWarpRow>(ss, shared);
    const C r = rstd_of(add_rn(div_rn(total, static_cast<C>(d)), eps));
    if (Map::lane() == 0) static_cast<C*>(a.rstd)[row] = r;
    T* yr = y + row * d;
    if (vectorize) {
      for (int64_t k = Map::lane(); k < d / N; k += Map::kWidth) {
        const P px = reinterpret_cast<const P*>(src)[k];
        P pw, py;
        if (w) pw = reinterpret_cast<const P*>(w)[k];
#pragma unroll
        for (int i = 0; i < N; ++i) {
          const C v = mul_rn(to_compute(px.v[i]), r);
          py.v[i] = from_compute<T>(w ? mul_rn(v, to_compute(pw.v[i])) : v);
        }
        reinterpret_cast<P*>(yr)[k] = py;
      }
    } else {
      for (int64_t j = Map::lane(); j < d; j += Map::kWidth) {
        const C v = mul_rn(to_compute(src[j]), r);
        yr[j] = from_compute<T>(w ? mul_rn(v, to_compute(w[j])) : v);
      }
    }
  }
}

// dx (if non-null) and, with a weight, this slot's partial dw row.
template <typename T, bool kWarpRow>
__global__ void __launch_bounds__(kThreads, kMinBlocks) rms_backward_kernel(RmsBackward a) {
  using C = decltype(to_compute(T{}));
  using Map = RowMap<kWarpRow>;
  __shared__ C shared[kThreads / 32];
  const T* dy = static_cast<const T*>(a.dy);
  const T* x = static_cast<const T*>(a.x);
  const T* w = static_cast<const T*>(a.weight);
  const C* rstd = static_cast<const C*>(a.rstd);
  T* dx = static_cast<T*>(a.dx);
  const int64_t d = a.d;
  const int64_t slot = Map::first_row();
  C* part = w ? static_cast<C*>(a.partial) + slot * d : nullptr;
  bool first = true;
  for (int64_t row = slot; row < a.rows; row += Map::row_step()) {
    const T* gr = dy + row * d;
    const T* xr = x + row * d;
    const C r = rstd[row];
    C dot = 0;
    for (int64_t j = Map::lane(); j < d; j += Map::kWidth) {
      const C g = w ? mul_rn(to_compute(gr[j]), to_compute(w[j])) : to_compute(gr[j]);
      dot = add_rn(dot, mul_rn(g, mul_rn(to_compute(xr[j]), r)));
    }
    const C c = div_rn(row_sum<kWarpRow>(dot, shared), static_cast<C>(d));
    T* dxr = dx + row * d;
    for (int64_t j = Map::lane(); j < d; j += Map::kWidth) {
      const C g0 = to_compute(gr[j]);
      const C xh = mul_rn(to_compute(xr[j]), r);
      const C g = w ? mul_rn(g0, to_compute(w[j])) : g0;
      dxr[j] = from_compute<T>(mul_rn(add_rn(g, -mul_rn(xh, c)), r));
      if (part) part[j] = first ? mul_rn(g0, xh) : add_rn(part[j], mul_rn(g0, xh));
    }
    first = false;
  }
  if (part && first)  // a slot with no row: its partial row is zero
    for (int64_t j = Map::lane(); j < d; j += Map::kWidth) part[j] = C(0);
}

// dw[j] = the slots' partial sums in order, rounded once to the weight's dtype.
template <typename T>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    rms_dw_kernel(const void* partial, int64_t slots, int64_t d, T* dw) {
  using C = decltype(to_compute(T{}));
  const C* p = static_cast<const C*>(partial);
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < d;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    C s = 0;
    for (int64_t k = 0; k < slots; ++k) s = add_rn(s, p[k * d + j]);
    dw[j] = from_compute<T>(s);
  }
}

int sm_count() {
  int device = 0, sms = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

// Blocks for `rows` rows: enough to fill every SM a few times; the kernels'
// row loops cover the rest.
int blocks_for(int64_t rows, int64_t d) {
  const int64_t per_block = d <= kWarpRowMaxD ? kThreads / 32 : 1;
  const int64_t wanted = (rows + per_block - 1) / per_block;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(wanted, int64_t{sm_count()} * 4)));
}

// The backward's blocks: blocks_for's, but never more partial dw than
// core's CPU kernel allows itself (kRmsMaxScratch in tierkit/rms_norm.h,
// 2^22 elements of slots x d): uncapped, a float32 [1024, 2^22] x took
// min(rows, 4 x SMs) x d floats, 8.25 GiB, on an H200. The kernel strides
// over the rows, so fewer blocks only take more rows each.
constexpr int64_t kMaxScratch = int64_t{1} << 22;
int backward_blocks(int64_t rows, int64_t d) {
  const int64_t per_block = d <= kWarpRowMaxD ? kThreads / 32 : 1;
  const int64_t cap = std::max<int64_t>(1, kMaxScratch / (std::max<int64_t>(1, d) * per_block));
  return static_cast<int>(std::min<int64_t>(blocks_for(rows, d), cap));
}

bool aligned16(const void* p) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <typename T, bool kWarpRow, bool kAdd>
void forward_as(const RmsForward& a, cudaStream_t stream) {
  constexpr int64_t N = 16 / sizeof(T);
  const bool vectorize = a.d % N == 0 && aligned16(a.x) && aligned16(a.residual) && aligned16(a.weight) &&
                         aligned16(a.y) && aligned16(a.h);
  rms_forward_kernel<T, kWarpRow, kAdd><<<blocks_for(a.rows, a.d), kThreads, 0, stream>>>(a, vectorize);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename T>
void forward(const RmsForward& a, cudaStream_t stream) {
  const bool warp_row = a.d <= kWarpRowMaxD;
  if (a.residual)
    return warp_row ? forward_as<T, true, true>(a, stream) : forward_as<T, false, true>(a, stream);
  return warp_row ? forward_as<T, true, false>(a, stream) : forward_as<T, false, false>(a, stream);
}

template <typename T>
void backward(const RmsBackward& a, cudaStream_t stream) {
  const int blocks = backward_blocks(a.rows, a.d);
  if (a.d <= kWarpRowMaxD)
    rms_backward_kernel<T, true><<<blocks, kThreads, 0, stream>>>(a);
  else
    rms_backward_kernel<T, false><<<blocks, kThreads, 0, stream>>>(a);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  if (!a.weight) return;
  const int dw_blocks =
      static_cast<int>(std::min<int64_t>((a.d + kThreads - 1) / kThreads, int64_t{sm_count()} * 4));
  rms_dw_kernel<T><<<std::max(1, dw_blocks), kThreads, 0, stream>>>(
      a.partial, rms_backward_slots(a.rows, a.d), a.d, static_cast<T*>(a.dw));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename F>
void dispatch(tierkit::DType dtype, const F& f) {
  tierkit::dispatch_accepted(dtype, "x", [&](auto host) { f(typename DeviceType<decltype(host)>::type{}); });
}

}  // namespace

int64_t rms_backward_slots(int64_t rows, int64_t d) {
  return int64_t{backward_blocks(rows, d)} * (d <= kWarpRowMaxD ? kThreads / 32 : 1);
}

void launch_rms_forward(tierkit::DType dtype, const RmsForward& args, cudaStream_t stream) {
  if (args.rows == 0) return;  // an empty grid is a launch error; there is nothing to do
  dispatch(dtype, [&](auto tag) { forward<decltype(tag)>(args, stream); });
}

void launch_rms_backward(tierkit::DType dtype, const RmsBackward& args, cudaStream_t stream) {
  if (args.rows == 0 && !args.weight) return;
  dispatch(dtype, [&](auto tag) { backward<decltype(tag)>(args, stream); });
}

}  // namespace tierkit_cuda
