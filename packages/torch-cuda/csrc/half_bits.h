// Core's 16-bit conversions (tierkit/dtype.h: Half, BFloat16) where CUDA's
// differ, on bit patterns, for the device and the host alike: the kernels
// (device_math.cuh) use them, and tests/test_half_bits.py compiles this
// header with the host's C++ compiler to compare them with core's over every
// input they handle (no GPU needed).
//
// Where CUDA's conversions differ: a NaN. cvt.rn.f16.f32 and
// cvt.rn.bf16.f32 give the canonical 0x7fff for every NaN (cuda_fp16.hpp's
// and cuda_bf16.hpp's host emulations say the same); core gives
// sign | 0x7e00 for float16 and (x >> 16) | 0x40 (sign and top payload bits
// kept, quieted) for bfloat16. Widening: core keeps a 16-bit NaN's sign and
// payload (float16: sign | 0x7f800000 | mantissa << 13; bfloat16: the bits
// shifted up), which cvt.f32.f16 / cvt.f32.bf16 are not documented to do.
// Every other input converts the same either way (round to nearest even,
// subnormals kept, overflow to inf): float16 keeps CUDA's conversions for
// those; bfloat16 uses core's integer formulas whole, as cheap as a test.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define TIERKIT_CUDA_HD __host__ __device__ __forceinline__
#else
#define TIERKIT_CUDA_HD inline
#endif

namespace tierkit_cuda::bits {

// A float's bits: is it a NaN?
TIERKIT_CUDA_HD bool float_is_nan(std::uint32_t x) { return (x & 0x7fffffffu) > 0x7f800000u; }

// float -> bfloat16, core's BFloat16::from_float whole (integer arithmetic:
// round to nearest even, a NaN quieted with its sign and top payload bits).
TIERKIT_CUDA_HD std::uint16_t bfloat16_from_float(std::uint32_t x) {
  return static_cast<std::uint16_t>(float_is_nan(x) ? (x >> 16) | 0x40u
                                                    : (x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// float NaN -> float16, core's Half::from_float for a NaN: its sign | 0x7e00.
TIERKIT_CUDA_HD std::uint16_t half_nan_from_float(std::uint32_t x) {
  return static_cast<std::uint16_t>(((x >> 16) & 0x8000u) | 0x7e00u);
}

// float16 bits: is it a NaN?
TIERKIT_CUDA_HD bool half_is_nan(std::uint16_t h) { return (h & 0x7fffu) > 0x7c00u; }

// float16 NaN -> float, core's Half::to_float for a NaN: sign, all-ones
// exponent, the 10 mantissa bits at the top of float's 23.
TIERKIT_CUDA_HD std::uint32_t float_from_half_nan(std::uint16_t h) {
  return (static_cast<std::uint32_t>(h & 0x8000u) << 16) | 0x7f800000u |
         (static_cast<std::uint32_t>(h & 0x3ffu) << 13);
}

// bfloat16 -> float, core's: the bits shifted up (exact for every input).
TIERKIT_CUDA_HD std::uint32_t float_from_bfloat16(std::uint16_t b) {
  return static_cast<std::uint32_t>(b) << 16;
}

}  // namespace tierkit_cuda::bits
