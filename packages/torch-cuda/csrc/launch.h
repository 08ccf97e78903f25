// The boundary between the host side (ops.cpp: ATen, checks, dispatcher)
// and the device side (kernels.cu: CUDA only). Plain pointers and layouts
// cross it, so the .cu file needs no ATen headers and compiles quickly.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tierkit_cuda {

inline constexpr int kMaxRank = 8;

enum class DType { Float32, Float64, Float16, BFloat16 };
enum class Op { Add, Mul, ScaleShift, MulAdd };

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

// Launches `op` on `stream`; p0/p1 are (alpha, beta) for ScaleShift and
// (c, unused) for MulAdd. Checks the launch. Does nothing for numel == 0.
void launch(Op op, DType dtype, const Operands& operands, double p0, double p1, cudaStream_t stream);

}  // namespace tierkit_cuda
