// The row maps' arithmetic on CUDA: one functor per row-map entry of the op
// table (functor="Rotary" names RotaryMapF here and tierkit::kernels::Rotary
// in core, tierkit/map_functors.h), kept apart from the kernel that runs
// them (map_kernels.cu: the element-to-thread mapping, the tables' rows,
// the columns past r copied). A functor gives:
//   kTables                         the entry's table count;
//   element(x, t, j, r, flag, tr)   output column j < r of a row, from the
//                                   row x, the row's table rows t (each r
//                                   wide), the entry's flag, and tr: the
//                                   map's transpose (x's gradient) instead.
// Each output is rounded once from the compute type with core's conversion
// and the same operations in core's order (mul_rn/add_rn: no FMA), so every
// non-NaN output equals the CPU tiers' bit for bit.
#pragma once

#include <cstdint>

#include "device_math.cuh"

namespace tierkit_cuda {

// Rotary embedding: y_j = x_j c_j + sign_j x_p s_j (forward),
// x_j c_j - sign_j x_p s_p (transpose), with p the pair partner of j and
// sign_j = -1 for a pair's first element, +1 for its second. The flag says
// which pairs: (j, j + 1) where set (GPT-J's interleaved layout), the
// halves' (j, j + r / 2) otherwise (GPT-NeoX's).
template <typename T>
struct RotaryMapF {
  static constexpr int kTables = 2;
  __device__ static T element(const T* x, const T* const (&t)[kTables], int64_t j, int64_t r, bool flag,
                              bool transpose) {
    const int64_t h = r / 2;
    const bool first = flag ? (j % 2 == 0) : (j < h);
    const int64_t p = flag ? (first ? j + 1 : j - 1) : (first ? j + h : j - h);
    const auto xj = to_compute(x[j]), xp = to_compute(x[p]);
    const auto cj = to_compute(t[0][j]);
    const auto sv = to_compute(t[1][transpose ? p : j]);
    const auto prod = mul_rn(xp, sv);
    const bool minus = first != transpose;  // forward: first subtracts; transpose: second does
    return from_compute<T>(add_rn(mul_rn(xj, cj), minus ? -prod : prod));
  }
};

}  // namespace tierkit_cuda
