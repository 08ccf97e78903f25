// EventTimer: a pair of CUDA events, created and destroyed with the object.
// GPU work is asynchronous: a host clock around a launch measures the
// launch, not the kernel. Events recorded on the stream before and after the
// work time what the GPU did, in stream order.
#pragma once

#include <c10/cuda/CUDAException.h>
#include <cuda_runtime_api.h>

namespace tierkit_cuda {

class EventTimer {
 public:
  EventTimer() {
    C10_CUDA_CHECK(cudaEventCreate(&start_));
    const cudaError_t err = cudaEventCreate(&stop_);
    if (err != cudaSuccess) {
      cudaEventDestroy(start_);
      C10_CUDA_CHECK(err);
    }
  }
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  ~EventTimer() {
    cudaEventDestroy(start_);  // errors here cannot be reported from a destructor
    cudaEventDestroy(stop_);
  }

  void start(cudaStream_t stream) { C10_CUDA_CHECK(cudaEventRecord(start_, stream)); }

  // Records the stop event, waits for it, returns milliseconds between the two.
  float stop_ms(cudaStream_t stream) {
    C10_CUDA_CHECK(cudaEventRecord(stop_, stream));
    C10_CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0.0f;
    C10_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return ms;
  }

 private:
  cudaEvent_t start_{};
  cudaEvent_t stop_{};
};

}  // namespace tierkit_cuda
