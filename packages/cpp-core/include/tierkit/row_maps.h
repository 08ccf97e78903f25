// The row maps (the op table's third kind, ROW_MAPS): each output row is a
// function of its own row of x and the same row of per-row tables (cos and
// sin for rotary embeddings) broadcast against x's leading dims. This file
// owns the loops: finding each row's table rows from the broadcast strides,
// the parallel split over rows, and the kinds' arithmetic, forward and
// transposed (the map is linear in x: its x-gradient is the transpose).
//
// Rounding: computed in compute_t<T>, each output rounded once. In float32
// and float64 that is eager's own sequence (two products, one sum, each
// rounded: -ffp-contract=off keeps them apart), so the result is eager's bit
// for bit; in 16-bit eager rounds every step and this rounds once.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "tierkit/dtype.h"
#include "tierkit/error.h"
#include "tierkit/kernels.h"
#include "tierkit/row_tables.h"

namespace tierkit::kernels {

// The rotary embedding: on the first r columns, y = x * cos + rotate(x) * sin;
// rotate pairs (j, j + r/2) (NeoX's rotate_half: [-x2, x1]) or, interleaved,
// (2i, 2i + 1) (GPT-J's). The transpose (x's gradient from y's) is R^T per
// pair. Columns from r on pass through.
struct Rotary {
  static constexpr std::size_t kTables = 2;
  // 16-bit rows go through float blocks of this many columns (every head_dim
  // models use fits one): widened once, computed by the float loop (which the
  // compiler vectorizes, as it does the conversion loops), narrowed once.
  static constexpr std::int64_t kBlock = 1024;

  template <typename T>
  static void row(const T* x, const T* c, const T* s, std::int64_t d, std::int64_t r, bool interleaved,
                  bool transpose, T* y) {
    if constexpr (!std::is_same_v<compute_t<T>, T>) {
      if (r <= kBlock) {
        float xf[kBlock], cf[kBlock], sf[kBlock], yf[kBlock];
        TIERKIT_VECTORIZE_LOOP
        for (std::int64_t j = 0; j < r; ++j) {
          xf[j] = load_compute(x + j);
          cf[j] = load_compute(c + j);
          sf[j] = load_compute(s + j);
        }
        // Every column the float loop reads, [0, r), was written above; GCC cannot see it through r.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
        row<float>(xf, cf, sf, r, r, interleaved, transpose, yf);
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
        TIERKIT_VECTORIZE_LOOP
        for (std::int64_t j = 0; j < r; ++j) store_compute(y + j, yf[j]);
        if (y != x)
          for (std::int64_t j = r; j < d; ++j) y[j] = x[j];
        return;
      }
    }
    using C = compute_t<T>;
    const std::int64_t h = r / 2;
    // pair (a, b) at (ia, ib): forward [ca a - sa b, sb a + cb b]; transpose [ca a + sb b, cb b - sa a].
    const auto pair = [&](std::int64_t ia, std::int64_t ib, auto transposed) {
      const C a = load_compute(x + ia), b = load_compute(x + ib);
      const C ca = load_compute(c + ia), cb = load_compute(c + ib);
      const C sa = load_compute(s + ia), sb = load_compute(s + ib);
      C ya, yb;
      if constexpr (!decltype(transposed)::value) {
        ya = a * ca - b * sa;
        yb = b * cb + a * sb;
      } else {
        ya = a * ca + b * sb;
        yb = b * cb - a * sa;
      }
      store_compute(y + ia, ya);
      store_compute(y + ib, yb);
    };
    // One loop per layout and direction, each vectorized: a pair reads and
    // writes only its own two columns, so no iteration feeds another, even
    // with y == x (the compiler alone kept them scalar: six pointers that
    // may alias, and the direction's branch inside).
    const auto pairs = [&](auto transposed) {
      if (interleaved) {
        TIERKIT_VECTORIZE_LOOP
        for (std::int64_t i = 0; i < h; ++i) pair(2 * i, 2 * i + 1, transposed);
      } else {
        TIERKIT_VECTORIZE_LOOP
        for (std::int64_t i = 0; i < h; ++i) pair(i, i + h, transposed);
      }
    };
    if (transpose)
      pairs(std::true_type{});
    else
      pairs(std::false_type{});
    if (y != x)
      for (std::int64_t j = r; j < d; ++j) y[j] = x[j];
  }
};

// y = K's map of x (C-contiguous, rows of d; y may be x exactly) with its
// tables (each row's at tables.offsets), transposed when `transpose`.
template <typename K, typename T, typename Runner = PoolRunner>
void row_map(const T* x, const T* const (&tables)[K::kTables], const RowTables<K::kTables>& layout,
             std::int64_t rows, std::int64_t d, std::int64_t r, bool interleaved, bool transpose, T* y,
             const Runner& run = {}) {
  if (rows <= 0 || d <= 0) return;
  check(r >= 0 && r % 2 == 0 && r <= d, "row_map: the width r (", r,
        ") must be even and at most the row's length (", d, ")");
  const std::int64_t grain = std::max<std::int64_t>(1, detail::kGrain / d);
  run(rows, grain, [&](std::int64_t lo, std::int64_t hi) {
    std::int64_t off[K::kTables];
    for (std::int64_t row = lo; row < hi; ++row) {
      layout.offsets(row, off);
      K::row(x + row * d, tables[0] + off[0], tables[1] + off[1], d, r, interleaved, transpose, y + row * d);
    }
  });
}

}  // namespace tierkit::kernels
