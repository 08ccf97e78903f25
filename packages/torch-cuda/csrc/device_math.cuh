// What every .cu file of this tier shares: core's host 16-bit types as CUDA's
// device ones, conversions to and from the compute type (16-bit types
// compute in float, like ATen's opmath; with core's bits, NaNs included)
// and the round-to-nearest arithmetic the kernels spell out so that no FMA
// contraction changes a result.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "half_bits.h"
#include "tierkit/dtype.h"

namespace tierkit_cuda {

// CUDA's own 16-bit types stand in for core's host ones (same bits); the
// compute type is core's (tierkit::compute_t: 16-bit floats compute in float).
template <typename Host>
struct DeviceType {
  using type = Host;
};
template <>
struct DeviceType<tierkit::Half> {
  using type = __half;
};
template <>
struct DeviceType<tierkit::BFloat16> {
  using type = __nv_bfloat16;
};
static_assert(sizeof(__half) == sizeof(tierkit::Half) && sizeof(__nv_bfloat16) == sizeof(tierkit::BFloat16));

// To and from the compute type with core's bits (half_bits.h says where
// CUDA's own conversions differ: NaNs), so a NaN that reaches a store keeps
// the sign and payload core's store would give it. A NaN made by arithmetic
// has none to keep: the GPU has one canonical float NaN, 0x7fffffff
// (CUDART_NAN_F), which its add and multiply return whatever the operands'
// payloads (NVIDIA's statement; unlike x86, which keeps the first NaN
// operand's, quieted); core's store of it is bfloat16 0x7fff, float16 0x7e00
// (CUDA's: 0x7fff). tests/test_gpu_nan.py checks this where a GPU is.
__device__ __forceinline__ float to_compute(__half x) {
  const unsigned short h = __half_as_ushort(x);
  return bits::half_is_nan(h) ? __uint_as_float(bits::float_from_half_nan(h)) : __half2float(x);
}
__device__ __forceinline__ float to_compute(__nv_bfloat16 x) {
  return __uint_as_float(bits::float_from_bfloat16(__bfloat16_as_ushort(x)));
}
__device__ __forceinline__ float to_compute(float x) { return x; }
__device__ __forceinline__ double to_compute(double x) { return x; }
template <typename T, typename C>
__device__ __forceinline__ T from_compute(C x);
template <>
__device__ __forceinline__ float from_compute<float, float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ double from_compute<double, double>(double x) {
  return x;
}
template <>
__device__ __forceinline__ __half from_compute<__half, float>(float x) {
  const unsigned u = __float_as_uint(x);
  return bits::float_is_nan(u) ? __ushort_as_half(bits::half_nan_from_float(u)) : __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_compute<__nv_bfloat16, float>(float x) {
  return __ushort_as_bfloat16(bits::bfloat16_from_float(__float_as_uint(x)));
}

// Round-to-nearest multiply and add that the compiler may not fuse into one
// FMA: eager torch (and core on the CPU) rounds a*b and then a*b+c, an FMA
// rounds once, and the exact-equality tests compare bits. (--fmad=false in
// setup.py says the same for the whole file; these hold whatever the flags.)
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }

}  // namespace tierkit_cuda
