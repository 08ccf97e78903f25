// Host side of the row maps on CUDA, one template for every entry of the op
// table's kind (map_kernels.cu is the device side): torch-cpu's checks
// (tierkit_torch/row_maps.h, with the CUDA device), the inputs in their
// promotion and contiguous, a device guard, the current stream, then
// map_launch.h's launcher. Autograd, fakes and vmap are torch-common's
// (registered by tierkit-torch for the tierkit namespace, any device).
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <array>
#include <string>

#include "map_launch.h"
#include "tierkit_torch/row_maps.h"

namespace tierkit_cuda {
namespace {

namespace tt = tierkit_torch;

template <typename Info, MapKind Kind>
struct CudaMap {
  static at::Tensor run(const char* op, const at::Tensor& x_in, const std::array<const at::Tensor*, 2>& in,
                        bool interleaved, bool transpose) {
    const tt::MapOperands<Info, 2> m(op, x_in, in, c10::DeviceType::CUDA);  // checked first: on x's device
    const c10::cuda::CUDAGuard guard(x_in.device());
    at::Tensor y = at::empty(m.x.sizes(), m.x.options());
    MapArgs a{};
    a.x = m.x.const_data_ptr();
    a.table0 = m.tables[0].const_data_ptr();
    a.table1 = m.tables[1].const_data_ptr();
    a.y = y.mutable_data_ptr();
    a.rows = m.rows;
    a.d = m.d;
    a.r = m.r;
    a.interleaved = interleaved;
    a.transpose = transpose;
    a.layout = m.layout;
    launch_row_map(Kind, tt::core_dtype_info(m.dtype)->dtype, a,
                   c10::cuda::getCurrentCUDAStream(m.x.get_device()).stream());
    return y;
  }
  static at::Tensor op(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, bool interleaved) {
    static const std::string name = std::string("tierkit::") + Info::name;
    return run(name.c_str(), x, {&cos, &sin}, interleaved, false);
  }
  static at::Tensor backward(const at::Tensor& grad, const at::Tensor& cos, const at::Tensor& sin,
                             bool interleaved) {
    static const std::string name = std::string("tierkit::") + Info::backward_name;
    return run(name.c_str(), grad, {&cos, &sin}, interleaved, true);
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(tierkit, CUDA, m) {
#define TIERKIT_REGISTER_MAP(NAME, FUNCTOR, TABLES)                                            \
  m.impl(tierkit::map_info::NAME::name, &CudaMap<tierkit::map_info::NAME, MapKind::NAME>::op); \
  m.impl(tierkit::map_info::NAME::backward_name, &CudaMap<tierkit::map_info::NAME, MapKind::NAME>::backward);
  TIERKIT_ROW_MAPS(TIERKIT_REGISTER_MAP)
#undef TIERKIT_REGISTER_MAP
}

}  // namespace tierkit_cuda
