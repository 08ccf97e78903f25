// The in-place row ops' arguments (TIERKIT_ROW_IN_PLACE), for every backend's
// kernel (torch-cpu's csrc/row_in_place.cpp, torch-cuda's in_place_ops.cpp),
// written for the entry's roles: an index (positions), x arguments written in
// place (query, and key or None), a table gathered by the index
// (cos_sin_cache), a size (head_size). The checks and their words (shape
// rules: core's row_rules), the values read as they were at the call, the
// token rows the kernels walk, and the write back of a layout that is no
// token rows.
#pragma once

#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>

#include "tierkit/row_rules.h"
#include "tierkit/token_rows.h"
#include "tierkit_torch/checks.h"

namespace tierkit_torch::in_place {

namespace rules = tierkit::row_rules;
using OptTensor = std::optional<at::Tensor>;

inline bool present(const OptTensor& t) { return t && t->defined(); }

// Arguments as the kernel reads them, and where each written x goes back.
struct Heads : tierkit::kernels::TokenRows {
  at::Tensor rows;  // [tokens, heads * head_size] over x's memory, or a contiguous copy
};

// x (query or key) as token rows (core's token_rows): over x's memory, or
// computed in a contiguous copy and written back.
inline Heads heads_of(const at::Tensor& x, int64_t index_dims, int64_t tokens, int64_t head_size) {
  Heads h{tierkit::kernels::token_rows(x.sizes(), x.strides(), index_dims, tokens, head_size), {}};
  h.rows = h.copied ? x.contiguous() : x;
  return h;
}

// The arguments' rules, the kernels' and the fakes' (torch-common's in_place_checks) words.
inline void check(const char* op, const at::Tensor& positions, const at::Tensor& query, const OptTensor& key,
                  const at::Tensor& cache, int64_t head_size, c10::DeviceType device) {
  check_first(op, query, "query", device);
  check_defined(op, positions, "positions");
  check_defined(op, cache, "cos_sin_cache");
  const auto same_device = [&](const at::Tensor& t, const char* n) {
    TORCH_CHECK(t.device() == query.device(), op, ": ", n, ": expected device ", query.device(),
                " (same as query), got ", t.device());
  };
  same_device(positions, "positions");
  same_device(cache, "cos_sin_cache");
  TORCH_CHECK(positions.scalar_type() == at::kLong || positions.scalar_type() == at::kInt, op,
              ": positions: expected dtype int64 or int32, got ", dtype_name(positions.scalar_type()));
  const at::ScalarType compute = query.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  TORCH_CHECK(cache.scalar_type() == query.scalar_type() || cache.scalar_type() == compute, op,
              ": cos_sin_cache: expected dtype ", dtype_name(query.scalar_type()),
              query.scalar_type() == compute
                  ? std::string(" (query's)")
                  : " or " + std::string(dtype_name(compute)) + " (query's or its compute type)",
              ", got ", dtype_name(cache.scalar_type()));
  core_check(op, [&] {
    rules::indexed_heads("query", query.sizes(), positions.sizes(), "positions", head_size,
                         rules::kTorchWords);
    rules::gathered_table("cos_sin_cache", cache.sizes(), head_size, rules::kTorchWords);
  });
  if (!present(key)) return;
  same_device(*key, "key");
  TORCH_CHECK(key->scalar_type() == query.scalar_type(), op, ": key: expected dtype ",
              dtype_name(query.scalar_type()), " (same as query), got ", dtype_name(key->scalar_type()));
  core_check(op, [&] {
    rules::indexed_heads("key", key->sizes(), positions.sizes(), "positions", head_size, rules::kTorchWords);
  });
}

// A call's arguments as a kernel reads them: checked; positions (int64) and
// the cache contiguous, as they were at the call (a copy where they share
// memory with what is written); query and key as token rows.
struct Prepared {
  at::Tensor positions, cache;
  Heads query, key;
  int64_t tokens = 0;
  // Writes a copied layout back into the caller's tensors.
  void write_back(const at::Tensor& query_out, const OptTensor& key_out) const {
    if (query.copied) query_out.copy_(query.rows);
    if (key.copied) key_out->copy_(key.rows);
  }
};

inline Prepared prepare(const char* op, const at::Tensor& positions_in, const at::Tensor& query,
                        const OptTensor& key, const at::Tensor& cache_in, int64_t head_size,
                        c10::DeviceType device) {
  check(op, positions_in, query, key, cache_in, head_size, device);
  core_check(op, [&] {
    namespace rules = tierkit::row_rules;
    rules::written_alone("query", query.sizes(), query.strides(), rules::kTorchWords);
    if (present(key)) rules::written_alone("key", key->sizes(), key->strides(), rules::kTorchWords);
  });
  const auto as_called = [&](const at::Tensor& t) {
    bool shared = at::get_overlap_status(t, query) != at::MemOverlapStatus::No;
    if (present(key)) shared = shared || at::get_overlap_status(t, *key) != at::MemOverlapStatus::No;
    return shared ? t.clone(at::MemoryFormat::Contiguous) : t.contiguous();
  };
  Prepared p;
  p.positions = as_called(positions_in).to(at::kLong);
  p.cache = as_called(cache_in);
  p.tokens = p.positions.numel();
  p.query = heads_of(query, p.positions.dim(), p.tokens, head_size);
  if (present(key)) p.key = heads_of(*key, p.positions.dim(), p.tokens, head_size);
  const bool shared =
      present(key) &&
      tierkit::kernels::key_shares_query(
          query.const_data_ptr(), p.query, key->const_data_ptr(), p.key, query.element_size(), head_size,
          p.tokens, [&] { return at::get_overlap_status(query, *key) != at::MemOverlapStatus::No; });
  core_check(op, [&] { tierkit::row_rules::written_apart("key", "query", shared); });
  return p;
}

}  // namespace tierkit_torch::in_place
