// Host check of csrc/half_bits.h against core's conversions (tierkit/dtype.h),
// over every input each helper handles; built and run by test_half_bits.py
// with the host's C++ compiler, no GPU. With TIERKIT_CUDA_HEADERS (CUDA's
// include directory on the path) it also checks what half_bits.h says of
// CUDA's own conversions, through cuda_fp16.hpp's and cuda_bf16.hpp's host
// emulations of cvt: the same bits as core's for every non-NaN float, 0x7fff
// for every NaN. Prints one line per check; exits 1 on the first mismatch.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "half_bits.h"
#include "tierkit/dtype.h"

#ifdef TIERKIT_CUDA_HEADERS
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

namespace {

namespace b = tierkit_cuda::bits;

float as_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
std::uint32_t as_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

int fail(const char* what, std::uint32_t input, unsigned got, unsigned want) {
  std::printf("FAIL %s: input 0x%08x gives 0x%x, core gives 0x%x\n", what, input, got, want);
  return 1;
}

}  // namespace

int main() {
  // Every float: bfloat16_from_float is core's whole; float_is_nan is isnan.
  std::uint64_t nans = 0;
  for (std::uint64_t i = 0; i <= 0xffffffffull; ++i) {
    const auto u = static_cast<std::uint32_t>(i);
    const std::uint16_t got = b::bfloat16_from_float(u), want = tierkit::BFloat16::from_float(as_float(u));
    if (got != want) return fail("bfloat16_from_float", u, got, want);
    if (b::float_is_nan(u) != std::isnan(as_float(u))) return fail("float_is_nan", u, b::float_is_nan(u), 2);
    nans += b::float_is_nan(u);
  }
  std::printf("ok bfloat16_from_float, float_is_nan: every float (%llu NaNs)\n",
              static_cast<unsigned long long>(nans));

  // Every float NaN: half_nan_from_float is core's Half::from_float.
  for (std::uint32_t sign : {0u, 0x80000000u})
    for (std::uint32_t m = 1; m < (1u << 23); ++m) {
      const std::uint32_t u = sign | 0x7f800000u | m;
      const std::uint16_t got = b::half_nan_from_float(u), want = tierkit::Half::from_float(as_float(u));
      if (got != want) return fail("half_nan_from_float", u, got, want);
    }
  std::printf("ok half_nan_from_float: every float NaN\n");

  // Every float16 and bfloat16: the widening helpers are core's.
  int half_nans = 0;
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    const auto hb = static_cast<std::uint16_t>(h);
    const float f = tierkit::Half::to_float(hb);
    if (b::half_is_nan(hb) != std::isnan(f)) return fail("half_is_nan", h, b::half_is_nan(hb), 2);
    if (b::half_is_nan(hb)) {
      ++half_nans;
      if (b::float_from_half_nan(hb) != as_bits(f))
        return fail("float_from_half_nan", h, b::float_from_half_nan(hb), as_bits(f));
    }
    const float bf = tierkit::BFloat16::from_bits(hb);
    if (b::float_from_bfloat16(hb) != as_bits(bf))
      return fail("float_from_bfloat16", h, b::float_from_bfloat16(hb), as_bits(bf));
  }
  std::printf(
      "ok half_is_nan, float_from_half_nan, float_from_bfloat16: every 16-bit pattern (%d float16 NaNs)\n",
      half_nans);

#ifdef TIERKIT_CUDA_HEADERS
  // CUDA's conversions (host emulations of cvt.rn.f16.f32 / cvt.rn.bf16.f32):
  // core's bits except for NaN, where they give 0x7fff; widening float16
  // (cvt.f32.f16's emulation) core's except for NaN payloads, if at all.
  for (std::uint64_t i = 0; i <= 0xffffffffull; i += 7) {  // a stride prime to every field
    const auto u = static_cast<std::uint32_t>(i);
    const float f = as_float(u);
    const std::uint16_t h = __half_as_ushort(__float2half_rn(f)),
                        bf = __bfloat16_as_ushort(__float2bfloat16_rn(f));
    if (b::float_is_nan(u)) {
      if (h != 0x7fffu) return fail("CUDA float16 of a NaN is 0x7fff", u, h, 0x7fffu);
      if (bf != 0x7fffu) return fail("CUDA bfloat16 of a NaN is 0x7fff", u, bf, 0x7fffu);
    } else {
      if (h != tierkit::Half::from_float(f)) return fail("CUDA float16", u, h, tierkit::Half::from_float(f));
      if (bf != tierkit::BFloat16::from_float(f))
        return fail("CUDA bfloat16", u, bf, tierkit::BFloat16::from_float(f));
    }
  }
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    const auto hb = static_cast<std::uint16_t>(h);
    if (b::half_is_nan(hb)) continue;
    const std::uint32_t got = as_bits(__half2float(__ushort_as_half(hb))),
                        want = as_bits(tierkit::Half::to_float(hb));
    if (got != want) return fail("CUDA float16 -> float", h, got, want);
  }
  std::printf(
      "ok CUDA's conversions: core's bits for every non-NaN input (floats at a stride of 7), 0x7fff for "
      "NaN\n");
#endif
  return 0;
}
