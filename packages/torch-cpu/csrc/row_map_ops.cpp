// CPU kernels of the row maps (the op table's third kind, TIERKIT_ROW_MAPS),
// one template for every entry: the map and its transpose (x's gradient,
// _<name>_backward). The arithmetic and the loops are core's
// (tierkit/map_functors.h); inputs of mixed dtypes are computed in their
// promotion (a conversion of the small tables, usually). Autograd, fakes and
// vmap are torch-common's (row_maps.py), shared with torch-stable.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <array>

#include "tierkit/map_functors.h"
#include "tierkit/op_table.h"
#include "tierkit_torch/row_maps.h"
#include "view.h"
#include "warm_allocator.h"

namespace tierkit_torch {
namespace {

struct AtenRunner {
  template <typename Fn>
  void operator()(int64_t n, int64_t grain, const Fn& fn) const {
    at::parallel_for(0, n, grain, fn);
  }
};

template <typename Info, typename K>
struct CpuMap {
  static constexpr std::size_t N = K::kTables;

  static at::Tensor run(const char* op, const at::Tensor& x_in, const std::array<const at::Tensor*, N>& in,
                        bool interleaved, bool transpose) {
    const MapOperands<Info, N> m(op, x_in, in, c10::DeviceType::CPU);
    at::Tensor y = warm_empty(m.x.sizes(), m.x.options());
    tierkit::dispatch_accepted(to_core_dtype(m.dtype), "x", [&](auto tag) {
      using T = decltype(tag);
      const T* ptrs[N];
      for (std::size_t i = 0; i < N; ++i) ptrs[i] = static_cast<const T*>(m.tables[i].const_data_ptr());
      tierkit::kernels::row_map<K>(static_cast<const T*>(m.x.const_data_ptr()), ptrs, m.layout, m.rows, m.d,
                                   m.r, interleaved, transpose, static_cast<T*>(y.mutable_data_ptr()),
                                   AtenRunner{});
    });
    return y;
  }

  // Built while the library loads (op_handle.h: no guarded statics).
  static inline const std::string kName = std::string("tierkit::") + Info::name;
  static inline const std::string kBackwardName = std::string("tierkit::") + Info::backward_name;

  static at::Tensor op(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, bool interleaved) {
    return run(kName.c_str(), x, {&cos, &sin}, interleaved, false);
  }
  static at::Tensor backward(const at::Tensor& grad, const at::Tensor& cos, const at::Tensor& sin,
                             bool interleaved) {
    return run(kBackwardName.c_str(), grad, {&cos, &sin}, interleaved, true);
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(tierkit, CPU, m) {
#define TIERKIT_REGISTER_MAP(NAME, FUNCTOR, TABLES)                                                       \
  static_assert(TABLES == 2, "the row maps' kernels take two tables (cos, sin)");                         \
  m.impl(tierkit::map_info::NAME::name, &CpuMap<tierkit::map_info::NAME, tierkit::kernels::FUNCTOR>::op); \
  m.impl(tierkit::map_info::NAME::backward_name,                                                          \
         &CpuMap<tierkit::map_info::NAME, tierkit::kernels::FUNCTOR>::backward);
  TIERKIT_ROW_MAPS(TIERKIT_REGISTER_MAP)
#undef TIERKIT_REGISTER_MAP
}

}  // namespace tierkit_torch
