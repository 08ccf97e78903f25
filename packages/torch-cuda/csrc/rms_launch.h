// The row reductions' boundary between the host side (rms_norm.cpp: ATen,
// checks, allocation) and the device side (rms_norm.cu: CUDA only), as
// launch.h is for the pointwise ops: plain pointers cross it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "tierkit/dtype.h"

namespace tierkit_cuda {

// Contiguous [rows, d] operands of one dtype; rstd is float (double for
// double). weight may be null; residual null means plain rms_norm (then h is
// unused); h may be residual exactly (add_rms_norm_).
struct RmsForward {
  const void* x;
  const void* residual;
  const void* weight;
  void* y;
  void* h;
  void* rstd;
  int64_t rows, d;
  double eps;
};

// dy, x, weight (nullable), rstd -> dx, and dw (nullable, weight's dtype):
// per-slot partial sums in `partial` ([slots, d] of the compute type, from
// rms_backward_slots), then added over the slots in a fixed order.
struct RmsBackward {
  const void* dy;
  const void* x;
  const void* weight;
  const void* rstd;
  void* dx;
  void* dw;
  void* partial;
  int64_t rows, d;
};

// How many partial rows of dw the backward writes for [rows, d] on the
// current device: fixed by the shape and the device (so the sum's order is).
int64_t rms_backward_slots(int64_t rows, int64_t d);

void launch_rms_forward(tierkit::DType dtype, const RmsForward& args, cudaStream_t stream);
void launch_rms_backward(tierkit::DType dtype, const RmsBackward& args, cudaStream_t stream);

}  // namespace tierkit_cuda
