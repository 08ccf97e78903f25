// The in-place row ops' arithmetic: one functor per ROW_IN_PLACE entry of
// the op table (tierkit_core/op_table.py; TIERKIT_ROW_IN_PLACE names each
// entry's functor), apart from the token rows every binding walks
// (tierkit/token_rows.h). A binding includes this header and reaches each
// functor through the X-macro, so no binding names an op.
//
// rotary_embedding_cached, vLLM's cached rotary embedding (its
// `rotary_embedding(positions, query, key, head_size, cos_sin_cache,
// is_neox)`): query and key rotated in place,
// each token's cos and sin gathered from one row of a cache by the token's
// position. The serving engines call this form: the cache is built once for
// every position, and a batch's tokens sit at arbitrary positions.
//
//  * Layout, vLLM's: token t's head h of query starts at
//    query + t * query_stride + h * head_size (a token row may be a slice of
//    a wider qkv row: query_stride >= query_heads * head_size); key the same
//    with its own stride and head count, or null (no key).
//  * cos_sin_cache: [cache_rows, rot_dim], row p = [cos(p θ_0..), sin(p θ_0..)]
//    (rot_dim / 2 each); rot_dim even, at most head_size; a head's columns
//    from rot_dim on pass through. Of x's dtype or its compute type (vLLM
//    keeps a float32 cache beside 16-bit activations).
//  * NeoX (is_neox): pairs (i, i + rot_dim / 2); GPT-J: (2i, 2i + 1); pair i
//    uses cos[i], sin[i]: a' = a cos - b sin, b' = b cos + a sin, in
//    compute_t<T> (map_functors.h's Rotary::rotate, the row map's pair), each
//    rounded once to T. In float32 that is vLLM's own
//    sequence (two products and a sum, each rounded: -ffp-contract=off); in
//    16-bit vLLM rounds every step and this rounds once.
//  * Every position is checked to lie in [0, cache_rows) before anything is
//    written: a bad one raises InvalidArgument naming the token, and query
//    and key are left as they were.
//  * Tokens run in parallel (Runner); each writes only its own rows, so the
//    bits do not depend on the split.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "tierkit/dtype.h"
#include "tierkit/error.h"
#include "tierkit/kernels.h"
#include "tierkit/map_functors.h"
#include "tierkit/row_rules.h"
#include "tierkit/token_rows.h"

namespace tierkit::kernels {

namespace detail {

// One head's first rot_dim columns rotated in place by the cache row (c, s).
template <typename T, typename P>
void rotate_head_cached(T* x, const P* c, const P* s, std::int64_t half, bool is_neox) {
  using C = compute_t<T>;
  // a pair reads and writes only its own two columns: no iteration feeds another.
  if (is_neox) {
    TIERKIT_VECTORIZE_LOOP
    for (std::int64_t i = 0; i < half; ++i) {
      const C ci = load_compute(c + i), si = load_compute(s + i);
      C ya, yb;
      Rotary::rotate<false>(load_compute(x + i), load_compute(x + i + half), ci, ci, si, si, ya, yb);
      store_compute(x + i, ya);
      store_compute(x + i + half, yb);
    }
  } else {
    TIERKIT_VECTORIZE_LOOP
    for (std::int64_t i = 0; i < half; ++i) {
      const C ci = load_compute(c + i), si = load_compute(s + i);
      C ya, yb;
      Rotary::rotate<false>(load_compute(x + 2 * i), load_compute(x + 2 * i + 1), ci, ci, si, si, ya, yb);
      store_compute(x + 2 * i, ya);
      store_compute(x + 2 * i + 1, yb);
    }
  }
}

}  // namespace detail

template <typename T, typename P, typename Runner = PoolRunner>
void rotary_embedding_cached(const std::int64_t* positions, std::int64_t tokens, TokenHeads<T> query,
                             TokenHeads<T> key, std::int64_t head_size, const P* cos_sin_cache,
                             std::int64_t cache_rows, std::int64_t rot_dim, bool is_neox,
                             const Runner& run = {}) {
  static_assert(std::is_same_v<P, T> || std::is_same_v<P, compute_t<T>>,
                "rotary_embedding_cached: the cache in x's dtype or its compute type");
  check(rot_dim > 0 && rot_dim % 2 == 0 && rot_dim <= head_size,
        "cos_sin_cache: ", "expected an even row length (rot_dim) of at most head_size (", head_size,
        "), got ", rot_dim);
  for (const TokenHeads<T>* t : {&query, &key})
    check(!t->data || (t->heads >= 0 && t->stride >= t->heads * head_size), "a token's row stride (",
          t->stride, ") is shorter than its ", t->heads, " heads of ", head_size);
  for (std::int64_t t = 0; t < tokens; ++t)
    row_rules::index_row("positions", t, positions[t], "cos_sin_cache", cache_rows);
  if (tokens <= 0) return;
  const std::int64_t half = rot_dim / 2;
  const std::int64_t per_token = (query.heads + (key.data ? key.heads : 0)) * rot_dim;
  run(tokens, std::max<std::int64_t>(1, detail::kGrain / std::max<std::int64_t>(1, per_token)),
      [&](std::int64_t lo, std::int64_t hi) {
        for (std::int64_t t = lo; t < hi; ++t) {
          const P* c = cos_sin_cache + positions[t] * rot_dim;
          for (const TokenHeads<T>* x : {&query, &key}) {
            if (!x->data) continue;
            T* row = x->data + t * x->stride;
            for (std::int64_t h = 0; h < x->heads; ++h)
              detail::rotate_head_cached(row + h * head_size, c, c + half, half, is_neox);
          }
        }
      });
}

// The op table's entry (TIERKIT_ROW_IN_PLACE: rotary_embedding_cached): the
// functor each tier's binding calls. Its messages name no op: the binding
// prefixes its own.
struct RotaryCached {
  template <typename T, typename P, typename Runner = PoolRunner>
  static void run(const std::int64_t* positions, std::int64_t tokens, TokenHeads<T> query, TokenHeads<T> key,
                  std::int64_t head_size, const P* cos_sin_cache, std::int64_t cache_rows,
                  std::int64_t rot_dim, bool is_neox, const Runner& runner = {}) {
    rotary_embedding_cached(positions, tokens, query, key, head_size, cos_sin_cache, cache_rows, rot_dim,
                            is_neox, runner);
  }
};

}  // namespace tierkit::kernels
