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

// A torch tensor written through `out=` must look written to autograd: torch
// bumps a tensor's version counter on every in-place op, and backward refuses
// a saved tensor whose version moved. The bridge knows no torch at build
// time, so it asks torch (when, and only when, torch is already imported)
// through torch.autograd.graph.increment_version.
void bump_torch_version(const py::object& out) {
  static PyObject* tensor_type = nullptr;  // leaked on purpose: lives as long as torch
  static PyObject* increment_version = nullptr;
  if (!tensor_type) {
    PyObject* torch = PyDict_GetItemString(PyImport_GetModuleDict(), "torch");  // borrowed
    if (!torch) return;  // torch not imported: `out` cannot be a torch tensor
    py::object graph = py::module_::import("torch.autograd.graph");
    increment_version = py::object(graph.attr("increment_version")).release().ptr();
    tensor_type = py::object(py::reinterpret_borrow<py::object>(torch).attr("Tensor")).release().ptr();
  }
  const int is_tensor = PyObject_IsInstance(out.ptr(), tensor_type);
  if (is_tensor < 0) throw py::error_already_set();
  if (is_tensor) py::reinterpret_borrow<py::object>(increment_version)(out);
}

// Core's rules (tierkit/checks.h); its DTypeError / InvalidArgument become
// TypeError / ValueError through the module's exception translator.
void require_operand(const tierkit::TensorView& v, const char* name, const tierkit::TensorView& first,
                     const char* first_name) {
  if (&v == &first) return tierkit::checks::accepted_dtype(name, v.dtype());
  tierkit::checks::same_dtype(name, v.dtype(), first_name, first.dtype());
  tierkit::checks::same_shape(name, v.shape(), first_name, first.shape());
}

// A fresh C-contiguous output shaped like `first`: a numpy array when the
// first input is one (allocated through numpy's C API: what the caller gets
// back, with no second wrapping), else a Buffer (from the caching allocator
// when output caching is on).
py::object new_output(const py::handle& first_input, const tierkit::TensorView& first) {
  if (!g_use_cache.load(std::memory_order_relaxed) && numpy_imported() && py::isinstance<py::array>(first_input)) {
    std::vector<py::ssize_t> shape(first.shape().begin(), first.shape().end());
    return py::array(py::reinterpret_borrow<py::array>(first_input).dtype(), std::move(shape));
  }
  return py::cast(Buffer::empty(first.shape(), first.dtype(), g_use_cache.load()));
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
      "a + b elementwise. Returns ``out`` when given (written in place), else a new Buffer.");
  m.def(
      "mul",
      [](const py::object& a, const py::object& b, const py::object& out) {
        return run<2>({a, b}, {"a", "b"}, out, [](const auto& in, const auto& o, unsigned t) {
          tierkit::kernels::mul(in[0].view(), in[1].view(), o, tierkit::kernels::PoolRunner{t});
        });
      },
      py::arg("a"), py::arg("b"), py::kw_only(), py::arg("out") = py::none(), "a * b elementwise.");
  m.def(
      "scale_shift",
      [](const py::object& x, double alpha, double beta, const py::object& out) {
        return run<1>({x}, {"x"}, out, [alpha, beta](const auto& in, const auto& o, unsigned t) {
          tierkit::kernels::scale_shift(in[0].view(), alpha, beta, o, tierkit::kernels::PoolRunner{t});
        });
      },
      py::arg("x"), py::arg("alpha"), py::arg("beta"), py::kw_only(), py::arg("out") = py::none(),
      "alpha * x + beta elementwise.");
  m.def(
      "muladd",
      [](const py::object& a, const py::object& b, double c, const py::object& out) {
        return run<2>({a, b}, {"a", "b"}, out, [c](const auto& in, const auto& o, unsigned t) {
          tierkit::kernels::muladd(in[0].view(), in[1].view(), c, o, tierkit::kernels::PoolRunner{t});
        });
      },
      py::arg("a"), py::arg("b"), py::arg("c"), py::kw_only(), py::arg("out") = py::none(),
      "a * b + c elementwise (c a scalar).");

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
