// The current device's number of SMs, which the launches size their grids
// by (kernels.cu, row_kernels.cu): asked of the runtime once per device, not
// on every launch (it was a cudaGetDevice and a cudaDeviceGetAttribute per
// launch; now the cudaGetDevice alone, a read of the runtime's per-thread
// state).
//
// The cache is a fixed array of atomics, 0 meaning "not asked yet",
// constant-initialised: nothing runs at load, and no function-local static
// whose guard (a lock) a fork() could copy held, the hazard core's
// kernels.h describes for its lazily built statics. Two threads that both
// find 0 both ask and store the same number. A device index past the array
// is asked every time.
#pragma once

#include <c10/cuda/CUDAException.h>
#include <cuda_runtime_api.h>

#include <atomic>

namespace tierkit_cuda {

inline constexpr int kSmCountDevices = 128;  // torch's largest C10_COMPILE_TIME_MAX_GPUS is 120
inline constinit std::atomic<int> sm_count_cache[kSmCountDevices] = {};

inline int sm_count() {
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  const bool cached = device >= 0 && device < kSmCountDevices;
  if (cached) {
    const int known = sm_count_cache[device].load(std::memory_order_relaxed);
    if (known > 0) return known;
  }
  int sms = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  if (cached && sms > 0) sm_count_cache[device].store(sms, std::memory_order_relaxed);
  return sms;
}

}  // namespace tierkit_cuda
