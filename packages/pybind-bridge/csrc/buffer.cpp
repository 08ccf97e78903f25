// tierkit_bridge.Buffer: construction, the buffer protocol and DLPack export.
#include "buffer.h"

#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "dlpack.h"
#include "tierkit/caching_allocator.h"
#include "tierkit/error.h"

namespace tierkit_bridge {

using tierkit::DType;
using tierkit::Shape;

namespace {
Buffer empty_of(const Shape& shape, DType dtype) {
  Buffer a;
  a.storage = std::make_shared<tierkit::Buffer>();
  a.dtype = dtype;
  a.shape = shape;
  a.strides = shape.contiguous_strides();
  return a;
}
}  // namespace

Buffer Buffer::empty(const Shape& shape, DType dtype, bool cached) {
  // Sizes are multiplied with overflow checks: a shape whose byte count wraps
  // around would otherwise allocate a tiny buffer behind a huge shape.
  std::size_t nbytes = tierkit::dtype_size(dtype);
  bool overflow = false;
  for (std::int64_t s : shape) {
    if (s < 0) tierkit::fail("shape: expected non-negative sizes, got ", shape.str());
    if (s == 0) return empty_of(shape, dtype);  // no memory, however large the other sizes
    overflow = overflow || __builtin_mul_overflow(nbytes, static_cast<std::size_t>(s), &nbytes);
  }
  if (overflow || nbytes > static_cast<std::size_t>(PTRDIFF_MAX)) {
    throw tierkit::OutOfMemory(tierkit::detail::concat(
        "shape: ", shape.str(), " of ", tierkit::dtype_name(dtype), " is too large to allocate"));
  }
  Buffer a;
  a.storage = std::make_shared<tierkit::Buffer>(cached ? tierkit::default_host_allocator().allocate(nbytes)
                                                       : tierkit::Buffer(nbytes));
  a.dtype = dtype;
  a.shape = shape;
  a.strides = shape.contiguous_strides();
  a.from_cache = cached;
  return a;
}

DType parse_dtype(const py::handle& obj) {
  std::string name;
  if (py::isinstance<py::str>(obj)) {
    name = obj.cast<std::string>();
  } else if (py::isinstance<py::type>(obj)) {
    name = obj.attr("__name__").cast<std::string>();  // np.float32; builtin float is a double, as in numpy
    if (name == "float") name = "float64";
  } else {
    name = py::str(obj).cast<std::string>();  // numpy.dtype('float32') / torch.float32
  }
  if (name.rfind("torch.", 0) == 0) name = name.substr(6);
  try {
    return tierkit::dtype_from_name(name);
  } catch (const tierkit::DTypeError&) {
    throw py::type_error("dtype: expected one of " + tierkit::all_dtype_names() + ", got " +
                         py::repr(obj).cast<std::string>());
  }
}

Shape parse_shape(const py::handle& obj, const char* name) {
  Shape shape;
  auto add = [&](const py::handle& item) {
    if (!py::isinstance<py::int_>(item)) {
      throw py::type_error(std::string(name) + ": expected a sequence of ints, got element " +
                           py::repr(item).cast<std::string>());
    }
    const auto v = item.cast<std::int64_t>();
    if (v < 0)
      throw py::value_error(std::string(name) + ": expected non-negative sizes, got " + std::to_string(v));
    if (shape.rank() == tierkit::kMaxRank) {
      throw py::value_error(std::string(name) + ": expected at most " + std::to_string(tierkit::kMaxRank) +
                            " dimensions");
    }
    shape.push_back(v);
  };
  if (py::isinstance<py::int_>(obj)) {
    add(obj);
  } else if (py::isinstance<py::sequence>(obj) && !py::isinstance<py::str>(obj)) {
    for (const auto& item : obj.cast<py::sequence>()) add(item);
  } else {
    throw py::type_error(std::string(name) + ": expected an int or a sequence of ints, got " +
                         std::string(py::str(obj.get_type().attr("__name__"))));
  }
  return shape;
}

namespace {

// PEP 3118 format characters for each dtype ('e' is IEEE half).
std::string format_of(const Buffer& a) {
  if (!a.dtype) return "B";
  const char f = tierkit::dtype_info(*a.dtype).buffer_format;
  if (f == '\0') {
    throw py::buffer_error(std::string(tierkit::dtype_name(*a.dtype)) +
                           " has no buffer-protocol format; export it with DLPack instead "
                           "(torch.from_dlpack(buffer))");
  }
  return std::string(1, f);
}

py::buffer_info buffer_info_of(const Buffer& a) {
  std::vector<py::ssize_t> shape(a.shape.begin(), a.shape.end());
  std::vector<py::ssize_t> strides;
  for (std::int64_t s : a.strides) strides.push_back(static_cast<py::ssize_t>(s * a.itemsize()));
  return py::buffer_info(a.data(), static_cast<py::ssize_t>(a.itemsize()), format_of(a),
                         static_cast<py::ssize_t>(shape.size()), shape, strides, a.readonly);
}

DLDataType dl_dtype_of(const Buffer& a) {
  if (!a.dtype) return {kDLUInt, 8, 1};
  const tierkit::DTypeInfo& d = tierkit::dtype_info(*a.dtype);
  return {d.dlpack_code, static_cast<uint8_t>(8 * d.size), 1};
}

// Owns everything a DLPack consumer borrows: the storage reference and the
// shape/strides arrays the DLTensor points into. No Python objects inside, so
// the consumer may call the deleter from any thread without the GIL.
template <typename Managed>
struct DLPackContext {
  Managed managed{};
  std::shared_ptr<tierkit::Buffer> storage;
  std::vector<int64_t> shape, strides;

  static void deleter(Managed* self) { delete static_cast<DLPackContext*>(self->manager_ctx); }
};

template <typename Managed>
Managed* make_managed(const Buffer& a) {
  auto ctx = std::make_unique<DLPackContext<Managed>>();
  ctx->storage = a.storage;
  ctx->shape.assign(a.shape.begin(), a.shape.end());
  ctx->strides.assign(a.strides.begin(), a.strides.end());
  DLTensor& t = ctx->managed.dl_tensor;
  t.data = a.data();
  t.device = {kDLCPU, 0};
  t.ndim = a.shape.rank();
  t.dtype = dl_dtype_of(a);
  t.shape = ctx->shape.data();
  t.strides = ctx->strides.data();
  t.byte_offset = 0;
  ctx->managed.manager_ctx = ctx.get();
  ctx->managed.deleter = &DLPackContext<Managed>::deleter;
  return &ctx.release()->managed;
}

// A capsule nobody consumed still owns its tensor and must free it. A
// consumed one was renamed "used_..." and is the consumer's business. The
// destructor may run while an exception propagates: PyCapsule_IsValid sets
// no error, and nothing here may touch the error indicator.
template <typename Managed>
void capsule_destructor(PyObject* capsule, const char* live_name) {
  if (!PyCapsule_IsValid(capsule, live_name)) return;
  auto* m = static_cast<Managed*>(PyCapsule_GetPointer(capsule, live_name));
  if (m && m->deleter) m->deleter(m);
}

}  // namespace

DLManagedTensorVersioned* to_managed_versioned(const Buffer& a) {
  auto* m = make_managed<DLManagedTensorVersioned>(a);
  m->version = {dlpack::kMajor, dlpack::kMinor};
  m->flags = a.readonly ? dlpack::kFlagReadOnly : 0;
  return m;
}

namespace {

py::object to_dlpack(const Buffer& a, const py::object& stream, const py::object& max_version,
                     const py::object& dl_device, const py::object& copy) {
  if (!stream.is_none()) {
    throw py::value_error("stream: expected None for a CPU buffer, got " +
                          py::repr(stream).cast<std::string>());
  }
  if (!dl_device.is_none()) {
    const auto dev = dl_device.cast<std::pair<int, int>>();
    if (dev.first != kDLCPU) {
      throw py::buffer_error("dl_device: only (1, 0) (CPU) is available for this buffer, got (" +
                             std::to_string(dev.first) + ", " + std::to_string(dev.second) + ")");
    }
  }
  Buffer src = a;
  const bool copied = !copy.is_none() && copy.cast<bool>();
  if (copied) {  // copy=True: a fresh contiguous, writable copy
    tierkit::check(a.dtype.has_value(), "copy: raw byte buffers are always shared");
    src = Buffer::empty(a.shape, *a.dtype, false);
    const std::size_t item = a.itemsize();
    auto in = a.view();
    // Walk element by element: copies are rare, clarity over speed.
    std::vector<std::int64_t> idx(a.shape.rank(), 0);
    char* dst = static_cast<char*>(src.data());
    for (std::int64_t i = 0; i < a.shape.numel(); ++i) {
      std::int64_t pos = 0;
      for (int d = 0; d < a.shape.rank(); ++d) pos += idx[d] * a.strides[d];
      std::memcpy(dst + i * item, static_cast<const char*>(in.data()) + pos * item, item);
      for (int d = a.shape.rank() - 1; d >= 0; --d) {
        if (++idx[d] < a.shape[d]) break;
        idx[d] = 0;
      }
    }
  }
  bool versioned = false;
  if (!max_version.is_none()) {
    const auto v = max_version.cast<std::pair<int, int>>();
    versioned = v.first >= 1;
  }
  if (versioned) {
    auto* m = to_managed_versioned(src);
    m->flags |= copied ? dlpack::kFlagIsCopied : 0;
    PyObject* cap = PyCapsule_New(m, dlpack::kCapsuleVersioned, [](PyObject* c) {
      capsule_destructor<DLManagedTensorVersioned>(c, dlpack::kCapsuleVersioned);
    });
    if (!cap) {
      m->deleter(m);
      throw py::error_already_set();
    }
    return py::reinterpret_steal<py::object>(cap);
  }
  // A legacy (unversioned) capsule has no read-only flag: every consumer
  // would treat the memory as writable. numpy refuses the same way.
  if (src.readonly) {
    throw py::buffer_error(
        "__dlpack__: this Buffer is read-only and a legacy (unversioned) DLPack capsule cannot say so; "
        "ask for max_version=(1, 0) (numpy >= 2.1, torch >= 2.5 do) or pass copy=True");
  }
  auto* m = make_managed<DLManagedTensor>(src);
  PyObject* cap = PyCapsule_New(
      m, dlpack::kCapsule, [](PyObject* c) { capsule_destructor<DLManagedTensor>(c, dlpack::kCapsule); });
  if (!cap) {
    m->deleter(m);
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::object>(cap);
}

py::tuple to_tuple(const Shape& s) {
  py::tuple t(s.rank());
  for (int i = 0; i < s.rank(); ++i) t[i] = s[i];
  return t;
}

}  // namespace

void bind_buffer(py::module_& m) {
  py::class_<Buffer>(m, "Buffer", py::buffer_protocol(), R"doc(
Memory owned by tierkit's C++ core, seen from Python.

Exports the buffer protocol (``memoryview(b)``, ``numpy.asarray(b)``) and
DLPack (``numpy.from_dlpack(b)``, ``torch.from_dlpack(b)``) without copying.
Every such view keeps the memory alive, so deleting the Buffer first is safe.
)doc")
      .def(py::init([](std::size_t nbytes, std::size_t alignment, bool cached) {
             Buffer a;
             if (cached) {
               tierkit::check(alignment <= tierkit::default_host_allocator().alignment(),
                              "alignment: the caching allocator gives ",
                              tierkit::default_host_allocator().alignment(), "-byte alignment, asked for ",
                              alignment);
               a.storage =
                   std::make_shared<tierkit::Buffer>(tierkit::default_host_allocator().allocate(nbytes));
             } else {
               a.storage = std::make_shared<tierkit::Buffer>(nbytes, alignment);
             }
             a.shape = Shape{static_cast<std::int64_t>(nbytes)};
             a.strides = Shape{1};
             a.from_cache = cached;
             return a;
           }),
           py::arg("nbytes"), py::arg("alignment") = tierkit::kDefaultAlignment, py::kw_only(),
           py::arg("cached") = false,
           "Raw bytes (format 'B'), aligned to ``alignment`` (a power of two). "
           "``cached=True`` takes them from core's caching allocator.")
      .def_static(
          "empty",
          [](const py::object& shape, const py::object& dtype, bool cached) {
            return Buffer::empty(parse_shape(shape, "shape"), parse_dtype(dtype), cached);
          },
          py::arg("shape"), py::arg("dtype") = "float32", py::kw_only(), py::arg("cached") = false,
          "An uninitialised C-contiguous buffer of ``shape`` and ``dtype``.")
      .def_static(
          "from_list",
          [](const py::sequence& values, const py::object& dtype) {
            const DType t = parse_dtype(dtype);
            Buffer a = Buffer::empty(Shape{static_cast<std::int64_t>(values.size())}, t, false);
            std::size_t i = 0;
            for (const auto& v : values) {
              if (!PyFloat_Check(v.ptr()) && !PyLong_Check(v.ptr())) {
                throw py::type_error("values: expected numbers, got " +
                                     std::string(py::str(v.get_type().attr("__name__"))) + " at index " +
                                     std::to_string(i));
              }
              const double x = v.cast<double>();
              void* p = static_cast<char*>(a.data()) + i * a.itemsize();
              tierkit::dispatch_any(t, [&](auto tag) {
                using T = decltype(tag);
                if constexpr (std::is_integral_v<T>) {
                  *static_cast<T*>(p) = v.cast<T>();
                } else {
                  *static_cast<T*>(p) = T(static_cast<tierkit::compute_t<T>>(x));
                }
              });
              ++i;
            }
            return a;
          },
          py::arg("values"), py::arg("dtype") = "float32",
          "A 1-d buffer holding ``values`` converted to ``dtype``.")
      .def_buffer([](Buffer& a) { return buffer_info_of(a); })
      .def(
          "__dlpack__",
          [](const Buffer& a, const py::object& stream, const py::object& max_version,
             const py::object& dl_device,
             const py::object& copy) { return to_dlpack(a, stream, max_version, dl_device, copy); },
          py::kw_only(), py::arg("stream") = py::none(), py::arg("max_version") = py::none(),
          py::arg("dl_device") = py::none(), py::arg("copy") = py::none(),
          "A DLPack capsule sharing this memory (versioned when ``max_version >= (1, 0)``).")
      .def(
          "__dlpack_device__", [](const Buffer&) { return py::make_tuple(static_cast<int>(kDLCPU), 0); },
          "``(1, 0)``: CPU memory.")
      .def_property_readonly("shape", [](const Buffer& a) { return to_tuple(a.shape); })
      .def_property_readonly(
          "strides",
          [](const Buffer& a) {
            py::tuple t(a.strides.rank());
            for (int i = 0; i < a.strides.rank(); ++i)
              t[i] = a.strides[i] * static_cast<std::int64_t>(a.itemsize());
            return t;
          },
          "Strides in bytes, as numpy reports them.")
      .def_property_readonly("dtype", &Buffer::dtype_name)
      .def_property_readonly("itemsize", &Buffer::itemsize)
      .def_property_readonly("ndim", [](const Buffer& a) { return a.shape.rank(); })
      .def_property_readonly("size", [](const Buffer& a) { return a.shape.numel(); })
      .def_property_readonly(
          "nbytes", [](const Buffer& a) { return a.shape.numel() * static_cast<std::int64_t>(a.itemsize()); })
      .def_property_readonly("alignment", [](const Buffer& a) { return a.storage->alignment(); })
      .def_property_readonly("readonly", [](const Buffer& a) { return a.readonly; })
      .def_property_readonly(
          "cached", [](const Buffer& a) { return a.from_cache; },
          "True if the memory came from the caching allocator.")
      .def_property_readonly(
          "data_ptr", [](const Buffer& a) { return reinterpret_cast<std::uintptr_t>(a.data()); },
          "Address of the first element.")
      .def("__len__",
           [](const Buffer& a) {
             if (a.shape.rank() == 0) throw py::type_error("len() of a 0-d Buffer");
             return a.shape[0];
           })
      .def("__repr__", [](const Buffer& a) {
        return "tierkit_bridge.Buffer(shape=" + a.shape.str() + ", dtype=" + a.dtype_name() + ")";
      });
}

}  // namespace tierkit_bridge
