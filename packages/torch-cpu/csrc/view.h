// The two adapters between torch and core: an at::Tensor seen as a
// tierkit::TensorView (no copy), and at::parallel_for as the runner that
// splits core's kernels, so torch.set_num_threads governs them.
#pragma once

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>

#include "tierkit/kernels.h"
#include "tierkit_torch/checks.h"

#include <array>

namespace tierkit_torch {

// Only called after check_first accepted the dtype.
inline tierkit::DType to_core_dtype(c10::ScalarType t) {
  const auto* d = core_dtype_info(t);
  TORCH_INTERNAL_ASSERT(d != nullptr, "tierkit: dtype ", t, " reached a kernel unchecked");
  return d->dtype;
}

// c10::Half/BFloat16 and core's Half/BFloat16 are both bare IEEE / brain-float
// bit patterns of 16 bits, so the memory is read as-is.
static_assert(sizeof(c10::Half) == sizeof(tierkit::Half) &&
              sizeof(c10::BFloat16) == sizeof(tierkit::BFloat16));

// Core views hold up to kMaxRank dims; a deeper contiguous tensor is seen
// flat (the result is the same for elementwise ops). Deeper non-contiguous
// tensors are rare enough that the caller copies them (see run_views).
inline tierkit::TensorView as_view(const at::Tensor& t) {
  tierkit::Shape shape, strides;
  if (t.dim() > tierkit::kMaxRank) {
    TORCH_INTERNAL_ASSERT(t.is_contiguous());
    shape.push_back(t.numel());
    strides.push_back(1);
  } else {
    for (int64_t d = 0; d < t.dim(); ++d) {
      shape.push_back(t.size(d));
      strides.push_back(t.stride(d));
    }
  }
  // Torch strides are never negative: the furthest element bounds the view.
  int64_t extent = t.numel() == 0 ? 0 : 1;
  for (int d = 0; d < shape.rank() && t.numel() != 0; ++d) extent += (shape[d] - 1) * strides[d];
  return tierkit::TensorView(t.data_ptr(), extent, to_core_dtype(t.scalar_type()), shape, strides);
}

// A tensor whose elements are non-overlapping and dense (any permutation of
// strides) covers exactly numel() elements from data_ptr(): for an
// elementwise op over operands sharing that layout, it is flat memory.
inline tierkit::TensorView as_flat_view(const at::Tensor& t) {
  tierkit::Shape shape, strides;
  shape.push_back(t.numel());
  strides.push_back(1);
  return tierkit::TensorView(t.data_ptr(), t.numel(), to_core_dtype(t.scalar_type()), shape, strides);
}

// Torch's own elementwise kernels split at 32768 elements (GRAIN_SIZE):
// below that a second thread costs more than it saves.
inline constexpr int64_t kAtenGrain = 32768;

struct AtenRunner {
  template <typename Fn>
  void operator()(int64_t n, int64_t grain, const Fn& fn) const {
    at::parallel_for(0, n, std::max<int64_t>(grain, kAtenGrain), fn);
  }
};

// For core's row kernels (tierkit/row_kernels.h): there `n` counts rows or
// blocks and core sized `grain` in those units (about kGrain elements a
// chunk), so no element floor; AtenRunner's would have kept any tensor of
// fewer than 32768 rows on one thread (measured: RMSNorm over [4096, 4096]
// took as long on two threads as on one).
struct AtenRowRunner {
  template <typename Fn>
  void operator()(int64_t n, int64_t grain, const Fn& fn) const {
    at::parallel_for(0, n, grain, fn);
  }
};

}  // namespace tierkit_torch
