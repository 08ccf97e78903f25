// Values in a row test's dtype, shared by the row kinds' tests: long double in
// and out (the references' precision) and the bits the same-bits checks compare.
#pragma once

#include <cstdint>
#include <cstring>

#include "tierkit/dtype.h"

namespace row_test_values {

template <typename T>
using C = tierkit::compute_t<T>;

template <typename T>
long double ld(const T& v) {
  return static_cast<long double>(tierkit::load_compute(&v));
}
template <typename T>
T to_t(long double v) {
  T out;
  tierkit::store_compute(&out, static_cast<C<T>>(v));
  return out;
}
template <typename T>
std::uint64_t bits_of(const T& v) {
  std::uint64_t u = 0;
  std::memcpy(&u, &v, sizeof(T));
  return u;
}
template <typename T>
T from_bits(std::uint64_t u) {
  T v{};
  std::memcpy(static_cast<void*>(&v), &u, sizeof(T));  // little-endian: T's bytes are u's low ones
  return v;
}

}  // namespace row_test_values
