// CUDA kernels of the in-place row ops (TIERKIT_ROW_IN_PLACE), registered
// under the CUDA dispatch key of tierkit::'s schemas; the Autograd kernel is
// torch-cpu's, for every device. The arguments are prepared as on the CPU
// (tierkit_torch/row_in_place.h), and every position is checked to lie in the
// cache before anything is written: here that reads the positions' smallest
// and largest value back to the host (one synchronization a call), the price
// of raising instead of reading past the cache.
#include <ATen/core/Tensor.h>
#include <ATen/ops/aminmax.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <cstdint>
#include <string>
#include <tuple>

#include "in_place_launch.h"
#include "tierkit_torch/row_in_place.h"

namespace tierkit_cuda {
namespace {

namespace tt = tierkit_torch;
namespace ip = tierkit_torch::in_place;

template <InPlaceKind kKind>
struct CudaInPlace {
  static void op(const at::Tensor& positions_in, const at::Tensor& query, const ip::OptTensor& key,
                 const at::Tensor& cache_in, int64_t head_size, bool is_neox) {
    static const std::string name = std::string("tierkit::") + kNames[static_cast<int>(kKind)];
    const char* op = name.c_str();
    ip::Prepared p = ip::prepare(op, positions_in, query, key, cache_in, head_size, c10::DeviceType::CUDA);
    const c10::cuda::CUDAGuard guard(query.device());
    const int64_t rows = p.cache.size(0);
    if (p.tokens > 0) {
      const auto [lo, hi] = at::aminmax(p.positions);
      if (lo.item<int64_t>() < 0 || hi.item<int64_t>() >= rows) {  // the CPU's words: the first bad one
        const at::Tensor flat = p.positions.reshape({-1});
        const int64_t t = flat.lt(0).logical_or(flat.ge(rows)).nonzero()[0][0].item<int64_t>();
        TORCH_CHECK(false, op, ": positions[", t, "]: expected a row of cos_sin_cache, in [0, ", rows,
                    "), got ", flat[t].item<int64_t>());
      }
    }
    const InPlaceArgs a{p.positions.const_data_ptr<int64_t>(),
                        p.query.rows.mutable_data_ptr(),
                        p.key.rows.defined() ? p.key.rows.mutable_data_ptr() : nullptr,
                        p.cache.const_data_ptr(),
                        p.tokens,
                        p.query.stride,
                        p.query.heads,
                        p.key.stride,
                        p.key.heads,
                        head_size,
                        p.cache.size(1),
                        is_neox};
    launch_in_place(kKind, tt::core_dtype_info(query.scalar_type())->dtype,
                    p.cache.scalar_type() != query.scalar_type(), a,
                    c10::cuda::getCurrentCUDAStream(query.device().index()).stream());
    p.write_back(query, key);
  }

  static constexpr const char* kNames[] = {
#define TIERKIT_IN_PLACE_NAME(NAME, FUNCTOR) #NAME,
      TIERKIT_ROW_IN_PLACE(TIERKIT_IN_PLACE_NAME)
#undef TIERKIT_IN_PLACE_NAME
  };
};

}  // namespace

TORCH_LIBRARY_IMPL(tierkit, CUDA, m) {
#define TIERKIT_REGISTER_IN_PLACE(NAME, FUNCTOR) m.impl(#NAME, &CudaInPlace<InPlaceKind::NAME>::op);
  TIERKIT_ROW_IN_PLACE(TIERKIT_REGISTER_IN_PLACE)
#undef TIERKIT_REGISTER_IN_PLACE
}

}  // namespace tierkit_cuda
