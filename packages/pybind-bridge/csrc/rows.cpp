// The row reductions (every TIERKIT_ROW_REDUCTIONS entry of the op
// table) for any array the bridge reads: core's row kernels,
// without the GIL, one template instantiated per entry. The arguments come in
// through the bridge's own import path (ArrayArg::borrow, as the pointwise
// ops'), so the rows take what they take: numpy arrays, torch tensors
// (bfloat16 too, a negated view by its values, one that requires grad
// refused naming the argument), Buffers, anything with the buffer protocol
// or __dlpack__; Python lists and tuples through numpy.asarray; numpy arrays
// in the other byte order converted, and such an `out` written, as numpy's
// ufuncs and the pointwise ops do (readable, into_swapped). The result is
// presented like x (numpy in, numpy out; torch in, torch out; else a
// Buffer). Each entry is a compiled function with the table's signature:
// name(x, <params>=None, eps=<default>, *, out=None).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "array_arg.h"
#include "buffer.h"
#include "ops.h"
#include "tierkit/checks.h"
#include "tierkit/in_place_functors.h"
#include "tierkit/map_functors.h"
#include "tierkit/op_table.h"
#include "tierkit/row_functors.h"
#include "tierkit/row_rules.h"

namespace tierkit_bridge {
namespace {
namespace rules = tierkit::row_rules;

// The import path's refusals name the argument; here the op comes first, as
// every other row error.
ArrayArg import(const std::string& op, const py::handle& obj, const char* name, bool writable) {
  try {
    return ArrayArg::borrow(obj, name, writable);
  } catch (const py::value_error& e) {
    throw py::value_error(op + e.what());
  } catch (const py::type_error& e) {
    throw py::type_error(op + e.what());
  } catch (const tierkit::DTypeError& e) {
    throw py::type_error(op + e.what());
  } catch (const tierkit::InvalidArgument& e) {
    throw py::value_error(op + e.what());
  }
}

// A module already imported (sys.modules), or null: numpy's types are only
// looked at when numpy is there.
py::object imported(const char* module) {
  PyObject* m = PyDict_GetItemString(PyImport_GetModuleDict(), module);
  return m ? py::reinterpret_borrow<py::object>(m) : py::object();
}

// A mask says which elements exist; a row's norm would be taken over the
// masked ones too (numpy's ufuncs keep masks elementwise, but a row's
// statistics have no masked meaning tierkit could honour as numpy.ma would),
// so it is refused rather than silently dropped.
void refuse_masked(const std::string& op, const py::handle& value, const char* name) {
  PyTypeObject* masked = masked_array_type();
  if (!masked || !PyObject_TypeCheck(value.ptr(), masked)) return;
  const std::string n = name, o = op.substr(0, op.size() - 2);
  throw py::type_error(op + n + ": expected an array without a mask, got a numpy.ma.MaskedArray (" + o +
                       " would normalise over the masked elements too); pass " + n + ".filled(value) or " +
                       n + ".data");
}

// Python sequences are arrays to numpy (np.asarray), as to numpy's functions.
py::object from_sequence(const py::object& value) {
  if (!PyList_Check(value.ptr()) && !PyTuple_Check(value.ptr())) return value;
  return py::module_::import("numpy").attr("asarray")(value);
}

// tierkit_bridge._numpy_rules' function `name`: numpy's conversions, the
// ones the pointwise ops' general path applies (only called for arrays in
// the other byte order).
py::object numpy_rule(const char* name) {
  return py::module_::import("tierkit_bridge._numpy_rules").attr(name);
}

// An array argument as the kernels read it: a Python sequence through
// numpy.asarray; a numpy array in the other byte order ('>f4' here) as
// numpy's ufuncs read it, its values in native order (_numpy_rules.native,
// the pointwise ops' conversion; the result is then native too, as a
// ufunc's); anything else as it came.
py::object readable(const py::object& value) {
  py::object v = from_sequence(value);
  return numpy_swapped(v) ? numpy_rule("native")(v) : v;
}

// An `out` numpy array in the other byte order, written as numpy writes a
// ufunc's: the function computed into a native copy of out (`compute(copy)`:
// every check of out applies to the copy, which has its shape, dtype and
// layout), then byte-swapped into out (_numpy_rules.write_back, the
// pointwise ops' copy back). Inputs that are out, or lie in it, are read as
// they were at the call: they were converted (copied) first.
template <typename F>
py::object into_swapped(const std::string& op, const py::handle& out, F compute) {
  if (!py::reinterpret_borrow<py::array>(out).writeable())
    throw py::value_error(op + "out: expected a writable array, got a read-only " +
                          std::string(py::str(py::type::handle_of(out).attr("__name__"))));
  const py::object copy = numpy_rule("native")(out);
  compute(copy);
  return numpy_rule("write_back")(out, copy);
}

// A real number (Python's or numpy's; not a bool), or the error naming `name`.
double real_of(const std::string& op, const char* name, const py::handle& v) {
  bool real = !PyBool_Check(v.ptr()) && (PyFloat_Check(v.ptr()) || PyLong_Check(v.ptr()));
  if (!real && !PyBool_Check(v.ptr())) {
    const py::object np = imported("numpy");
    real = np && (py::isinstance(v, np.attr("floating")) || py::isinstance(v, np.attr("integer")));
  }
  if (!real)
    throw py::type_error(op + name + ": expected a real number, got " +
                         std::string(py::str(py::type::handle_of(v).attr("__name__"))));
  return v.cast<double>();
}

// eps as the kernel reads it: a real number (Python's or numpy's), or the
// entry's default (torch's, the compute type's machine epsilon, where the
// schema's eps is optional).
template <typename Info>
double eps_of(const std::string& op, const py::handle& eps, tierkit::DType x_dtype) {
  if (eps.is_none()) {
    if (!Info::eps_optional) return Info::eps_default;
    return x_dtype == tierkit::DType::Float64 ? std::numeric_limits<double>::epsilon()
                                              : std::numeric_limits<float>::epsilon();
  }
  return real_of(op, "eps", eps);
}

std::vector<std::int64_t> dims(const tierkit::Shape& s) { return {s.begin(), s.begin() + s.rank()}; }

// An axis (the dim role, numpy's name): an integer (Python's or numpy's,
// not a bool), or the error naming it.
std::int64_t axis_of(const std::string& op, const py::handle& v) {
  bool integer = !PyBool_Check(v.ptr()) && PyLong_Check(v.ptr());
  if (!integer && !PyBool_Check(v.ptr())) {
    const py::object np = imported("numpy");
    integer = np && py::isinstance(v, np.attr("integer"));
  }
  if (!integer)
    throw py::type_error(op + "axis: expected an int, got " +
                         std::string(py::str(py::type::handle_of(v).attr("__name__"))));
  return v.cast<std::int64_t>();
}

// v with its dim `axis` moved last (a view of the same elements).
tierkit::TensorView axis_last(const tierkit::TensorView& v, int axis) {
  tierkit::Shape shape, strides;
  for (int i = 0; i < v.rank(); ++i)
    if (i != axis) {
      shape.push_back(v.shape()[i]);
      strides.push_back(v.strides()[i]);
    }
  shape.push_back(v.shape()[axis]);
  strides.push_back(v.strides()[axis]);
  const std::int64_t capacity = v.offset() + (v.numel() ? tierkit::reach(shape, strides).hi + 1 : 0);
  return tierkit::TensorView(v.base(), capacity, v.dtype(), shape, strides, v.offset());
}

// A 0-d view as one row of one element (the dim role's 0-d x, as numpy's
// reductions take axis -1 or 0 of a 0-d array); any other view as it is.
tierkit::TensorView one_row(const tierkit::TensorView& v) {
  if (v.rank() > 0) return v;
  return tierkit::TensorView(v.base(), v.offset() + 1, v.dtype(), tierkit::Shape{1}, tierkit::Shape{1},
                             v.offset());
}

// A shape as Python prints a tuple: (3,), (2, 3), ().
std::string py_shape(const tierkit::Shape& s) { return tierkit::shape_str(dims(s)); }

// Runs a role's rule (core's tierkit/row_rules.h, numpy's words); its
// failure becomes "<op>: <core's message>" as a ValueError (a TypeError
// for a dtype rule, as numpy raises).
template <typename F>
void row_rule(const std::string& op, F&& f) {
  try {
    f();
  } catch (const tierkit::DTypeError& e) {  // the dtype rules': numpy's TypeError
    throw py::type_error(op + e.what());
  } catch (const tierkit::InvalidArgument& e) {
    throw py::value_error(op + e.what());
  }
}

// to[i] = from[i] element by element, over two views of one shape and dtype
// (bytes copied: no value changes, NaN payloads and -0 kept).
void copy_elements(const tierkit::TensorView& from, const tierkit::TensorView& to) {
  const std::int64_t n = from.numel();
  if (n == 0) return;
  const int rank = from.rank();
  const std::size_t item = tierkit::dtype_size(from.dtype());
  const auto* src = static_cast<const char*>(from.data());
  auto* dst = static_cast<char*>(to.data());
  std::int64_t index[tierkit::kMaxRank] = {};
  std::int64_t ps = 0, pd = 0;
  for (std::int64_t k = 0; k < n; ++k) {
    std::memcpy(dst + pd * static_cast<std::int64_t>(item), src + ps * static_cast<std::int64_t>(item), item);
    for (int d = rank - 1; d >= 0; --d) {
      if (++index[d] < from.shape()[d]) {
        ps += from.strides()[d];
        pd += to.strides()[d];
        break;
      }
      ps -= (from.shape()[d] - 1) * from.strides()[d];
      pd -= (to.shape()[d] - 1) * to.strides()[d];
      index[d] = 0;
    }
  }
}

// A C-contiguous copy of v (a Buffer that owns it).
Buffer contiguous_copy(const tierkit::TensorView& v) {
  Buffer b = Buffer::empty(v.shape(), v.dtype(), false);
  copy_elements(v, b.view());
  return b;
}

bool meet(const tierkit::TensorView& a, const tierkit::TensorView& b) {
  const tierkit::checks::Span sa = tierkit::checks::span_of(a), sb = tierkit::checks::span_of(b);
  return sa.lo && sb.lo && sa.lo < sb.hi && sb.lo < sa.hi;
}

// dst[k] = src[k] converted (through src's compute type, rounded once: a
// float64 result narrowed to float16 as numpy narrows it), both
// C-contiguous, the same length.
void convert_into(const tierkit::TensorView& src, const tierkit::TensorView& dst) {
  tierkit::dispatch_accepted(src.dtype(), "x", [&](auto s) {
    using S = decltype(s);
    tierkit::dispatch_accepted(dst.dtype(), "out", [&](auto t) {
      using D = decltype(t);
      const S* in = static_cast<const S*>(src.data());
      D* out = static_cast<D*>(dst.data());
      for (std::int64_t k = 0; k < src.numel(); ++k)
        out[k] = tierkit::round_to<D>(static_cast<tierkit::compute_t<S>>(in[k]));
    });
  });
}

Buffer converted(const tierkit::TensorView& v, tierkit::DType dtype) {
  Buffer b = Buffer::empty(v.shape(), dtype, false);
  convert_into(v, b.view());
  return b;
}

// The casting modes (the op table's CASTING_MODES, as op_table.h's
// kCastingModes; torch-common's casting.py arranges the same for the torch
// tiers): the entry's plain forward with the weight and one product arranged.
const tierkit::CastingMode& casting_mode_of(const std::string& op, const py::handle& name) {
  const std::string names = tierkit::kCastingModeNames;
  if (!PyUnicode_Check(name.ptr()))
    throw py::type_error(op + "casting_mode: expected a str (" + names + "), got " +
                         std::string(py::str(py::type::handle_of(name).attr("__name__"))));
  const std::string s = name.cast<std::string>();
  for (const tierkit::CastingMode& m : tierkit::kCastingModes)
    if (s == m.name) return m;
  throw py::value_error(op + "casting_mode: expected " + names + ", got " + std::string(py::repr(name)));
}

// dst[k] = src[k] + offset, in dst's compute type: torch's `w + offset`
// where dst has w's dtype, Gemma's `w.float() + offset` where it is wider.
void offset_into(const tierkit::TensorView& src, double offset, const tierkit::TensorView& dst) {
  tierkit::dispatch_accepted(src.dtype(), "weight", [&](auto s) {
    using S = decltype(s);
    tierkit::dispatch_accepted(dst.dtype(), "weight", [&](auto t) {
      using D = decltype(t);
      using C = tierkit::compute_t<D>;
      const S* in = static_cast<const S*>(src.data());
      D* out = static_cast<D*>(dst.data());
      for (std::int64_t k = 0; k < src.numel(); ++k)
        out[k] = static_cast<D>(static_cast<C>(static_cast<tierkit::compute_t<S>>(in[k])) +
                                static_cast<C>(offset));
    });
  });
}

// out[r, j] = w[j] * y[r, j] in out's compute type (torch's `w * y`), all
// C-contiguous; y and w of out's dtype or narrower (exactly widened).
void scale_columns_into(const tierkit::TensorView& y, const tierkit::TensorView& w,
                        const tierkit::TensorView& out) {
  const std::int64_t d = w.numel(), n = y.numel();
  tierkit::dispatch_accepted(y.dtype(), "x", [&](auto ty) {
    using Y = decltype(ty);
    tierkit::dispatch_accepted(w.dtype(), "weight", [&](auto tw) {
      using W = decltype(tw);
      tierkit::dispatch_accepted(out.dtype(), "out", [&](auto to) {
        using O = decltype(to);
        using C = tierkit::compute_t<O>;
        const Y* py = static_cast<const Y*>(y.data());
        const W* pw = static_cast<const W*>(w.data());
        O* po = static_cast<O*>(out.data());
        py::gil_scoped_release nogil;
        std::vector<C> wc(static_cast<std::size_t>(d));
        for (std::int64_t j = 0; j < d; ++j)
          wc[j] = static_cast<C>(static_cast<O>(static_cast<tierkit::compute_t<W>>(pw[j])));
        if (d == 0) return;
        // Rows split over the pool, each a loop the compiler vectorizes (a scalar
        // loop on one thread took 31 ms for bfloat16 [4096, 4096] on an AVX-512 Xeon).
        const C* w_c = wc.data();
        tierkit::kernels::PoolRunner{max_threads()}(
            n / d, tierkit::kernels::detail::row_grain(d), [&](std::int64_t lo, std::int64_t hi) {
              for (std::int64_t r = lo; r < hi; ++r) {
                const Y* yr = py + r * d;
                O* outr = po + r * d;
                TIERKIT_VECTORIZE_LOOP
                for (std::int64_t j = 0; j < d; ++j)
                  tierkit::store_compute(outr + j, w_c[j] * static_cast<C>(tierkit::load_compute(yr + j)));
              }
            });
      });
    });
  });
}

// A row op's result, `compute` writing it into a C-contiguous view of x's
// shape and `dtype`: a new array presented like x, or `out` after its checks
// (x's shape, `dtype` — `dtype_why` says whose — and a writable layout).
// Written straight into out when the kernel can write it: C-contiguous, apart
// from every array in `read`, and apart from x or exactly x of x's dtype (each
// row is read before it is written); otherwise computed apart, then copied in.
template <typename Compute>
py::object into_result(const std::string& op, const py::object& x, const tierkit::TensorView& vx,
                       const tierkit::TensorView& xc, const std::vector<tierkit::TensorView>& read,
                       const py::handle& out, tierkit::DType dtype, const char* dtype_why,
                       const Compute& compute) {
  if (out.is_none()) {
    const Buffer like = Buffer::empty(xc.shape(), dtype, false);
    py::object result = dtype == vx.dtype() ? new_output_like(x, xc) : new_output_of_dtype(x, like.view());
    if (xc.numel() == 0) return result;
    const ArrayArg ar = ArrayArg::borrow(result, "out", true);
    compute(ar.view());
    return result;
  }
  const ArrayArg ao = import(op, out, "out", true);
  const tierkit::TensorView& vo = ao.view();
  if (vo.dtype() != dtype || vo.shape() != vx.shape())
    throw py::value_error(op + "out: expected shape " + py_shape(vx.shape()) + " and dtype " +
                          std::string(tierkit::dtype_name(dtype)) + dtype_why + ", got " +
                          py_shape(vo.shape()) + " and " + std::string(tierkit::dtype_name(vo.dtype())));
  try {
    tierkit::checks::writable_layout(vo);
  } catch (const tierkit::InvalidArgument& e) {
    throw py::value_error(op + e.what());
  }
  if (xc.numel() == 0) return py::reinterpret_borrow<py::object>(out);
  // Exactly x is apart only in x's dtype: a float32 y (a 16-bit x's "llama"
  // with a float32 weight) from x's first byte would overwrite rows not yet read.
  bool apart = vo.is_contiguous() && (!meet(vo, xc) || (vo.data() == xc.data() && vo.dtype() == xc.dtype()));
  for (const tierkit::TensorView& t : read) apart = apart && !meet(vo, t);
  if (apart) {
    compute(vo);
  } else {
    Buffer tmp = Buffer::empty(xc.shape(), dtype, false);
    compute(tmp.view());
    copy_elements(tmp.view(), vo);
  }
  note_written(py::reinterpret_borrow<py::object>(out));
  return py::reinterpret_borrow<py::object>(out);
}

// The kernel over x (C-contiguous) and parameters of x's dtype, or, with
// `in_compute`, of x's compute type (core's RowParams takes either);
// `round_normalized`: core's flag (x-hat rounded to x's dtype before the weight).
// y is of x's dtype, or float32 over 16-bit x for a kind with core's
// kWideOutput (RMSNorm's "llama" with a float32 weight: its product's dtype).
template <typename K, std::size_t P>
void run_rows(const tierkit::TensorView& x, const std::array<const tierkit::TensorView*, P>& params,
              double eps, const tierkit::TensorView& y, bool in_compute, bool round_normalized) {
  const std::int64_t d = x.shape()[x.rank() - 1];
  const std::int64_t rows = d == 0 ? 0 : x.numel() / d;
  const unsigned threads = max_threads();
  tierkit::dispatch_accepted(x.dtype(), "x", [&](auto tag) {
    using T = decltype(tag);
    std::vector<tierkit::compute_t<T>> stats(static_cast<std::size_t>(rows * K::kStats));
    const auto run = [&](auto p) {
      using Param = std::remove_const_t<std::remove_pointer_t<decltype(p.w)>>;
      if constexpr (P > 0)
        if (params[0]) p.w = static_cast<const Param*>(params[0]->data());
      if constexpr (P > 1)
        if (params[1]) p.b = static_cast<const Param*>(params[1]->data());
      p.round_normalized = round_normalized;
      const bool wide = y.dtype() != x.dtype();
      py::gil_scoped_release nogil;
      // Core reads parameters that lie in y as they were at the call.
      if constexpr (K::kWideOutput && sizeof(T) == 2) {
        if (wide)
          return tierkit::kernels::row_forward<K>(static_cast<const T*>(x.data()), p, eps, rows, d,
                                                  static_cast<float*>(y.data()), stats.data(),
                                                  tierkit::kernels::PoolRunner{threads});
      }
      if (wide) throw std::logic_error("run_rows: a float32 y is for 16-bit x of a kind with a wide output");
      tierkit::kernels::row_forward<K>(static_cast<const T*>(x.data()), p, eps, rows, d,
                                       static_cast<T*>(y.data()), stats.data(),
                                       tierkit::kernels::PoolRunner{threads});
    };
    if (in_compute)
      run(tierkit::kernels::RowParams<tierkit::compute_t<T>>{});
    else
      run(tierkit::kernels::RowParams<T>{});
  });
}

// y = the entry's forward of x (C-contiguous) with its parameters (each
// null or C-contiguous of x's last dimension). Parameters of another float
// dtype are computed as aten's norms compute them: in x's compute type
// (float32 for 16-bit x; float64 where x or a parameter is), the result
// rounded to x's dtype (torch-cpu's rows.h MixedRows): the parameters
// converted to the compute type (d elements) beside x as it is, one pass;
// only a float64 parameter beside a narrower x converts x too.
template <typename K, std::size_t P>
void run_kernel(const tierkit::TensorView& x, const std::array<const tierkit::TensorView*, P>& params,
                double eps, const tierkit::TensorView& y) {
  std::array<std::optional<tierkit::DType>, P> dtypes;
  for (std::size_t i = 0; i < P; ++i)
    if (params[i]) dtypes[i] = params[i]->dtype();
  const tierkit::row_rules::MixedDtypes mixed =
      tierkit::row_rules::mixed_dtypes(x.dtype(), dtypes);  // core's rule
  if (!mixed.active) return run_rows<K, P>(x, params, eps, y, false, false);
  const tierkit::DType c = mixed.compute;
  std::array<std::optional<Buffer>, P> held;
  std::array<tierkit::TensorView, P> views;
  std::array<const tierkit::TensorView*, P> converted_params{};
  for (std::size_t i = 0; i < P; ++i) {
    if (!params[i]) continue;
    if (params[i]->dtype() == c) {
      converted_params[i] = params[i];
      continue;
    }
    held[i] = converted(*params[i], c);
    views[i] = held[i]->view();
    converted_params[i] = &views[i];
  }
  if (!mixed.converts_x) return run_rows<K, P>(x, converted_params, eps, y, true, false);
  const Buffer xc = converted(x, c);
  Buffer yc = Buffer::empty(x.shape(), c, false);
  run_rows<K, P>(xc.view(), converted_params, eps, yc.view(), false, false);
  convert_into(yc.view(), y);
}

// One entry's function: name(x, <params>, eps, out).
template <typename Info, typename K>
struct BridgeRows {
  static constexpr std::size_t P = Info::params.size();
  using Args = std::array<py::object, P>;

  // `mode`: null for an entry without casting modes, else the call's, with its `offset`.
  static py::object call(py::object x_in, const Args& params_in, const py::handle& eps_in,
                         const py::handle& out, const tierkit::CastingMode* mode = nullptr,
                         double offset = 0.0) {
    const std::string op = std::string(Info::name) + ": ";
    refuse_masked(op, x_in, "x");
    refuse_masked(op, out, "out");
    for (std::size_t i = 0; i < P; ++i) refuse_masked(op, params_in[i], Info::params[i]);
    if (numpy_swapped(out))
      return into_swapped(op, out,
                          [&](const py::object& copy) { call(x_in, params_in, eps_in, copy, mode, offset); });
    const py::object x = readable(x_in);
    Args param_objs;
    for (std::size_t i = 0; i < P; ++i) param_objs[i] = readable(params_in[i]);
    const ArrayArg ax = import(op, x, "x", false);
    const tierkit::TensorView& vx = ax.view();
    if (!tierkit::is_accepted(vx.dtype()))
      throw py::type_error(op + "x: expected dtype " + tierkit::accepted_dtype_names() + ", got " +
                           std::string(tierkit::dtype_name(vx.dtype())));
    // The dim role: rows along `axis`, the last-axis rows of x with it moved last.
    int axis = vx.rank() - 1;
    if constexpr (Info::has_dim) {
      const std::int64_t a = axis_of(op, eps_in);
      row_rule(op, [&] { axis = static_cast<int>(rules::dim("axis", a, vx.rank(), rules::kNumpyWords)); });
    } else {
      row_rule(op, [&] { rules::x_rank(vx.rank(), "the last is normalised", rules::kNumpyWords); });
    }
    const std::int64_t d = vx.rank() ? vx.shape()[vx.rank() - 1] : 1;
    const double eps = Info::has_dim ? 0.0 : eps_of<Info>(op, eps_in, vx.dtype());

    // The parameters as the kernel reads them: C-contiguous (a copy only when not).
    std::array<std::optional<ArrayArg>, P> args;
    std::array<std::optional<Buffer>, P> copies;
    std::array<tierkit::TensorView, P> views;
    std::array<const tierkit::TensorView*, P> params{};
    for (std::size_t i = 0; i < P; ++i) {
      if (param_objs[i].is_none()) continue;
      const char* name = Info::params[i];
      args[i] = import(op, param_objs[i], name, false);
      const tierkit::TensorView& w = args[i]->view();
      if (!tierkit::is_accepted(w.dtype()))  // any float dtype, as aten's: the result keeps x's
        throw py::type_error(op + name + ": expected dtype " + tierkit::accepted_dtype_names() + ", got " +
                             std::string(tierkit::dtype_name(w.dtype())));
      row_rule(op, [&] { rules::param_shape(name, dims(w.shape()), d, rules::kNumpyWords); });
      if (w.is_contiguous()) {
        views[i] = w;
      } else {
        copies[i] = contiguous_copy(w);
        views[i] = copies[i]->view();
      }
      params[i] = &views[i];
    }
    // The casting mode's arrangement: the weight the kernel reads (w + offset
    // in w's dtype, or in the compute type), and the one that multiplies
    // x-hat rounded to x's dtype after (`after`, the result then in
    // result_type(weight, x)).
    std::optional<Buffer> arranged;
    const tierkit::TensorView* after = nullptr;
    if constexpr (Info::casting) {
      if (mode && !params[0] && offset != 0.0)
        throw py::value_error(
            op + "offset: expected 0.0 without a weight (the offset is added to the weight), got " +
            std::string(py::repr(py::float_(offset))));
      if (mode && params[0]) {
        if (mode->weight_in_compute || offset != 0.0) {
          bool wide = vx.dtype() == tierkit::DType::Float64 || params[0]->dtype() == tierkit::DType::Float64;
          const tierkit::DType c = wide ? tierkit::DType::Float64 : tierkit::DType::Float32;
          arranged =
              Buffer::empty(params[0]->shape(), mode->weight_in_compute ? c : params[0]->dtype(), false);
          offset_into(*params[0], offset, arranged->view());
          views[0] = arranged->view();
        }
        if (mode->rounds_normalized) {
          after = &views[0];
          params[0] = nullptr;
        }
      }
    }
    const tierkit::DType result_dtype =
        after ? tierkit::promote_floating(after->dtype(), vx.dtype()) : vx.dtype();

    // x as the kernel reads it: C-contiguous (a copy only when it is not).
    std::optional<Buffer> x_copy;
    tierkit::TensorView xc = one_row(vx);
    const bool moved = vx.rank() > 0 && axis != vx.rank() - 1;
    if (moved || !vx.is_contiguous()) {
      x_copy = contiguous_copy(moved ? axis_last(vx, axis) : vx);
      xc = x_copy->view();
    }
    // The forward into a C-contiguous `y` of the result's dtype (then the product after, if any).
    // A product after by a weight of x's dtype is core's round_normalized rows: x-hat rounded,
    // times the weight, rounded once more, in one pass (the same bits as the two passes below).
    // The weight is the only parameter (casting modes are weight-only) and of x's dtype: the
    // call mixes no dtypes, so it goes to run_rows as it is. A float32 weight beside 16-bit x
    // is one pass too where the kind writes a float32 y (core's kWideOutput): x-hat rounded,
    // times the weight in float32, not rounded again (the result's dtype is float32).
    const bool sixteen = vx.dtype() == tierkit::DType::BFloat16 || vx.dtype() == tierkit::DType::Float16;
    const bool wide_pass = after && K::kWideOutput && sixteen && after->dtype() == tierkit::DType::Float32;
    const bool one_pass = after && (after->dtype() == vx.dtype() || wide_pass);
    const auto forward_rows = [&](const tierkit::TensorView& y) {
      if (one_pass) {
        std::array<const tierkit::TensorView*, P> with_weight = params;
        if constexpr (P > 0) with_weight[0] = after;
        return run_rows<K, P>(xc, with_weight, eps, y, /*in_compute=*/wide_pass, true);
      }
      if (!after) return run_kernel<K, P>(xc, params, eps, y);
      Buffer normalized = Buffer::empty(xc.shape(), xc.dtype(), false);
      run_kernel<K, P>(xc, params, eps, normalized.view());
      scale_columns_into(normalized.view(), *after, y);
    };
    // Along a moved axis: the rows computed apart, then each element put back in its place in y.
    const auto forward = [&](const tierkit::TensorView& y) {
      if (!moved) return forward_rows(one_row(y));
      Buffer rows = Buffer::empty(xc.shape(), y.dtype(), false);
      forward_rows(rows.view());
      copy_elements(rows.view(), axis_last(y, axis));
    };

    std::vector<tierkit::TensorView> read;  // what the kernel reads besides x
    for (const tierkit::TensorView* v : params)
      if (v) read.push_back(*v);
    if (after) read.push_back(*after);
    return into_result(op, x, vx, moved || vx.rank() == 0 ? vx : xc, read, out, result_dtype,
                       after ? " (the result's: result_type(weight, x))" : " (x's)", forward);
  }

  static py::arg_v eps_arg() {
    if (Info::eps_optional) return py::arg_v("eps", py::none(), "None");
    return py::arg_v("eps", Info::eps_default);
  }

  static std::string doc() {
    std::string params;
    for (std::size_t i = 0; i < P; ++i)
      params += std::string(i ? " and " : "") + "``" + Info::params[i] + "``";
    return std::string(Info::doc) + ", over the last axis.\n\n" + params +
           ": shape ``(x.shape[-1],)``, any float dtype (computed as torch computes it: a float32 parameter "
           "with float16 ``x`` in float32, the result in x's dtype), read as they were at the call, even "
           "where "
           "they lie in ``out``. ``eps`` defaults to " +
           (Info::eps_optional ? std::string("torch's: float32's machine epsilon (float64's for float64 x)")
                               : std::string(py::str(py::float_(Info::eps_default)))) +
           ". 16-bit inputs accumulate in float32; every row is reduced in one fixed order, so the result "
           "does not depend on the thread count. Returns a new array presented like ``x``, or writes into "
           "``out`` (x's shape and dtype, any layout) and returns it. Masked arrays are refused.";
  }

  static std::string casting_doc() {
    return std::string(
               "\n\n``offset`` is added to the weight and ``casting_mode`` says where results round, as "
               "the torch op's (tierkit_torch.") +
           Info::name +
           "): \"aten\" (the weight in the compute type, one rounding), \"llama\" (x-hat rounded to x's "
           "dtype, then times the weight in result_type(weight, x)) or \"gemma\" (offset + weight in the "
           "compute type).";
  }

  static std::string axis_doc() {
    return std::string(Info::name) +
           " along ``axis`` (any axis, negative counting from the end), as scipy.special's function of that "
           "name gives it for an int axis; what torch calls " +
           Info::doc +
           ". 16-bit inputs are computed in "
           "float32 and rounded once; every row is reduced in one fixed order, so the result does not depend "
           "on the thread count. Returns a new array presented like ``x``, or writes into ``out`` (x's shape "
           "and dtype, any layout) and returns it. Masked arrays are refused.";
  }

  static void bind(py::module_& m) {
    if constexpr (Info::has_dim) {
      static_assert(P == 0, "an op along a dim has no per-column parameters");
      m.def(
          Info::name,
          [](py::object x, const py::object& axis, const py::object& out) {
            return call(std::move(x), Args{}, axis, out);
          },
          py::arg("x"), py::arg_v("axis", -1), py::kw_only(), py::arg_v("out", py::none(), "None"),
          axis_doc().c_str());
    } else if constexpr (P == 1 && Info::casting) {
      m.def(
          Info::name,
          [](py::object x, py::object p0, const py::object& eps, const py::object& out,
             const py::object& offset, const py::object& casting_mode) {
            const std::string op = std::string(Info::name) + ": ";
            const tierkit::CastingMode& mode = casting_mode_of(op, casting_mode);
            return call(std::move(x), Args{std::move(p0)}, eps, out, &mode, real_of(op, "offset", offset));
          },
          py::arg("x"), py::arg_v(Info::params[0], py::none(), "None"), eps_arg(), py::kw_only(),
          py::arg_v("out", py::none(), "None"), py::arg_v("offset", 0.0), py::arg_v("casting_mode", "aten"),
          (doc() + casting_doc()).c_str());
    } else if constexpr (P == 1) {
      m.def(
          Info::name,
          [](py::object x, py::object p0, const py::object& eps, const py::object& out) {
            return call(std::move(x), Args{std::move(p0)}, eps, out);
          },
          py::arg("x"), py::arg_v(Info::params[0], py::none(), "None"), eps_arg(), py::kw_only(),
          py::arg_v("out", py::none(), "None"), doc().c_str());
    } else {
      static_assert(P == 2, "a row reduction has one or two parameters (weight, bias)");
      static_assert(!Info::casting, "casting modes are declared for weight-only norms");
      m.def(
          Info::name,
          [](py::object x, py::object p0, py::object p1, const py::object& eps, const py::object& out) {
            return call(std::move(x), Args{std::move(p0), std::move(p1)}, eps, out);
          },
          py::arg("x"), py::arg_v(Info::params[0], py::none(), "None"),
          py::arg_v(Info::params[1], py::none(), "None"), eps_arg(), py::kw_only(),
          py::arg_v("out", py::none(), "None"), doc().c_str());
    }
  }
};

// The row maps (TIERKIT_ROW_MAPS): name(x, <the entry's tables>, <its flag>=
// <default>, *, out=None), computed in the promotion of the inputs' dtypes
// (np.result_type), the tables broadcast against x[..., :r]. Every name,
// count and word comes from the entry (Info), none from an op.
template <typename Info, typename K>
struct BridgeMap {
  static constexpr std::size_t N = K::kTables;

  // v C-contiguous in `dtype` (a copy only where it is not already).
  static tierkit::TensorView as_kernel_reads(const tierkit::TensorView& v, tierkit::DType dtype,
                                             std::optional<Buffer>& held) {
    tierkit::TensorView c = v;
    if (!v.is_contiguous()) {
      held = contiguous_copy(v);
      c = held->view();
    }
    if (c.dtype() == dtype) return c;
    std::optional<Buffer> conv = converted(c, dtype);
    held = std::move(conv);
    return held->view();
  }

  static py::object call(py::object x_in, const std::array<py::object, N>& tables_in, bool flag,
                         const py::handle& out) {
    const std::string op = std::string(Info::name) + ": ";
    refuse_masked(op, x_in, "x");
    refuse_masked(op, out, "out");
    for (std::size_t i = 0; i < N; ++i) refuse_masked(op, tables_in[i], Info::tables[i]);
    if (numpy_swapped(out))
      return into_swapped(op, out, [&](const py::object& copy) { call(x_in, tables_in, flag, copy); });
    const py::object x = readable(x_in);
    std::array<py::object, N> table_objs;
    for (std::size_t i = 0; i < N; ++i) table_objs[i] = readable(tables_in[i]);
    const ArrayArg ax = import(op, x, "x", false);
    const tierkit::TensorView& vx = ax.view();
    if (!tierkit::is_accepted(vx.dtype()))
      throw py::type_error(op + "x: expected dtype " + tierkit::accepted_dtype_names() + ", got " +
                           std::string(tierkit::dtype_name(vx.dtype())));
    row_rule(op, [&] { rules::x_rank(vx.rank(), nullptr, rules::kNumpyWords); });
    std::array<std::optional<ArrayArg>, N> args;
    tierkit::DType dtype = vx.dtype();
    for (std::size_t i = 0; i < N; ++i) {
      const char* name = Info::tables[i];
      args[i] = import(op, table_objs[i], name, false);
      const tierkit::TensorView& t = args[i]->view();
      if (!tierkit::is_accepted(t.dtype()))
        throw py::type_error(op + name + ": expected dtype " + tierkit::accepted_dtype_names() + ", got " +
                             std::string(tierkit::dtype_name(t.dtype())));
      row_rule(op, [&] { rules::table_rank(name, t.rank(), rules::kNumpyWords); });
      dtype = tierkit::promote_floating(dtype, t.dtype());
    }
    std::array<std::vector<std::int64_t>, N> sizes;
    for (std::size_t i = 0; i < N; ++i) sizes[i] = dims(args[i]->view().shape());
    row_rule(op, [&] {
      rules::tables_fit(dims(vx.shape()), sizes, Info::tables, Info::width_rule, rules::kNumpyWords);
    });
    const std::int64_t d = vx.shape()[vx.rank() - 1], r = sizes[0].back();
    // As the kernel reads them: C-contiguous, in the promoted dtype.
    std::optional<Buffer> x_held;
    std::array<std::optional<Buffer>, N> held;
    const tierkit::TensorView xc = as_kernel_reads(vx, dtype, x_held);
    std::array<tierkit::TensorView, N> tables;
    for (std::size_t i = 0; i < N; ++i) tables[i] = as_kernel_reads(args[i]->view(), dtype, held[i]);
    tierkit::kernels::RowTables<N> layout;
    layout.rank = xc.rank() - 1;
    for (int k = 0; k < layout.rank; ++k) layout.shape[k] = xc.shape()[k];
    for (std::size_t i = 0; i < N; ++i) {
      const tierkit::TensorView& t = tables[i];
      const int skip = layout.rank - (t.rank() - 1);
      for (int k = 0; k < layout.rank; ++k)
        layout.strides[i][k] = (k < skip || t.shape()[k - skip] == 1) ? 0 : t.strides()[k - skip];
    }
    const std::int64_t rows = d == 0 ? 0 : xc.numel() / d;
    const auto run = [&](const tierkit::TensorView& y) {
      tierkit::dispatch_accepted(dtype, "x", [&](auto tag) {
        using T = decltype(tag);
        const T* ptrs[N];
        for (std::size_t i = 0; i < N; ++i) ptrs[i] = static_cast<const T*>(tables[i].data());
        py::gil_scoped_release nogil;
        tierkit::kernels::row_map<K>(static_cast<const T*>(xc.data()), ptrs, layout, rows, d, r, flag, false,
                                     static_cast<T*>(y.data()), tierkit::kernels::PoolRunner{max_threads()});
      });
    };
    return into_result(op, x, vx, xc, std::vector<tierkit::TensorView>(tables.begin(), tables.end()), out,
                       dtype, " (the inputs' promotion)", run);
  }

  // The entry's doc, then the kind's rules in the entry's names.
  static std::string doc() {
    std::string names;
    for (std::size_t i = 0; i < N; ++i) names += std::string(i ? ", " : "") + Info::tables[i];
    return std::string(Info::doc) + ".\n\nThe tables (" + names + ") have r = " + Info::tables[0] +
           ".shape[-1] columns (r: " + Info::width_rule +
           ") and broadcast against x[..., :r] (numpy's rules, never enlarging x); columns from r on pass "
           "through. Computed in the promotion of the inputs' dtypes (np.result_type; 16-bit in float32, "
           "rounded once). Returns a new array presented like ``x``, or writes into ``out`` (x's shape, the "
           "result's dtype, any layout) and returns it. Masked arrays are refused.";
  }

  // name(x, <N tables>, <flag>=<default>, *, out=None): one Python argument a table.
  template <std::size_t I>
  using Table = py::object;
  template <std::size_t... I>
  static void bind(py::module_& m, std::index_sequence<I...>) {
    static const std::string text = doc();
    m.def(
        Info::name,
        [](py::object x, Table<I>... tables, bool flag, const py::object& out) {
          return call(std::move(x), std::array<py::object, N>{std::move(tables)...}, flag, out);
        },
        py::arg("x"), py::arg(Info::tables[I])..., py::arg(Info::flag) = Info::flag_default, py::kw_only(),
        py::arg_v("out", py::none(), "None"), text.c_str());
  }
  static void bind(py::module_& m) { bind(m, std::make_index_sequence<N>{}); }
};

// An array as core's in-place rules read it (row_rules::in_place_roles):
// numpy's dtype names, no devices.
struct RoleReader {
  static tierkit::DType dtype(const tierkit::TensorView& v) { return v.dtype(); }
  static bool indexes(tierkit::DType t) { return t == tierkit::DType::Int64 || t == tierkit::DType::Int32; }
  static tierkit::DType compute(tierkit::DType t) {
    return t == tierkit::DType::Float64 ? tierkit::DType::Float64 : tierkit::DType::Float32;
  }
  static std::string name(tierkit::DType t) { return std::string(tierkit::dtype_name(t)); }
  static std::vector<std::int64_t> sizes(const tierkit::TensorView& v) { return dims(v.shape()); }
  static std::vector<std::int64_t> strides(const tierkit::TensorView& v) { return dims(v.strides()); }
  static bool device_differs(const tierkit::TensorView&, const tierkit::TensorView&) { return false; }
  static std::string device(const tierkit::TensorView&) { return {}; }
};

// The in-place row ops (TIERKIT_ROW_IN_PLACE) for arrays: the x arguments
// written in place, each token's table row gathered by its index; written for
// the entry's roles (an index, x written in place, an optional second x, a
// gathered table, a size, a flag), as torch-cpu's row_in_place.cpp.
template <typename Info, typename F>
struct BridgeInPlace {
  // x as token rows (core's token_rows): over x's memory, or the kernel
  // runs on a C-contiguous copy, copied back.
  struct Heads : tierkit::kernels::TokenRows {
    tierkit::TensorView view;
    std::optional<Buffer> copy;
  };
  static Heads heads_of(const tierkit::TensorView& x, int index_dims, std::int64_t tokens,
                        std::int64_t size) {
    Heads h{tierkit::kernels::token_rows(dims(x.shape()), dims(x.strides()), index_dims, tokens, size), x,
            std::nullopt};
    if (h.copied) {
      h.copy = contiguous_copy(x);
      h.view = h.copy->view();
    }
    return h;
  }

  // The index as int64, C-contiguous (a copy: what is written cannot change it).
  static Buffer as_int64(const tierkit::TensorView& v) {
    const Buffer c = contiguous_copy(v);
    if (v.dtype() == tierkit::DType::Int64) return c;
    Buffer out = Buffer::empty(v.shape(), tierkit::DType::Int64, false);
    const auto* in = static_cast<const std::int32_t*>(c.view().data());
    auto* to = static_cast<std::int64_t*>(out.view().data());
    for (std::int64_t i = 0; i < v.numel(); ++i) to[i] = in[i];
    return out;
  }

  static std::int64_t integer(const std::string& op, const char* name, const py::handle& v) {
    bool ok = !PyBool_Check(v.ptr()) && PyLong_Check(v.ptr());
    if (!ok && !PyBool_Check(v.ptr())) {
      const py::object np = imported("numpy");
      ok = np && py::isinstance(v, np.attr("integer"));
    }
    if (!ok)
      throw py::type_error(op + name + ": expected an int, got " +
                           std::string(py::str(py::type::handle_of(v).attr("__name__"))));
    return v.cast<std::int64_t>();
  }

  // The schema's arguments by role, each named as the entry names it
  // (Info: tierkit::in_place_info): the index, the x written in place and
  // the optional second, the table gathered by the index, the size of a
  // head, the flag.
  static void call(const py::object& index_in, const py::object& x_in, const py::object& x2_in,
                   const py::object& table_in, const py::object& size_in, const py::object& flag_in) {
    const std::string op = std::string(Info::name) + ": ";
    const char *x_name = Info::written[0], *x2_name = Info::written[1];
    const bool has_x2 = !x2_in.is_none();
    refuse_masked(op, index_in, Info::index);
    refuse_masked(op, x_in, x_name);
    refuse_masked(op, x2_in, x2_name);
    refuse_masked(op, table_in, Info::table);
    const std::int64_t size = integer(op, Info::size, size_in);
    if (!PyBool_Check(flag_in.ptr()))
      throw py::type_error(op + Info::flag + ": expected a bool, got " +
                           std::string(py::str(py::type::handle_of(flag_in).attr("__name__"))));
    const bool flag = flag_in.cast<bool>();
    const py::object index_obj = readable(index_in), table_obj = readable(table_in);
    const ArrayArg ai = import(op, index_obj, Info::index, false);
    const ArrayArg ax = import(op, x_in, x_name, true);
    std::optional<ArrayArg> ax2;
    if (has_x2) ax2 = import(op, x2_in, x2_name, true);
    const ArrayArg at = import(op, table_obj, Info::table, false);
    const tierkit::TensorView &vi = ai.view(), &vx = ax.view(), &vt = at.view();
    const auto dtype_text = [](const tierkit::TensorView& v) { return tierkit::dtype_name(v.dtype()); };
    if (!tierkit::is_accepted(vx.dtype()))
      throw py::type_error(op + x_name + ": expected dtype " + tierkit::accepted_dtype_names() + ", got " +
                           std::string(dtype_text(vx)));
    row_rule(op, [&] {
      rules::in_place_roles<Info>(RoleReader{}, vi, vx, ax2 ? &ax2->view() : nullptr, vt, size,
                                  rules::kNumpyWords);
    });
    // The index as int64 and the table C-contiguous: copies, so what is
    // written cannot change what the tokens read.
    const Buffer index = as_int64(vi);
    const Buffer table = contiguous_copy(vt);
    const std::int64_t tokens = vi.numel();
    Heads h = heads_of(vx, vi.rank(), tokens, size);
    Heads h2 = ax2 ? heads_of(ax2->view(), vi.rank(), tokens, size) : Heads{};
    if (ax2) {
      const tierkit::TensorView& vx2 = ax2->view();
      const bool shared =
          tierkit::kernels::written_rows_share(vx.data(), h, vx2.data(), h2, tierkit::dtype_size(vx.dtype()),
                                               size, tokens, [&] { return meet(vx, vx2); });
      row_rule(op, [&] { rules::written_apart(x2_name, x_name, shared); });
    }
    const unsigned threads = max_threads();
    row_rule(op, [&] {
      tierkit::dispatch_accepted(vx.dtype(), x_name, [&](auto tag) {
        using T = decltype(tag);
        const auto heads = [](const Heads& r) {
          return tierkit::kernels::TokenHeads<T>{r.view.numel() ? static_cast<T*>(r.view.data()) : nullptr,
                                                 r.stride, r.heads};
        };
        const auto run = [&](const auto* t) {
          py::gil_scoped_release nogil;
          F::run(static_cast<const std::int64_t*>(index.view().data()), tokens, heads(h),
                 ax2 ? heads(h2) : tierkit::kernels::TokenHeads<T>{}, size, t, vt.shape()[0], vt.shape()[1],
                 flag, tierkit::kernels::PoolRunner{threads});
        };
        if (vt.dtype() == vx.dtype())
          run(static_cast<const T*>(table.view().data()));
        else
          run(static_cast<const tierkit::compute_t<T>*>(table.view().data()));
      });
    });
    if (h.copy) copy_elements(h.view, vx);
    if (ax2 && h2.copy) copy_elements(h2.view, ax2->view());
    note_written(x_in);
    if (has_x2) note_written(x2_in);
  }

  static void bind(py::module_& m) {
    m.def(
        Info::name,
        [](const py::object& index, const py::object& x, const py::object& x2, const py::object& table,
           const py::object& size, const py::object& flag) { call(index, x, x2, table, size, flag); },
        py::arg(Info::index), py::arg(Info::written[0]), py::arg(Info::written[1]), py::arg(Info::table),
        py::arg(Info::size), py::arg(Info::flag),
        (std::string(Info::doc) + ". " + Info::written[0] + " and " + Info::written[1] +
         " are written in place (numpy arrays, torch tensors, anything writable the bridge reads); " +
         Info::index + " int64 or int32, each checked to lie in " + Info::table +
         " before anything is written; " + Info::table + " of " + Info::written[0] +
         "'s dtype or float32 beside a 16-bit " + Info::written[0] + ". Returns None.")
            .c_str());
  }
};

}  // namespace

void bind_rows(py::module_& m) {
#define TIERKIT_BRIDGE_ROWS(name, Functor, P, S) \
  BridgeRows<tierkit::row_info::name, tierkit::kernels::Functor>::bind(m);
  TIERKIT_ROW_REDUCTIONS(TIERKIT_BRIDGE_ROWS)
#undef TIERKIT_BRIDGE_ROWS
#define TIERKIT_BRIDGE_MAPS(name, Functor, TABLES) \
  BridgeMap<tierkit::map_info::name, tierkit::kernels::Functor>::bind(m);
  TIERKIT_ROW_MAPS(TIERKIT_BRIDGE_MAPS)
#undef TIERKIT_BRIDGE_MAPS
#define TIERKIT_BRIDGE_IN_PLACE(name, Functor) \
  BridgeInPlace<tierkit::in_place_info::name, tierkit::kernels::Functor>::bind(m);
  TIERKIT_ROW_IN_PLACE(TIERKIT_BRIDGE_IN_PLACE)
#undef TIERKIT_BRIDGE_IN_PLACE
}

}  // namespace tierkit_bridge
