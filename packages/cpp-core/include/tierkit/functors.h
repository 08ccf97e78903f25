// The arithmetic of each pointwise op of the op table, one functor each:
// what a contributor writes to add an op (docs/adding-an-op.md), apart from
// the loops, target clones, 16-bit blocks and streaming stores that run it
// (tierkit/kernels.h). A functor is an aggregate of the op's float
// arguments in schema order over the compute type C (float for float32,
// float16 and bfloat16; double for float64), applied to one element per
// call: inline, branch-free arithmetic, so the loops vectorize it.
//
// Optional facts a functor may declare, which the loops read:
//  * `static constexpr bool kComputeBound = true;` -- its arithmetic, not
//    memory, limits it: its float loops run at the widest vector level;
//  * `static C inner(C a)` and `C outer(C inner_a, C rest...) const`, with
//    `operator()` = `outer(inner(a), rest...)`: the 16-bit loops read
//    `inner(a)` from a table of all 65536 values of the type.
#pragma once

#include <cmath>
#include <type_traits>

#include "tierkit/vmath.h"

namespace tierkit::kernels {

// The operations, written once over the compute type C: the arithmetic of
// each op of the op table (tierkit/op_table.h names them), aggregates of the
// op's float arguments in schema order, applied to one element per call.
template <typename C>
struct AddOp {
  C operator()(C a, C b) const { return a + b; }
};
template <typename C>
struct MulOp {
  C operator()(C a, C b) const { return a * b; }
};
template <typename C>
struct ScaleShiftOp {
  C alpha, beta;
  C operator()(C x) const { return alpha * x + beta; }
};
template <typename C>
struct MulAddOp {
  C c;
  C operator()(C a, C b) const { return a * b + c; }
};
// silu(a) * b = a / (1 + exp(-a)) * b, the SwiGLU gate.
//  * The formula is eager torch's (ATen's silu: x / (1 + exp(-x))), then * b
//    as `F.silu(a) * b` does: for float and double the same roundings
//    (1 + e, the division, the product) as eager, so special values come
//    out as eager's bits (tests/silu_mul_eager_specials.h): silu(+inf) =
//    inf, silu(-inf) = -inf / inf = NaN, silu(-0) = -0, and in float -0
//    below -88.72, where exp(-a) overflows (exact: ~-2e-37 at -89; eager
//    has the same error). a * (1 / (1 + e)) gives the same specials but
//    one rounding more, and a subnormal 1 / e near a = -88.7.
//  * exp is vmath::vexp_sigmoid for float: inline arithmetic, so the loop
//    vectorizes (a call to expf keeps it scalar: 4x slower), with fused
//    multiply-adds, so the loops that run it are compiled for FMA (std::fma
//    is exactly rounded: every level, and the scalar code, give the same
//    bits; without FMA hardware it is glibc's fmaf). It is exp within
//    1.0103 ulp wherever 1 + exp(x) is not 1, which is all silu reads of
//    it. Against the exp it replaced (vexp: no FMA, 1.0037 ulp) it takes half the
//    instructions: float silu_mul over 2^14 in-cache elements on one Intel
//    Xeon core, 1.05 -> 0.80 ns an element. std::exp for double (not a
//    speed target).
//  * 16-bit types compute in float and round once on store, like every
//    kernel here. Eager rounds silu(a) to 16 bits before * b: twice, up to
//    1.5 ulp (measured), where this is 0.5 ulp plus float's error (bfloat16
//    0.498 ulp, float16 0.500). So it may differ from eager in the last
//    bit, and where eager's rounded silu(a) is 0 and b large or infinite
//    (eager 0 * inf = NaN or 0 * 1e30 = 0; here the float product, -inf or
//    -4.6e-11).
//  * silu(a) is `inner`, a function of a alone (see has_inner below): for
//    16-bit storage the loops read it from a table of its 65536 values.
template <typename C>
struct SiluMulOp {
  static constexpr bool kComputeBound = true;
  static C exp_(C x) {
    if constexpr (std::is_same_v<C, float>) {
      return vmath::vexp_sigmoid(x);
    } else {
      return std::exp(x);
    }
  }
  static C inner(C a) { return a / (C(1) + exp_(-a)); }
  C outer(C silu_a, C b) const { return silu_a * b; }
  C operator()(C a, C b) const { return outer(inner(a), b); }
};

// gelu_tanh(a) * b = F.gelu(a, approximate="tanh") * b, the GeGLU gate.
//  * 0.5 a (1 + tanh(u)), u = sqrt(2/pi) (a + 0.044715 a^3), is a *
//    sigmoid(2u) = a / (1 + exp(-z)) with z = 2u: computed so, with
//    SiluMulOp's exp. No tanh, so no cancellation where 1 + tanh(u) nears 0
//    (a below about -3: eager's float result there is 0 or off in every
//    digit; this one is within a few ulps of the exact value).
//  * z is (((0.044715 a) a) a + a) * 1.5957691216057308 in that order, as the
//    entry's reference formula evaluates it in torch, so the two see the same z.
//  * Special values as eager's: gelu(+inf) = inf, gelu(-inf) = -inf / inf =
//    NaN, gelu(-0) = -0, NaN passes; a^3 overflowing makes z +-inf, which
//    gives a (large positive a) or -0 (large negative a), as eager.
//  * `inner` (gelu_tanh(a)) is a function of a alone: the 16-bit loops read
//    it from a table of its 65536 values.
template <typename C>
struct GeluTanhMulOp {
  static constexpr bool kComputeBound = true;
  static C inner(C a) {
    const C z = C(1.5957691216057308) * (a + C(0.044715) * a * a * a);
    return a / (C(1) + SiluMulOp<C>::exp_(-z));
  }
  C outer(C gelu_a, C b) const { return gelu_a * b; }
  C operator()(C a, C b) const { return outer(inner(a), b); }
};

}  // namespace tierkit::kernels
