// Buffer: what a Python `tierkit_bridge.Buffer` holds. Shared ownership of a
// core Buffer plus the typed, strided layout seen from Python. Every view
// handed out (memoryview, numpy, DLPack) holds a reference to the storage, so
// the memory lives as long as the last of them, whatever order they die in.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <optional>
#include <string>

#include "dlpack.h"
#include "tierkit/buffer.h"
#include "tierkit/dtype.h"
#include "tierkit/view.h"

namespace tierkit_bridge {

namespace py = pybind11;

struct Buffer {
  std::shared_ptr<tierkit::Buffer> storage;
  std::optional<tierkit::DType> dtype;  // nullopt: raw bytes (format 'B')
  tierkit::Shape shape;
  tierkit::Shape strides;   // in elements
  std::int64_t offset = 0;  // in elements, from storage->data()
  bool readonly = false;
  bool from_cache = false;

  std::size_t itemsize() const { return dtype ? tierkit::dtype_size(*dtype) : 1; }
  std::string dtype_name() const { return dtype ? std::string(tierkit::dtype_name(*dtype)) : "uint8"; }
  void* data() const {
    return static_cast<char*>(storage->data()) + offset * static_cast<std::int64_t>(itemsize());
  }
  std::int64_t capacity() const { return static_cast<std::int64_t>(storage->size() / itemsize()); }
  tierkit::TensorView view() const {
    return tierkit::TensorView(storage->data(), capacity(), dtype.value_or(tierkit::DType::Float32), shape,
                               strides, offset);
  }

  // A fresh C-contiguous array; `cached` takes the memory from core's
  // process-wide caching allocator instead of the system.
  static Buffer empty(const tierkit::Shape& shape, tierkit::DType dtype, bool cached);
};

// An owning, versioned DLPack tensor sharing `a`'s memory (it holds a
// reference to the storage; its deleter needs no GIL), flags READ_ONLY as
// `a` is.
DLManagedTensorVersioned* to_managed_versioned(const Buffer& a);

// "float32", numpy.float32, numpy.dtype('float32'), torch.float32 -> DType.
tierkit::DType parse_dtype(const py::handle& obj);
tierkit::Shape parse_shape(const py::handle& obj, const char* name);

void bind_buffer(py::module_& m);

}  // namespace tierkit_bridge
