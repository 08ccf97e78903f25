// The in-place row ops' arithmetic on CUDA, one functor per entry of the op
// table's ROW_IN_PLACE (functor="RotaryCached" means RotaryCachedF here and
// tierkit::kernels::RotaryCached in core), apart from the kernel that runs
// it (in_place_kernels.cu: the gather, one thread a pair).
#pragma once

#include "device_math.cuh"

namespace tierkit_cuda {

// vLLM's cached rotary pair: a' = a cos - b sin, b' = b cos + a sin, each
// product and the sum rounded (vLLM's float32 sequence; core's rows round
// the same way; no FMA contraction).
template <typename C>
struct RotaryCachedF {
  __device__ static void pair(C a, C b, C c, C s, C& ya, C& yb) {
    ya = add_rn(mul_rn(a, c), -mul_rn(b, s));
    yb = add_rn(mul_rn(b, c), mul_rn(a, s));
  }
};

}  // namespace tierkit_cuda
