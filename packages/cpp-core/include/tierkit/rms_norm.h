// Transitional: rms_norm's former entry points over the row kinds' generic
// loops (tierkit/row_kernels.h) and its functor (tierkit/row_functors.h).
#pragma once

#include "tierkit/row_functors.h"

namespace tierkit::kernels {

template <typename T, typename Runner = PoolRunner>
void rms_norm_forward(const T* x, const T* w, double eps, std::int64_t rows, std::int64_t d, T* y,
                      compute_t<T>* rstd, const Runner& run = {}) {
  row_forward<RmsNorm>(x, RowParams<T>{w, nullptr}, eps, rows, d, y, rstd, run);
}
template <typename T, typename Runner = PoolRunner>
void add_rms_norm_forward(const T* x, const T* residual, const T* w, double eps, std::int64_t rows,
                          std::int64_t d, T* y, T* h_out, compute_t<T>* rstd, const Runner& run = {}) {
  row_add_forward<RmsNorm>(x, residual, RowParams<T>{w, nullptr}, eps, rows, d, y, h_out, rstd, run);
}
template <typename T, typename Runner = PoolRunner>
void rms_norm_backward(const T* dy, const T* x, const T* w, const compute_t<T>* rstd, std::int64_t rows,
                       std::int64_t d, T* dx, compute_t<T>* dw, const Runner& run = {}) {
  row_backward<RmsNorm>(dy, x, RowParams<T>{w, nullptr}, rstd, rows, d, dx, dw,
                        static_cast<compute_t<T>*>(nullptr), run);
}

}  // namespace tierkit::kernels
