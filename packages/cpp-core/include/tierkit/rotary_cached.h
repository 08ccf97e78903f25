// vLLM's cached rotary embedding (its `rotary_embedding(positions, query,
// key, head_size, cos_sin_cache, is_neox)`): query and key rotated in place,
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
//    compute_t<T> (row_maps.h's Rotary::rotate, the row map's pair), each
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
#include "tierkit/row_maps.h"

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

// The heads of one tensor (query or key) of the cached rotary embedding.
template <typename T>
struct CachedHeads {
  T* data = nullptr;  // null: no such tensor (key is optional)
  std::int64_t stride = 0, heads = 0;
};

template <typename T, typename P, typename Runner = PoolRunner>
void rotary_embedding_cached(const std::int64_t* positions, std::int64_t tokens, CachedHeads<T> query,
                             CachedHeads<T> key, std::int64_t head_size, const P* cos_sin_cache,
                             std::int64_t cache_rows, std::int64_t rot_dim, bool is_neox,
                             const Runner& run = {}) {
  static_assert(std::is_same_v<P, T> || std::is_same_v<P, compute_t<T>>,
                "rotary_embedding_cached: the cache in x's dtype or its compute type");
  check(rot_dim > 0 && rot_dim % 2 == 0 && rot_dim <= head_size,
        "cos_sin_cache: ", "expected an even row length (rot_dim) of at most head_size (", head_size,
        "), got ", rot_dim);
  for (const CachedHeads<T>* t : {&query, &key})
    check(!t->data || (t->heads >= 0 && t->stride >= t->heads * head_size), "a token's row stride (",
          t->stride, ") is shorter than its ", t->heads, " heads of ", head_size);
  for (std::int64_t t = 0; t < tokens; ++t)
    check(positions[t] >= 0 && positions[t] < cache_rows, "positions[", t,
          "]: expected a row of cos_sin_cache, in [0, ", cache_rows, "), got ", positions[t]);
  if (tokens <= 0) return;
  const std::int64_t half = rot_dim / 2;
  const std::int64_t per_token = (query.heads + (key.data ? key.heads : 0)) * rot_dim;
  run(tokens, std::max<std::int64_t>(1, detail::kGrain / std::max<std::int64_t>(1, per_token)),
      [&](std::int64_t lo, std::int64_t hi) {
        for (std::int64_t t = lo; t < hi; ++t) {
          const P* c = cos_sin_cache + positions[t] * rot_dim;
          for (const CachedHeads<T>* x : {&query, &key}) {
            if (!x->data) continue;
            T* row = x->data + t * x->stride;
            for (std::int64_t h = 0; h < x->heads; ++h)
              detail::rotate_head_cached(row + h * head_size, c, c + half, half, is_neox);
          }
        }
      });
}

// x (query or key) seen as token rows, from its sizes and strides (in
// elements): its dims from `index_dims` on one dense row, its index dims one
// positive stride apart. Returns that token stride (a row's elements when
// there is one token), or -1 for any other layout (the caller then works on
// a contiguous copy and writes it back). Every binding asks this.
template <typename Sizes, typename Strides>
std::int64_t token_stride(const Sizes& sizes, const Strides& strides, std::int64_t index_dims,
                          std::int64_t tokens) {
  const auto n = static_cast<std::int64_t>(sizes.size());
  std::int64_t row = 1;
  for (std::int64_t k = n - 1; k >= index_dims; --k) {
    if (!(sizes[k] == 1 || strides[k] == row)) return -1;
    row *= sizes[k];
  }
  for (std::int64_t k = index_dims - 2; k >= 0; --k)
    if (!(sizes[k] == 1 || strides[k] == strides[k + 1] * sizes[k + 1])) return -1;
  if (index_dims == 0 || tokens <= 1) return row;
  return strides[index_dims - 1] > 0 ? strides[index_dims - 1] : -1;
}

// Whether two tensors of token rows share an element: a's row t holds the
// elements [a0 + t sa, a0 + t sa + wa) (element offsets from one base), b's
// alike; `tokens` rows each, strides positive. Exact: query and key sliced
// from one fused qkv row share none, though their byte ranges interleave.
inline bool token_rows_share(std::int64_t a0, std::int64_t sa, std::int64_t wa, std::int64_t b0,
                             std::int64_t sb, std::int64_t wb, std::int64_t tokens) {
  if (tokens <= 0 || wa <= 0 || wb <= 0) return false;
  const auto floor_div = [](std::int64_t n, std::int64_t d) {
    return n / d - (n % d != 0 && (n < 0) != (d < 0));
  };
  for (std::int64_t t = 0; t < tokens; ++t) {
    const std::int64_t lo = a0 + t * sa, hi = lo + wa;
    if (tokens == 1 || sb <= 0) {
      if (b0 < hi && lo < b0 + wb) return true;
      continue;
    }
    // b's rows u starting in (lo - wb, hi) meet a's row t.
    const std::int64_t u0 = std::max<std::int64_t>(0, floor_div(lo - wb - b0, sb) + 1);
    const std::int64_t u1 = std::min<std::int64_t>(tokens - 1, floor_div(hi - 1 - b0, sb));
    if (u0 <= u1) return true;
  }
  return false;
}

// x (query or key) as the kernel walks it: token_stride's stride or, where
// there is none (`copied`: the binding computes in a contiguous copy and
// writes it back), the copy's, a token's elements; and its heads a token.
// Every binding asks this.
struct TokenRows {
  std::int64_t stride = 0, heads = 0;
  bool copied = false;
};
template <typename Sizes, typename Strides>
TokenRows token_rows(const Sizes& sizes, const Strides& strides, std::int64_t index_dims, std::int64_t tokens,
                     std::int64_t head_size) {
  const std::int64_t stride = token_stride(sizes, strides, index_dims, tokens);
  std::int64_t numel = 1;
  for (const auto size : sizes) numel *= static_cast<std::int64_t>(size);
  const std::int64_t per_token = tokens ? numel / tokens : 0;
  return {stride < 0 ? per_token : stride, head_size ? per_token / head_size : 0, stride < 0};
}

// Whether key shares an element with query, so that one would be rotated
// twice (row_rules::written_apart refuses the call). `query` and `key`: the
// caller's data pointers. Exact where both are the caller's token rows and
// key lies a whole number of elements from query (token_rows_share: query
// and key sliced from one fused qkv row share none, though their byte
// ranges interleave); the binding's byte-range test `spans_meet()` otherwise.
template <typename SpansMeet>
bool key_shares_query(const void* query, const TokenRows& q, const void* key, const TokenRows& k,
                      std::size_t item, std::int64_t head_size, std::int64_t tokens, SpansMeet spans_meet) {
  const std::int64_t bytes = static_cast<const char*>(key) - static_cast<const char*>(query);
  const auto size = static_cast<std::int64_t>(item);
  if (q.copied || k.copied || bytes % size != 0) return spans_meet();
  return token_rows_share(0, q.stride, q.heads * head_size, bytes / size, k.stride, k.heads * head_size,
                          tokens);
}

// The op table's entry (TIERKIT_ROW_IN_PLACE: rotary_embedding_cached): the
// functor each tier's binding calls. Its messages name no op: the binding
// prefixes its own.
struct RotaryCached {
  template <typename T, typename P, typename Runner = PoolRunner>
  static void run(const std::int64_t* positions, std::int64_t tokens, CachedHeads<T> query,
                  CachedHeads<T> key, std::int64_t head_size, const P* cos_sin_cache, std::int64_t cache_rows,
                  std::int64_t rot_dim, bool is_neox, const Runner& runner = {}) {
    rotary_embedding_cached(positions, tokens, query, key, head_size, cos_sin_cache, cache_rows, rot_dim,
                            is_neox, runner);
  }
};

}  // namespace tierkit::kernels
