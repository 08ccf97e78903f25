// The in-place row ops' x arguments as token rows (TIERKIT_ROW_IN_PLACE's
// roles: an index of tokens, x arguments of heads written in place): the
// layouts a kernel walks without a copy, whether two x arguments share an
// element, the heads a token. Every binding asks these; no op is named here
// (each entry's arithmetic: in_place_functors.h).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace tierkit::kernels {

// The heads of one x argument written in place (vLLM's query or key): a
// token's row starts stride elements after the last, `heads` heads a row.
template <typename T>
struct TokenHeads {
  T* data = nullptr;  // null: no such tensor (the second x is optional)
  std::int64_t stride = 0, heads = 0;
};

// A written x seen as token rows, from its sizes and strides (in
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

// A written x as the kernel walks it: token_stride's stride or, where
// there is none (`copied`: the binding computes in a contiguous copy and
// writes it back), the copy's, a token's elements; and its heads a token.
// Every binding asks this.
struct TokenRows {
  std::int64_t stride = 0, heads = 0;
  bool copied = false;
};
template <typename Sizes, typename Strides>
TokenRows token_rows(const Sizes& sizes, const Strides& strides, std::int64_t index_dims, std::int64_t tokens,
                     std::int64_t size) {
  const std::int64_t stride = token_stride(sizes, strides, index_dims, tokens);
  std::int64_t numel = 1;
  for (const auto size : sizes) numel *= static_cast<std::int64_t>(size);
  const std::int64_t per_token = tokens ? numel / tokens : 0;
  return {stride < 0 ? per_token : stride, size ? per_token / size : 0, stride < 0};
}

// Whether the second x written in place shares an element with the first,
// so that one would be computed twice (row_rules::written_apart refuses the
// call). `a` and `b`: the caller's data pointers of the first and the
// second, `ra` and `rb` their token rows, `size` a head's elements. Exact
// where both are the caller's token rows and b lies a whole number of
// elements from a (token_rows_share: vLLM's query and key sliced from one
// fused qkv row share none, though their byte ranges interleave); the
// binding's byte-range test `spans_meet()` otherwise.
template <typename SpansMeet>
bool written_rows_share(const void* a, const TokenRows& ra, const void* b, const TokenRows& rb,
                        std::size_t item, std::int64_t size, std::int64_t tokens, SpansMeet spans_meet) {
  const std::int64_t bytes = static_cast<const char*>(b) - static_cast<const char*>(a);
  const auto elem = static_cast<std::int64_t>(item);
  if (ra.copied || rb.copied || bytes % elem != 0) return spans_meet();
  return token_rows_share(0, ra.stride, ra.heads * size, bytes / elem, rb.stride, rb.heads * size, tokens);
}

}  // namespace tierkit::kernels
