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

// positions: `tokens` int64 rows of the cache, each checked by the host;
// query and key: token rows `*_stride` elements apart, each `*_heads` heads
// of head_size (key null: none); cache: contiguous [rows, rot_dim], of the
// tensors' dtype or their compute type (`cache_in_compute`).
struct InPlaceArgs {
  const int64_t* positions;
  void* query;
  void* key;
  const void* cache;
  int64_t tokens, query_stride, query_heads, key_stride, key_heads, head_size, rot_dim;
  bool is_neox;
};

void launch_in_place(InPlaceKind kind, tierkit::DType dtype, bool cache_in_compute, const InPlaceArgs& args,
                     cudaStream_t stream);

}  // namespace tierkit_cuda
