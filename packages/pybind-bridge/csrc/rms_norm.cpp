// The row reductions for any array the bridge reads: core's rms_norm kernel,
// without the GIL. The arguments come in through the bridge's own import
// path (ArrayArg::borrow, as the pointwise ops'), so rms_norm takes what they
// take: numpy arrays, torch tensors (bfloat16 too, a negated view by its
// values, one that requires grad refused naming the argument), Buffers,
// anything with the buffer protocol or __dlpack__. The result is presented
// like x (numpy in, numpy out; torch in, torch out; else a Buffer).
// tierkit_bridge._norms is the Python face (its signature, docs, eps's type
// and masked arrays); every other rule is here.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "array_arg.h"
#include "buffer.h"
#include "ops.h"
#include "tierkit/checks.h"
#include "tierkit/rms_norm.h"

namespace tierkit_bridge {
namespace {

constexpr const char* kOp = "rms_norm: ";

// The import path's refusals name the argument; here the op comes first, as
// every other rms_norm error.
ArrayArg import(const py::handle& obj, const char* name, bool writable) {
  try {
    return ArrayArg::borrow(obj, name, writable);
  } catch (const py::value_error& e) {
    throw py::value_error(kOp + std::string(e.what()));
  } catch (const py::type_error& e) {
    throw py::type_error(kOp + std::string(e.what()));
  } catch (const tierkit::DTypeError& e) {
    throw py::type_error(kOp + std::string(e.what()));
  } catch (const tierkit::InvalidArgument& e) {
    throw py::value_error(kOp + std::string(e.what()));
  }
}

// A shape as Python prints a tuple: (3,), (2, 3), ().
std::string py_shape(const tierkit::Shape& s) {
  std::string out = "(";
  for (int i = 0; i < s.rank(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.rank() == 1 ? ",)" : ")");
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

// dst[k] = src[k] converted (through src's compute type), both C-contiguous, the same length.
void convert_into(const tierkit::TensorView& src, const tierkit::TensorView& dst) {
  tierkit::dispatch_accepted(src.dtype(), "x", [&](auto s) {
    using S = decltype(s);
    tierkit::dispatch_accepted(dst.dtype(), "out", [&](auto t) {
      using D = decltype(t);
      const S* in = static_cast<const S*>(src.data());
      D* out = static_cast<D*>(dst.data());
      for (std::int64_t k = 0; k < src.numel(); ++k)
        out[k] = static_cast<D>(static_cast<tierkit::compute_t<S>>(in[k]));
    });
  });
}

Buffer converted(const tierkit::TensorView& v, tierkit::DType dtype) {
  Buffer b = Buffer::empty(v.shape(), dtype, false);
  convert_into(v, b.view());
  return b;
}

void run_kernel(const tierkit::TensorView& x, const tierkit::TensorView* w, double eps,
                const tierkit::TensorView& y) {
  if (w && w->dtype() != x.dtype()) {
    // A weight of another float dtype, as aten's F.rms_norm computes it: in
    // x's compute type (float32 for float16 x; float64 where the weight is),
    // the weight converted to it, the result rounded to x's dtype (torch-cpu's
    // rows.h MixedRows).
    const bool wide = x.dtype() == tierkit::DType::Float64 || w->dtype() == tierkit::DType::Float64;
    const tierkit::DType c = wide ? tierkit::DType::Float64 : tierkit::DType::Float32;
    const Buffer wc = converted(*w, c);
    const tierkit::TensorView wv = wc.view();
    if (c == x.dtype()) return run_kernel(x, &wv, eps, y);
    const Buffer xc = converted(x, c);
    Buffer yc = Buffer::empty(x.shape(), c, false);
    run_kernel(xc.view(), &wv, eps, yc.view());
    convert_into(yc.view(), y);
    return;
  }
  const std::int64_t d = x.shape()[x.rank() - 1];
  const std::int64_t rows = d == 0 ? 0 : x.numel() / d;
  const unsigned threads = max_threads();
  tierkit::dispatch_accepted(x.dtype(), "x", [&](auto tag) {
    using T = decltype(tag);
    std::vector<tierkit::compute_t<T>> rstd(static_cast<std::size_t>(rows));
    const T* wp = w ? static_cast<const T*>(w->data()) : nullptr;
    py::gil_scoped_release nogil;
    // Core reads a weight that lies in y as it was at the call.
    tierkit::kernels::rms_norm_forward(static_cast<const T*>(x.data()), wp, eps, rows, d,
                                       static_cast<T*>(y.data()), rstd.data(),
                                       tierkit::kernels::PoolRunner{threads});
  });
}

py::object rms_norm(const py::handle& x, const py::handle& weight, const py::handle& eps_in,
                    const py::handle& out) {
  const ArrayArg ax = import(x, "x", false);
  const tierkit::TensorView& vx = ax.view();
  if (!tierkit::is_accepted(vx.dtype()))
    throw py::type_error(std::string(kOp) + "x: expected dtype " + tierkit::accepted_dtype_names() +
                         ", got " + std::string(tierkit::dtype_name(vx.dtype())));
  if (vx.rank() < 1)
    throw py::value_error(std::string(kOp) +
                          "x: expected an array with at least one dimension (the last is normalised), got a "
                          "0-d one");
  const std::int64_t d = vx.shape()[vx.rank() - 1];
  std::optional<ArrayArg> aw;
  std::optional<Buffer> w_copy;
  const tierkit::TensorView* vw = nullptr;
  if (!weight.is_none()) {
    aw = import(weight, "weight", false);
    const tierkit::TensorView& w = aw->view();
    if (!tierkit::is_accepted(w.dtype()))  // any float dtype, as aten's: the result keeps x's
      throw py::type_error(std::string(kOp) + "weight: expected dtype " + tierkit::accepted_dtype_names() +
                           ", got " + std::string(tierkit::dtype_name(w.dtype())));
    if (w.rank() != 1 || w.shape()[0] != d)
      throw py::value_error(std::string(kOp) + "weight: expected shape (" + std::to_string(d) +
                            ",) (x's last dimension), got " + py_shape(w.shape()));
    vw = &w;
    if (!w.is_contiguous()) {
      w_copy = contiguous_copy(w);
      vw = nullptr;
    }
  }
  tierkit::TensorView w_view;
  if (w_copy) {
    w_view = w_copy->view();
    vw = &w_view;
  }
  // torch's default eps: the compute type's machine epsilon.
  const double eps = !eps_in.is_none()                       ? eps_in.cast<double>()
                     : vx.dtype() == tierkit::DType::Float64 ? std::numeric_limits<double>::epsilon()
                                                             : std::numeric_limits<float>::epsilon();
  // x as the kernel reads it: C-contiguous (a copy only when it is not).
  std::optional<Buffer> x_copy;
  tierkit::TensorView xc = vx;
  if (!vx.is_contiguous()) {
    x_copy = contiguous_copy(vx);
    xc = x_copy->view();
  }

  if (out.is_none()) {
    py::object result = new_output_like(x, xc);
    if (xc.numel() == 0) return result;
    const ArrayArg ar = ArrayArg::borrow(result, "out", true);
    run_kernel(xc, vw, eps, ar.view());
    return result;
  }
  const ArrayArg ao = import(out, "out", true);
  const tierkit::TensorView& vo = ao.view();
  if (vo.dtype() != vx.dtype() || vo.shape() != vx.shape())
    throw py::value_error(std::string(kOp) + "out: expected shape " + py_shape(vx.shape()) + " and dtype " +
                          std::string(tierkit::dtype_name(vx.dtype())) + " (x's), got " +
                          py_shape(vo.shape()) + " and " + std::string(tierkit::dtype_name(vo.dtype())));
  try {
    tierkit::checks::writable_layout(vo);
  } catch (const tierkit::InvalidArgument& e) {
    throw py::value_error(kOp + std::string(e.what()));
  }
  if (xc.numel() == 0) return py::reinterpret_borrow<py::object>(out);
  // Straight into out when the kernel can write it: C-contiguous, and apart
  // from x or exactly x (each row is read before it is written); otherwise
  // computed apart, then copied in.
  if (vo.is_contiguous() && (!meet(vo, xc) || vo.data() == xc.data())) {
    run_kernel(xc, vw, eps, vo);
  } else {
    Buffer tmp = Buffer::empty(xc.shape(), xc.dtype(), false);
    run_kernel(xc, vw, eps, tmp.view());
    copy_elements(tmp.view(), vo);
  }
  note_written(py::reinterpret_borrow<py::object>(out));
  return py::reinterpret_borrow<py::object>(out);
}

}  // namespace

void bind_norms(py::module_& m) {
  m.def("_rms_norm", &rms_norm, py::arg("x"), py::arg("weight"), py::arg("eps"), py::arg("out"),
        "rms_norm(x, weight, eps, out) over the last dimension, for any array the bridge reads "
        "(tierkit_bridge.rms_norm is its face).");
}

}  // namespace tierkit_bridge
