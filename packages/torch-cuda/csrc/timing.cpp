// tierkit_cuda::time_op: runs a tierkit op `iters` times on the current
// stream between an EventTimer's two events and returns the mean
// milliseconds per call — the kernel's own time, without Python's per-call
// overhead. Used by the GPU benchmark.
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "event_timer.h"

namespace tierkit_cuda {
namespace {

double time_op(const std::string& op, const at::Tensor& a, const at::Tensor& b, int64_t iters) {
  TORCH_CHECK(a.is_cuda(), "tierkit_cuda::time_op: a: expected a CUDA tensor, got one on ", a.device());
  TORCH_CHECK(iters > 0, "tierkit_cuda::time_op: iters: expected > 0, got ", iters);
  const c10::cuda::CUDAGuard guard(a.device());
  auto& dispatcher = c10::Dispatcher::singleton();
  auto call = [&]() {
    if (op == "scale_shift") {
      static auto h = dispatcher.findSchemaOrThrow("tierkit::scale_shift", "")
                          .typed<at::Tensor(const at::Tensor&, double, double)>();
      h.call(a, 2.0, 1.0);
    } else if (op == "custom_add") {
      static auto h = dispatcher.findSchemaOrThrow("tierkit::custom_add", "")
                          .typed<at::Tensor(const at::Tensor&, const at::Tensor&)>();
      h.call(a, b);
    } else if (op == "add_out") {
      static auto h = dispatcher.findSchemaOrThrow("tierkit::add_out", "")
                          .typed<void(const at::Tensor&, const at::Tensor&, const at::Tensor&)>();
      h.call(a, b, a);
    } else {
      TORCH_CHECK(false, "tierkit_cuda::time_op: op: expected scale_shift, custom_add or add_out, got '", op,
                  "'");
    }
  };
  call();  // warm-up: first-launch costs stay out of the figure
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(a.get_device()).stream();
  EventTimer timer;
  timer.start(stream);
  for (int64_t i = 0; i < iters; ++i) call();
  return static_cast<double>(timer.stop_ms(stream)) / static_cast<double>(iters);
}

}  // namespace

TORCH_LIBRARY(tierkit_cuda, m) { m.def("time_op(str op, Tensor a, Tensor b, int iters) -> float", &time_op); }

}  // namespace tierkit_cuda
