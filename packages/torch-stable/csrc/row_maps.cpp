// The row maps (the op table's third kind, TIERKIT_ROW_MAPS) on torch's
// stable ABI, one template for every entry: the map
// and its transpose (x's gradient, _<name>_backward). The schemas are the op
// table's (kRowMapSchemas, defined in ops.cpp), the checks say what
// tierkit::'s say, and the arithmetic is core's (tierkit/map_functors.h), so
// results equal tierkit::'s bit for bit. Autograd, fakes and vmap come from
// Python (torch-common's row_maps.py).
#include <torch/csrc/stable/library.h>

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "stable_tensor.h"
#include "tierkit/map_functors.h"
#include "tierkit/op_table.h"
#include "tierkit/row_rules.h"

namespace tierkit_stable {
namespace {

ScalarType scalar_type_of(tierkit::DType d) {
  switch (d) {
    case tierkit::DType::Float64: return ScalarType::Double;
    case tierkit::DType::Float16: return ScalarType::Half;
    case tierkit::DType::BFloat16: return ScalarType::BFloat16;
    default: return ScalarType::Float;
  }
}

template <typename Info, std::size_t N>
void check_map(const char* op, const Tensor& x, const std::array<Tensor, N>& tables) {
  namespace rules = tierkit::row_rules;
  check_defined(op, x, "x");
  core_check(op, [&] { rules::x_rank(x.dim(), nullptr, rules::kTorchWords); });
  check_first(op, x, "x");
  std::array<std::vector<int64_t>, N> sizes;
  for (std::size_t i = 0; i < N; ++i) {
    const Tensor& t = tables[i];
    const std::string name = Info::tables[i];
    check_defined(op, t, Info::tables[i]);
    if (!(t.device() == x.device()))
      fail(op, name + ": expected device " + device_str(x.device()) + " (same as x), got " +
                   device_str(t.device()));
    check_dtype(op, t, Info::tables[i]);
    core_check(op, [&] { rules::table_rank(Info::tables[i], t.dim(), rules::kTorchWords); });
    sizes[i] = sizes_of(t);
  }
  core_check(
      op, [&] { rules::tables_fit(sizes_of(x), sizes, Info::tables, Info::width_rule, rules::kTorchWords); });
}

template <typename Info, typename K>
struct StableMap {
  static constexpr std::size_t N = K::kTables;

  static Tensor run(const char* op, const Tensor& x_in, const std::array<Tensor, N>& in, bool flag,
                    bool transpose) {
    check_map<Info>(op, x_in, in);
    tierkit::DType dt = dtype_of(x_in);
    for (const Tensor& t : in) dt = tierkit::promote_floating(dt, dtype_of(t));
    const ScalarType dtype = scalar_type_of(dt);
    const auto as = [&](const Tensor& t) {
      const Tensor c = t.scalar_type() == dtype ? t : torch::stable::to(t, dtype);
      return c.is_contiguous() ? c : torch::stable::contiguous(c);
    };
    const Tensor x = as(x_in);
    std::array<Tensor, N> tables;
    for (std::size_t i = 0; i < N; ++i) tables[i] = as(in[i]);
    Tensor y = torch::stable::new_empty(x, x.sizes());
    const auto xs = sizes_of(x);
    tierkit::kernels::RowTables<N> layout;
    int ranks[N];
    std::array<std::vector<int64_t>, N> ts, st;
    const int64_t *sizes[N], *strides[N];
    for (std::size_t i = 0; i < N; ++i) {
      ts[i] = sizes_of(tables[i]);
      st[i] = strides_of(tables[i]);
      ranks[i] = static_cast<int>(ts[i].size());
      sizes[i] = ts[i].data();
      strides[i] = st[i].data();
    }
    if (!layout.broadcast(xs.data(), static_cast<int>(xs.size()) - 1, ranks, sizes, strides))
      fail(op, "x: expected leading dims that the tables' broadcast leaves in at most " +
                   std::to_string(tierkit::kMaxRank) + " runs, got shape " + shape_list(xs));
    const int64_t d = xs.back(), rows = d == 0 ? 0 : x.numel() / d, r = sizes_of(tables[0]).back();
    core_check(op, [&] {
      tierkit::dispatch_accepted(dt, "x", [&](auto tag) {
        using T = decltype(tag);
        const T* ptrs[N];
        for (std::size_t i = 0; i < N; ++i) ptrs[i] = static_cast<const T*>(tables[i].data_ptr());
        tierkit::kernels::row_map<K>(static_cast<const T*>(x.data_ptr()), ptrs, layout, rows, d, r, flag,
                                     transpose, static_cast<T*>(y.mutable_data_ptr()), RowRunner{});
      });
    });
    return y;
  }

  // The schema's kernels, name(x, <N tables>, bool flag) and its backward: one tensor argument a table.
  template <std::size_t>
  using Table = Tensor;
  template <typename Seq>
  struct Kernels;
  template <std::size_t... I>
  struct Kernels<std::index_sequence<I...>> {
    static Tensor op(Tensor x, Table<I>... tables, bool flag) {
      static const std::string name = std::string("tierkit_stable::") + Info::name;
      return run(name.c_str(), x, {tables...}, flag, false);
    }
    static Tensor backward(Tensor grad, Table<I>... tables, bool flag) {
      static const std::string name = std::string("tierkit_stable::") + Info::backward_name;
      return run(name.c_str(), grad, {tables...}, flag, true);
    }
  };
  using Registered = Kernels<std::make_index_sequence<N>>;
};

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(tierkit_stable, CPU, m) {
#define TIERKIT_REGISTER_MAP(NAME, FUNCTOR, TABLES)                                      \
  {                                                                                      \
    using M = StableMap<tierkit::map_info::NAME, tierkit::kernels::FUNCTOR>::Registered; \
    m.impl(tierkit::map_info::NAME::name, TORCH_BOX(&M::op));                            \
    m.impl(tierkit::map_info::NAME::backward_name, TORCH_BOX(&M::backward));             \
  }
  TIERKIT_ROW_MAPS(TIERKIT_REGISTER_MAP)
#undef TIERKIT_REGISTER_MAP
}

}  // namespace tierkit_stable
