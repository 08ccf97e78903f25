// The elementwise ops, bound from core's kernels. Arguments are imported
// zero-copy (ArrayArg), checked with messages naming the argument, then the
// GIL is released for the native loop and taken back before any Python
// object is touched again.
#include "ops.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <array>

#include <atomic>
#include <string>
#include <vector>

#include "array_arg.h"
#include "buffer.h"
#include "tierkit/checks.h"
#include "tierkit/kernels.h"

namespace tierkit_bridge {

namespace {

std::atomic<unsigned> g_max_threads{0};
std::atomic<bool> g_use_cache{false};

// What the bridge needs from torch, looked up once torch has been imported
// by someone (the bridge knows no torch at build time and never imports it).
struct TorchHooks {
  PyTypeObject* tensor = nullptr;
  PyObject* increment_version = nullptr;  // torch.autograd.graph.increment_version
  PyObject* from_dlpack = nullptr;        // torch.from_dlpack
};
// Leaked on purpose: they live as long as torch, i.e. the process.
const TorchHooks* torch_hooks() {
  static TorchHooks hooks;
  if (!hooks.tensor) {
    PyObject* torch = PyDict_GetItemString(PyImport_GetModuleDict(), "torch");  // borrowed
    if (!torch) return nullptr;
    const auto t = py::reinterpret_borrow<py::object>(torch);
    const py::object graph = py::module_::import("torch.autograd.graph");
    hooks.increment_version = py::object(graph.attr("increment_version")).release().ptr();
    hooks.from_dlpack = py::object(t.attr("from_dlpack")).release().ptr();
    hooks.tensor = reinterpret_cast<PyTypeObject*>(py::object(t.attr("Tensor")).release().ptr());
  }
  return &hooks;
}

// A C-level subtype check: torch.Tensor's metaclass __instancecheck__ is
// Python code, and this runs on every call.
bool is_torch_tensor(const py::handle& obj, const TorchHooks* torch) {
  return torch && PyType_IsSubtype(Py_TYPE(obj.ptr()), torch->tensor);
}

// A torch tensor written through `out=` must look written to autograd: torch
// bumps a tensor's version counter on every in-place op, and backward refuses
// a saved tensor whose version moved.
void bump_torch_version(const py::object& out) {
  if (numpy_imported() && py::isinstance<py::array>(out)) return;
  const TorchHooks* torch = torch_hooks();
  if (is_torch_tensor(out, torch)) py::reinterpret_borrow<py::object>(torch->increment_version)(out);
}

// Core's rules (tierkit/checks.h); its DTypeError / InvalidArgument become
// TypeError / ValueError through the module's exception translator.
void require_operand(const tierkit::TensorView& v, const char* name, const tierkit::TensorView& first,
                     const char* first_name) {
  if (&v == &first) return tierkit::checks::accepted_dtype(name, v.dtype());
  tierkit::checks::same_dtype(name, v.dtype(), first_name, first.dtype());
  tierkit::checks::same_shape(name, v.shape(), first_name, first.shape());
}

// A fresh C-contiguous output shaped like `first`, presented the way the
// first input was: a numpy array for numpy (allocated through numpy's C API),
// a torch tensor for torch (a Buffer handed over by DLPack, zero-copy), a
// Buffer otherwise. With output caching on, the memory comes from core's
// caching allocator whatever the input.
py::object new_output(const py::handle& first_input, const tierkit::TensorView& first) {
  const bool cached = g_use_cache.load(std::memory_order_relaxed);
  const bool numpy_in = numpy_imported() && py::isinstance<py::array>(first_input);
  if (numpy_in && !cached) {
    // numpy's own allocation (PyArray_NewFromDescr, C order), with the
    // input's dtype descriptor: no Python-level call, no dtype object built.
    const auto& api = py::detail::npy_api::get();
    PyObject* descr = py::detail::array_proxy(first_input.ptr())->descr;
    Py_INCREF(descr);  // NewFromDescr steals a reference
    py::ssize_t dims[tierkit::kMaxRank];
    for (int d = 0; d < first.rank(); ++d) dims[d] = first.shape()[d];
    PyObject* array =
        api.PyArray_NewFromDescr_(api.PyArray_Type_, descr, first.rank(), dims, nullptr, nullptr, 0, nullptr);
    if (!array) throw py::error_already_set();
    return py::reinterpret_steal<py::object>(array);
  }
  py::object buffer = py::cast(Buffer::empty(first.shape(), first.dtype(), cached));
  if (numpy_in) return py::module_::import("numpy").attr("asarray")(buffer);
  const TorchHooks* torch = torch_hooks();
  if (is_torch_tensor(first_input, torch))
    return py::reinterpret_borrow<py::object>(torch->from_dlpack)(buffer);
  return buffer;
}

// Below one grain (core's kGrain elements) the kernel runs on the calling
// thread in a few microseconds: releasing and retaking the GIL would cost
// more than other threads could gain.
constexpr std::int64_t kReleaseGilFrom = tierkit::kernels::detail::kGrain;

// Imports every input, checks them against the first, resolves `out`
// (allocating when None), runs `kernel(views..., out_view)` (without the GIL
// for large arrays) and returns the output object.
template <std::size_t N, typename Kernel>
py::object run(const py::handle (&inputs)[N], const char* const (&names)[N], const py::object& out,
               Kernel kernel) {
  std::array<ArrayArg, N> args;
  for (std::size_t i = 0; i < N; ++i) {
    args[i] = ArrayArg::borrow(inputs[i], names[i], false);
    require_operand(args[i].view(), names[i], args[0].view(), names[0]);
  }
  const py::object result = out.is_none() ? new_output(inputs[0], args[0].view()) : out;
  const ArrayArg dst = ArrayArg::borrow(result, "out", true);
  require_operand(dst.view(), "out", args[0].view(), names[0]);
  const unsigned threads = g_max_threads.load(std::memory_order_relaxed);
  if (dst.view().numel() >= kReleaseGilFrom) {
    py::gil_scoped_release nogil;
    kernel(args, dst.view(), threads);
  } else {
    kernel(args, dst.view(), threads);
  }
  if (!out.is_none()) bump_torch_version(out);
  return result;
}

}  // namespace

void bind_ops(py::module_& m) {
  m.def(
      "add",
      [](const py::object& a, const py::object& b, const py::object& out) {
        return run<2>({a, b}, {"a", "b"}, out, [](const auto& in, const auto& o, unsigned t) {
          tierkit::kernels::add(in[0].view(), in[1].view(), o, tierkit::kernels::PoolRunner{t});
        });
      },
      py::arg("a"), py::arg("b"), py::kw_only(), py::arg("out") = py::none(),
      "a + b elementwise (same shape and dtype). Writes into ``out`` when given and returns it; else\n"
      "returns a new C-contiguous array presented like ``a``: numpy for numpy, torch for torch,\n"
      "a Buffer otherwise (zero-copy each way).");
  m.def(
      "mul",
      [](const py::object& a, const py::object& b, const py::object& out) {
        return run<2>({a, b}, {"a", "b"}, out, [](const auto& in, const auto& o, unsigned t) {
          tierkit::kernels::mul(in[0].view(), in[1].view(), o, tierkit::kernels::PoolRunner{t});
        });
      },
      py::arg("a"), py::arg("b"), py::kw_only(), py::arg("out") = py::none(),
      "a * b elementwise; same rules as add.");
  m.def(
      "scale_shift",
      [](const py::object& x, double alpha, double beta, const py::object& out) {
        return run<1>({x}, {"x"}, out, [alpha, beta](const auto& in, const auto& o, unsigned t) {
          tierkit::kernels::scale_shift(in[0].view(), alpha, beta, o, tierkit::kernels::PoolRunner{t});
        });
      },
      py::arg("x"), py::arg("alpha"), py::arg("beta"), py::kw_only(), py::arg("out") = py::none(),
      "alpha * x + beta elementwise, one pass; same rules as add.");
  m.def(
      "muladd",
      [](const py::object& a, const py::object& b, double c, const py::object& out) {
        return run<2>({a, b}, {"a", "b"}, out, [c](const auto& in, const auto& o, unsigned t) {
          tierkit::kernels::muladd(in[0].view(), in[1].view(), c, o, tierkit::kernels::PoolRunner{t});
        });
      },
      py::arg("a"), py::arg("b"), py::arg("c"), py::kw_only(), py::arg("out") = py::none(),
      "a * b + c elementwise (c a scalar), one pass; same rules as add.");

  m.def(
      "vector_add_list",
      [](const std::vector<float>& a, const std::vector<float>& b) {
        if (a.size() != b.size()) {
          throw py::value_error("b: expected length " + std::to_string(a.size()) + " (same as a), got " +
                                std::to_string(b.size()));
        }
        std::vector<float> out(a.size());
        tierkit::kernels::add(a.data(), b.data(), out.data(), static_cast<std::int64_t>(a.size()));
        return out;
      },
      py::arg("a"), py::arg("b"),
      "The deliberately slow path: list -> std::vector<float> -> list, one Python float\n"
      "object converted per element each way. Kept to measure the boundary cost.");

  m.def(
      "as_buffer", [](const py::object& obj) { return ArrayArg::from(obj, "obj", false).share(); },
      py::arg("obj"),
      "A Buffer sharing ``obj``'s memory (buffer protocol or DLPack), keeping ``obj`` alive.");

  m.def(
      "set_num_threads", [](unsigned n) { g_max_threads.store(n); }, py::arg("n"),
      "Threads the kernels may use (0: every pool thread, 1: the calling thread only).");
  m.def("get_num_threads", [] { return g_max_threads.load(); });
  m.def("_noop", [] {}, "Does nothing: measures the bare cost of a bound call.");
}

void set_output_caching(bool enabled) { g_use_cache.store(enabled); }
bool output_caching() { return g_use_cache.load(); }

}  // namespace tierkit_bridge
