// How each row of a row map (tierkit/row_maps.h) finds its rows of the
// tables broadcast against x's leading dims: plain data, so that a CUDA
// launch (torch-cuda's map_launch.h) can carry it without core's kernels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tierkit/view.h"

namespace tierkit::kernels {

// Where each row of x reads its tables: x's leading dims (every dim but the
// last) and, per table, its element strides over them (0 where the table is
// broadcast). A table's last dim is contiguous (stride 1), r elements.
template <std::size_t N>
struct RowTables {
  int rank = 0;  // x's leading dims
  std::int64_t shape[kMaxRank] = {};
  std::int64_t strides[N][kMaxRank] = {};

  // Table t's offset for row `row` (row-major over the leading dims).
  void offsets(std::int64_t row, std::int64_t (&out)[N]) const {
    for (std::size_t t = 0; t < N; ++t) out[t] = 0;
    for (int k = rank - 1; k >= 0; --k) {
      const std::int64_t i = row % shape[k];
      row /= shape[k];
      for (std::size_t t = 0; t < N; ++t) out[t] += i * strides[t][k];
    }
  }
};

}  // namespace tierkit::kernels
