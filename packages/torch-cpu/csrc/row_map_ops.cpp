// CPU kernels of the row maps (the op table's third kind, TIERKIT_ROW_MAPS),
// one template for every entry: the map and its transpose (x's gradient,
// _<name>_backward). The arithmetic and the loops are core's
// (tierkit/map_functors.h); inputs of mixed dtypes are computed in their
// promotion (a conversion of the small tables, usually). Autograd is
// row_map_autograd.cpp's; fakes and vmap are torch-common's (row_maps.py),
// shared with torch-stable, whose autograd is there too.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <array>
#include <cstddef>
#include <string>
#include <utility>

#include "tierkit/map_functors.h"
#include "tierkit/op_table.h"
#include "tierkit_torch/row_maps.h"
#include "view.h"
#include "warm_allocator.h"

namespace tierkit_torch {
namespace {

template <typename Info, typename K>
struct CpuMap {
  static constexpr std::size_t N = K::kTables;

  static at::Tensor run(const char* op, const at::Tensor& x_in, const MapTables<N>& in, bool flag,
                        bool transpose) {
    const MapOperands<Info, N> m(op, x_in, in, c10::DeviceType::CPU);
    at::Tensor y = warm_empty(m.x.sizes(), m.x.options());
    tierkit::dispatch_accepted(to_core_dtype(m.dtype), "x", [&](auto tag) {
      using T = decltype(tag);
      const T* ptrs[N];
      for (std::size_t i = 0; i < N; ++i) ptrs[i] = static_cast<const T*>(m.tables[i].const_data_ptr());
      tierkit::kernels::row_map<K>(static_cast<const T*>(m.x.const_data_ptr()), ptrs, m.layout, m.rows, m.d,
                                   m.r, flag, transpose, static_cast<T*>(y.mutable_data_ptr()),
                                   AtenRowRunner{});
    });
    return y;
  }

  // Built while the library loads (op_handle.h: no guarded statics).
  static inline const std::string kName = std::string("tierkit::") + Info::name;
  static inline const std::string kBackwardName = std::string("tierkit::") + Info::backward_name;

  static at::Tensor forward(const at::Tensor& x, const std::array<const at::Tensor*, N>& tables, bool flag) {
    return run(kName.c_str(), x, tables, flag, false);
  }
  static at::Tensor backward(const at::Tensor& grad, const std::array<const at::Tensor*, N>& tables,
                             bool flag) {
    return run(kBackwardName.c_str(), grad, tables, flag, true);
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(tierkit, CPU, m) {
#define TIERKIT_REGISTER_MAP(NAME, FUNCTOR, TABLES)                                                         \
  static_assert(TABLES == tierkit::kernels::FUNCTOR::kTables, "the entry's tables, the functor's");         \
  register_map_kernels<tierkit::map_info::NAME, CpuMap<tierkit::map_info::NAME, tierkit::kernels::FUNCTOR>, \
                       TABLES>(m);
  TIERKIT_ROW_MAPS(TIERKIT_REGISTER_MAP)
#undef TIERKIT_REGISTER_MAP
}

}  // namespace tierkit_torch
