// DLPack's C exchange API (DLPack 1.2+): a producer's type carries a
// `__dlpack_c_exchange_api__` capsule ("dlpack_exchange_api") pointing at a
// table of C functions, so a consumer reads a tensor's DLTensor in tens of
// nanoseconds instead of calling __dlpack__ through Python (torch 2.14:
// __dlpack__ and __dlpack_device__ cost ~4 us each).
//
// The vendored header (third_party/dlpack) is v1.1, which predates the
// table; its layout is declared here as the DLPack 1.2 specification gives
// it (the header torch ships as ATen/dlpack.h, v1.3, has the same), with
// the offsets asserted. The allocator and stream entries are not called.
#pragma once

#include <Python.h>

#include <cstddef>
#include <cstdint>

#include "dlpack.h"

namespace tierkit_bridge::dlpack {

inline constexpr const char* kExchangeAttribute = "__dlpack_c_exchange_api__";
inline constexpr const char* kExchangeCapsule = "dlpack_exchange_api";
inline constexpr uint32_t kExchangeMinMinor = 2;  // the table exists from DLPack 1.2

struct ExchangeHeader {
  DLPackVersion version;  // major must match ours before anything else is trusted
  ExchangeHeader* prev_api;
};

// Every entry returns 0 on success, -1 with a Python exception set.
struct ExchangeAPI {
  ExchangeHeader header;
  void* managed_tensor_allocator;  // not used by the bridge
  // An owning DLManagedTensorVersioned (flags included: READ_ONLY).
  int (*managed_tensor_from_py_object_no_sync)(void* py_object, DLManagedTensorVersioned** out);
  // A new producer object (a torch tensor) owning `tensor` (stolen).
  int (*managed_tensor_to_py_object_no_sync)(DLManagedTensorVersioned* tensor, void** out_py_object);
  // A non-owning DLTensor, valid while the caller holds the object and runs
  // no Python code that could resize it; may be null in a producer's table.
  int (*dltensor_from_py_object_no_sync)(void* py_object, DLTensor* out);
  void* current_work_stream;  // CPU memory only: no stream to order against
};

static_assert(offsetof(ExchangeHeader, prev_api) == 8 && sizeof(ExchangeHeader) == 16);
static_assert(offsetof(ExchangeAPI, managed_tensor_allocator) == 16 &&
              offsetof(ExchangeAPI, managed_tensor_from_py_object_no_sync) == 24 &&
              offsetof(ExchangeAPI, managed_tensor_to_py_object_no_sync) == 32 &&
              offsetof(ExchangeAPI, dltensor_from_py_object_no_sync) == 40 &&
              offsetof(ExchangeAPI, current_work_stream) == 48);

// The table of `obj`'s type, or null when it has none we can use (another
// major version, or older than 1.2). Cached per type; call with the GIL.
const ExchangeAPI* exchange_api_of(PyObject* obj);

}  // namespace tierkit_bridge::dlpack
