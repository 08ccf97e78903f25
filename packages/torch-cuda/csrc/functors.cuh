// The arithmetic of each pointwise op of the op table on CUDA, one functor
// each (`<Functor>F<C>`, the entry's `functor` name): what a contributor
// writes to add an op, apart from the loops that run it (kernels.cu). Over
// the compute type C (float for 16-bit types), aggregates of the op's float
// arguments in schema order; unary ones ignore `b`. Use the `_rn` forms
// (device_math.cuh) wherever the op promises eager's roundings: the SASS
// test forbids fused multiply-adds in those kernels.
#pragma once

#include "device_math.cuh"

namespace tierkit_cuda {

template <typename C>
struct AddF {
  __device__ C operator()(C a, C b) const { return add_rn(a, b); }
};
template <typename C>
struct MulF {
  __device__ C operator()(C a, C b) const { return mul_rn(a, b); }
};
template <typename C>
struct ScaleShiftF {
  C alpha, beta;
  __device__ C operator()(C x, C) const { return add_rn(mul_rn(alpha, x), beta); }
};
template <typename C>
struct MulAddF {
  C c;
  __device__ C operator()(C a, C b) const { return add_rn(mul_rn(a, b), c); }
};
// silu(a) * b with core's formula (core's functors.h SiluMulOp) and ATen's CUDA
// silu's: a / (1 + exp(-a)), then * b; 16-bit types round once from float.
// expf/exp are CUDA's accurate ones (2 ulp / 1 ulp; not __expf, whose error
// grows with |x|: 2 + 1.17|x| ulp); the division is IEEE round-to-nearest
// (__fdiv_rn/__ddiv_rn, whatever -prec-div says). exp's polynomial and the
// division's refinement use FFMA/DFMA internally (as eager's kernel does),
// so this functor's kernels cannot pass the no-FFMA rule of
// tests/test_sass.py, which is about a*b+c rounding twice where an op
// promises eager's roundings; the 1 + e, the division and * b here are
// still the separately rounded _rn forms.
template <typename C>
struct SiluMulF {
  static __device__ __forceinline__ float div_rn(float a, float b) { return __fdiv_rn(a, b); }
  static __device__ __forceinline__ double div_rn(double a, double b) { return __ddiv_rn(a, b); }
  static __device__ __forceinline__ float exp_(float x) { return expf(x); }
  static __device__ __forceinline__ double exp_(double x) { return exp(x); }
  __device__ C operator()(C a, C b) const { return mul_rn(div_rn(a, add_rn(C(1), exp_(-a))), b); }
};

// gelu_tanh(a) * b as core's GeluTanhMulOp computes it: a / (1 + exp(-z)),
// z = 1.5957691216057308 (a + 0.044715 a^3) in the reference's order, every
// step separately rounded (no contraction), SiluMulF's exp and division.
template <typename C>
struct GeluTanhMulF {
  __device__ C operator()(C a, C b) const {
    const C cube = mul_rn(mul_rn(mul_rn(C(0.044715), a), a), a);
    const C z = mul_rn(C(1.5957691216057308), add_rn(a, cube));
    return mul_rn(SiluMulF<C>::div_rn(a, add_rn(C(1), SiluMulF<C>::exp_(-z))), b);
  }
};

}  // namespace tierkit_cuda
