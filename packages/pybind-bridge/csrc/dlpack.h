// The DLPack v1.0 ABI (https://dmlc.github.io/dlpack): the handful of C
// structs a producer and a consumer agree on. Declared here, not vendored,
// because the bridge needs nothing beyond these layouts.
#pragma once

#include <cstdint>

extern "C" {

enum DLDeviceType : int32_t { kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3 };

struct DLDevice {
  DLDeviceType device_type;
  int32_t device_id;
};

enum DLDataTypeCode : uint8_t { kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4 };

struct DLDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};

struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; null means C-contiguous
  uint64_t byte_offset;
};

struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

struct DLPackVersion {
  uint32_t major;
  uint32_t minor;
};

struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorVersioned* self);
  uint64_t flags;
  DLTensor dl_tensor;
};

}  // extern "C"

namespace tierkit_bridge::dlpack {
inline constexpr uint32_t kMajor = 1;
inline constexpr uint32_t kMinor = 0;
inline constexpr uint64_t kFlagReadOnly = 1;       // DLPACK_FLAG_BITMASK_READ_ONLY
inline constexpr uint64_t kFlagIsCopied = 1 << 1;  // DLPACK_FLAG_BITMASK_IS_COPIED
inline constexpr const char* kCapsule = "dltensor";
inline constexpr const char* kCapsuleVersioned = "dltensor_versioned";
inline constexpr const char* kUsedCapsule = "used_dltensor";
inline constexpr const char* kUsedCapsuleVersioned = "used_dltensor_versioned";
}  // namespace tierkit_bridge::dlpack
