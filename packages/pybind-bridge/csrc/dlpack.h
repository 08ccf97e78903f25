// DLPack for the bridge: the official header (third_party/dlpack, v1.1,
// vendored unchanged) plus the capsule names and flags of the Python
// exchange protocol, and static_asserts on every layout fact the bridge
// relies on, so an update of the header that moved a field fails to build.
#pragma once

#include <dlpack/dlpack.h>

#include <cstddef>
#include <cstdint>

static_assert(DLPACK_MAJOR_VERSION == 1, "the bridge speaks DLPack 1.x");
static_assert(sizeof(DLDataType) == 4 && offsetof(DLDataType, bits) == 1 && offsetof(DLDataType, lanes) == 2);
static_assert(sizeof(DLDevice) == 8 && offsetof(DLDevice, device_id) == 4);
static_assert(offsetof(DLTensor, data) == 0 && offsetof(DLTensor, device) == 8 &&
              offsetof(DLTensor, ndim) == 16 && offsetof(DLTensor, dtype) == 20 &&
              offsetof(DLTensor, shape) == 24 && offsetof(DLTensor, strides) == 32 &&
              offsetof(DLTensor, byte_offset) == 40);
static_assert(offsetof(DLManagedTensor, dl_tensor) == 0);
// The versioned struct starts with its version, so a consumer can read it
// before trusting anything else; the flags word is what the tests inspect.
static_assert(offsetof(DLManagedTensorVersioned, version) == 0 &&
              offsetof(DLManagedTensorVersioned, manager_ctx) == 8 &&
              offsetof(DLManagedTensorVersioned, deleter) == 16 &&
              offsetof(DLManagedTensorVersioned, flags) == 24 &&
              offsetof(DLManagedTensorVersioned, dl_tensor) == 32);
static_assert(kDLCPU == 1 && kDLCUDA == 2 && kDLCUDAHost == 3);
static_assert(kDLInt == 0 && kDLUInt == 1 && kDLFloat == 2 && kDLBfloat == 4,
              "core's dtype table records these DLPack type codes");

namespace tierkit_bridge::dlpack {
inline constexpr uint32_t kMajor = DLPACK_MAJOR_VERSION;
inline constexpr uint32_t kMinor = DLPACK_MINOR_VERSION;
inline constexpr uint64_t kFlagReadOnly = DLPACK_FLAG_BITMASK_READ_ONLY;
inline constexpr uint64_t kFlagIsCopied = DLPACK_FLAG_BITMASK_IS_COPIED;
inline constexpr const char* kCapsule = "dltensor";
inline constexpr const char* kCapsuleVersioned = "dltensor_versioned";
inline constexpr const char* kUsedCapsule = "used_dltensor";
inline constexpr const char* kUsedCapsuleVersioned = "used_dltensor_versioned";
}  // namespace tierkit_bridge::dlpack
