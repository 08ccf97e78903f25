// The boundary between the host side (ops.cpp: ATen, checks, dispatcher)
// and the device side (kernels.cu: CUDA only). Plain pointers and layouts
// cross it, so the .cu file needs no ATen headers and compiles quickly.
// Element types and the rank limit are core's (tierkit/dtype.h, view.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "tierkit/dtype.h"
#include "tierkit/op_table.h"
#include "tierkit/view.h"

namespace tierkit_cuda {

using tierkit::DType;
using tierkit::kMaxRank;

// Sizes and strides in elements; passed to kernels by value.
struct Layout {
  int64_t sizes[kMaxRank];
  int64_t strides[kMaxRank];
  int rank;
};

struct Operands {
  const void* a;
  const void* b;  // null for unary ops
  void* out;
  int64_t numel;
  Layout la, lb, lout;
  bool contiguous;  // every operand C-contiguous
};

// The op table's pointwise ops (tierkit/op_table.h), by name.
enum class OpId {
#define TIERKIT_OP_ID(name, Functor, n_tensors, n_scalars) name,
  TIERKIT_POINTWISE_OPS(TIERKIT_OP_ID)
#undef TIERKIT_OP_ID
};

// Launches op `id` (its functor <Functor>F of kernels.cu, with the op's
// float arguments `scalars` in schema order) on `stream`; checks its launch
// and does nothing for numel == 0. `dtype` must be one core accepts
// (checked by the caller). Unary ops leave `operands.b` null.
void launch_pointwise(OpId id, DType dtype, const Operands& operands, const double* scalars,
                      cudaStream_t stream);

}  // namespace tierkit_cuda
