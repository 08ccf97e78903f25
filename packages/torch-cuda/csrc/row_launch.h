// The row reductions' boundary between the host side (row_ops.cpp: ATen,
// checks, allocation) and the device side (row_kernels.cu: CUDA only), as
// launch.h is for the pointwise ops: plain pointers and the entry's index
// in the op table's kind cross it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "tierkit/dtype.h"
#include "tierkit/op_table.h"

namespace tierkit_cuda {

// The entries, in TIERKIT_ROW_REDUCTIONS order.
enum class RowKind {
#define TIERKIT_ROW_KIND(NAME, FUNCTOR, PARAMS, STATS) NAME,
  TIERKIT_ROW_REDUCTIONS(TIERKIT_ROW_KIND)
#undef TIERKIT_ROW_KIND
};

// Contiguous [rows, d] operands of one dtype; stats [rows, kStats] in the
// compute type (float; double for double). weight and bias may be null;
// residual null means the plain op (then h is unused); h may be residual
// exactly (the in-place fused form).
struct RowForward {
  const void* x;
  const void* residual;
  const void* weight;
  const void* bias;
  void* y;
  void* h;
  void* stats;
  int64_t rows, d;
  double eps;
};

// dy, x, weight, bias (each parameter nullable), stats -> dx, and dw / db
// (each null when its parameter is absent, in the parameter's dtype, which
// is x's): per-slot partial sums in partial_w / partial_b ([slots, d] of the
// compute type, from row_backward_slots), then added over the slots in a
// fixed order.
struct RowBackward {
  const void* dy;
  const void* x;
  const void* weight;
  const void* bias;
  const void* stats;
  void* dx;
  void* dw;
  void* db;
  void* partial_w;
  void* partial_b;
  int64_t rows, d;
};

// How many partial rows of each parameter's gradient the backward writes for
// [rows, d] on the current device: fixed by the shape and the device (so the
// sum's order is).
int64_t row_backward_slots(int64_t rows, int64_t d);

void launch_row_forward(RowKind kind, tierkit::DType dtype, const RowForward& args, cudaStream_t stream);
void launch_row_backward(RowKind kind, tierkit::DType dtype, const RowBackward& args, cudaStream_t stream);

}  // namespace tierkit_cuda
