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
// Built dim by dim with append(), which merges what it can, so x of any rank
// fits in kMaxRank dims (a 9-d q of a model that keeps extra batch dims).
template <std::size_t N>
struct RowTables {
  int rank = 0;  // merged leading dims
  std::int64_t shape[kMaxRank] = {};
  std::int64_t strides[N][kMaxRank] = {};

  // x's next leading dim (outermost first) of `size`, table t's element
  // stride over it dim_strides[t]. A dim of size 1 is dropped, and one joins
  // the dim before it where every table allows (each broadcast over both, or
  // laid out contiguously across them): the rows' offsets are the same. False
  // when the dim needs a place and kMaxRank are taken (tables broadcast in
  // more than kMaxRank alternating runs).
  bool append(std::int64_t size, const std::int64_t (&dim_strides)[N]) {
    if (size == 1) return true;
    if (rank > 0) {
      bool merges = true;
      for (std::size_t t = 0; t < N; ++t) merges = merges && strides[t][rank - 1] == dim_strides[t] * size;
      if (merges) {
        shape[rank - 1] *= size;
        for (std::size_t t = 0; t < N; ++t) strides[t][rank - 1] = dim_strides[t];
        return true;
      }
    }
    if (rank == kMaxRank) return false;
    shape[rank] = size;
    for (std::size_t t = 0; t < N; ++t) strides[t][rank] = dim_strides[t];
    ++rank;
    return true;
  }

  // The same layout in a RowTables of M >= N tables (a launch that carries
  // its kind's most tables), the tables past N never read.
  template <std::size_t M>
  RowTables<M> widened() const {
    static_assert(M >= N, "widened: to at least as many tables");
    RowTables<M> w;
    w.rank = rank;
    for (int k = 0; k < rank; ++k) w.shape[k] = shape[k];
    for (std::size_t t = 0; t < N; ++t)
      for (int k = 0; k < rank; ++k) w.strides[t][k] = strides[t][k];
    return w;
  }

  // The layout of x's `lead` leading dims (sizes x_lead) against N tables,
  // table t of rank table_rank[t] (its last dim the width) with sizes and
  // element strides table_sizes[t] / table_strides[t], broadcast from the
  // right as torch does (the caller checked that they broadcast). False as
  // append() says.
  bool broadcast(const std::int64_t* x_lead, int lead, const int (&table_rank)[N],
                 const std::int64_t* const (&table_sizes)[N], const std::int64_t* const (&table_strides)[N]) {
    for (int k = 0; k < lead; ++k) {
      std::int64_t s[N];
      for (std::size_t t = 0; t < N; ++t) {
        const int j = k - (lead - (table_rank[t] - 1));  // the table's dim under x's dim k
        s[t] = (j < 0 || table_sizes[t][j] == 1) ? 0 : table_strides[t][j];
      }
      if (!append(x_lead[k], s)) return false;
    }
    return true;
  }

  // Rows lo, lo + 1, ... in turn: each row's offsets (off) stepped from the
  // last row's, where offsets() divides by every dim (rows of 128 elements
  // spent a large share of their time there).
  struct Walk {
    const RowTables& layout;
    std::int64_t index[kMaxRank] = {};
    std::int64_t off[N] = {};
    Walk(const RowTables& l, std::int64_t row) : layout(l) {
      for (int k = l.rank - 1; k >= 0; --k) {
        index[k] = row % l.shape[k];
        row /= l.shape[k];
        for (std::size_t t = 0; t < N; ++t) off[t] += index[k] * l.strides[t][k];
      }
    }
    void next() {
      for (int k = layout.rank - 1; k >= 0; --k) {
        for (std::size_t t = 0; t < N; ++t) off[t] += layout.strides[t][k];
        if (++index[k] < layout.shape[k]) return;
        for (std::size_t t = 0; t < N; ++t) off[t] -= layout.strides[t][k] * layout.shape[k];
        index[k] = 0;
      }
    }
  };

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
