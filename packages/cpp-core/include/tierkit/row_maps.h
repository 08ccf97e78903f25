// The row maps (the op table's third kind, ROW_MAPS): each output row is a
// function of its own row of x and the same row of per-row tables broadcast
// against x's leading dims. This file owns the loops: finding each row's
// table rows from the broadcast strides, the parallel split over rows, the
// SIMD levels and the streamed stores, forward and transposed (a map is
// linear in x: its x-gradient is the transpose). The entries' arithmetic is
// map_functors.h's.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "tierkit/dtype.h"
#include "tierkit/error.h"
#include "tierkit/kernels.h"
#include "tierkit/row_kernels.h"
#include "tierkit/row_tables.h"

namespace tierkit::kernels {

namespace detail {

// Rows [lo, hi) of x (rows of d) and y, row(x_row, table_rows, y_row) for
// each (the functor gets its N table rows as one array, and the entry's one
// flag; which table is which is the functor's business), the tables' rows walked from the last row's (no
// division a row), x prefetched ahead.
template <std::size_t N, typename T, typename Row>
TIERKIT_ROW_INLINE void walk_map_rows(const T* x, const T* const (&tables)[N], const RowTables<N>& layout,
                                      std::int64_t d, std::int64_t lo, std::int64_t hi, T* y,
                                      const Row& row) {
  typename RowTables<N>::Walk walk(layout, lo);
  const T* t[N];
  // x's row about 4 KiB ahead is asked for a row at a time: rows of a head's
  // width (256-512 bytes) ran bound by their loads' misses (perf: most of the
  // time on the first product after them), the prefetchers alone keeping x
  // at 22 GB/s where a copy reads and writes 44 (bfloat16 [8, 32, 2048, 128]
  // on an AVX-512 Xeon: 12.1 -> 10.0 ms; float32 9.2 -> 8.8). A hint only.
  const std::int64_t row_bytes = d * static_cast<std::int64_t>(sizeof(T));
  const std::int64_t ahead = std::max<std::int64_t>(1, 4096 / row_bytes);
  for (std::int64_t i = lo; i < hi; ++i, walk.next()) {
    if (i + ahead < hi) {
      const char* next = reinterpret_cast<const char*>(x + (i + ahead) * d);
      for (std::int64_t b = 0; b < row_bytes; b += 64) __builtin_prefetch(next + b, 0, 3);
    }
    for (std::size_t k = 0; k < N; ++k) t[k] = tables[k] + walk.off[k];
    row(x + i * d, t, y + i * d);
  }
}

// A map's rows at each SIMD level: the scalar rows (baseline; double
// everywhere) and RowVec's at AVX2 and AVX-512, as the row kinds' copies.
template <typename K, typename T>
void map_rows_scalar(const T* x, const T* const (&tables)[K::kTables], const RowTables<K::kTables>& layout,
                     std::int64_t d, std::int64_t r, bool flag, bool transpose, std::int64_t lo,
                     std::int64_t hi, T* y) {
  walk_map_rows(x, tables, layout, d, lo, hi, y, [&](const T* xr, const T* const(&t)[K::kTables], T* yr) {
    K::row(xr, t, d, r, flag, transpose, yr);
  });
}
#ifdef TIERKIT_ROW_VEC
template <typename K, typename W, typename T>
TIERKIT_ROW_INLINE void map_rows_vec(const T* x, const T* const (&tables)[K::kTables],
                                     const RowTables<K::kTables>& layout, std::int64_t d, std::int64_t r,
                                     bool flag, bool transpose, std::int64_t lo, std::int64_t hi, T* y,
                                     bool stream) {
  walk_map_rows(x, tables, layout, d, lo, hi, y,
                [&](const T* xr, const T* const(&t)[K::kTables], T* yr) TIERKIT_ROW_LAMBDA {
                  K::template RowVec<W, T>::row(xr, t, d, r, flag, transpose, yr, stream);
                });
  if (stream) _mm_sfence();
}
template <typename K, typename T>
struct MapRowsBody {
  template <typename W>
  static void run(const T* x, const T* const (&tables)[K::kTables], const RowTables<K::kTables>& layout,
                  std::int64_t d, std::int64_t r, bool flag, bool transpose, std::int64_t lo, std::int64_t hi,
                  T* y, bool stream) {
    map_rows_vec<K, W, T>(x, tables, layout, d, r, flag, transpose, lo, hi, y, stream);
  }
};
#endif
template <typename K, typename T>
void map_rows(const T* x, const T* const (&tables)[K::kTables], const RowTables<K::kTables>& layout,
              std::int64_t d, std::int64_t r, bool flag, bool transpose, std::int64_t lo, std::int64_t hi,
              T* y, bool stream) {
#ifdef TIERKIT_ROW_VEC
  // At the CPU's level (simd_copies.h); double and baseline x86-64: the scalar rows.
  if constexpr (!std::is_same_v<T, double>)
    if (run_at_level<MapRowsBody<K, T>, T>(x, tables, layout, d, r, flag, transpose, lo, hi, y, stream))
      return;
#endif
  (void)stream;
  map_rows_scalar<K>(x, tables, layout, d, r, flag, transpose, lo, hi, y);
}

}  // namespace detail

// y = K's map of x (C-contiguous, rows of d; y may be x exactly) with its
// tables (each row's at tables.offsets), transposed when `transpose`. y's
// rows are streamed past the cache where the call outgrows it (row_streams).
template <typename K, typename T, typename Runner = PoolRunner>
void row_map(const T* x, const T* const (&tables)[K::kTables], const RowTables<K::kTables>& layout,
             std::int64_t rows, std::int64_t d, std::int64_t r, bool flag, bool transpose, T* y,
             const Runner& run = {}) {
  if (rows <= 0 || d <= 0) return;
  check(r >= 0 && r % 2 == 0 && r <= d, "row_map: the width r (", r,
        ") must be even and at most the row's length (", d, ")");
  // A map's float blocks are stored straight into y: streamed only from whole lines.
  const bool stream = detail::row_streams(y, rows, d, 2) && detail::line_aligned(y);
  run(rows, detail::row_grain(d), [&](std::int64_t lo, std::int64_t hi) {
    detail::map_rows<K>(x, tables, layout, d, r, flag, transpose, lo, hi, y, stream);
  });
}

}  // namespace tierkit::kernels
