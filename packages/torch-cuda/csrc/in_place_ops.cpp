// CUDA kernels of the in-place row ops (TIERKIT_ROW_IN_PLACE), registered
// under the CUDA dispatch key of tierkit::'s schemas; the Autograd kernel is
// torch-cpu's, for every device. The arguments are prepared as on the CPU
// (tierkit_torch/row_in_place.h), and every value of the index is checked to
// lie in the table before anything is written: here that reads the index's
// smallest and largest value back to the host (one synchronization a call),
// the price of raising instead of reading past the table.
#include <ATen/core/Tensor.h>
#include <ATen/ops/aminmax.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <cstdint>
#include <string>
#include <tuple>

#include "in_place_launch.h"
#include "tierkit/row_rules.h"
#include "tierkit_torch/row_in_place.h"

namespace tierkit_cuda {
namespace {

namespace tt = tierkit_torch;
namespace ip = tierkit_torch::in_place;

// One entry's kernel: Info is the op table's (tierkit::in_place_info: its
// arguments' names by role), Kind its index in the kind.
template <typename Info, InPlaceKind Kind>
struct CudaInPlace {
  // Built while the library loads (tierkit_torch/op_handle.h: no guarded statics).
  static inline const std::string kName = std::string("tierkit::") + Info::name;

  static void op(const at::Tensor& index, const at::Tensor& x, const ip::OptTensor& x2,
                 const at::Tensor& table, int64_t size, bool flag) {
    const char* op = kName.c_str();
    ip::Prepared p = ip::prepare<Info>(op, index, x, x2, table, size, c10::DeviceType::CUDA);
    const c10::cuda::CUDAGuard guard(x.device());
    const int64_t rows = p.table.size(0);
    if (p.tokens > 0) {
      const auto [lo, hi] = at::aminmax(p.index);
      if (lo.item<int64_t>() < 0 || hi.item<int64_t>() >= rows) {  // the CPU's words: the first bad one
        const at::Tensor flat = p.index.reshape({-1});
        const int64_t t = flat.lt(0).logical_or(flat.ge(rows)).nonzero()[0][0].item<int64_t>();
        tt::core_check(op, [&] {
          tierkit::row_rules::index_row(Info::index, t, flat[t].item<int64_t>(), Info::table, rows);
        });
      }
    }
    const InPlaceArgs a{p.index.const_data_ptr<int64_t>(),
                        p.x.rows.mutable_data_ptr(),
                        p.x2.rows.defined() ? p.x2.rows.mutable_data_ptr() : nullptr,
                        p.table.const_data_ptr(),
                        p.tokens,
                        p.x.stride,
                        p.x.heads,
                        p.x2.stride,
                        p.x2.heads,
                        size,
                        p.table.size(1),
                        flag};
    launch_in_place(Kind, tt::core_dtype_info(x.scalar_type())->dtype,
                    p.table.scalar_type() != x.scalar_type(), a,
                    c10::cuda::getCurrentCUDAStream(x.device().index()).stream());
    p.write_back(x, x2);
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(tierkit, CUDA, m) {
#define TIERKIT_REGISTER_IN_PLACE(NAME, FUNCTOR) \
  m.impl(#NAME, &CudaInPlace<tierkit::in_place_info::NAME, InPlaceKind::NAME>::op);
  TIERKIT_ROW_IN_PLACE(TIERKIT_REGISTER_IN_PLACE)
#undef TIERKIT_REGISTER_IN_PLACE
}

}  // namespace tierkit_cuda
