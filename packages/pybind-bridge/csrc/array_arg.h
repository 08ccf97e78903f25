// ArrayArg: any Python array argument, borrowed without copying. Our own
// Buffer, anything with the buffer protocol (numpy, memoryview, array.array)
// or anything with __dlpack__ (torch, jax, cupy-on-host...) becomes a
// tierkit::TensorView plus a keep-alive that releases the borrow when the
// last holder lets go. Anything unusable is refused with a message naming the
// argument.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <optional>

#include "buffer.h"
#include "dlpack.h"
#include "tierkit/view.h"

namespace tierkit_bridge {

// True once numpy has been imported by anyone: before that no argument can
// be a numpy array, and the bridge must not import numpy itself.
bool numpy_imported();

// Whether obj is a numpy array whose elements are in the other byte order
// ('>f4' on a little-endian host): core reads none in place, numpy's rules
// convert them (tierkit_bridge._numpy_rules.native).
bool numpy_swapped(const py::handle& obj);

class ArrayArg {
 public:
  // `writable`: the argument will be written to (an `out=`); read-only
  // memory is refused.
  static ArrayArg from(const py::handle& obj, const char* name, bool writable);
  // The same view, for the duration of a call that holds `obj` (an op's
  // argument): numpy arrays are read through numpy's C API without the buffer
  // protocol or a keep-alive, a type with DLPack's C exchange API (torch
  // tensors) through that table; anything else goes through from().
  static ArrayArg borrow(const py::handle& obj, const char* name, bool writable);

  const tierkit::TensorView& view() const { return view_; }
  bool readonly() const { return readonly_; }
  // A Buffer sharing this memory; it keeps the source object alive.
  Buffer share() const;

 private:
  static std::optional<ArrayArg> borrow_exchanged(const py::handle& obj, const char* name, bool writable);
  static ArrayArg from_dltensor(const DLTensor& t, std::shared_ptr<void> keepalive, bool readonly,
                                const char* name);
  static ArrayArg from_raw(void* first, tierkit::DType dtype, const tierkit::Shape& shape,
                           const tierkit::Shape& strides, std::shared_ptr<void> keepalive, bool readonly,
                           const char* name);
  tierkit::TensorView view_;
  std::shared_ptr<void> keepalive_;
  bool readonly_ = false;
};

}  // namespace tierkit_bridge
