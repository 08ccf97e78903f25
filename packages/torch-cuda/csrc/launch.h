// The boundary between the host side (ops.cpp: ATen, checks, dispatcher)
// and the device side (kernels.cu: CUDA only). Plain pointers and layouts
// cross it, so the .cu file needs no ATen headers and compiles quickly.
// Element types and the rank limit are core's (tierkit/dtype.h, view.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "tierkit/dtype.h"
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

// One launcher per op, on `stream`; each checks its launch and does nothing
// for numel == 0. `dtype` must be one core accepts (checked by the caller).
void launch_add(DType dtype, const Operands& operands, cudaStream_t stream);
void launch_mul(DType dtype, const Operands& operands, cudaStream_t stream);
void launch_scale_shift(DType dtype, const Operands& operands, double alpha, double beta,
                        cudaStream_t stream);
void launch_muladd(DType dtype, const Operands& operands, double c, cudaStream_t stream);

}  // namespace tierkit_cuda
