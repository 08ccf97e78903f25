// The row maps' arithmetic: one functor per ROW_MAPS entry of the op table
// (tierkit_core/op_table.py; TIERKIT_ROW_MAPS names each entry's functor),
// kept apart from the loops that run them (tierkit/row_maps.h: the table
// rows, the split over rows, the SIMD levels). A binding includes this
// header and reaches each functor through the X-macro, so no binding names
// an op.
//
// Rounding: computed in compute_t<T>, each output rounded once. In float32
// and float64 that is eager's own sequence (two products, one sum, each
// rounded: -ffp-contract=off keeps them apart), so the result is eager's bit
// for bit; in 16-bit eager rounds every step and this rounds once.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "tierkit/dtype.h"
#include "tierkit/row_kernels.h"
#include "tierkit/row_maps.h"

namespace tierkit::kernels {

// The rotary embedding: on the first r columns, y = x * cos + rotate(x) * sin;
// rotate pairs (j, j + r/2) (NeoX's rotate_half: [-x2, x1]) or, interleaved,
// (2i, 2i + 1) (GPT-J's). The transpose (x's gradient from y's) is R^T per
// pair. Columns from r on pass through.
struct Rotary {
  static constexpr std::size_t kTables = 2;
  // 16-bit rows at the baseline level go through float blocks of this many
  // columns (every head_dim models use fits one): widened once, computed by
  // the float loop (which the compiler vectorizes, as it does the conversion
  // loops), narrowed once. The vector levels widen in registers (RowVec).
  static constexpr std::int64_t kBlock = 1024;

  // Every output of the map, in any layout, at any width: y = x * c + p *
  // sign, where p is the partner's product (the partner times this column's
  // sin forward, times its own transposed) and sign is -1 or +1 by the
  // column's place in its pair. A sign flip is exact and x - y is x + (-y)
  // in IEEE, so this is a pair's "x c - p" or "x c + p" bit for bit; GCC
  // folds the constant signs of the scalar and NeoX forms away.
  template <typename V, typename S>
  TIERKIT_ROW_INLINE static V turn(V x, V c, V p, S sign) {
    return x * c + p * sign;
  }
  // A pair (a, b) rotated: forward [ca a - sa b, sb a + cb b]; transpose
  // [ca a + sb b, cb b - sa a]: turn() for each, for a compute-type value
  // and a register vector (RowVec's NeoX halves; the cached form's pairs,
  // in_place_functors.h). GPT-J's vector lanes call turn() directly.
  template <bool kTranspose, typename V>
  TIERKIT_ROW_INLINE static void rotate(V a, V b, V ca, V cb, V sa, V sb, V& ya, V& yb) {
    if constexpr (!kTranspose) {
      ya = turn(a, ca, b * sa, -1.0f);
      yb = turn(b, cb, a * sb, 1.0f);
    } else {
      ya = turn(a, ca, b * sb, 1.0f);
      yb = turn(b, cb, a * sa, -1.0f);
    }
  }

  // One pair at (ia, ib), in compute_t<T>, each output rounded once.
  template <typename T, bool kTranspose>
  static void pair(const T* x, const T* c, const T* s, std::int64_t ia, std::int64_t ib, T* y) {
    using C = compute_t<T>;
    C ya, yb;
    rotate<kTranspose>(load_compute(x + ia), load_compute(x + ib), load_compute(c + ia), load_compute(c + ib),
                       load_compute(s + ia), load_compute(s + ib), ya, yb);
    store_compute(y + ia, ya);
    store_compute(y + ib, yb);
  }
  // Pairs [lo, hi) of a row in its layout.
  template <typename T, bool kTranspose>
  static void pairs(const T* x, const T* c, const T* s, std::int64_t lo, std::int64_t hi, std::int64_t h,
                    bool interleaved, T* y) {
    // One loop per layout, each vectorized: a pair reads and writes only its
    // own two columns, so no iteration feeds another, even with y == x.
    if (interleaved) {
      TIERKIT_VECTORIZE_LOOP
      for (std::int64_t i = lo; i < hi; ++i) pair<T, kTranspose>(x, c, s, 2 * i, 2 * i + 1, y);
    } else {
      TIERKIT_VECTORIZE_LOOP
      for (std::int64_t i = lo; i < hi; ++i) pair<T, kTranspose>(x, c, s, i, i + h, y);
    }
  }
  template <typename T>
  static void pairs(const T* x, const T* c, const T* s, std::int64_t lo, std::int64_t hi, std::int64_t h,
                    bool interleaved, bool transpose, T* y) {
    if (transpose)
      pairs<T, true>(x, c, s, lo, hi, h, interleaved, y);
    else
      pairs<T, false>(x, c, s, lo, hi, h, interleaved, y);
  }

  // The kind's call (row_maps.h): the tables' rows as the loops hand them over, cos then sin.
  template <typename T>
  static void row(const T* x, const T* const (&t)[kTables], std::int64_t d, std::int64_t r, bool interleaved,
                  bool transpose, T* y) {
    row(x, t[0], t[1], d, r, interleaved, transpose, y);
  }
  // The row at the baseline level (and double's at every level).
  template <typename T>
  static void row(const T* x, const T* c, const T* s, std::int64_t d, std::int64_t r, bool interleaved,
                  bool transpose, T* y) {
    if constexpr (!std::is_same_v<compute_t<T>, T>) {
      if (r <= kBlock) {
        float xf[kBlock], cf[kBlock], sf[kBlock], yf[kBlock];
        TIERKIT_VECTORIZE_LOOP
        for (std::int64_t j = 0; j < r; ++j) {
          xf[j] = load_compute(x + j);
          cf[j] = load_compute(c + j);
          sf[j] = load_compute(s + j);
        }
        // Every column the float loop reads, [0, r), was written above; GCC cannot see it through r.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
        row<float>(xf, cf, sf, r, r, interleaved, transpose, yf);
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
        TIERKIT_VECTORIZE_LOOP
        for (std::int64_t j = 0; j < r; ++j) store_compute(y + j, yf[j]);
        if (y != x) std::copy(x + r, x + d, y + r);
        return;
      }
    }
    pairs(x, c, s, 0, r / 2, r / 2, interleaved, transpose, y);
    if (y != x) std::copy(x + r, x + d, y + r);
  }

#ifdef TIERKIT_ROW_VEC
  // The row at W's vector width (float and the 16-bit types at AVX2 and
  // AVX-512), 16-bit lanes widened and rounded in registers: each element
  // the scalar pair's products and sum (the interleaved layout's partner
  // from a lane swap; x - y is x + (-y) in IEEE, so a sign flip of an exact
  // product keeps the bits), so row()'s bits at every level. A row's tail is
  // one more vector through zero-padded lanes, not pair(): GCC 12 fuses the
  // interleaved scalar pairs, vectorized at these levels, into VFMADDSUB
  // despite fp-contract=off (one rounding, not three). `stream`: y's full
  // vectors stored non-temporally (float; rows aligned).
  template <typename W, typename T>
  struct RowVec {
    using F = typename W::F;
    using U = typename W::U;
    static constexpr std::int64_t L = W::kLanes;

    TIERKIT_ROW_INLINE static F load(const T* p) { return detail::load_lanes<W>(p); }
    // Lanes [0, n) of p, the rest 0.
    TIERKIT_ROW_INLINE static F load_part(const T* p, std::int64_t n) {
      T b[L] = {};
      std::copy(p, p + n, b);
      return detail::load_lanes<W>(b);
    }
    TIERKIT_ROW_INLINE static void store_part(T* p, F v, std::int64_t n) {
      T b[L];
      detail::store_lanes<W>(b, v);
      std::copy(b, b + n, p);
    }
    TIERKIT_ROW_INLINE static F swap_pairs(F v) {
      U idx;
      for (int k = 0; k < L; ++k) idx[k] = static_cast<std::uint32_t>(k ^ 1);
      return __builtin_shuffle(v, idx);
    }
    // GPT-J pairs (2i, 2i + 1) in lanes: forward [a ca - b sa, b cb + a sb],
    // transpose [a ca + b sb, b cb - a sa], each lane turn() with its
    // partner from a lane swap; `sign` (-1, +1, ...) forward, (+1, -1, ...)
    // transposed.
    TIERKIT_ROW_INLINE static F gptj(F x, F c, F s, F sign, bool transpose) {
      return turn(x, c, transpose ? swap_pairs(x * s) : swap_pairs(x) * s, sign);
    }
    // NeoX halves: lanes of a (columns i..) and b (i + h..), as pair().
    TIERKIT_ROW_INLINE static void neox(F a, F b, F ca, F cb, F sa, F sb, bool transpose, F& ya, F& yb) {
      if (transpose)
        rotate<true>(a, b, ca, cb, sa, sb, ya, yb);
      else
        rotate<false>(a, b, ca, cb, sa, sb, ya, yb);
    }

    // The kind's call (row_maps.h): the tables' rows as the loops hand them over, cos then sin.
    TIERKIT_ROW_INLINE static void row(const T* x, const T* const (&t)[kTables], std::int64_t d,
                                       std::int64_t r, bool interleaved, bool transpose, T* y, bool stream) {
      row(x, t[0], t[1], d, r, interleaved, transpose, y, stream);
    }
    TIERKIT_ROW_INLINE static void row(const T* x, const T* c, const T* s, std::int64_t d, std::int64_t r,
                                       bool interleaved, bool transpose, T* y, bool stream) {
      if constexpr (sizeof(T) == 2) {
        if (stream) {  // whole lines around the cache (detail::row_streams)
          detail::StreamRow<T> buf;
          row_to(x, c, s, d, r, interleaved, transpose, buf.p, false);
          detail::stream_row<W>(buf.p, y, d);
          return;
        }
      }
      row_to(x, c, s, d, r, interleaved, transpose, y, stream);
    }
    TIERKIT_ROW_INLINE static void row_to(const T* x, const T* c, const T* s, std::int64_t d, std::int64_t r,
                                          bool interleaved, bool transpose, T* y, bool stream) {
      const std::int64_t h = r / 2;
      if (interleaved) {
        F sign;
        for (int k = 0; k < L; ++k) sign[k] = ((k % 2 == 0) != transpose) ? -1.0f : 1.0f;
        std::int64_t j = 0;
        for (; j + L <= r; j += L)
          detail::store_lanes<W>(y + j, gptj(load(x + j), load(c + j), load(s + j), sign, transpose), stream);
        if (j < r) {
          const std::int64_t n = r - j;
          store_part(y + j,
                     gptj(load_part(x + j, n), load_part(c + j, n), load_part(s + j, n), sign, transpose), n);
        }
      } else {
        // y + i + h is a vector's boundary only where h is a whole number of vectors.
        const bool aligned = stream && h % L == 0;
        F ya, yb;
        std::int64_t i = 0;
        for (; i + L <= h; i += L) {
          neox(load(x + i), load(x + i + h), load(c + i), load(c + i + h), load(s + i), load(s + i + h),
               transpose, ya, yb);
          detail::store_lanes<W>(y + i, ya, aligned);
          detail::store_lanes<W>(y + i + h, yb, aligned);
        }
        if (i < h) {
          const std::int64_t n = h - i;
          neox(load_part(x + i, n), load_part(x + i + h, n), load_part(c + i, n), load_part(c + i + h, n),
               load_part(s + i, n), load_part(s + i + h, n), transpose, ya, yb);
          store_part(y + i, ya, n);
          store_part(y + i + h, yb, n);
        }
      }
      if (y != x) std::copy(x + r, x + d, y + r);
    }
  };
#endif
};

}  // namespace tierkit::kernels
