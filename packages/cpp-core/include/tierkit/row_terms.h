// How a row kind's expressions run. A kind writes each expression once, as
// term(L, j) over an L that loads, stores, rounds and splats (row_kernels.h's
// VecAt, OneAt and ScalarAt), inside a body templated on R, which runs
// the terms:
//   ScalarRowTerms<T>    in C one element at a time (the scalar rows: every
//                        dtype, the baseline level, double everywhere), sums
//                        in lane_sum's order;
//   VecRowTerms<W, T>    a register block of W's width at a time, then the
//                        tail (float and the 16-bit types at AVX2 and
//                        AVX-512), sums in the same order.
// The same terms in the same order give the same bits at every level, and
// there is no second copy of a kind's arithmetic to keep in step.
#pragma once

#include <cstdint>
#include <limits>

#include "tierkit/row_kernels.h"

namespace tierkit::kernels::detail {

// A row's largest element, NaNs skipped (a comparison with NaN is false),
// zero read as +0: -0 + +0 = +0, every other value unchanged, so the result
// does not depend on the order in which lanes meet -0 and +0.
template <typename C>
TIERKIT_ROW_INLINE C max_settled(C m) {
  return m + C(0);
}

template <typename T>
struct ScalarRowTerms {
  using C = compute_t<T>;
  using At = ScalarAt<C, T>;
  template <typename Term>
  TIERKIT_ROW_INLINE static C sum(std::int64_t d, const Term& term) {
    return lane_sum_of<C>(d, [&](std::int64_t j) TIERKIT_ROW_LAMBDA { return term(At{}, j); });
  }
  // Whether scaled_normal can lift a row's conversion checks: never here
  // (the scalar conversions have none).
  static constexpr bool kProvesNormal = false;
  // `head` (the vector rows' first block's place) changes nothing here.
  template <typename Term>
  TIERKIT_ROW_INLINE static void each(std::int64_t d, const Term& term, NextRow<T> = {}, std::int64_t = 0) {
    TIERKIT_VECTORIZE_LOOP
    for (std::int64_t j = 0; j < d; ++j) term(At{}, j);
  }
  template <typename Term>
  TIERKIT_ROW_INLINE static void each_scaled(bool, std::int64_t d, const Term& term, NextRow<T> ahead,
                                             std::int64_t = 0) {
    each(d, term, ahead);
  }
  // Two sums from one pass, each in lane_sum's order: term(L, j, a, b).
  template <typename Term>
  TIERKIT_ROW_INLINE static Sums2<C> sum2(std::int64_t d, const Term& term) {
    return lane_sum2_of<C>(
        d,
        [&](std::int64_t j) TIERKIT_ROW_LAMBDA {
          C a, b;
          term(At{}, j, a, b);
          return a;
        },
        [&](std::int64_t j) TIERKIT_ROW_LAMBDA {
          C a, b;
          term(At{}, j, a, b);
          return b;
        });
  }
  // sum_j term(h_j) over a row it writes: h_j = value(j) stored to out[j]
  // (rounded to T), term reading h_j as rounded. A block's values are all
  // computed before any is stored (out may be an input exactly), which also
  // lets GCC vectorize the block: stored element by element, the same sum
  // ran at half the speed (a float row at the baseline level), and without
  // `omp simd` GCC split the 16 lanes 14 + 2 and reloaded them whole from
  // the stack, a failed store forward each block (20% slower).
  template <typename Value, typename Term>
  TIERKIT_ROW_INLINE static C sum_stored(std::int64_t d, T* out, const Value& value, const Term& term) {
    return lane_sum<C>(
        d,
        [&](std::int64_t j, C* v) TIERKIT_ROW_LAMBDA {
          C h[kRowLanes];
          TIERKIT_VECTORIZE_LOOP
          for (int k = 0; k < kRowLanes; ++k) h[k] = value(At{}, j + k);
          TIERKIT_VECTORIZE_LOOP
          for (int k = 0; k < kRowLanes; ++k) {
            const C hv = store_rounded(out + j + k, h[k]);
            v[k] = term(At{}, hv);
          }
        },
        [&](std::int64_t j)
            TIERKIT_ROW_LAMBDA { return term(At{}, store_rounded(out + j, value(At{}, j))); });
  }
  // A row's output: write(out, stream, head) stores it (each(), from its
  // element `head` on in blocks); the scalar rows store plainly.
  template <typename Y, typename Write>
  TIERKIT_ROW_INLINE static void out_row(Y* y, std::int64_t, bool, const Write& write) {
    write(y, false, 0);
  }
  // A row the body writes and then reads back (the fused add's h):
  // use(row) writes and reads it; the scalar rows use `out` itself.
  template <typename Use>
  TIERKIT_ROW_INLINE static void staged_row(T* out, std::int64_t, bool, const Use& use) {
    use(out);
  }
  TIERKIT_ROW_INLINE static void prefetch(const void*, std::int64_t) {}
  // The row's max (max_settled); -inf for an empty row.
  TIERKIT_ROW_INLINE static C max(const T* x, std::int64_t d) {
    C m = -std::numeric_limits<C>::infinity();
    for (std::int64_t j = 0; j < d; ++j) {
      const C v = load_compute(x + j);
      m = v > m ? v : m;
    }
    return max_settled(m);
  }
};

#ifdef TIERKIT_ROW_VEC
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"  // vectors between always-inline functions (row_kernels.h)
template <typename W, typename T>
struct VecRowTerms {
  using C = float;
  using F = typename W::F;
  template <typename Term>
  TIERKIT_ROW_INLINE static float sum(std::int64_t d, const Term& term) {
    return vec_sum_of<W, T>(d, term);
  }
  // bfloat16 at the AVX512-BF16 level: VCVTNEPS2BF16's subnormal check.
  static constexpr bool kProvesNormal = W::kNativeBf16 && std::is_same_v<T, BFloat16>;
  // Whether the row x scaled by s, then by weights of floor w_floor, holds
  // no subnormal (scaled_normal, row_kernels.h).
  TIERKIT_ROW_INLINE static bool scaled_normal(const T* x, std::int64_t d, float s, float w_floor) {
    static_assert(kProvesNormal);
    return detail::scaled_normal(bf16_row_floor<W>(x, d), s, w_floor);
  }
  // The weights' floor (float_weight_floor, row_kernels.h); 1 without a weight.
  TIERKIT_ROW_INLINE static float weight_floor(const float* w, std::int64_t d) {
    static_assert(kProvesNormal);
    return w ? float_weight_floor<W>(w, d) : 1.f;
  }
  // `ahead`: the next row's starts, asked for a line at a time (vec_each);
  // `head`: elements before the first block (vec_each), one at a time.
  template <typename Term>
  TIERKIT_ROW_INLINE static void each(std::int64_t d, const Term& term, NextRow<T> ahead = {},
                                      std::int64_t head = 0) {
    vec_each_of<W, T>(d, term, ahead, head);
  }
  // each() for a scaled row's stores, without VCVTNEPS2BF16's subnormal
  // check where `normal` (scaled_normal's verdict) allows it.
  template <typename Term>
  TIERKIT_ROW_INLINE static void each_scaled(bool normal, std::int64_t d, const Term& term, NextRow<T> ahead,
                                             std::int64_t head = 0) {
    if constexpr (kProvesNormal) {
      if (normal) return vec_each_of<W, T, true>(d, term, ahead, head);
    }
    vec_each_of<W, T>(d, term, ahead, head);
  }
  template <typename Term>
  TIERKIT_ROW_INLINE static Sums2<float> sum2(std::int64_t d, const Term& term) {
    return vec_sum2_of<W, T>(d, term);
  }
  template <typename Value, typename Term>
  TIERKIT_ROW_INLINE static float sum_stored(std::int64_t d, T* out, const Value& value, const Term& term) {
    return vec_sum_of<W, T>(d, [&](auto L, std::int64_t j) TIERKIT_ROW_LAMBDA {
      L.st(out + j, value(L, j));
      return term(L, L.ld(out + j));  // as rounded to T
    });
  }
  // A 16-bit row that streams (row_streams) is written into a stack row,
  // then leaves a whole line at a time (a block's own store is half a line
  // or a quarter). Float rows stream their blocks' own stores; where a row
  // does not start a line (an out= array numpy allocated starts 16 bytes
  // into one), its elements up to the first line are stored one at a time
  // (`head`) and the blocks start there. Every element's arithmetic is the
  // same in a block or alone, so the bits do not move. (Through the stack
  // row instead, float32 rows of 4096 ran at 4.0 ms a [4096, 4096] call
  // against 2.8 on their lines: the row and the stack row filled L1.)
  // y is x's type, or float where a kind writes its output in the compute
  // type (kWideOutput, row_kernels.h): a float row's blocks stream as float's do.
  template <typename Y, typename Write>
  TIERKIT_ROW_INLINE static void out_row(Y* y, std::int64_t d, bool stream, const Write& write) {
    if constexpr (sizeof(Y) == 2) {
      if (stream) {
        StreamRow<Y> row;
        write(row.p, false, 0);
        stream_row<W>(row.p, y, d);
        return;
      }
    }
    write(y, stream, line_head(y, d, stream));
  }
  // A row the body writes and then reads back (the fused add's h): where the
  // call streams (row_streams), use(row) runs on a stack row and the row
  // leaves a whole line at a time afterwards (stream_row: on any element
  // boundary; the in-place form's h is the caller's residual). Stored plainly,
  // each line of h was read before it was written: a fifth pass over memory
  // in a kernel of four (the RMSNorm residual form, float32 [4096, 4096], one thread on
  // the AVX-512 Xeon, 0.59 of the copy limit).
  template <typename Use>
  TIERKIT_ROW_INLINE static void staged_row(T* out, std::int64_t d, bool stream, const Use& use) {
    if (stream && d <= kStreamRow16) {
      StreamRow<T> row;
      use(row.p);
      stream_row<W>(row.p, out, d);
      return;
    }
    use(out);
  }
  // A line of the next row, while this one's last pass runs (ask_ahead).
  template <typename P>
  TIERKIT_ROW_INLINE static void prefetch(const P* p, std::int64_t d) {
    ask_ahead(p, ahead_to_l2<P>(d));
  }
  // ScalarRowTerms::max's value: the lanes' maxima, then the tail's and the
  // lanes' together (max is exact, so any order gives its bits).
  TIERKIT_ROW_INLINE static float max(const T* x, std::int64_t d) {
    F mv = splat<W>(-std::numeric_limits<float>::infinity());
    float m = -std::numeric_limits<float>::infinity();
    vec_each<W>(
        d,
        [&](std::int64_t j) TIERKIT_ROW_LAMBDA {
          const F v = load_lanes<W>(x + j);
          mv = v > mv ? v : mv;
        },
        [&](std::int64_t j) TIERKIT_ROW_LAMBDA {
          const float v = load_compute(x + j);
          m = v > m ? v : m;
        });
    float lanes[W::kLanes];
    __builtin_memcpy(lanes, &mv, sizeof(lanes));
    for (float v : lanes) m = v > m ? v : m;
    return max_settled(m);
  }
};
#pragma GCC diagnostic pop
#endif  // TIERKIT_ROW_VEC

// A kind written as a body, Body<R, T> with forward, add_forward and
// backward over a runner R, as row_kernels.h calls it: Rows<T> runs the body
// on ScalarRowTerms (the reference bits at every level), RowsVec<W, T> on
// VecRowTerms, its streamed stores fenced before the chunk of rows returns.
template <template <typename, typename> class Body, typename T>
struct ScalarRowsOf {
  using C = compute_t<T>;
  using B = Body<ScalarRowTerms<T>, T>;
  template <typename Y>
  TIERKIT_ROW_INLINE static void forward(const T* x, RowParams<C> p, C eps, std::int64_t d, std::int64_t lo,
                                         std::int64_t hi, Y* y, C* stats) {
    B::forward(x, p, eps, d, lo, hi, y, stats, false);
  }
  template <typename Y>
  TIERKIT_ROW_INLINE static void add_forward(const T* x, const T* res, RowParams<C> p, C eps, std::int64_t d,
                                             std::int64_t lo, std::int64_t hi, Y* y, T* h, C* stats) {
    B::add_forward(x, res, p, eps, d, lo, hi, y, h, stats, false);
  }
  TIERKIT_ROW_INLINE static void backward(const T* dy, const T* x, RowParams<C> p, const C* stats,
                                          std::int64_t d, std::int64_t lo, std::int64_t hi, T* dx, C* dwp,
                                          C* dbp) {
    B::backward(dy, x, p, stats, d, lo, hi, dx, dwp, dbp, false);
  }
};

#ifdef TIERKIT_ROW_VEC
template <template <typename, typename> class Body, typename W, typename T>
struct VecRowsOf {
  using B = Body<VecRowTerms<W, T>, T>;
  template <typename Y>
  TIERKIT_ROW_INLINE static void forward(const T* x, RowParams<float> p, float eps, std::int64_t d,
                                         std::int64_t lo, std::int64_t hi, Y* y, float* stats, bool stream) {
    B::forward(x, p, eps, d, lo, hi, y, stats, stream);
    if (stream) _mm_sfence();
  }
  template <typename Y>
  TIERKIT_ROW_INLINE static void add_forward(const T* x, const T* res, RowParams<float> p, float eps,
                                             std::int64_t d, std::int64_t lo, std::int64_t hi, Y* y, T* h,
                                             float* stats, bool stream) {
    B::add_forward(x, res, p, eps, d, lo, hi, y, h, stats, stream);
    if (stream) _mm_sfence();
  }
  TIERKIT_ROW_INLINE static void backward(const T* dy, const T* x, RowParams<float> p, const float* stats,
                                          std::int64_t d, std::int64_t lo, std::int64_t hi, T* dx, float* dwp,
                                          float* dbp, bool stream) {
    B::backward(dy, x, p, stats, d, lo, hi, dx, dwp, dbp, stream);
    if (stream) _mm_sfence();
  }
};
#endif  // TIERKIT_ROW_VEC

}  // namespace tierkit::kernels::detail
