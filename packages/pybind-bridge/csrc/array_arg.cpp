#include "array_arg.h"

#include <pybind11/numpy.h>

#include <optional>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "dlpack.h"
#include "dlpack_exchange.h"
#include "tierkit/error.h"

namespace tierkit_bridge {

using tierkit::DType;
using tierkit::Shape;

namespace {

std::string type_name(const py::handle& obj) {
  return py::str(obj.get_type().attr("__name__")).cast<std::string>();
}

// Releasing a borrow may touch Python objects (PyBuffer_Release, a numpy
// DLPack deleter), and the last holder may be a thread without the GIL.
template <typename F>
std::shared_ptr<void> keepalive(F release) {
  return std::shared_ptr<void>(reinterpret_cast<void*>(1), [release](void*) {
    if (!Py_IsInitialized()) return;  // interpreter gone: nothing left to release into
    py::gil_scoped_acquire gil;
    release();
  });
}

// A PEP 3118 format's element type as numpy names it ("int8 "), or "" when
// it is not a single numpy scalar type.
std::string numpy_name_of_format(const std::string& f, Py_ssize_t itemsize) {
  static const struct {
    const char* format;
    const char* kind;
  } kinds[] = {{"?", "bool"},  {"b", "int"},   {"B", "uint"},     {"h", "int"},      {"H", "uint"},
               {"i", "int"},   {"I", "uint"},  {"l", "int"},      {"L", "uint"},     {"q", "int"},
               {"Q", "uint"},  {"n", "int"},   {"N", "uint"},     {"e", "float"},    {"f", "float"},
               {"d", "float"}, {"g", "float"}, {"Zf", "complex"}, {"Zd", "complex"}, {"Zg", "complex"}};
  for (const auto& k : kinds) {
    if (f != k.format) continue;
    if (f == "?") return "bool ";
    return std::string(k.kind) + std::to_string(itemsize * 8) + " ";
  }
  return "";
}

DType dtype_from_format(const char* format, Py_ssize_t itemsize, const char* name) {
  std::string f = format ? format : "B";
  const bool little = [] {
    const std::uint16_t one = 1;
    unsigned char first;
    std::memcpy(&first, &one, 1);
    return first == 1;
  }();
  if (!f.empty() && (f[0] == '>' || f[0] == '!' || f[0] == '<')) {
    const bool is_little = f[0] == '<';
    if (is_little != little) {
      throw py::value_error(std::string(name) + ": expected native byte order, got format '" + f +
                            "'; convert with arr.astype(arr.dtype.newbyteorder('='))");
    }
    f = f.substr(1);
  } else if (!f.empty() && (f[0] == '@' || f[0] == '=')) {
    f = f.substr(1);
  }
  if (f.size() == 1) {
    // 'i', 'l', 'q' are C int, long, long long: which DType depends on the size.
    const bool c_signed_int = f[0] == 'i' || f[0] == 'l' || f[0] == 'q';
    for (const tierkit::DTypeInfo& d : tierkit::kDTypeTable) {
      const bool int_match =
          c_signed_int && d.dlpack_code == kDLInt && d.size == static_cast<std::size_t>(itemsize);
      if (int_match || (!c_signed_int && d.buffer_format == f[0])) return d.dtype;
    }
  }
  const std::string no_format = tierkit::dtype_list(
      [](const tierkit::DTypeInfo& d) { return d.accepted && d.buffer_format == '\0'; }, " and ");
  throw py::type_error(std::string(name) + ": unsupported element type " + numpy_name_of_format(f, itemsize) +
                       "(buffer format '" + f + "'); accepted: " + tierkit::accepted_dtype_names() +
                       (no_format.empty() ? "" : " (" + no_format + " only through DLPack)"));
}

DType dtype_from_dlpack(const DLDataType& t, const char* name) {
  if (t.lanes == 1) {
    if (const auto* d = tierkit::dtype_from_dlpack(t.code, t.bits)) return d->dtype;
  }
  static const char* codes[] = {"int", "uint", "float", "opaque", "bfloat", "complex", "bool"};
  // DLPack 1.1's narrow floats, named as torch and ml_dtypes name them (the
  // name carries the width, so no bits are appended).
  static const char* narrow[] = {"float8_e3m4",     "float8_e4m3",   "float8_e4m3b11fnuz", "float8_e4m3fn",
                                 "float8_e4m3fnuz", "float8_e5m2",   "float8_e5m2fnuz",    "float8_e8m0fnu",
                                 "float6_e2m3fn",   "float6_e3m2fn", "float4_e2m1fn"};
  const bool is_narrow = t.code >= 7 && t.code < 7 + sizeof(narrow) / sizeof(narrow[0]);
  const std::string code = t.code < 7  ? codes[t.code]
                           : is_narrow ? narrow[t.code - 7]
                                       : "code " + std::to_string(t.code) + " of ";
  const std::string bits = (t.code == 6 && t.bits == 8) || is_narrow ? "" : std::to_string(t.bits);
  throw py::type_error(std::string(name) + ": unsupported element type " + code + bits +
                       (t.lanes != 1 ? "x" + std::to_string(t.lanes) : "") +
                       " from DLPack; accepted: " + tierkit::accepted_dtype_names());
}

// torch's rules for a tensor the bridge reads or writes: autograd sees
// nothing the bridge does, so a tensor that requires grad is refused while
// grad mode is on (torch would record the op); an inference tensor is not
// written outside inference mode, as torch refuses it there.
void torch_autograd_rules(const py::handle& obj, const char* name, bool writable) {
  PyObject* torch = PyDict_GetItemString(PyImport_GetModuleDict(), "torch");  // borrowed
  if (!torch || !PyObject_HasAttrString(obj.ptr(), "is_inference")) return;
  const auto t = py::reinterpret_borrow<py::object>(torch);
  if (obj.attr("requires_grad").cast<bool>() && t.attr("is_grad_enabled")().cast<bool>()) {
    throw py::value_error(
        std::string(name) +
        ": expected a tensor that does not require grad, got one with requires_grad=True; "
        "the bridge records no gradient: pass t.detach(), or call it under torch.no_grad()");
  }
  if (writable && obj.attr("is_inference")().cast<bool>() &&
      !t.attr("is_inference_mode_enabled")().cast<bool>()) {
    throw py::value_error(
        std::string(name) +
        ": Inplace update to inference tensor outside InferenceMode is not allowed (torch "
        "refuses it too); write under torch.inference_mode(), or into a tensor made outside it");
  }
}

const char* device_name(int type) {
  switch (type) {
    case 1: return "cpu";
    case 2: return "cuda";
    case 3: return "cuda_host";
    case 4: return "opencl";
    case 7: return "vulkan";
    case 8: return "metal";
    case 10: return "rocm";
    default: return "other";
  }
}

}  // namespace

namespace dlpack {

// Looked up on the type (where the specification puts it) once per type. The cached
// types are kept alive, so an address can never come back as another type.
// Callers hold the GIL, which serialises the cache.
const ExchangeAPI* exchange_api_of(PyObject* obj) {
  struct Entry {
    PyTypeObject* type;
    const ExchangeAPI* api;
  };
  static Entry cache[8];
  static int used = 0;
  PyTypeObject* type = Py_TYPE(obj);
  for (int i = 0; i < used; ++i) {
    if (cache[i].type == type) return cache[i].api;
  }
  const ExchangeAPI* api = nullptr;
  PyObject* capsule = PyObject_GetAttrString(reinterpret_cast<PyObject*>(type), kExchangeAttribute);
  if (!capsule) {
    PyErr_Clear();
  } else {
    if (PyCapsule_IsValid(capsule, kExchangeCapsule)) {
      // The table lives as long as the process (the specification's rule), not the capsule.
      const auto* table = static_cast<const ExchangeAPI*>(PyCapsule_GetPointer(capsule, kExchangeCapsule));
      if (table && table->header.version.major == kMajor &&
          table->header.version.minor >= kExchangeMinMinor && table->managed_tensor_from_py_object_no_sync)
        api = table;
    }
    Py_DECREF(capsule);
  }
  if (used < 8) {
    Py_INCREF(type);
    cache[used++] = {type, api};
  }
  return api;
}

}  // namespace dlpack

namespace {
// A producer's shape with a negative size describes no array (found by
// fuzzing: shape (-1, 2^62) from a hand-built DLPack capsule overflowed the
// extent's arithmetic).
void refuse_negative_sizes(const Shape& shape, const char* name) {
  for (int d = 0; d < shape.rank(); ++d)
    if (shape[d] < 0)
      throw py::value_error(std::string(name) + ": shape: expected non-negative sizes, got " + shape.str());
}
}  // namespace

ArrayArg ArrayArg::from_raw(void* first, DType dtype, const Shape& shape, const Shape& strides,
                            std::shared_ptr<void> keep, bool readonly, const char* name) {
  // Kernels read elements through T*: an address that is not a multiple of
  // the item size is undefined behaviour (and faults on some CPUs). Strides
  // are whole items, so the first element decides for all of them.
  refuse_negative_sizes(shape, name);
  const auto item_size = tierkit::dtype_size(dtype);
  const auto address = reinterpret_cast<std::uintptr_t>(first);
  if (shape.numel() != 0 && address % item_size != 0) {
    const std::uintptr_t alignment = address & (~address + 1);  // lowest set bit
    throw py::value_error(
        std::string(name) + ": data at address 0x" +
        [&] {
          char hex[32];
          std::snprintf(hex, sizeof hex, "%llx", static_cast<unsigned long long>(address));
          return std::string(hex);
        }() +
        " is aligned to " + std::to_string(alignment) + " byte(s); " +
        std::string(tierkit::dtype_name(dtype)) + " elements need " + std::to_string(item_size) +
        " (e.g. np.frombuffer(..., offset=...) with an offset that is not a multiple of the "
        "item size); copy it first: np.array(x)");
  }
  // TensorView addresses from its lowest element: with negative strides
  // that is not the first one.
  const bool empty = shape.numel() == 0;
  const auto [lo, hi] = tierkit::reach(shape, strides);
  const auto item = static_cast<std::int64_t>(tierkit::dtype_size(dtype));
  if (!empty) {  // the byte extent must be addressable too, not just the element count
    // hi - lo itself may not fit (strides of opposite signs near 2^62).
    std::int64_t span = 0;
    if (__builtin_sub_overflow(hi, lo, &span))
      throw py::value_error(std::string(name) + ": strides: the elements' extent overflows int64");
    const std::int64_t extent = tierkit::checked_add(span, 1, "strides");
    std::int64_t bytes = 0;
    if (__builtin_mul_overflow(extent, item, &bytes)) {
      throw py::value_error(std::string(name) + ": strides: " + std::to_string(extent) + " * " +
                            std::to_string(item) + " overflows int64");
    }
  }
  ArrayArg arg;
  arg.view_ = tierkit::TensorView(static_cast<char*>(first) + lo * item, empty ? 0 : hi - lo + 1, dtype,
                                  shape, strides, -lo);
  arg.keepalive_ = std::move(keep);
  arg.readonly_ = readonly;
  return arg;
}

ArrayArg ArrayArg::from_dltensor(const DLTensor& t, std::shared_ptr<void> keep, bool readonly,
                                 const char* name) {
  if (t.device.device_type != kDLCPU && t.device.device_type != kDLCUDAHost) {
    throw py::value_error(std::string(name) + ": expected CPU memory, got DLPack device (" +
                          std::to_string(t.device.device_type) + ", " + std::to_string(t.device.device_id) +
                          ") = " + device_name(t.device.device_type) + ":" +
                          std::to_string(t.device.device_id) +
                          "; move it to the CPU first (e.g. tensor.cpu())");
  }
  const DType dtype = dtype_from_dlpack(t.dtype, name);
  if (t.ndim < 0 || t.ndim > tierkit::kMaxRank) {
    throw py::value_error(std::string(name) + ": expected at most " + std::to_string(tierkit::kMaxRank) +
                          " dimensions, got " + std::to_string(t.ndim));
  }
  // DLPack 1.2+: shape may be null for ndim 0; null strides mean C order.
  const Shape shape = t.ndim ? Shape::from_range(t.shape, t.shape + t.ndim) : Shape{};
  refuse_negative_sizes(shape, name);  // before C-order strides are computed from them
  const Shape strides =
      t.strides && t.ndim ? Shape::from_range(t.strides, t.strides + t.ndim) : shape.contiguous_strides();
  return from_raw(static_cast<char*>(t.data) + t.byte_offset, dtype, shape, strides, std::move(keep),
                  readonly, name);
}

bool numpy_imported() {
  static bool seen = false;  // numpy, once imported, is never unloaded
  if (!seen) seen = PyDict_GetItemString(PyImport_GetModuleDict(), "numpy") != nullptr;  // borrowed
  return seen;
}

namespace {
// numpy's dtype (kind, item size) as core's; nullopt for anything else (the
// buffer-protocol path then accepts it or explains why not).
std::optional<DType> numpy_dtype(char kind, py::ssize_t itemsize) {
  if (kind == 'f') {
    if (itemsize == 4) return DType::Float32;
    if (itemsize == 8) return DType::Float64;
    if (itemsize == 2) return DType::Float16;
  } else if (kind == 'i') {
    if (itemsize == 4) return DType::Int32;
    if (itemsize == 8) return DType::Int64;
  }
  return std::nullopt;
}
}  // namespace

namespace {

// What the exchange path asks of a tensor, by interned names (no string is
// built per call).
struct TensorNames {
  PyObject* requires_grad = PyUnicode_InternFromString("requires_grad");
  PyObject* is_neg = PyUnicode_InternFromString("is_neg");
  PyObject* is_conj = PyUnicode_InternFromString("is_conj");
  PyObject* is_inference = PyUnicode_InternFromString("is_inference");
};
const TensorNames& tensor_names() {
  static const TensorNames names;  // leaked with the interpreter's interned strings
  return names;
}

// The truth of a new reference (an attribute or a method's result); stolen.
bool truth(PyObject* value) {
  if (!value) throw py::error_already_set();
  const int t = PyObject_IsTrue(value);
  Py_DECREF(value);
  if (t < 0) throw py::error_already_set();
  return t != 0;
}

// o.attr (called, if `call`) as a truth, or false where o has no such
// attribute: the exchange table is DLPack's, shipped by producers that are
// not torch (tvm-ffi, Paddle) and have no requires_grad or is_neg.
bool optional_truth(PyObject* o, PyObject* attr, bool call) {
  PyObject* value = PyObject_GetAttr(o, attr);
  if (!value) {
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) throw py::error_already_set();
    PyErr_Clear();
    return false;
  }
  if (!call) return truth(value);
  PyObject* result = PyObject_CallNoArgs(value);
  Py_DECREF(value);
  return truth(result);
}

}  // namespace

// The C exchange path, for the common case: a tensor without grad, without
// the neg or conj bit and (for `out`) not an inference tensor. Anything else
// returns nullopt and takes from(), which applies torch's rules (a detached
// alias, a resolved copy, or an error naming the argument), as before.
// Inputs are read through the non-owning DLTensor (valid while the caller
// holds them); `out` through the owning export, whose flags say read-only.
std::optional<ArrayArg> ArrayArg::borrow_exchanged(const py::handle& obj, const char* name, bool writable) {
  const dlpack::ExchangeAPI* api = dlpack::exchange_api_of(obj.ptr());
  if (!api) return std::nullopt;
  PyObject* o = obj.ptr();
  const TensorNames& n = tensor_names();
  if (optional_truth(o, n.requires_grad, false) || optional_truth(o, n.is_neg, true) ||
      (writable && optional_truth(o, n.is_inference, true)))
    return std::nullopt;
  // A producer's refusal (a sparse layout...) is left to from(), whose
  // message names the argument.
  if (!writable && api->dltensor_from_py_object_no_sync) {
    DLTensor t;
    if (api->dltensor_from_py_object_no_sync(o, &t) != 0) {
      PyErr_Clear();
      return std::nullopt;
    }
    if (t.dtype.code == kDLComplex && optional_truth(o, n.is_conj, true)) return std::nullopt;
    return from_dltensor(t, nullptr, false, name);
  }
  DLManagedTensorVersioned* m = nullptr;
  if (api->managed_tensor_from_py_object_no_sync(o, &m) != 0) {
    PyErr_Clear();
    return std::nullopt;
  }
  auto keep = keepalive([m] {
    if (m->deleter) m->deleter(m);
  });
  if (m->version.major != dlpack::kMajor ||
      (m->dl_tensor.dtype.code == kDLComplex && optional_truth(o, n.is_conj, true)))
    return std::nullopt;
  const bool readonly = (m->flags & dlpack::kFlagReadOnly) != 0;
  if (writable && readonly) {
    throw py::value_error(std::string(name) + ": expected a writable array, got a read-only " +
                          type_name(obj));
  }
  return from_dltensor(m->dl_tensor, std::move(keep), readonly, name);
}

namespace {
bool native_order(const py::dtype& dt) {
  const char order = dt.byteorder();
  return order == '=' || order == '|' || (order == '<') == (PY_LITTLE_ENDIAN != 0);
}
}  // namespace

bool numpy_swapped(const py::handle& obj) {
  return numpy_imported() && py::isinstance<py::array>(obj) &&
         !native_order(py::reinterpret_borrow<py::array>(obj).dtype());
}

ArrayArg ArrayArg::borrow(const py::handle& obj, const char* name, bool writable) {
  if (numpy_imported() && py::isinstance<py::array>(obj)) {
    const auto a = py::reinterpret_borrow<py::array>(obj);
    const py::dtype dt = a.dtype();
    const auto dtype = numpy_dtype(dt.kind(), dt.itemsize());
    if (!dtype) {  // named as numpy names it: int8, bool, complex64, float128...
      throw py::type_error(std::string(name) + ": expected dtype " + tierkit::accepted_dtype_names() +
                           ", got " + py::str(dt).cast<std::string>());
    }
    const bool native = native_order(dt);
    const bool writeable = a.writeable();
    if (dtype && native && a.ndim() <= tierkit::kMaxRank && (writeable || !writable)) {
      Shape shape, strides;
      bool whole_items = true;
      for (py::ssize_t i = 0; i < a.ndim(); ++i) {
        whole_items = whole_items && a.strides(i) % dt.itemsize() == 0;
        shape.push_back(a.shape(i));
        strides.push_back(a.strides(i) / dt.itemsize());
      }
      if (whole_items)
        return from_raw(const_cast<void*>(a.data()), *dtype, shape, strides, nullptr, !writeable, name);
    }
  }
  if (auto exchanged = borrow_exchanged(obj, name, writable)) return std::move(*exchanged);
  return from(obj, name, writable);
}

ArrayArg ArrayArg::from(const py::handle& obj, const char* name, bool writable) {
  auto refuse_readonly = [&](bool readonly) {
    if (writable && readonly) {
      throw py::value_error(std::string(name) + ": expected a writable array, got a read-only " +
                            type_name(obj));
    }
  };

  // 1. Our own Buffer: no protocol needed.
  if (py::isinstance<Buffer>(obj)) {
    const auto& a = obj.cast<const Buffer&>();
    if (!a.dtype) {
      throw py::type_error(std::string(name) +
                           ": a raw byte Buffer has no element type; create it with "
                           "Buffer.empty(shape, dtype)");
    }
    refuse_readonly(a.readonly);
    ArrayArg arg;
    arg.view_ = a.view();
    arg.keepalive_ = a.storage;
    arg.readonly_ = a.readonly;
    return arg;
  }

  // 2. The buffer protocol (numpy, memoryview, array.array, bytes...).
  if (PyObject_CheckBuffer(obj.ptr())) {
    auto buf = std::make_unique<Py_buffer>();
    const int flags = writable ? PyBUF_RECORDS : PyBUF_RECORDS_RO;
    if (PyObject_GetBuffer(obj.ptr(), buf.get(), flags) != 0) {
      PyErr_Clear();
      if (writable && PyObject_GetBuffer(obj.ptr(), buf.get(), PyBUF_RECORDS_RO) == 0) {
        PyBuffer_Release(buf.get());
        refuse_readonly(true);
      }
      throw py::type_error(std::string(name) + ": " + type_name(obj) + " refused to export its buffer");
    }
    Py_buffer* raw = buf.release();
    auto keep = keepalive([raw] {
      PyBuffer_Release(raw);
      delete raw;
    });
    const DType dtype = dtype_from_format(raw->format, raw->itemsize, name);
    Shape shape, strides;
    if (raw->ndim > tierkit::kMaxRank) {
      throw py::value_error(std::string(name) + ": expected at most " + std::to_string(tierkit::kMaxRank) +
                            " dimensions, got " + std::to_string(raw->ndim));
    }
    if (raw->itemsize != static_cast<Py_ssize_t>(tierkit::dtype_size(dtype))) {
      throw py::type_error(std::string(name) + ": buffer format '" + (raw->format ? raw->format : "B") +
                           "' has items of " + std::to_string(raw->itemsize) + " bytes, expected " +
                           std::to_string(tierkit::dtype_size(dtype)) + " for " +
                           std::string(tierkit::dtype_name(dtype)));
    }
    // Some producers (ctypes) leave strides null even when asked for them:
    // that means C-contiguous.
    Shape contiguous;
    if (raw->ndim > 0 && raw->shape == nullptr) {
      throw py::value_error(std::string(name) + ": " + type_name(obj) + " exported " +
                            std::to_string(raw->ndim) + " dimensions without a shape");
    }
    for (int i = 0; i < raw->ndim; ++i) contiguous.push_back(raw->shape[i]);
    contiguous = contiguous.contiguous_strides();
    for (int i = 0; i < raw->ndim; ++i) {
      const Py_ssize_t stride = raw->strides ? raw->strides[i] : contiguous[i] * raw->itemsize;
      if (stride % raw->itemsize != 0) {
        throw py::value_error(std::string(name) + ": strides must be multiples of the item size (" +
                              std::to_string(raw->itemsize) + " bytes), got " + std::to_string(stride));
      }
      shape.push_back(raw->shape[i]);
      strides.push_back(stride / raw->itemsize);
    }
    return from_raw(raw->buf, dtype, shape, strides, std::move(keep), raw->readonly != 0, name);
  }

  // 3. DLPack.
  if (py::hasattr(obj, "__dlpack__")) {
    // torch marks a lazily negated or conjugated view (z.conj().imag, x.conj())
    // with a bit its __dlpack__ does not resolve: the capsule holds the raw
    // memory, the values' sign or imaginary part flipped. Read such a tensor
    // by its values (a resolved copy, kept alive by its capsule); refuse it as
    // `out`, where the values written would read back negated.
    torch_autograd_rules(obj, name, writable);
    if (PyObject_HasAttrString(obj.ptr(), "requires_grad") && obj.attr("requires_grad").cast<bool>()) {
      // torch's __dlpack__ refuses a tensor that requires grad. Under
      // torch.no_grad() torch itself computes with it (and writes into it, as
      // an optimizer step does) without recording anything: so does the
      // bridge, through a detached alias (same memory, same version counter).
      return from(obj.attr("detach")(), name, writable);
    }
    for (const char* bit : {"neg", "conj"}) {
      const std::string is = std::string("is_") + bit;
      if (!PyObject_HasAttrString(obj.ptr(), is.c_str()) || !obj.attr(is.c_str())().cast<bool>()) continue;
      if (writable) {
        throw py::value_error(std::string(name) + ": expected a tensor without torch's " + bit +
                              " bit, got one with it set (a lazily " +
                              (bit[0] == 'n' ? "negated" : "conjugated") +
                              " view, e.g. z.conj().imag): its memory holds other values than it reads as; "
                              "write into a plain tensor and copy");
      }
      py::object resolved;
      try {
        resolved = obj.attr((std::string("resolve_") + bit).c_str())();
      } catch (py::error_already_set& e) {
        // torch cannot resolve every dtype's bit (a negated float8 view:
        // "neg_cpu" not implemented for 'Float8_e4m3fn'; found by fuzzing).
        throw py::type_error(std::string(name) + ": expected a tensor whose " + bit +
                             " bit torch can resolve, got one of dtype " +
                             py::str(obj.attr("dtype")).cast<std::string>() + " that it cannot (" + e.what() +
                             ")");
      }
      return from(resolved, name, writable);
    }
    if (py::hasattr(obj, "__dlpack_device__")) {
      std::pair<int, int> dev;
      try {
        dev = obj.attr("__dlpack_device__")().cast<std::pair<int, int>>();
      } catch (py::error_already_set& e) {
        // A device DLPack has no code for (torch's meta tensors: "Unknown
        // device type meta for Dlpack"): the argument named, its device too.
        const std::string where = py::hasattr(obj, "device") ? py::str(obj.attr("device")).cast<std::string>()
                                                             : std::string("(unknown)");
        throw py::value_error(std::string(name) + ": expected CPU memory, got a tensor on device " + where +
                              ", which DLPack cannot describe (" + e.what() + ")");
      }
      if (dev.first != kDLCPU && dev.first != kDLCUDAHost) {
        throw py::value_error(std::string(name) + ": expected CPU memory, got DLPack device (" +
                              std::to_string(dev.first) + ", " + std::to_string(dev.second) +
                              ") = " + device_name(dev.first) + ":" + std::to_string(dev.second) +
                              "; move it to the CPU first (e.g. tensor.cpu())");
      }
    }
    py::object capsule;
    try {
      capsule =
          obj.attr("__dlpack__")(py::arg("max_version") = py::make_tuple(dlpack::kMajor, dlpack::kMinor));
    } catch (py::error_already_set& e) {
      if (!e.matches(PyExc_TypeError)) throw py::value_error(std::string(name) + ": " + e.what());
      capsule = obj.attr("__dlpack__")();  // a producer older than DLPack 1.0
    }
    PyObject* cap = capsule.ptr();
    const DLTensor* t = nullptr;
    bool readonly = false;
    std::shared_ptr<void> keep;
    if (PyCapsule_IsValid(cap, dlpack::kCapsuleVersioned)) {
      auto* m = static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(cap, dlpack::kCapsuleVersioned));
      PyCapsule_SetName(cap, dlpack::kUsedCapsuleVersioned);  // consumed: now ours to delete
      keep = keepalive([m] {
        if (m->deleter) m->deleter(m);
      });
      if (m->version.major != dlpack::kMajor) {
        throw py::value_error(std::string(name) + ": unsupported DLPack version " +
                              std::to_string(m->version.major) + "." + std::to_string(m->version.minor));
      }
      t = &m->dl_tensor;
      readonly = (m->flags & dlpack::kFlagReadOnly) != 0;
    } else if (PyCapsule_IsValid(cap, dlpack::kCapsule)) {
      auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, dlpack::kCapsule));
      PyCapsule_SetName(cap, dlpack::kUsedCapsule);
      keep = keepalive([m] {
        if (m->deleter) m->deleter(m);
      });
      t = &m->dl_tensor;
    } else {
      throw py::type_error(std::string(name) + ": __dlpack__ did not return a DLPack capsule");
    }
    refuse_readonly(readonly);
    return from_dltensor(*t, std::move(keep), readonly, name);
  }

  throw py::type_error(std::string(name) + ": expected an array (buffer protocol or __dlpack__), got " +
                       type_name(obj));
}

Buffer ArrayArg::share() const {
  Buffer a;
  const auto item = tierkit::dtype_size(view_.dtype());
  // Capacity covers exactly the elements the view can reach.
  const std::int64_t hi = view_.offset() + tierkit::reach(view_.shape(), view_.strides()).hi;
  const std::size_t nbytes = view_.numel() == 0 ? 0 : static_cast<std::size_t>(hi + 1) * item;
  std::shared_ptr<void> keep = keepalive_;
  a.storage = std::make_shared<tierkit::Buffer>(tierkit::Buffer::wrap(
      nbytes ? view_.base() : nullptr, nbytes, [keep](void*) mutable { keep.reset(); }));
  a.dtype = view_.dtype();
  a.shape = view_.shape();
  a.strides = view_.strides();
  a.offset = nbytes ? view_.offset() : 0;
  a.readonly = readonly_;
  return a;
}

}  // namespace tierkit_bridge
