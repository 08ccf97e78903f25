// The tierkit operator namespace: every schema, defined once, here. Kernels
// for each dispatch key live beside it (cpu_kernels.cpp; autograd, backward
// and the no-graph fast path, in autograd.cpp) and in the torch-cuda tier;
// the Python face registers only the fake kernels
// (src/tierkit_torch/_registrations.py).
#include <torch/library.h>

#include <string>
#include <vector>

#include "tierkit/dtype.h"
#include "tierkit_torch/empty_module.h"

namespace {
// The dtypes the kernels accept, from core's dtype table, so the Python fake
// kernels check against the same list instead of spelling their own.
std::vector<std::string> accepted_dtypes() {
  std::vector<std::string> names;
  for (const tierkit::DTypeInfo& d : tierkit::kDTypeTable)
    if (d.accepted) names.emplace_back(d.name);
  return names;
}
}  // namespace

TORCH_LIBRARY(tierkit, m) {
  m.def("custom_add(Tensor a, Tensor b) -> Tensor");
  m.def("scale_shift(Tensor x, float alpha, float beta) -> Tensor");
  m.def("muladd(Tensor a, Tensor b, float c) -> Tensor");
  m.def("mul(Tensor a, Tensor b) -> Tensor");
  m.def("add_out(Tensor a, Tensor b, Tensor(a!) out) -> ()");
  // out= overloads in aten's convention: keyword-only `out`, returned. The
  // `out` tag tells torch.compile's functionalization that `out` is a
  // write-only buffer, so it can rewrite the call functionally.
  const std::vector<at::Tag> out_tag{at::Tag::out};
  m.def("custom_add.out(Tensor a, Tensor b, *, Tensor(a!) out) -> Tensor(a!)", out_tag);
  m.def("mul.out(Tensor a, Tensor b, *, Tensor(a!) out) -> Tensor(a!)", out_tag);
  m.def("scale_shift.out(Tensor x, float alpha, float beta, *, Tensor(a!) out) -> Tensor(a!)", out_tag);
  m.def("muladd.out(Tensor a, Tensor b, float c, *, Tensor(a!) out) -> Tensor(a!)", out_tag);
  m.def("_accepted_dtypes() -> str[]", &accepted_dtypes);
}

// Importing tierkit_torch._C loads this library, whose static initialisers
// run the registrations above. The module itself is empty; built against the
// limited API (Py_LIMITED_API 3.10), one wheel (cp310-abi3) serves CPython >= 3.10.
TIERKIT_EMPTY_PYTHON_MODULE(_C, "tierkit operator registrations (see torch.ops.tierkit)")
