// The in-place row ops (TIERKIT_ROW_IN_PLACE) on torch's stable ABI: the x
// arguments written in place, each token's table row gathered by its index.
// Written for the entry's roles as tierkit::'s (torch-cpu's
// csrc/row_in_place.cpp), with its checks and words and core's functor, so
// the results are tierkit::'s bit for bit. The Autograd kernel (refusing a
// derivative, bumping the versions) is Python's
// (tierkit_torch_stable/_rows.py).
#include <torch/csrc/stable/library.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "stable_tensor.h"
#include "tierkit/in_place_functors.h"
#include "tierkit/op_table.h"
#include "tierkit/row_rules.h"

namespace tierkit_stable {
namespace {

namespace rules = tierkit::row_rules;
using OptTensor = std::optional<Tensor>;

bool present(const OptTensor& t) { return t.has_value() && t->defined(); }

bool spans_meet(const Tensor& a, const Tensor& b) {
  if (a.numel() == 0 || b.numel() == 0) return false;
  const auto [a0, a1] = byte_span(a);
  const auto [b0, b1] = byte_span(b);
  return a0 < b1 && b0 < a1;
}

// x as token rows (core's token_rows): over x's memory, or computed in a
// contiguous copy and written back after.
struct Heads : tierkit::kernels::TokenRows {
  Tensor rows;
};
Heads heads_of(const Tensor& x, int64_t index_dims, int64_t tokens, int64_t head_size) {
  Heads h{tierkit::kernels::token_rows(sizes_of(x), strides_of(x), index_dims, tokens, head_size), {}};
  h.rows = h.copied ? torch::stable::contiguous(x) : x;
  return h;
}

template <typename Info>
struct StableInPlace {
  static const char* name() {
    static const std::string n = std::string("tierkit_stable::") + Info::name;
    return n.c_str();
  }

  static void check(const char* op, const Tensor& positions, const Tensor& query, const OptTensor& key,
                    const Tensor& cache, int64_t head_size) {
    check_first(op, query, "query");
    check_defined(op, positions, "positions");
    check_defined(op, cache, "cos_sin_cache");
    const auto same_device = [&](const Tensor& t, const std::string& n) {
      if (!(t.device() == query.device()))
        fail(op, n + ": expected device " + device_str(query.device()) + " (same as query), got " +
                     device_str(t.device()));
    };
    same_device(positions, "positions");
    same_device(cache, "cos_sin_cache");
    if (positions.scalar_type() != ScalarType::Long && positions.scalar_type() != ScalarType::Int)
      fail(op, "positions: expected dtype int64 or int32, got " + dtype_name(positions.scalar_type()));
    const ScalarType compute =
        query.scalar_type() == ScalarType::Double ? ScalarType::Double : ScalarType::Float;
    if (cache.scalar_type() != query.scalar_type() && cache.scalar_type() != compute)
      fail(op, "cos_sin_cache: expected dtype " + dtype_name(query.scalar_type()) +
                   (query.scalar_type() == compute
                        ? std::string(" (query's)")
                        : " or " + dtype_name(compute) + " (query's or its compute type)") +
                   ", got " + dtype_name(cache.scalar_type()));
    core_check(op, [&] {
      rules::indexed_heads("query", sizes_of(query), sizes_of(positions), "positions", head_size,
                           rules::kTorchWords);
      rules::gathered_table("cos_sin_cache", sizes_of(cache), head_size, rules::kTorchWords);
    });
    if (!present(key)) return;
    same_device(*key, "key");
    if (key->scalar_type() != query.scalar_type())
      fail(op, "key: expected dtype " + dtype_name(query.scalar_type()) + " (same as query), got " +
                   dtype_name(key->scalar_type()));
    core_check(op, [&] {
      rules::indexed_heads("key", sizes_of(*key), sizes_of(positions), "positions", head_size,
                           rules::kTorchWords);
    });
  }

  static void op(Tensor positions_in, Tensor query, OptTensor key, Tensor cache_in, int64_t head_size,
                 bool is_neox) {
    const char* op = name();
    check(op, positions_in, query, key, cache_in, head_size);
    core_check(op, [&] {  // before anything is computed: a copied layout's write-back would race or fail
      rules::written_alone("query", sizes_of(query), strides_of(query), rules::kTorchWords);
      if (present(key)) rules::written_alone("key", sizes_of(*key), strides_of(*key), rules::kTorchWords);
    });
    // The index and the table as every token reads them: the values they had at the call.
    const auto as_called = [&](const Tensor& t) {
      const bool shared = spans_meet(t, query) || (present(key) && spans_meet(t, *key));
      return torch::stable::contiguous(shared ? torch::stable::clone(t) : t);
    };
    Tensor positions = as_called(positions_in);
    if (positions.scalar_type() != ScalarType::Long)
      positions = torch::stable::to(positions, ScalarType::Long);
    const Tensor cache = as_called(cache_in);
    const int64_t tokens = positions.numel(), index_dims = positions.dim();
    Heads q = heads_of(query, index_dims, tokens, head_size);
    Heads k = present(key) ? heads_of(*key, index_dims, tokens, head_size) : Heads{};
    if (present(key)) {
      const bool shared =
          tierkit::kernels::key_shares_query(query.data_ptr(), q, key->data_ptr(), k, query.element_size(),
                                             head_size, tokens, [&] { return spans_meet(query, *key); });
      core_check(op, [&] { rules::written_apart("key", "query", shared); });
    }
    const auto cache_sizes = sizes_of(cache);
    core_check(op, [&] {
      tierkit::dispatch_accepted(dtype_of(query), "query", [&](auto tag) {
        using T = decltype(tag);
        const auto heads = [](Heads& h) {
          return tierkit::kernels::TokenHeads<T>{
              h.rows.defined() ? static_cast<T*>(h.rows.mutable_data_ptr()) : nullptr, h.stride, h.heads};
        };
        const auto run = [&](const auto* table) {
          Info::Functor::run(static_cast<const int64_t*>(positions.data_ptr()), tokens, heads(q), heads(k),
                             head_size, table, cache_sizes[0], cache_sizes[1], is_neox, RowRunner{});
        };
        if (cache.scalar_type() == query.scalar_type())
          run(static_cast<const T*>(cache.data_ptr()));
        else
          run(static_cast<const tierkit::compute_t<T>*>(cache.data_ptr()));
      });
    });
    if (q.copied) torch::stable::copy_(query, q.rows);
    if (present(key) && k.copied) torch::stable::copy_(*key, k.rows);
  }
};

#define TIERKIT_IN_PLACE_INFO(NAME, FUNCTOR)   \
  struct NAME##_info {                         \
    static constexpr const char* name = #NAME; \
    using Functor = tierkit::kernels::FUNCTOR; \
  };                                           \
  using NAME##_kernel = StableInPlace<NAME##_info>;
TIERKIT_ROW_IN_PLACE(TIERKIT_IN_PLACE_INFO)
#undef TIERKIT_IN_PLACE_INFO

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(tierkit_stable, CPU, m) {
#define TIERKIT_REGISTER_IN_PLACE(NAME, FUNCTOR) m.impl(#NAME, TORCH_BOX(&NAME##_kernel::op));
  TIERKIT_ROW_IN_PLACE(TIERKIT_REGISTER_IN_PLACE)
#undef TIERKIT_REGISTER_IN_PLACE
}

}  // namespace tierkit_stable
