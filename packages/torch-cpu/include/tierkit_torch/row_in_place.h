// The in-place row ops' arguments (TIERKIT_ROW_IN_PLACE), for every backend's
// kernel (torch-cpu's csrc/row_in_place.cpp, torch-cuda's in_place_ops.cpp),
// written for the kind's roles, each named as its entry names it
// (tierkit::in_place_info: vLLM's positions, query, key, cos_sin_cache,
// head_size): an index, x arguments written in place (the second optional),
// a table gathered by the index, a size. The checks (core's
// row_rules::in_place_roles, over torch's tensors), the values read as they
// were at the call, the token rows the kernels walk, and the write back of
// a layout that is no token rows.
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
  at::Tensor rows;  // [tokens, heads * size] over x's memory, or a contiguous copy
};

// A written x as token rows (core's token_rows): over x's memory, or
// computed in a contiguous copy and written back.
inline Heads heads_of(const at::Tensor& x, int64_t index_dims, int64_t tokens, int64_t size) {
  Heads h{tierkit::kernels::token_rows(x.sizes(), x.strides(), index_dims, tokens, size), {}};
  h.rows = h.copied ? x.contiguous() : x;
  return h;
}

// at::Tensor as core's in-place rules read it (row_rules::in_place_roles).
struct RoleReader {
  static at::ScalarType dtype(const at::Tensor& t) { return t.scalar_type(); }
  static bool indexes(at::ScalarType t) { return t == at::kLong || t == at::kInt; }
  static at::ScalarType compute(at::ScalarType t) { return t == at::kDouble ? at::kDouble : at::kFloat; }
  static std::string name(at::ScalarType t) { return dtype_name(t); }
  static at::IntArrayRef sizes(const at::Tensor& t) { return t.sizes(); }
  static at::IntArrayRef strides(const at::Tensor& t) { return t.strides(); }
  static bool device_differs(const at::Tensor& t, const at::Tensor& x) { return t.device() != x.device(); }
  static std::string device(const at::Tensor& t) { return c10::str(t.device()); }
};

// The arguments' rules: core's, with the entry's names (the kernels' and
// the fakes' words: torch-common's in_place_checks).
template <typename Info>
void check(const char* op, const at::Tensor& index, const at::Tensor& x, const OptTensor& x2,
           const at::Tensor& table, int64_t size, c10::DeviceType device) {
  check_first(op, x, Info::written[0], device);
  check_defined(op, index, Info::index);
  check_defined(op, table, Info::table);
  core_check(op, [&] {
    rules::in_place_roles<Info>(RoleReader{}, index, x, present(x2) ? &*x2 : nullptr, table, size,
                                rules::kTorchWords);
  });
}

// A call's arguments as a kernel reads them: checked; the index (int64) and
// the table contiguous, as they were at the call (a copy where they share
// memory with what is written); the written xs as token rows.
struct Prepared {
  at::Tensor index, table;
  Heads x, x2;
  int64_t tokens = 0;
  // Writes a copied layout back into the caller's tensors.
  void write_back(const at::Tensor& x_out, const OptTensor& x2_out) const {
    if (x.copied) x_out.copy_(x.rows);
    if (x2.copied) x2_out->copy_(x2.rows);
  }
};

template <typename Info>
Prepared prepare(const char* op, const at::Tensor& index_in, const at::Tensor& x, const OptTensor& x2,
                 const at::Tensor& table_in, int64_t size, c10::DeviceType device) {
  check<Info>(op, index_in, x, x2, table_in, size, device);
  const auto as_called = [&](const at::Tensor& t) {
    bool shared = at::get_overlap_status(t, x) != at::MemOverlapStatus::No;
    if (present(x2)) shared = shared || at::get_overlap_status(t, *x2) != at::MemOverlapStatus::No;
    return shared ? t.clone(at::MemoryFormat::Contiguous) : t.contiguous();
  };
  Prepared p;
  p.index = as_called(index_in).to(at::kLong);
  p.table = as_called(table_in);
  p.tokens = p.index.numel();
  p.x = heads_of(x, p.index.dim(), p.tokens, size);
  if (present(x2)) p.x2 = heads_of(*x2, p.index.dim(), p.tokens, size);
  const bool shared = present(x2) && tierkit::kernels::written_rows_share(
                                         x.const_data_ptr(), p.x, x2->const_data_ptr(), p.x2,
                                         x.element_size(), size, p.tokens, [&] {
                                           return at::get_overlap_status(x, *x2) != at::MemOverlapStatus::No;
                                         });
  core_check(op, [&] { rules::written_apart(Info::written[1], Info::written[0], shared); });
  return p;
}

}  // namespace tierkit_torch::in_place
