// 16-bit floats to and from float a vector at a time (AVX2: 8 lanes,
// AVX-512: 16), the gathers of an op's inner table, and whole 64-byte
// lines streamed around the cache: what the 16-bit loops (kernels.h), the
// row kinds and the row maps build their blocks from.
//
// Conversions, bit-identical to the scalar ones (tests/test_conversions_simd.cpp,
// every input): float16 through F16C, which rounds to nearest even and
// handles subnormals as the scalar code does; only NaN outputs differ (F16C
// keeps payload bits, the scalar gives sign | 0x7e00), so those lanes are
// rewritten. bfloat16 by integer arithmetic, the scalar formula in lanes.
// The functions carry "fma" so that vmath::vexp_sigmoid's std::fma becomes
// an instruction; no other contraction happens (-ffp-contract=off, core's
// flag, and fp-contract=off on the functions themselves).
#pragma once

#include <cstdint>

#include "tierkit/dtype.h"
#include "tierkit/simd_level.h"

#ifdef TIERKIT_SIMD_DISPATCH
namespace tierkit::kernels::detail {

inline void canonical_nans(const float* in, Half* out, unsigned lanes) {
  for (; lanes; lanes &= lanes - 1) {
    const int k = __builtin_ctz(lanes);
    out[k].bits = Half::from_float(in[k]);
  }
}

// Each converter moves one vector of floats' worth, in order: 8 elements
// (AVX2) or 16 (AVX-512). (Widening bfloat16 by interleaving with zeros,
// which permutes the elements, measured no faster for silu_mul; the row kernels'
// sums need the order.)
inline constexpr std::int64_t kLanes256 = 8;
inline constexpr std::int64_t kLanes512 = 16;

TIERKIT_16_AVX2 inline void to_floats_256(const Half* in, float* out) {
  _mm256_store_ps(out, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in))));
}
TIERKIT_16_AVX2 inline void from_floats_256(const float* in, Half* out) {
  const __m256 v = _mm256_load_ps(in);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out),
                   _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  const unsigned nan = static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
  if (nan) canonical_nans(in, out, nan);
}
TIERKIT_16_AVX2 inline void to_floats_256(const BFloat16* in, float* out) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in)));
  _mm256_store_ps(out, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
}
// BFloat16::from_float in lanes: (x + 0x7fff + lsb) >> 16, NaNs quieted.
TIERKIT_16_AVX2 inline void from_floats_256(const float* in, BFloat16* out) {
  const __m256 v = _mm256_load_ps(in);
  const __m256i x = _mm256_castps_si256(v);
  const __m256i hi = _mm256_srli_epi32(x, 16);
  const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb), 16);
  const __m256i quiet = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
  const __m256i r =
      _mm256_blendv_epi8(rounded, quiet, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
  // 32 -> 16 bits (every lane is <= 0xffff, so the unsigned saturation never
  // bites), the two 128-bit halves' results brought together.
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm256_castsi256_si128(packed));
}
// inner_table's entries for 8 or 16 16-bit patterns (any 16-bit type).
TIERKIT_16_AVX2 inline void gather_256(const void* in, const float* table, float* out) {
  const __m256i idx = _mm256_cvtepu16_epi32(_mm_loadu_si128(static_cast<const __m128i*>(in)));
  _mm256_store_ps(out, _mm256_mask_i32gather_ps(_mm256_setzero_ps(), table, idx,
                                                _mm256_castsi256_ps(_mm256_set1_epi32(-1)), 4));
}
TIERKIT_16_AVX512 inline void gather_512(const void* in, const float* table, float* out) {
  const __m512i idx =
      _mm512_maskz_cvtepu16_epi32(0xffff, _mm256_loadu_si256(static_cast<const __m256i*>(in)));
  _mm512_store_ps(out, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), 0xffff, idx, table, 4));
}

TIERKIT_16_AVX512 inline void to_floats_512(const Half* in, float* out) {
  // The masked form: the plain one starts from _mm512_undefined_ps, which
  // GCC 12 reports as maybe-uninitialized (as it does for the plain integer
  // shifts and conversions: hence their maskz forms below).
  _mm512_store_ps(out, _mm512_mask_cvtph_ps(_mm512_setzero_ps(), 0xffff,
                                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in))));
}
TIERKIT_16_AVX512 inline void from_floats_512(const float* in, Half* out) {
  const __m512 v = _mm512_load_ps(in);
  _mm256_storeu_si256(
      reinterpret_cast<__m256i*>(out),
      _mm512_mask_cvtps_ph(_mm256_setzero_si256(), 0xffff, v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  const unsigned nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  if (nan) canonical_nans(in, out, nan);
}
TIERKIT_16_AVX512 inline void to_floats_512(const BFloat16* in, float* out) {
  const __m512i w =
      _mm512_maskz_cvtepu16_epi32(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in)));
  _mm512_store_ps(out, _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, w, 16)));
}
TIERKIT_16_AVX512 inline __m512i bf16_bits_512(const float* in) {
  const __m512 v = _mm512_load_ps(in);
  const __m512i x = _mm512_castps_si512(v);
  const __m512i hi = _mm512_maskz_srli_epi32(0xffff, x, 16);
  const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_maskz_srli_epi32(
      0xffff, _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), lsb), 16);
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  return _mm512_mask_or_epi32(rounded, nan, hi, _mm512_set1_epi32(0x40));
}
TIERKIT_16_AVX512 inline void from_floats_512(const float* in, BFloat16* out) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out),
                      _mm512_maskz_cvtepi32_epi16(0xffff, bf16_bits_512(in)));
}

// AVX512-BF16's one-instruction rounding (simd_level.h says when).
TIERKIT_16_AVX512BF16 inline void from_floats_512_bf16(const float* in, BFloat16* out) {
  const __m512 v = _mm512_load_ps(in);
  const __m512i x = _mm512_castps_si512(v);
  // Subnormal: exponent bits 0, mantissa not.
  const __mmask16 subnormal = _mm512_mask_test_epi32_mask(
      _mm512_testn_epi32_mask(x, _mm512_set1_epi32(0x7f800000)), x, _mm512_set1_epi32(0x007fffff));
  const __m256i r = subnormal ? _mm512_maskz_cvtepi32_epi16(0xffff, bf16_bits_512(in))
                              : reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), r);
}

// A 64-byte line of 16-bit results from `from` (aligned) to `to` (aligned),
// around the cache.
inline constexpr std::int64_t kLine16 = 32;
TIERKIT_16_AVX2 inline void stream_line_256(const void* from, void* to) {
  const auto* f = static_cast<const __m256i*>(from);
  auto* t = static_cast<__m256i*>(to);
  _mm256_stream_si256(t, _mm256_load_si256(f));
  _mm256_stream_si256(t + 1, _mm256_load_si256(f + 1));
}
TIERKIT_16_AVX512 inline void stream_line_512(const void* from, void* to) {
  _mm512_stream_si512(static_cast<__m512i*>(to), _mm512_load_si512(from));
}

}  // namespace tierkit::kernels::detail
#endif
