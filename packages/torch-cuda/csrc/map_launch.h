// The row maps' boundary between the host side (map_ops.cpp: ATen, checks,
// allocation) and the device side (map_kernels.cu: CUDA only), as
// row_launch.h is for the row reductions: plain pointers, the tables'
// broadcast layout and the entry's index in the op table's kind cross it.
#pragma once

#include <cuda_runtime_api.h>

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

// Contiguous x [rows, d] and y of one dtype; the two tables (contiguous, r
// columns) addressed per row through `layout` (core's RowTables).
struct MapArgs {
  const void* x;
  const void* table0;
  const void* table1;
  void* y;
  int64_t rows, d, r;
  bool interleaved, transpose;
  tierkit::kernels::RowTables<2> layout;
};

void launch_row_map(MapKind kind, tierkit::DType dtype, const MapArgs& args, cudaStream_t stream);

}  // namespace tierkit_cuda
