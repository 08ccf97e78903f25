// The in-place row ops' boundary between the host side (in_place_ops.cpp:
// ATen, checks) and the device side (in_place_kernels.cu: CUDA only), as
// row_launch.h is for the row reductions: plain pointers and the entry's
// index in the op table's kind cross it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "tierkit/dtype.h"
#include "tierkit/op_table.h"

namespace tierkit_cuda {

// The entries, in TIERKIT_ROW_IN_PLACE order.
enum class InPlaceKind {
#define TIERKIT_IN_PLACE_KIND(NAME, FUNCTOR) NAME,
  TIERKIT_ROW_IN_PLACE(TIERKIT_IN_PLACE_KIND)
#undef TIERKIT_IN_PLACE_KIND
};

// The entry's arguments by role (tierkit::in_place_info names them: vLLM's
// positions, query, key, cos_sin_cache, head_size, is_neox): index,
// `tokens` int64 rows of the table, each checked by the host; x and x2 (the
// x arguments written in place), token rows `*_stride` elements apart, each
// `*_heads` heads of `size` (x2 null: none); table: contiguous
// [rows, width], of the tensors' dtype or their compute type
// (`table_in_compute`); the flag.
struct InPlaceArgs {
  const int64_t* index;
  void* x;
  void* x2;
  const void* table;
  int64_t tokens, x_stride, x_heads, x2_stride, x2_heads, size, width;
  bool flag;
};

void launch_in_place(InPlaceKind kind, tierkit::DType dtype, bool table_in_compute, const InPlaceArgs& args,
                     cudaStream_t stream);

}  // namespace tierkit_cuda
