// The row reductions for numpy: core's rms_norm kernel over C-contiguous
// arrays (tierkit_bridge._norms checks and prepares the arguments by numpy's
// rules in Python, then calls this), without the GIL.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "array_arg.h"
#include "ops.h"
#include "tierkit/checks.h"
#include "tierkit/rms_norm.h"

namespace tierkit_bridge {
namespace {

void require_contiguous(const tierkit::TensorView& v, const char* name) {
  if (!v.is_contiguous())
    throw py::value_error(std::string("_rms_norm: ") + name + ": expected a C-contiguous array");
}

// out[r, :] = rms_norm(x[r, :]) * weight, for every row r of the last dimension.
void rms_norm_rows(const py::handle& x, const py::handle& weight, double eps, const py::handle& out) {
  const ArrayArg ax = ArrayArg::borrow(x, "x", false);
  const ArrayArg ao = ArrayArg::borrow(out, "out", true);
  std::optional<ArrayArg> aw;
  if (!weight.is_none()) aw = ArrayArg::borrow(weight, "weight", false);
  const tierkit::TensorView &vx = ax.view(), &vo = ao.view();
  tierkit::checks::accepted_dtype("x", vx.dtype());
  if (vx.rank() < 1) throw py::value_error("_rms_norm: x: expected at least one dimension");
  require_contiguous(vx, "x");
  require_contiguous(vo, "out");
  if (vo.dtype() != vx.dtype() || vo.shape() != vx.shape())
    throw py::value_error("_rms_norm: out: expected x's dtype and shape");
  const std::int64_t d = vx.shape()[vx.rank() - 1];
  std::int64_t rows = 1;
  for (int i = 0; i + 1 < vx.rank(); ++i) rows *= vx.shape()[i];
  if (aw) {
    const tierkit::TensorView& vw = aw->view();
    require_contiguous(vw, "weight");
    if (vw.dtype() != vx.dtype() || vw.rank() != 1 || vw.shape()[0] != d)
      throw py::value_error("_rms_norm: weight: expected x's dtype and shape [d]");
  }
  const unsigned threads = max_threads();
  tierkit::dispatch_accepted(vx.dtype(), "x", [&](auto tag) {
    using T = decltype(tag);
    std::vector<tierkit::compute_t<T>> rstd(static_cast<std::size_t>(rows));
    const T* w = aw ? static_cast<const T*>(aw->view().data()) : nullptr;
    py::gil_scoped_release nogil;
    tierkit::kernels::rms_norm_forward(static_cast<const T*>(vx.data()), w, eps, rows, d,
                                       static_cast<T*>(vo.data()), rstd.data(),
                                       tierkit::kernels::PoolRunner{threads});
  });
}

}  // namespace

void bind_norms(py::module_& m) {
  m.def("_rms_norm", &rms_norm_rows, py::arg("x"), py::arg("weight"), py::arg("eps"), py::arg("out"),
        "out = rms_norm(x, weight, eps) over the last dimension; C-contiguous arrays of one dtype "
        "(tierkit_bridge.rms_norm checks and prepares them).");
}

}  // namespace tierkit_bridge
