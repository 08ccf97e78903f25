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
#include <tuple>
#include <utility>
#include <vector>

#include "array_arg.h"
#include "buffer.h"
#include "dlpack_exchange.h"
#include "tierkit/checks.h"
#include "tierkit/kernels.h"
#include "tierkit/op_table.h"

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

// The strides (in elements) numpy gives a new ufunc output of `shape` from
// the operands `ins` (already broadcast to `shape`): its K order, nditer's
// npyiter_find_best_axis_ordering. Axes are insertion-sorted from smallest
// to largest stride; two axes swap only when every operand with a non-zero
// stride on both says so (a conflict keeps C order), a size-1 axis counts as
// stride 0 (no say), and the output's strides are positive and dense.
template <std::size_t N>
tierkit::Shape k_order_strides(const tierkit::Shape& shape,
                               const std::array<const tierkit::TensorView*, N>& ins) {
  const int rank = shape.rank();
  tierkit::Shape strides = shape;
  if (rank < 2) return shape.contiguous_strides();
  int order[tierkit::kMaxRank];  // innermost first
  for (int i = 0; i < rank; ++i) order[i] = rank - 1 - i;
  auto stride = [&](std::size_t k, int dim) -> std::int64_t {
    const std::int64_t s = shape[dim] == 1 ? 0 : ins[k]->strides()[dim];
    return s < 0 ? -s : s;
  };
  for (int i0 = 1; i0 < rank; ++i0) {
    const int d0 = order[i0];
    int ipos = i0;
    for (int i1 = i0 - 1; i1 >= 0; --i1) {
      const int d1 = order[i1];
      bool ambiguous = true, swap = false;
      for (std::size_t k = 0; k < N; ++k) {
        const std::int64_t s0 = stride(k, d0), s1 = stride(k, d1);
        if (s0 == 0 || s1 == 0) continue;
        if (s1 <= s0) {
          swap = false;
        } else if (ambiguous) {
          swap = true;
        }
        ambiguous = false;
      }
      if (ambiguous) continue;
      if (!swap) break;
      ipos = i1;
    }
    for (int i = i0; i > ipos; --i) order[i] = order[i - 1];
    order[ipos] = d0;
  }
  std::int64_t acc = 1;
  for (int i = 0; i < rank; ++i) {
    strides[order[i]] = acc;
    acc = tierkit::checked_mul(acc, shape[order[i]] > 1 ? shape[order[i]] : 1, "shape: output stride");
  }
  return strides;
}

// A fresh output shaped like the operands, presented the way the first input
// was: a numpy array for numpy (allocated through numpy's C API, in numpy's
// K order), a torch tensor for torch (a C-contiguous Buffer handed over by
// DLPack, zero-copy), a Buffer otherwise. With output caching on, the memory
// comes from core's caching allocator (C order) whatever the input.
// `input_dtype`: the output has the first input's dtype, so numpy's
// allocation can reuse its descriptor.
template <std::size_t N>
py::object new_output(const py::handle& first_input, const std::array<const tierkit::TensorView*, N>& ins,
                      bool input_dtype = true) {
  const tierkit::TensorView& first = *ins[0];
  const bool cached = g_use_cache.load(std::memory_order_relaxed);
  const bool numpy_in = numpy_imported() && py::isinstance<py::array>(first_input);
  if (numpy_in && !cached && input_dtype) {
    // numpy's own allocation (PyArray_NewFromDescr), with the input's dtype
    // descriptor: no Python-level call, no dtype object built. C order (null
    // strides) unless no operand is C-contiguous.
    const auto& api = py::detail::npy_api::get();
    PyObject* descr = py::detail::array_proxy(first_input.ptr())->descr;
    py::ssize_t dims[tierkit::kMaxRank], steps[tierkit::kMaxRank];
    for (int d = 0; d < first.rank(); ++d) dims[d] = first.shape()[d];
    bool c_order = first.rank() < 2;
    for (std::size_t k = 0; k < N && !c_order; ++k) c_order = ins[k]->is_contiguous();
    if (!c_order) {
      const tierkit::Shape st = k_order_strides(first.shape(), ins);
      const auto item = static_cast<py::ssize_t>(tierkit::dtype_size(first.dtype()));
      for (int d = 0; d < first.rank(); ++d) steps[d] = st[d] * item;
    }
    Py_INCREF(descr);  // NewFromDescr steals a reference
    PyObject* array = api.PyArray_NewFromDescr_(api.PyArray_Type_, descr, first.rank(), dims,
                                                c_order ? nullptr : steps, nullptr, 0, nullptr);
    if (!array) throw py::error_already_set();
    return py::reinterpret_steal<py::object>(array);
  }
  Buffer fresh = Buffer::empty(first.shape(), first.dtype(), cached);
  const TorchHooks* torch = torch_hooks();
  if (!numpy_in && is_torch_tensor(first_input, torch)) {
    // torch's C exchange table makes the tensor (tens of nanoseconds, where
    // torch.from_dlpack on a capsule takes microseconds).
    const dlpack::ExchangeAPI* api = dlpack::exchange_api_of(first_input.ptr());
    if (api && api->managed_tensor_to_py_object_no_sync) {
      DLManagedTensorVersioned* m = to_managed_versioned(fresh);
      void* tensor = nullptr;
      if (api->managed_tensor_to_py_object_no_sync(m, &tensor) != 0) throw py::error_already_set();
      return py::reinterpret_steal<py::object>(static_cast<PyObject*>(tensor));
    }
    return py::reinterpret_borrow<py::object>(torch->from_dlpack)(py::cast(std::move(fresh)));
  }
  py::object buffer = py::cast(std::move(fresh));
  if (numpy_in) return py::module_::import("numpy").attr("asarray")(buffer);
  return buffer;
}

// Below one grain (core's kGrain elements) the kernel runs on the calling
// thread in a few microseconds: releasing and retaking the GIL would cost
// more than other threads could gain.
constexpr std::int64_t kReleaseGilFrom = tierkit::kernels::detail::kGrain;

// ---- numpy's rules beyond the fast path ------------------------------------
// The fast path takes operands of one shape and one dtype that core reads in
// place (and an `out` of that shape and dtype). Anything else numpy accepts
// (broadcasting, promotion, Python and numpy scalars, masked arrays, dtypes
// or byte orders core does not read, an `out` of another dtype) goes to
// tierkit_bridge._numpy_rules, which applies numpy's rules and calls the
// op's exact twin (_add_exact ...): the same code without the diversion, where
// a mismatch is an error, as it was before.
py::object general_path(const char* op, PyObject* const* slots, std::size_t count, const py::object& out) {
  static PyObject* call = nullptr;  // leaked: lives as long as the module
  if (!call)
    call = py::object(py::module_::import("tierkit_bridge._numpy_rules").attr("call")).release().ptr();
  py::tuple args(count);
  for (std::size_t i = 0; i < count; ++i) args[i] = py::reinterpret_borrow<py::object>(slots[i]);
  return py::reinterpret_borrow<py::object>(call)(op, args, out);
}

// numpy's generic scalar type (np.float64(1) ...), once numpy is imported.
PyTypeObject* numpy_generic_type() {
  static PyTypeObject* type = nullptr;
  if (!type && numpy_imported()) {
    PyObject* np = PyDict_GetItemString(PyImport_GetModuleDict(), "numpy");  // borrowed
    type = reinterpret_cast<PyTypeObject*>(py::object(py::handle(np).attr("generic")).release().ptr());
  }
  return type;
}

// An operand only numpy's rules handle, seen before borrowing: a Python or
// numpy scalar, or a masked array (whose mask a borrow would drop).
bool general_operand(PyObject* obj) {
  const bool numpy = numpy_imported();
  if (numpy && Py_TYPE(obj) == py::detail::npy_api::get().PyArray_Type_) return false;  // the common case
  if (PyFloat_Check(obj) || PyLong_Check(obj) || PyComplex_Check(obj)) return true;     // bool is a PyLong
  if (!numpy) return false;
  if (PyTypeObject* masked = masked_array_type(); masked && PyObject_TypeCheck(obj, masked)) return true;
  PyTypeObject* generic = numpy_generic_type();
  return generic && PyObject_TypeCheck(obj, generic);
}

bool is_numpy_array(PyObject* obj) {
  return numpy_imported() && py::detail::npy_api::get().PyArray_Check_(obj);
}

// Imports every input, checks them against the first, resolves `out`
// (allocating when None), runs `kernel(views..., out_view)` (without the GIL
// for large arrays) and returns the output object. Takes numpy's general
// path (above) instead when the operands need it.
struct DivertToGeneral {};

template <bool Divert, std::size_t N, typename Kernel>
py::object run_body(const char* op, PyObject* const* slots, std::size_t count, const py::handle (&inputs)[N],
                    const char* const (&names)[N], const py::object& out, Kernel kernel) {
  constexpr bool may_divert = Divert;
  std::array<ArrayArg, N> args;
  for (std::size_t i = 0; i < N; ++i) {
    if (may_divert && general_operand(inputs[i].ptr())) return general_path(op, slots, count, out);
    try {
      args[i] = ArrayArg::borrow(inputs[i], names[i], false);
    } catch (...) {
      // A numpy array core cannot read in place (another dtype or byte order):
      // numpy's rules may still promote or convert it.
      if (may_divert && is_numpy_array(inputs[i].ptr())) return general_path(op, slots, count, out);
      throw;
    }
    const tierkit::TensorView& v = args[i].view();
    if (i > 0 && (v.dtype() != args[0].view().dtype() || v.shape() != args[0].view().shape())) {
      if (may_divert) return general_path(op, slots, count, out);
      require_operand(v, names[i], args[0].view(), names[0]);  // throws, naming both
    } else if (i == 0 && !tierkit::is_accepted(v.dtype())) {
      if (may_divert) return general_path(op, slots, count, out);  // int32 + float32 promotes
      require_operand(v, names[0], v, names[0]);                   // throws, naming the dtype
    }
  }
  if (may_divert && !out.is_none() && general_operand(out.ptr())) return general_path(op, slots, count, out);
  std::array<const tierkit::TensorView*, N> views;
  for (std::size_t i = 0; i < N; ++i) views[i] = &args[i].view();
  const py::object result = out.is_none() ? new_output(inputs[0], views) : out;
  // Built in place (no default-constructed view assigned over): this is the
  // per-call path. A numpy `out` core cannot write in place goes to numpy's
  // rules, signalled by DivertToGeneral.
  const ArrayArg dst = [&] {
    try {
      return ArrayArg::borrow(result, "out", true);
    } catch (...) {
      if (may_divert && is_numpy_array(result.ptr())) throw DivertToGeneral{};
      throw;
    }
  }();
  if (dst.view().dtype() != args[0].view().dtype() || dst.view().shape() != args[0].view().shape()) {
    if (may_divert) return general_path(op, slots, count, out);
    require_operand(dst.view(), "out", args[0].view(), names[0]);  // throws, naming both
  }
  const unsigned threads = g_max_threads.load(std::memory_order_relaxed);
  if (dst.view().numel() >= kReleaseGilFrom) {
    py::gil_scoped_release nogil;
    kernel(args, dst.view(), threads);
  } else {
    kernel(args, dst.view(), threads);
  }
  if (!out.is_none()) {
    bump_torch_version(out);
  } else if (dst.view().rank() == 0 && may_divert && is_numpy_array(result.ptr())) {
    // numpy's ufuncs return a numpy scalar, not a 0-d array, for a 0-d result.
    return py::reinterpret_steal<py::object>(PyObject_GetItem(result.ptr(), py::tuple().ptr()));
  }
  return result;
}

template <bool Divert, std::size_t N, typename Kernel>
py::object run(const char* op, PyObject* const* slots, std::size_t count, const py::handle (&inputs)[N],
               const char* const (&names)[N], const py::object& out, Kernel kernel) {
  try {
    return run_body<Divert>(op, slots, count, inputs, names, out, kernel);
  } catch (const DivertToGeneral&) {
    return general_path(op, slots, count, out);
  }
}

// ---- the calling convention of the ops ---------------------------------
// They are METH_FASTCALL | METH_KEYWORDS functions, not pybind11 defs:
// pybind11's dispatcher looks every keyword up by a C string decoded afresh
// on each call, which made `out=` cost ~250 ns more than allocating (perf:
// unicode decoding, interning and dict lookups on top), a tenth of a
// 1e4-element add. Vectorcall hands over the argument array and a tuple of
// keyword names, matched here in a few compares.

// The positional-or-keyword parameters of an op, then the keyword-only `out`.
struct Signature {
  const char* name;
  std::array<const char*, 3> params;
  std::size_t count;
};

// Only on the error path: the message names the function and the keyword.
[[noreturn]] void signature_error(const Signature& sig, const std::string& what) {
  throw py::type_error(std::string(sig.name) + "() " + what);
}
std::string keyword_name(PyObject* key) { return py::str(key).cast<std::string>(); }

// Binds (args, nargs, kwnames) to slots[0..count) and slots[count] (`out`,
// may stay null); the TypeErrors read as Python's own for a def. Nothing is
// allocated or decoded unless an error is raised.
void bind_arguments(const Signature& sig, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames,
                    PyObject** slots) {
  if (static_cast<std::size_t>(nargs) > sig.count) {
    signature_error(sig, "takes " + std::to_string(sig.count) + " positional arguments but " +
                             std::to_string(nargs) + " were given");
  }
  for (Py_ssize_t i = 0; i < nargs; ++i) slots[i] = args[i];
  const Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t k = 0; k < nkw; ++k) {
    PyObject* key = PyTuple_GET_ITEM(kwnames, k);
    std::size_t slot = sig.count + 1;
    if (PyUnicode_CompareWithASCIIString(key, "out") == 0) slot = sig.count;
    for (std::size_t j = 0; j < sig.count && slot > sig.count; ++j) {
      if (PyUnicode_CompareWithASCIIString(key, sig.params[j]) == 0) slot = j;
    }
    if (slot > sig.count)
      signature_error(sig, "got an unexpected keyword argument '" + keyword_name(key) + "'");
    if (slots[slot]) signature_error(sig, "got multiple values for argument '" + keyword_name(key) + "'");
    slots[slot] = args[nargs + k];
  }
  for (std::size_t j = 0; j < sig.count; ++j) {
    if (!slots[j]) signature_error(sig, std::string("missing required argument: '") + sig.params[j] + "'");
  }
}

// A scalar parameter: a Python float or int, or a numpy scalar (anything
// with __float__ or __index__); not a bool, a complex or a string.
double real_argument(PyObject* obj, const Signature& sig, const char* param) {
  if (PyFloat_CheckExact(obj)) return PyFloat_AS_DOUBLE(obj);
  if (!PyBool_Check(obj) && !PyComplex_Check(obj) && PyNumber_Check(obj)) {
    const double value = PyFloat_AsDouble(obj);
    if (!(value == -1.0 && PyErr_Occurred())) return value;
    PyErr_Clear();
  }
  throw py::type_error(std::string(sig.name) + "(): " + param +
                       ": expected a real number (float or int), got " +
                       py::str(py::handle(obj).get_type().attr("__name__")).cast<std::string>());
}

// Runs `body(slots)` and turns what it throws into the Python exception the
// module's translators give (core's errors -> ValueError/TypeError...).
template <typename Body>
PyObject* call_op(const Signature& sig, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames,
                  Body body) noexcept {
  try {
    PyObject* slots[4] = {nullptr, nullptr, nullptr, nullptr};
    bind_arguments(sig, args, nargs, kwnames, slots);
    const py::object out =
        slots[sig.count] ? py::reinterpret_borrow<py::object>(slots[sig.count]) : py::none();
    return body(slots, out).release().ptr();
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (...) {
    py::detail::try_translate_exceptions();
  }
  return nullptr;
}

// Every op of the op table (tierkit/op_table.h): its signature (tensors,
// then floats), arguments bound and converted, then core's functor F over
// the operands' views. `Divert`: numpy's general path may take the call.
template <typename Info>
constexpr std::size_t kTensors = std::tuple_size_v<std::decay_t<decltype(Info::tensors)>>;
template <typename Info>
constexpr std::size_t kScalars = std::tuple_size_v<std::decay_t<decltype(Info::scalars)>>;

// The k-th parameter's name: the tensors, then the floats.
template <typename Info>
constexpr const char* param(std::size_t k) {
  return k < kTensors<Info> ? Info::tensors[k] : Info::scalars[k - kTensors<Info>];
}

template <typename Info, template <typename> class F, bool Divert, typename Tensors, typename Scalars>
struct BridgeOp;

template <typename Info, template <typename> class F, bool Divert, std::size_t... I, std::size_t... J>
struct BridgeOp<Info, F, Divert, std::index_sequence<I...>, std::index_sequence<J...>> {
  static constexpr std::size_t N = sizeof...(I), M = sizeof...(J);
  static_assert(N + M <= 3, "Signature holds three parameters; widen it for a longer op");
  static constexpr Signature kSig{Divert ? Info::bridge_name : Info::bridge_exact_name,
                                  {param<Info>(I)..., param<Info>(N + J)...},
                                  N + M};

  static PyObject* call(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
    return call_op(kSig, args, nargs, kwnames, [](PyObject** s, const py::object& out) {
      const std::array<double, M> scalars{real_argument(s[N + J], kSig, Info::scalars[J])...};
      static constexpr const char* names[N] = {Info::tensors[I]...};
      return run<Divert, N>(kSig.name, s, kSig.count, {s[I]...}, names, out,
                            [&](const auto& in, const tierkit::TensorView& o, unsigned t) {
                              const std::array<tierkit::TensorView, N> views{in[I].view()...};
                              const std::array<const tierkit::TensorView*, N> ptrs{&views[I]...};
                              tierkit::kernels::pointwise<F>(ptrs, Info::tensors, scalars, o,
                                                             tierkit::kernels::PoolRunner{t});
                            });
    });
  }
};

template <typename Info, template <typename> class F, bool Divert>
constexpr PyCFunction bridge_function() {
  using Op = BridgeOp<Info, F, Divert, std::make_index_sequence<kTensors<Info>>,
                      std::make_index_sequence<kScalars<Info>>>;
  return reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&Op::call));
}

// The functions (one per op, and its exact twin, which numpy's general path
// (_numpy_rules) calls with operands it made fit: same code, no diversion).
PyMethodDef kOpMethods[] = {
#define TIERKIT_BRIDGE_METHODS(name, Functor, n_tensors, n_scalars)                     \
  {tierkit::op_info::name::bridge_name,                                                 \
   bridge_function<tierkit::op_info::name, tierkit::kernels::Functor##Op, true>(),      \
   METH_FASTCALL | METH_KEYWORDS, tierkit::op_info::name::bridge_doc},                  \
      {tierkit::op_info::name::bridge_exact_name,                                       \
       bridge_function<tierkit::op_info::name, tierkit::kernels::Functor##Op, false>(), \
       METH_FASTCALL | METH_KEYWORDS, tierkit::op_info::name::bridge_exact_doc},
    TIERKIT_POINTWISE_OPS(TIERKIT_BRIDGE_METHODS)
#undef TIERKIT_BRIDGE_METHODS
        {nullptr, nullptr, 0, nullptr},
};

// Each op's tensor and float parameters, by its bridge name: what numpy's
// general path needs to know of it.
py::dict op_parameters() {
  py::dict table;
#define TIERKIT_BRIDGE_PARAMS(name, Functor, n_tensors, n_scalars)                                       \
  {                                                                                                      \
    py::list tensors, scalars;                                                                           \
    for (const char* t : tierkit::op_info::name::tensors) tensors.append(t);                             \
    for (const char* x : tierkit::op_info::name::scalars) scalars.append(x);                             \
    table[tierkit::op_info::name::bridge_name] = py::make_tuple(py::tuple(tensors), py::tuple(scalars)); \
  }
  TIERKIT_POINTWISE_OPS(TIERKIT_BRIDGE_PARAMS)
#undef TIERKIT_BRIDGE_PARAMS
  return table;
}

}  // namespace

// numpy's MaskedArray type once numpy.ma is imported (before that, no masked
// array exists); null otherwise.
PyTypeObject* masked_array_type() {
  static PyTypeObject* type = nullptr;
  if (!type) {
    PyObject* ma = PyDict_GetItemString(PyImport_GetModuleDict(), "numpy.ma");  // borrowed
    if (!ma) return nullptr;
    type = reinterpret_cast<PyTypeObject*>(py::object(py::handle(ma).attr("MaskedArray")).release().ptr());
  }
  return type;
}

unsigned max_threads() { return g_max_threads.load(std::memory_order_relaxed); }

void bind_ops(py::module_& m) {
  if (PyModule_AddFunctions(m.ptr(), kOpMethods) != 0) throw py::error_already_set();
  m.def("_op_parameters", &op_parameters,
        "Each op's (tensor parameters, float parameters), by name: from the op table.");

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

py::object new_output_like(const py::handle& first_input, const tierkit::TensorView& like) {
  return new_output<1>(first_input, {&like});
}

py::object new_output_of_dtype(const py::handle& first_input, const tierkit::TensorView& like) {
  return new_output<1>(first_input, {&like}, /*input_dtype=*/false);
}

void note_written(const py::object& out) { bump_torch_version(out); }

void set_output_caching(bool enabled) { g_use_cache.store(enabled); }
bool output_caching() { return g_use_cache.load(); }

}  // namespace tierkit_bridge
