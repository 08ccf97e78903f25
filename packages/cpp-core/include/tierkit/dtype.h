// Element types: the enum every tier speaks, and the two 16-bit float
// storage types with round-to-nearest-even conversion from float.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "tierkit/error.h"

namespace tierkit {

// The dtype table: the one place that lists tierkit's element types.
// Columns: enum name, storage type, compute type (16-bit floats compute in
// float), name users see, bytes, accepted by the kernels, PEP 3118 buffer
// format character ('\0': none), DLPack type code (0 int, 2 float, 4 bfloat).
// Everything else (the enum, names, sizes, dispatch, format and DLPack
// mappings, the "accepted" lists in error messages) is generated from it.
#define TIERKIT_DTYPES(X)                                            \
  X(Float32, float, float, "float32", 4, true, 'f', 2)               \
  X(Float64, double, double, "float64", 8, true, 'd', 2)             \
  X(Float16, ::tierkit::Half, float, "float16", 2, true, 'e', 2)     \
  X(BFloat16, ::tierkit::BFloat16, float, "bfloat16", 2, true, 0, 4) \
  X(Int32, std::int32_t, std::int32_t, "int32", 4, false, 'i', 0)    \
  X(Int64, std::int64_t, std::int64_t, "int64", 8, false, 'q', 0)

#define TIERKIT_DTYPE_ENUM_(E, T, C, N, S, A, F, D) E,
enum class DType : std::uint8_t { TIERKIT_DTYPES(TIERKIT_DTYPE_ENUM_) };
#undef TIERKIT_DTYPE_ENUM_

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  std::size_t size;
  bool accepted;       // the elementwise kernels take it
  char buffer_format;  // PEP 3118 character, '\0' when there is none
  std::uint8_t dlpack_code;
};

#define TIERKIT_DTYPE_INFO_(E, T, C, N, S, A, F, D) DTypeInfo{DType::E, N, S, A, F, D},
inline constexpr DTypeInfo kDTypeTable[] = {TIERKIT_DTYPES(TIERKIT_DTYPE_INFO_)};
#undef TIERKIT_DTYPE_INFO_
inline constexpr std::size_t kNumDTypes = sizeof(kDTypeTable) / sizeof(kDTypeTable[0]);
static_assert(kDTypeTable[kNumDTypes - 1].dtype == static_cast<DType>(kNumDTypes - 1),
              "kDTypeTable is indexed by DType");

constexpr const DTypeInfo& dtype_info(DType t) { return kDTypeTable[static_cast<std::size_t>(t)]; }
constexpr std::size_t dtype_size(DType t) { return dtype_info(t).size; }
constexpr std::string_view dtype_name(DType t) { return dtype_info(t).name; }
// An element type's C++ enum-style name (Byte, Float, ComplexHalf, UInt16,
// Float8_e4m3fn) as Python array libraries spell it (uint8, float32,
// complex32, uint16, float8_e4m3fn): the few named by their C type are
// renamed by width, the rest are the name in lower case. For the bindings'
// error messages about types core does not know.
inline std::string python_dtype_name(std::string_view enum_name) {
  static constexpr std::string_view kRenamed[][2] = {
      {"Byte", "uint8"},
      {"Char", "int8"},
      {"Short", "int16"},
      {"Int", "int32"},
      {"Long", "int64"},
      {"Half", "float16"},
      {"Float", "float32"},
      {"Double", "float64"},
      {"ComplexHalf", "complex32"},
      {"ComplexFloat", "complex64"},
      {"ComplexDouble", "complex128"},
  };
  for (const auto& r : kRenamed)
    if (r[0] == enum_name) return std::string(r[1]);
  std::string name(enum_name);
  for (char& c : name)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return name;
}

// Accepted by the elementwise kernels (today: exactly the floating types).
constexpr bool is_accepted(DType t) { return dtype_info(t).accepted; }
constexpr bool is_floating(DType t) { return is_accepted(t); }

// torch.promote_types (and np.result_type) of two floating dtypes: the wider;
// float16 with bfloat16, neither holding the other, float32.
constexpr DType promote_floating(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::Float64 || b == DType::Float64) return DType::Float64;
  return DType::Float32;
}

// "a, b, c" + `last_sep` + "d" over the table's rows that `keep` selects.
template <typename Keep>
std::string dtype_list(Keep keep, std::string_view last_sep) {
  std::string out;
  std::size_t count = 0, total = 0;
  for (const DTypeInfo& d : kDTypeTable) total += keep(d) ? 1 : 0;
  for (const DTypeInfo& d : kDTypeTable) {
    if (!keep(d)) continue;
    if (count > 0) out += count + 1 == total ? std::string(last_sep) : std::string(", ");
    out += d.name;
    ++count;
  }
  return out;
}
// "float32, float64, float16 or bfloat16": what error messages list.
inline std::string accepted_dtype_names() {
  return dtype_list([](const DTypeInfo& d) { return d.accepted; }, " or ");
}
inline std::string all_dtype_names() {
  return dtype_list([](const DTypeInfo&) { return true; }, ", ");
}

// The DType with this DLPack type code and width, if the table has one.
constexpr const DTypeInfo* dtype_from_dlpack(std::uint8_t code, std::size_t bits) {
  for (const DTypeInfo& d : kDTypeTable)
    if (d.dlpack_code == code && 8 * d.size == bits) return &d;
  return nullptr;
}

// The accepted dtypes' names, in table order ("float32", "float64", ...).
inline std::vector<std::string> accepted_dtype_list() {
  std::vector<std::string> names;
  for (const DTypeInfo& d : kDTypeTable)
    if (d.accepted) names.emplace_back(d.name);
  return names;
}

inline DType dtype_from_name(std::string_view name) {
  for (const DTypeInfo& d : kDTypeTable)
    if (d.name == name) return d.dtype;
  throw DTypeError(detail::concat("dtype: expected one of ", all_dtype_names(), ", got '", name, "'"));
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
// All ones when `c`, else zero; and a select written with it. Arithmetic
// instead of branches keeps the conversions' loops vectorizable.
inline std::uint32_t mask(bool c) { return 0u - static_cast<std::uint32_t>(c); }
inline std::uint32_t select(bool c, std::uint32_t if_true, std::uint32_t if_false) {
  return (if_true & mask(c)) | (if_false & ~mask(c));
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

  // Branch-free (every case computed, one selected) so that loops over many
  // elements vectorize; bit-identical to the branching form (tests/test_dtype.cpp
  // compares them over every half and a sweep of floats).
  static std::uint16_t from_float(float f) {
    const std::uint32_t x = detail::float_bits(f);
    const std::uint32_t sign = (x >> 16) & 0x8000u;
    const std::uint32_t abs = x & 0x7fffffffu;
    // Normal: rebias exponent (127 -> 15) and round 13 dropped bits to even.
    const std::uint32_t normal = (abs + 0xfffu + ((abs >> 13) & 1u) - (112u << 23)) >> 13;
    // Subnormal (or zero) in half: align the mantissa to 2^-24 units with a
    // float add of 0.5 (ulp 2^-24), which rounds to nearest even for us.
    const std::uint32_t subnormal = detail::float_bits(detail::bits_float(abs) + 0.5f) - 0x3f000000u;
    // inf stays inf; nan stays a quiet, non-zero nan.
    const std::uint32_t inf_nan = 0x7c00u | (detail::mask(abs > 0x7f800000u) & 0x200u);
    std::uint32_t h = detail::select(abs < 0x38800000u, subnormal, normal);
    h = detail::select(abs >= 0x477ff000u, 0x7c00u, h);  // rounds to inf
    h = detail::select(abs >= 0x7f800000u, inf_nan, h);
    return static_cast<std::uint16_t>(sign | h);
  }

  static float to_float(std::uint16_t h) {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    const std::uint32_t exp = (h >> 10) & 0x1fu;
    const std::uint32_t man = h & 0x3ffu;
    // Zero or subnormal: exact as float arithmetic (man * 2^-24).
    const std::uint32_t subnormal =
        sign | detail::float_bits(static_cast<float>(static_cast<std::int32_t>(man)) *
                                  detail::bits_float(0x33800000u));
    const std::uint32_t normal = sign | ((exp + 112u) << 23) | (man << 13);
    const std::uint32_t inf_nan = sign | 0x7f800000u | (man << 13);
    std::uint32_t f = detail::select(exp == 0, subnormal, normal);
    f = detail::select(exp == 0x1f, inf_nan, f);
    return detail::bits_float(f);
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

  static std::uint16_t from_float(float f) {  // branch-free, like Half's
    const std::uint32_t x = detail::float_bits(f);
    const std::uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    const std::uint32_t quiet_nan = (x >> 16) | 0x40u;
    return static_cast<std::uint16_t>(detail::select((x & 0x7fffffffu) > 0x7f800000u, quiet_nan, rounded));
  }
};

template <typename T>
struct dtype_of;
template <typename T>
struct compute_type {
  using type = T;
};
#define TIERKIT_DTYPE_TRAITS_(E, T, C, N, S, A, F, D) \
  template <>                                         \
  struct dtype_of<T> {                                \
    static constexpr DType value = DType::E;          \
  };                                                  \
  template <>                                         \
  struct compute_type<T> {                            \
    using type = C;                                   \
  };
TIERKIT_DTYPES(TIERKIT_DTYPE_TRAITS_)
#undef TIERKIT_DTYPE_TRAITS_
template <typename T>
inline constexpr DType dtype_of_v = dtype_of<T>::value;
// The type arithmetic is done in: 16-bit floats compute in float.
template <typename T>
using compute_t = typename compute_type<T>::type;

// An element read as its compute type, and a compute value stored as an
// element. For the 16-bit floats they go through the bit patterns, not the
// structs, so that loops over many elements vectorize (a struct copy per
// element does not).
template <typename T>
inline compute_t<T> load_compute(const T* p) {
  if constexpr (std::is_same_v<T, Half>) {
    return Half::to_float(p->bits);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return detail::bits_float(static_cast<std::uint32_t>(p->bits) << 16);
  } else {
    return static_cast<compute_t<T>>(*p);
  }
}
template <typename T>
inline void store_compute(T* p, compute_t<T> v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    p->bits = T::from_float(v);
  } else {
    *p = static_cast<T>(v);
  }
}

namespace detail {
// v rounded to float toward an odd last bit where inexact ("round to odd"):
// narrowing that float to a type with at least 2 fewer significand bits
// then rounds to nearest even exactly as narrowing v once would.
inline float round_to_odd_float(double v) {
  float f = static_cast<float>(v);
  if (!(std::fabs(v) <= static_cast<double>(std::numeric_limits<float>::max())) ||
      static_cast<double>(f) == v)
    return f;  // exact, NaN, or beyond float: nothing to keep
  if (std::fabs(static_cast<double>(f)) > std::fabs(v)) f = std::nextafter(f, 0.0f);
  return bits_float(float_bits(f) | 1u);
}
}  // namespace detail

// v stored as D, rounded once: a double narrowed to a 16-bit type goes
// through round-to-odd float, not float's nearest (which, rounded again to
// 16 bits, is off by one ulp on ties: numpy's float64 -> float16 rounds once).
template <typename D, typename V>
inline D round_to(V v) {
  if constexpr ((std::is_same_v<D, Half> || std::is_same_v<D, BFloat16>) && std::is_same_v<V, double>) {
    D out;
    out.bits = D::from_float(detail::round_to_odd_float(v));
    return out;
  } else {
    return static_cast<D>(v);
  }
}

// Calls fn(T{}) with the storage type T of any dtype in the table.
template <typename Fn>
void dispatch_any(DType t, Fn&& fn) {
  switch (t) {
#define TIERKIT_DTYPE_CASE_(E, T, C, N, S, A, F, D) \
  case DType::E: fn(T{}); return;
    TIERKIT_DTYPES(TIERKIT_DTYPE_CASE_)
#undef TIERKIT_DTYPE_CASE_
  }
}

// Calls fn(T{}) with the storage type T of `t`, for every accepted dtype;
// anything else is a DTypeError naming `name`.
template <typename Fn>
void dispatch_accepted(DType t, const char* name, Fn&& fn) {
  switch (t) {
#define TIERKIT_DTYPE_CASE_(E, T, C, N, S, A, F, D) \
  case DType::E:                                    \
    if constexpr (A) {                              \
      fn(T{});                                      \
      return;                                       \
    }                                               \
    break;
    TIERKIT_DTYPES(TIERKIT_DTYPE_CASE_)
#undef TIERKIT_DTYPE_CASE_
  }
  throw DTypeError(
      detail::concat(name, ": expected dtype ", accepted_dtype_names(), ", got ", dtype_name(t)));
}

}  // namespace tierkit
