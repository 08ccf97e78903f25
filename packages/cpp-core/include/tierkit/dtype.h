// Element types: the enum every tier speaks, and the two 16-bit float
// storage types with round-to-nearest-even conversion from float.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <type_traits>

#include "tierkit/error.h"

namespace tierkit {

enum class DType : std::uint8_t { Float32, Float64, Float16, BFloat16, Int32, Int64 };

constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::Float32: return 4;
    case DType::Float64: return 8;
    case DType::Float16: return 2;
    case DType::BFloat16: return 2;
    case DType::Int32: return 4;
    case DType::Int64: return 8;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
  }
  return "unknown";
}

constexpr bool is_floating(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 || t == DType::BFloat16;
}

inline DType dtype_from_name(std::string_view name) {
  for (DType t :
       {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int32, DType::Int64}) {
    if (dtype_name(t) == name) return t;
  }
  throw DTypeError(
      detail::concat("dtype: expected one of float32, float64, float16, bfloat16, "
                     "int32, int64, got '",
                     name, "'"));
}

namespace detail {
inline std::uint32_t float_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float bits_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
}  // namespace detail

// IEEE 754 binary16, stored as its bit pattern.
struct Half {
  std::uint16_t bits = 0;

  Half() = default;
  Half(float f) : bits(from_float(f)) {}  // NOLINT: implicit like a built-in float
  operator float() const { return to_float(bits); }
  static Half from_bits(std::uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }

  static std::uint16_t from_float(float f) {
    const std::uint32_t x = detail::float_bits(f);
    const std::uint32_t sign = (x >> 16) & 0x8000u;
    const std::uint32_t abs = x & 0x7fffffffu;
    if (abs >= 0x7f800000u) {  // inf or nan: keep nan quiet and non-zero
      return static_cast<std::uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
    }
    if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds to inf
    if (abs < 0x38800000u) {
      // Result is subnormal (or zero) in half: align the mantissa to 2^-24
      // units using a float add, which rounds to nearest even for us.
      const float magic = detail::bits_float(0x3f000000u);  // 0.5: ulp 2^-24
      const float r = detail::bits_float(abs) + magic;
      return static_cast<std::uint16_t>(sign | (detail::float_bits(r) - 0x3f000000u));
    }
    // Normal: rebias exponent (127 -> 15) and round 13 dropped bits to even.
    const std::uint32_t odd = (abs >> 13) & 1u;
    const std::uint32_t rounded = abs + 0xfffu + odd - (112u << 23);
    return static_cast<std::uint16_t>(sign | (rounded >> 13));
  }

  static float to_float(std::uint16_t h) {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    const std::uint32_t exp = (h >> 10) & 0x1fu;
    const std::uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) return detail::bits_float(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {  // zero or subnormal: exact as float arithmetic
      const float v = static_cast<float>(man) * detail::bits_float(0x33800000u);  // 2^-24
      return sign ? -v : v;
    }
    return detail::bits_float(sign | ((exp + 112u) << 23) | (man << 13));
  }
};

// bfloat16: the top half of a float32, rounded to nearest even.
struct BFloat16 {
  std::uint16_t bits = 0;

  BFloat16() = default;
  BFloat16(float f) : bits(from_float(f)) {}  // NOLINT: implicit like a built-in float
  operator float() const { return detail::bits_float(static_cast<std::uint32_t>(bits) << 16); }
  static BFloat16 from_bits(std::uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }

  static std::uint16_t from_float(float f) {
    const std::uint32_t x = detail::float_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
    const std::uint32_t odd = (x >> 16) & 1u;
    return static_cast<std::uint16_t>((x + 0x7fffu + odd) >> 16);
  }
};

template <typename T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::Float32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::Float64;
};
template <>
struct dtype_of<Half> {
  static constexpr DType value = DType::Float16;
};
template <>
struct dtype_of<BFloat16> {
  static constexpr DType value = DType::BFloat16;
};
template <>
struct dtype_of<std::int32_t> {
  static constexpr DType value = DType::Int32;
};
template <>
struct dtype_of<std::int64_t> {
  static constexpr DType value = DType::Int64;
};
template <typename T>
inline constexpr DType dtype_of_v = dtype_of<T>::value;

// The type arithmetic is done in: 16-bit floats compute in float.
template <typename T>
struct compute_type {
  using type = T;
};
template <>
struct compute_type<Half> {
  using type = float;
};
template <>
struct compute_type<BFloat16> {
  using type = float;
};
template <typename T>
using compute_t = typename compute_type<T>::type;

}  // namespace tierkit
