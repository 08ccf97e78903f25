// The row reductions' forward with x-hat rounded to x's dtype before the
// weight multiplies it (core's RowParams::round_normalized: casting_mode
// "llama" with a weight of x's dtype or float32), in one pass on the CPU:
// what row_casting.cpp's composite otherwise computes as the op without a weight
// and then aten's product (two passes and a fresh output). Defined per
// entry in row_ops.cpp, beside the kernels it shares.
#pragma once

#include <ATen/core/Tensor.h>

#include <tuple>

namespace tierkit_torch {

// y = T(T(x-hat) * weight) over contiguous CPU x and weight of one 16-bit
// dtype, or, with a float32 weight, y = float(T(x-hat)) * weight in float32
// (the composite's product dtype). With `residual` defined, x-hat of h =
// T(x + residual), and h written to `h_out` (a fresh tensor when undefined;
// residual itself for the in-place form). Returns (y, h); h undefined
// without a residual. The caller has checked the arguments.
template <typename Info>
std::tuple<at::Tensor, at::Tensor> round_normalized_forward(const at::Tensor& x, const at::Tensor& residual,
                                                            const at::Tensor& h_out, const at::Tensor& weight,
                                                            double eps);

}  // namespace tierkit_torch
