// Host side of the row maps on CUDA, one template for every entry of the op
// table's kind (map_kernels.cu is the device side): torch-cpu's checks
// (tierkit_torch/row_maps.h, with the CUDA device), the inputs in their
// promotion and contiguous, a device guard, the current stream, then
// map_launch.h's launcher. Autograd is tierkit-torch's (row_map_autograd.cpp,
// any device); fakes and vmap are torch-common's.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <cstddef>
#include <string>

#include "map_launch.h"
#include "tierkit_torch/row_maps.h"

namespace tierkit_cuda {
namespace {

namespace tt = tierkit_torch;

template <typename Info, MapKind Kind, std::size_t N>
struct CudaMap {
  static_assert(N <= kMapTables, "MapArgs holds the kind's most tables");
  // Built while the library loads (tierkit_torch/op_handle.h: no guarded statics).
  static inline const std::string kName = std::string("tierkit::") + Info::name;
  static inline const std::string kBackwardName = std::string("tierkit::") + Info::backward_name;

  static at::Tensor run(const char* op, const at::Tensor& x_in, const tt::MapTables<N>& in, bool flag,
                        bool transpose) {
    const tt::MapOperands<Info, N> m(op, x_in, in, c10::DeviceType::CUDA);  // checked first: on x's device
    const c10::cuda::CUDAGuard guard(x_in.device());
    at::Tensor y = at::empty(m.x.sizes(), m.x.options());
    MapArgs a{};
    a.x = m.x.const_data_ptr();
    a.y = y.mutable_data_ptr();
    a.rows = m.rows;
    a.d = m.d;
    a.r = m.r;
    a.flag = flag;
    a.transpose = transpose;
    a.layout = m.layout.template widened<kMapTables>();
    for (std::size_t t = 0; t < N; ++t) a.tables[t] = m.tables[t].const_data_ptr();
    launch_row_map(Kind, tt::core_dtype_info(m.dtype)->dtype, a,
                   c10::cuda::getCurrentCUDAStream(m.x.get_device()).stream());
    return y;
  }
  static at::Tensor forward(const at::Tensor& x, const tt::MapTables<N>& t, bool flag) {
    return run(kName.c_str(), x, t, flag, /*transpose=*/false);
  }
  static at::Tensor backward(const at::Tensor& grad, const tt::MapTables<N>& t, bool flag) {
    return run(kBackwardName.c_str(), grad, t, flag, /*transpose=*/true);
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(tierkit, CUDA, m) {
#define TIERKIT_REGISTER_MAP(NAME, FUNCTOR, TABLES)                                                          \
  tt::register_map_kernels<tierkit::map_info::NAME, CudaMap<tierkit::map_info::NAME, MapKind::NAME, TABLES>, \
                           TABLES>(m);
  TIERKIT_ROW_MAPS(TIERKIT_REGISTER_MAP)
#undef TIERKIT_REGISTER_MAP
}

}  // namespace tierkit_cuda
