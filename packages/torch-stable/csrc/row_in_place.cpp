// The in-place row ops (TIERKIT_ROW_IN_PLACE) on torch's stable ABI: the x
// arguments written in place, each token's table row gathered by its index.
// Written for the kind's roles, each named as the entry names it
// (tierkit::in_place_info), as tierkit::'s (torch-cpu's
// csrc/row_in_place.cpp), with core's rules and words and functor, so
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

// A stable Tensor as core's in-place rules read it (row_rules::in_place_roles).
struct RoleReader {
  static ScalarType dtype(const Tensor& t) { return t.scalar_type(); }
  static bool indexes(ScalarType t) { return t == ScalarType::Long || t == ScalarType::Int; }
  static ScalarType compute(ScalarType t) {
    return t == ScalarType::Double ? ScalarType::Double : ScalarType::Float;
  }
  static std::string name(ScalarType t) { return dtype_name(t); }
  static std::vector<int64_t> sizes(const Tensor& t) { return sizes_of(t); }
  static std::vector<int64_t> strides(const Tensor& t) { return strides_of(t); }
  static bool device_differs(const Tensor& t, const Tensor& x) { return !(t.device() == x.device()); }
  static std::string device(const Tensor& t) { return device_str(t.device()); }
};

// A written x as token rows (core's token_rows): over x's memory, or
// computed in a contiguous copy and written back after.
struct Heads : tierkit::kernels::TokenRows {
  Tensor rows;
};
Heads heads_of(const Tensor& x, int64_t index_dims, int64_t tokens, int64_t size) {
  Heads h{tierkit::kernels::token_rows(sizes_of(x), strides_of(x), index_dims, tokens, size), {}};
  h.rows = h.copied ? torch::stable::contiguous(x) : x;
  return h;
}

// One entry's kernel: Info is the op table's (tierkit::in_place_info: its
// arguments' names by role), F core's functor. The schema's arguments by
// role: the index, the x written in place and the optional second, the
// table gathered by the index, the size of a head, the flag.
template <typename Info, typename F>
struct StableInPlace {
  static inline const std::string kName = std::string("tierkit_stable::") + Info::name;

  static void check(const char* op, const Tensor& index, const Tensor& x, const OptTensor& x2,
                    const Tensor& table, int64_t size) {
    check_first(op, x, Info::written[0]);
    check_defined(op, index, Info::index);
    check_defined(op, table, Info::table);
    core_check(op, [&] {
      rules::in_place_roles<Info>(RoleReader{}, index, x, present(x2) ? &*x2 : nullptr, table, size,
                                  rules::kTorchWords);
    });
  }

  static void op(Tensor index_in, Tensor x, OptTensor x2, Tensor table_in, int64_t size, bool flag) {
    const char* op = kName.c_str();
    check(op, index_in, x, x2, table_in, size);
    // The index and the table as every token reads them: the values they had at the call.
    const auto as_called = [&](const Tensor& t) {
      const bool shared = spans_meet(t, x) || (present(x2) && spans_meet(t, *x2));
      return torch::stable::contiguous(shared ? torch::stable::clone(t) : t);
    };
    Tensor index = as_called(index_in);
    if (index.scalar_type() != ScalarType::Long) index = torch::stable::to(index, ScalarType::Long);
    const Tensor table = as_called(table_in);
    const int64_t tokens = index.numel(), index_dims = index.dim();
    Heads h = heads_of(x, index_dims, tokens, size);
    Heads h2 = present(x2) ? heads_of(*x2, index_dims, tokens, size) : Heads{};
    if (present(x2)) {
      const bool shared =
          tierkit::kernels::written_rows_share(x.data_ptr(), h, x2->data_ptr(), h2, x.element_size(), size,
                                               tokens, [&] { return spans_meet(x, *x2); });
      core_check(op, [&] { rules::written_apart(Info::written[1], Info::written[0], shared); });
    }
    const auto table_sizes = sizes_of(table);
    core_check(op, [&] {
      tierkit::dispatch_accepted(dtype_of(x), Info::written[0], [&](auto tag) {
        using T = decltype(tag);
        const auto heads = [](Heads& r) {
          return tierkit::kernels::TokenHeads<T>{
              r.rows.defined() ? static_cast<T*>(r.rows.mutable_data_ptr()) : nullptr, r.stride, r.heads};
        };
        const auto run = [&](const auto* t) {
          F::run(static_cast<const int64_t*>(index.data_ptr()), tokens, heads(h), heads(h2), size, t,
                 table_sizes[0], table_sizes[1], flag, RowRunner{});
        };
        if (table.scalar_type() == x.scalar_type())
          run(static_cast<const T*>(table.data_ptr()));
        else
          run(static_cast<const tierkit::compute_t<T>*>(table.data_ptr()));
      });
    });
    if (h.copied) torch::stable::copy_(x, h.rows);
    if (present(x2) && h2.copied) torch::stable::copy_(*x2, h2.rows);
  }
};

// One kernel type per entry (a name, so TORCH_BOX's argument holds no comma).
#define TIERKIT_IN_PLACE_KERNEL(NAME, FUNCTOR) \
  using NAME##_kernel = StableInPlace<tierkit::in_place_info::NAME, tierkit::kernels::FUNCTOR>;
TIERKIT_ROW_IN_PLACE(TIERKIT_IN_PLACE_KERNEL)
#undef TIERKIT_IN_PLACE_KERNEL

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(tierkit_stable, CPU, m) {
#define TIERKIT_REGISTER_IN_PLACE(NAME, FUNCTOR) m.impl(#NAME, TORCH_BOX(&NAME##_kernel::op));
  TIERKIT_ROW_IN_PLACE(TIERKIT_REGISTER_IN_PLACE)
#undef TIERKIT_REGISTER_IN_PLACE
}

}  // namespace tierkit_stable
