// CUDA kernels of the row reductions, one template for every entry of the op
// table's kind (its functor in row_functors.cuh): a row per warp when
// d <= 1024, a row per 256-thread block beyond; 16-byte vector loads and
// stores when every row is 16-byte aligned (d a multiple of the vector width
// and every pointer aligned), a scalar loop otherwise; sums in the compute
// type (float; double for double) reduced by warp shuffles and, per block,
// through shared memory. The formulas and roundings are core's
// (tierkit/row_functors.h); the sums' order differs from the CPU's (lanes,
// then a shuffle tree), so results agree with the CPU tiers within the
// compute type's rounding, not bit for bit. NaN outputs are NaN where the
// CPU's are, with the GPU's canonical NaN's bits, not the CPU's
// (device_math.cuh).
//
// Backward: dx per row from the row's means a = mean(g) and c = mean(g *
// x-hat) (g = dy * w); the weight's and bias's gradients, sum over rows of
// dy * x-hat and of dy, accumulated per "slot" (a warp or a block, each
// owning rows slot, slot + slots, ... and one row of each partial, so no
// atomics), then added over the slots in order by a second kernel: the same
// result on every run for a given shape and device.
#include <c10/cuda/CUDAException.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "device_math.cuh"
#include "row_functors.cuh"
#include "row_launch.h"
#include "sm_count.h"

namespace tierkit_cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpRowMaxD = 1024;
// Blocks an SM must hold at once: 4 x 256 threads caps a kernel at 64
// registers (65536 / 1024), enough occupancy for a memory-bound row loop;
// with no minimum ptxas spent up to 147 registers on unrolling (and, at
// its default heuristic of 32, spilled).
constexpr int kMinBlocks = 4;
constexpr int kMaxStats = 2;

// The row's reductions: a sum (add_rn) or a max (fmax: NaNs skipped), with
// the value an idle thread holds.
template <bool kMax>
struct ReduceOp {
  static constexpr double kIdentity = kMax ? -INFINITY : 0.0;
  template <typename C>
  __device__ static C apply(C a, C b) {
    return kMax ? fmax(a, b) : add_rn(a, b);
  }
};
using SumOp = ReduceOp<false>;
using MaxOp = ReduceOp<true>;

template <typename Op, typename C>
__device__ __forceinline__ C warp_reduce(C v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = Op::apply(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Op over the row's threads: a warp (kWarpRow) or the whole block.
template <bool kWarpRow, typename Op = SumOp, typename C>
__device__ __forceinline__ C row_reduce(C v, C* shared) {
  v = warp_reduce<Op>(v);
  if constexpr (kWarpRow) {
    return v;
  } else {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    C total = lane < kThreads / 32 ? shared[lane] : static_cast<C>(Op::kIdentity);
    total = warp_reduce<Op>(total);  // every warp reduces the partials, in the same order
    __syncthreads();                 // shared is free again for the next row
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

// y = F's forward of x (or of h = x + residual, written first); stats per row.
template <template <typename> class F, typename T, bool kWarpRow, bool kAdd>
__global__ void __launch_bounds__(kThreads, kMinBlocks) row_forward_kernel(RowForward a, bool vectorize) {
  using C = decltype(to_compute(T{}));
  using Fn = F<C>;
  static_assert(Fn::kStats <= kMaxStats);
  using Map = RowMap<kWarpRow>;
  constexpr int N = 16 / sizeof(T);
  using P = Pack<T, N>;
  __shared__ C shared[kThreads / 32];
  const T* x = static_cast<const T*>(a.x);
  const T* res = static_cast<const T*>(a.residual);
  const T* w = static_cast<const T*>(a.weight);
  const T* b = static_cast<const T*>(a.bias);
  T* y = static_cast<T*>(a.y);
  T* h = static_cast<T*>(a.h);
  const int64_t d = a.d;
  const C eps = static_cast<C>(a.eps);
  // Block per row: the loop bound is the same for the whole block (its
  // __syncthreads are reached by all); warp per row: the same for the warp.
  for (int64_t row = Map::first_row(); row < a.rows; row += Map::row_step()) {
    const T* xr = x + row * d;
    const T* src = xr;
    if constexpr (kAdd) {  // h = x + residual rounded, read back below by the threads that wrote it
      const T* rr = res + row * d;
      T* hr = h + row * d;
      if (vectorize) {
        for (int64_t k = Map::lane(); k < d / N; k += Map::kWidth) {
          P px = reinterpret_cast<const P*>(xr)[k];
          const P pr = reinterpret_cast<const P*>(rr)[k];
#pragma unroll
          for (int i = 0; i < N; ++i)
            px.v[i] = from_compute<T>(add_rn(to_compute(px.v[i]), to_compute(pr.v[i])));
          reinterpret_cast<P*>(hr)[k] = px;
        }
      } else {
        for (int64_t j = Map::lane(); j < d; j += Map::kWidth)
          hr[j] = from_compute<T>(add_rn(to_compute(xr[j]), to_compute(rr[j])));
      }
      src = hr;
    }
    // sum_j term(src_j) over the row.
    const auto sum = [&](const auto& term) {
      C acc = 0;
      if (vectorize) {
        for (int64_t k = Map::lane(); k < d / N; k += Map::kWidth) {
          const P px = reinterpret_cast<const P*>(src)[k];
#pragma unroll
          for (int i = 0; i < N; ++i) acc = add_rn(acc, term(to_compute(px.v[i])));
        }
      } else {
        for (int64_t j = Map::lane(); j < d; j += Map::kWidth) acc = add_rn(acc, term(to_compute(src[j])));
      }
      return row_reduce<kWarpRow>(acc, shared);
    };
    const auto max = [&]() {
      C acc = -C(INFINITY);
      for (int64_t j = Map::lane(); j < d; j += Map::kWidth) acc = fmax(acc, to_compute(src[j]));
      return row_reduce<kWarpRow, MaxOp>(acc, shared);
    };
    C s[kMaxStats];
    Fn::stats(sum, max, d, eps, s);
    if (Map::lane() == 0)
      for (int i = 0; i < Fn::kStats; ++i) static_cast<C*>(a.stats)[row * Fn::kStats + i] = s[i];
    const auto out = [&](C v, T wv, T bv) {
      C o = Fn::xhat(v, s);
      if (w) o = mul_rn(o, to_compute(wv));
      if (b) o = add_rn(o, to_compute(bv));
      return from_compute<T>(o);
    };
    T* yr = y + row * d;
    if (vectorize) {
      for (int64_t k = Map::lane(); k < d / N; k += Map::kWidth) {
        const P px = reinterpret_cast<const P*>(src)[k];
        P pw{}, pb{}, py;
        if (w) pw = reinterpret_cast<const P*>(w)[k];
        if (b) pb = reinterpret_cast<const P*>(b)[k];
#pragma unroll
        for (int i = 0; i < N; ++i) py.v[i] = out(to_compute(px.v[i]), pw.v[i], pb.v[i]);
        reinterpret_cast<P*>(yr)[k] = py;
      }
    } else {
      for (int64_t j = Map::lane(); j < d; j += Map::kWidth)
        yr[j] = out(to_compute(src[j]), w ? w[j] : T{}, b ? b[j] : T{});
    }
  }
}

// A functor with an exp or log per element (kTranscendental) gets twice the
// registers in double (two blocks of 256 threads an SM, not four): CUDA's
// double exp inside a backward with an exp per element needed more than 64 and spilled
// 8-24 bytes a thread to the stack; the norms' double kernels keep 64.
template <typename Fn, typename = void>
struct Transcendental : std::false_type {};
template <typename Fn>
struct Transcendental<Fn, std::void_t<decltype(Fn::kTranscendental)>>
    : std::bool_constant<Fn::kTranscendental> {};
template <template <typename> class F, typename T>
constexpr int backward_min_blocks() {
  return sizeof(T) == 8 && Transcendental<F<double>>::value ? kMinBlocks / 2 : kMinBlocks;
}

// dx and this slot's partial rows of the parameters' gradients.
template <template <typename> class F, typename T, bool kWarpRow>
__global__ void __launch_bounds__(kThreads, (backward_min_blocks<F, T>()))
    row_backward_kernel(RowBackward a) {
  using C = decltype(to_compute(T{}));
  using Fn = F<C>;
  using Map = RowMap<kWarpRow>;
  __shared__ C shared[kThreads / 32];
  const T* dy = static_cast<const T*>(a.dy);
  const T* x = static_cast<const T*>(a.x);
  const T* w = static_cast<const T*>(a.weight);
  const C* stats = static_cast<const C*>(a.stats);
  T* dx = static_cast<T*>(a.dx);
  const int64_t d = a.d;
  const int64_t slot = Map::first_row();
  C* pw = a.partial_w ? static_cast<C*>(a.partial_w) + slot * d : nullptr;
  C* pb = a.partial_b ? static_cast<C*>(a.partial_b) + slot * d : nullptr;
  bool first = true;
  for (int64_t row = slot; row < a.rows; row += Map::row_step()) {
    const T* gr = dy + row * d;
    const T* xr = x + row * d;
    const C* s = stats + row * Fn::kStats;
    C sg = 0, sgx = 0;
    for (int64_t j = Map::lane(); j < d; j += Map::kWidth) {
      const C g = w ? mul_rn(to_compute(gr[j]), to_compute(w[j])) : to_compute(gr[j]);
      sg = add_rn(sg, g);
      sgx = add_rn(sgx, mul_rn(g, Fn::xhat(to_compute(xr[j]), s)));
    }
    const C n = static_cast<C>(d);
    const C mean_g = div_rn(row_reduce<kWarpRow>(sg, shared), n);
    const C mean_gx = div_rn(row_reduce<kWarpRow>(sgx, shared), n);
    T* dxr = dx + row * d;
    for (int64_t j = Map::lane(); j < d; j += Map::kWidth) {
      const C g0 = to_compute(gr[j]);
      const C xh = Fn::xhat(to_compute(xr[j]), s);
      const C g = w ? mul_rn(g0, to_compute(w[j])) : g0;
      dxr[j] = from_compute<T>(Fn::dx(g, xh, mean_g, mean_gx, s, n));
      if (pw) pw[j] = first ? mul_rn(g0, xh) : add_rn(pw[j], mul_rn(g0, xh));
      if (pb) pb[j] = first ? g0 : add_rn(pb[j], g0);
    }
    first = false;
  }
  if (first)  // a slot with no row: its partial rows are zero
    for (int64_t j = Map::lane(); j < d; j += Map::kWidth) {
      if (pw) pw[j] = C(0);
      if (pb) pb[j] = C(0);
    }
}

// out[j] = the slots' partial sums in order, rounded once to the parameter's dtype.
template <typename T>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    slot_sum_kernel(const void* partial, int64_t slots, int64_t d, T* out) {
  using C = decltype(to_compute(T{}));
  const C* p = static_cast<const C*>(partial);
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < d;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    C s = 0;
    for (int64_t k = 0; k < slots; ++k) s = add_rn(s, p[k * d + j]);
    out[j] = from_compute<T>(s);
  }
}

// Blocks for `rows` rows: enough to fill every SM a few times; the kernels'
// row loops cover the rest.
int blocks_for(int64_t rows, int64_t d) {
  const int64_t per_block = d <= kWarpRowMaxD ? kThreads / 32 : 1;
  const int64_t wanted = (rows + per_block - 1) / per_block;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(wanted, int64_t{sm_count()} * 4)));
}

// The backward's blocks: blocks_for's, but never more partial sums than
// core's CPU kernel allows itself (kRowMaxScratch in tierkit/row_kernels.h,
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

template <template <typename> class F, typename T, bool kWarpRow, bool kAdd>
void forward_as(const RowForward& a, cudaStream_t stream) {
  constexpr int64_t N = 16 / sizeof(T);
  const bool vectorize = a.d % N == 0 && aligned16(a.x) && aligned16(a.residual) && aligned16(a.weight) &&
                         aligned16(a.bias) && aligned16(a.y) && aligned16(a.h);
  row_forward_kernel<F, T, kWarpRow, kAdd><<<blocks_for(a.rows, a.d), kThreads, 0, stream>>>(a, vectorize);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// kFused: the entry has a fused residual form (the add kernels exist only then).
template <template <typename> class F, typename T, bool kFused>
void forward(const RowForward& a, cudaStream_t stream) {
  const bool warp_row = a.d <= kWarpRowMaxD;
  if constexpr (kFused)
    if (a.residual)
      return warp_row ? forward_as<F, T, true, true>(a, stream) : forward_as<F, T, false, true>(a, stream);
  return warp_row ? forward_as<F, T, true, false>(a, stream) : forward_as<F, T, false, false>(a, stream);
}

template <typename T>
void slot_sum(const void* partial, int64_t rows, int64_t d, void* out, cudaStream_t stream) {
  const int blocks =
      static_cast<int>(std::min<int64_t>((d + kThreads - 1) / kThreads, int64_t{sm_count()} * 4));
  slot_sum_kernel<T><<<std::max(1, blocks), kThreads, 0, stream>>>(partial, row_backward_slots(rows, d), d,
                                                                   static_cast<T*>(out));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <template <typename> class F, typename T>
void backward(const RowBackward& a, cudaStream_t stream) {
  const int blocks = backward_blocks(a.rows, a.d);
  if (a.d <= kWarpRowMaxD)
    row_backward_kernel<F, T, true><<<blocks, kThreads, 0, stream>>>(a);
  else
    row_backward_kernel<F, T, false><<<blocks, kThreads, 0, stream>>>(a);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  if (a.dw) slot_sum<T>(a.partial_w, a.rows, a.d, a.dw, stream);
  if (a.db) slot_sum<T>(a.partial_b, a.rows, a.d, a.db, stream);
}

template <typename Fn>
void dispatch(tierkit::DType dtype, const Fn& f) {
  tierkit::dispatch_accepted(dtype, "x", [&](auto host) { f(typename DeviceType<decltype(host)>::type{}); });
}

}  // namespace

int64_t row_backward_slots(int64_t rows, int64_t d) {
  return int64_t{backward_blocks(rows, d)} * (d <= kWarpRowMaxD ? kThreads / 32 : 1);
}

void launch_row_forward(RowKind kind, tierkit::DType dtype, const RowForward& args, cudaStream_t stream) {
  if (args.rows == 0) return;  // an empty grid is a launch error; there is nothing to do
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    switch (kind) {
#define TIERKIT_ROW_CASE(NAME, FUNCTOR, PARAMS, STATS) \
  case RowKind::NAME: return forward<FUNCTOR##RowsF, T, tierkit::row_info::NAME::fused_add>(args, stream);
      TIERKIT_ROW_REDUCTIONS(TIERKIT_ROW_CASE)
#undef TIERKIT_ROW_CASE
    }
  });
}

void launch_row_backward(RowKind kind, tierkit::DType dtype, const RowBackward& args, cudaStream_t stream) {
  if (args.rows == 0 && !args.dw && !args.db) return;
  dispatch(dtype, [&](auto tag) {
    using T = decltype(tag);
    switch (kind) {
#define TIERKIT_ROW_CASE(NAME, FUNCTOR, PARAMS, STATS) \
  case RowKind::NAME: return backward<FUNCTOR##RowsF, T>(args, stream);
      TIERKIT_ROW_REDUCTIONS(TIERKIT_ROW_CASE)
#undef TIERKIT_ROW_CASE
    }
  });
}

}  // namespace tierkit_cuda
