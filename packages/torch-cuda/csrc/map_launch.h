// The row maps' boundary between the host side (map_ops.cpp: ATen, checks,
// allocation) and the device side (map_kernels.cu: CUDA only), as
// row_launch.h is for the row reductions: plain pointers, the tables'
// broadcast layout and the entry's index in the op table's kind cross it.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "tierkit/dtype.h"
#include "tierkit/op_table.h"
#include "tierkit/row_tables.h"

namespace tierkit_cuda {

// The entries, in TIERKIT_ROW_MAPS order.
enum class MapKind {
#define TIERKIT_MAP_KIND(NAME, FUNCTOR, TABLES) NAME,
  TIERKIT_ROW_MAPS(TIERKIT_MAP_KIND)
#undef TIERKIT_MAP_KIND
};

// The most tables an entry of the kind takes: MapArgs has room for them.
#define TIERKIT_MAP_TABLES(NAME, FUNCTOR, TABLES) \
  , std::size_t { TABLES }
inline constexpr std::size_t kMapTables = std::max({std::size_t{1} TIERKIT_ROW_MAPS(TIERKIT_MAP_TABLES)});
#undef TIERKIT_MAP_TABLES

// Contiguous x [rows, d] and y of one dtype; the entry's tables (contiguous,
// r columns; the first of them, in the entry's order) addressed per row
// through `layout` (core's RowTables); the entry's flag; `transpose` for
// x's gradient (the map's transpose).
struct MapArgs {
  const void* x;
  const void* tables[kMapTables];
  void* y;
  int64_t rows, d, r;
  bool flag, transpose;
  tierkit::kernels::RowTables<kMapTables> layout;
};

void launch_row_map(MapKind kind, tierkit::DType dtype, const MapArgs& args, cudaStream_t stream);

}  // namespace tierkit_cuda
