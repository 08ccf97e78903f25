// What the row kinds' tests share: values in a row test's dtype (long double
// in and out, the references' precision; the bits the same-bits checks
// compare), and the check that a kernel's bits do not depend on how its rows
// are split among threads.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tierkit/dtype.h"
#include "tierkit/kernels.h"      // PoolRunner
#include "tierkit/row_kernels.h"  // RowParams

namespace row_test_support {

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
// n values of T drawn from a normal distribution (rounded to T).
template <typename T>
std::vector<T> random_vec(std::size_t n, std::uint32_t seed, float scale = 1.f, float mean = 0.f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(mean, scale);
  std::vector<T> v(n);
  for (auto& e : v) e = to_t<T>(dist(gen));
  return v;
}

// T's rounding (half an ulp, relative) and the compute type's epsilon.
template <typename T>
long double half_ulp() {
  if constexpr (std::is_same_v<T, tierkit::Half>) return 1.0L / 2048;
  if constexpr (std::is_same_v<T, tierkit::BFloat16>) return 1.0L / 256;
  return std::numeric_limits<T>::epsilon() / 2;
}
template <typename T>
long double eps_c() {
  return std::numeric_limits<C<T>>::epsilon();
}

// Every element's bits, for EXPECT_EQ over a kernel's outputs.
template <typename V>
std::vector<std::uint64_t> as_bits(const V& v) {
  std::vector<std::uint64_t> b;
  for (const auto& e : v) b.push_back(bits_of(e));
  return b;
}

// Parameters widened to the compute type, as the entry points hand them to
// the row bodies (row_kernels.h's RowParams): the scalar bodies, called
// directly, take them so.
template <typename T>
struct Widened {
  std::vector<C<T>> w, b;
  tierkit::kernels::RowParams<C<T>> p;
  Widened(tierkit::kernels::RowParams<T> in, std::int64_t d) {
    const auto widen = [d](const T* from, std::vector<C<T>>& into) -> const C<T>* {
      if (!from) return nullptr;
      into.resize(static_cast<std::size_t>(d));
      for (std::int64_t j = 0; j < d; ++j)
        into[static_cast<std::size_t>(j)] = tierkit::load_compute(from + j);
      return into.data();
    };
    p = {widen(in.w, w), widen(in.b, b)};
  }
};

// A copy of v starting `off` bytes past a 64-byte line (0: on it; 16: where
// numpy's own allocations start): the row kinds' streamed-output tests.
template <typename T>
struct Aligned64 {
  std::vector<T> storage;
  T* p;
  explicit Aligned64(const std::vector<T>& v, std::size_t off = 0) : storage(v.size() + 128 / sizeof(T)) {
    void* raw = storage.data();
    std::size_t space = storage.size() * sizeof(T);
    p = static_cast<T*>(std::align(64, (v.size() + 64 / sizeof(T)) * sizeof(T), raw, space));
    // (Never null: storage has two lines to spare. Said, so GCC's overflow
    // analysis does not follow a null p into the copy.)
    if (p == nullptr) std::abort();
    p += off / sizeof(T);
    std::copy(v.begin(), v.end(), p);
  }
  std::vector<T> vec(std::size_t n) const { return std::vector<T>(p, p + n); }
};

// Runs fn over chunks of `chunk` items, last chunk first: a Runner whose
// split and order differ from the pool's.
struct ReverseChunkRunner {
  std::int64_t chunk = 1;
  template <typename Fn>
  void operator()(std::int64_t n, std::int64_t, const Fn& fn) const {
    for (std::int64_t hi = n; hi > 0; hi -= chunk) fn(std::max<std::int64_t>(0, hi - chunk), hi);
  }
};

struct Shape {
  std::int64_t rows, d;
};

// The streamed-rows tests' shapes, each with its outputs' offset from a
// 64-byte line: whole lines (0), and 16 bytes off (an out= array numpy
// allocated: whole lines streamed, the head and tail stored plainly).
inline const std::pair<Shape, std::size_t> kStreamedShapes[] = {
    {Shape{6, 64}, 0}, {Shape{5, 256}, 0}, {Shape{3, 4096}, 0}, {Shape{6, 64}, 16}, {Shape{3, 4096}, 16}};

// Under TIERKIT_STREAMING_STORES=on at a vector level, the kernel is handed
// the streaming flag for rows like y's: so a streamed-rows test runs the
// streaming path, not the plain one twice (softmax's 16-bit rows then store
// plainly from their first whole line). (The SIMD levels, and so streaming
// rows, exist only where core dispatches: x86-64.)
template <typename T>
void expect_rows_stream_where_asked([[maybe_unused]] const T* y, [[maybe_unused]] std::int64_t rows,
                                    [[maybe_unused]] std::int64_t d) {
#ifdef TIERKIT_SIMD_DISPATCH
  namespace k = tierkit::kernels;
  const char* mode = std::getenv("TIERKIT_STREAMING_STORES");
  if (mode && std::string(mode) == "on" && !std::is_same_v<T, double> &&
      k::detail::simd_level() != k::detail::SimdLevel::Baseline && k::detail::cpu_has_16bit_simd()) {
    EXPECT_TRUE(k::detail::row_streams(y, rows, d, 2)) << "d " << d;
  }
#endif
}

// outputs(rows, d, runner) (every output of a kernel, as one comparable value)
// is the same on one thread, two, the pool's default and reversed chunks of 1
// and 7 rows. 300 x 257: several pool chunks and 38 dw blocks; 1200 x 64:
// the maximum 64 blocks.
template <typename Outputs>
void expect_same_bits_for_any_runner(const Outputs& outputs) {
  for (const Shape& s : {Shape{300, 257}, Shape{1200, 64}, Shape{3, 5000}}) {
    const auto one = outputs(s.rows, s.d, tierkit::kernels::PoolRunner{1});
    EXPECT_EQ(one, outputs(s.rows, s.d, tierkit::kernels::PoolRunner{2}));
    EXPECT_EQ(one, outputs(s.rows, s.d, tierkit::kernels::PoolRunner{}));
    EXPECT_EQ(one, outputs(s.rows, s.d, ReverseChunkRunner{1}));
    EXPECT_EQ(one, outputs(s.rows, s.d, ReverseChunkRunner{7}));
  }
}

}  // namespace row_test_support
