// The tierkit operator namespace: every schema, defined once, here. Kernels
// for each dispatch key live beside it (cpu_kernels.cpp; autograd, backward
// and the no-graph fast path, in autograd.cpp) and in the torch-cuda tier;
// the Python face registers only the fake kernels
// (src/tierkit_torch/_registrations.py).
#include <torch/library.h>

#include <string>
#include <vector>

#include "tierkit/dtype.h"

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
  // out= overloads in aten's convention: keyword-only `out`, returned. Not
  // tagged `out`: with the tag, torch 2.14's inductor lowers the functional
  // ops to these overloads and, in AOTInductor's C++ wrapper, calls C shims
  // (aoti_torch_cpu_<op>) that custom ops do not have. torch.compile
  // functionalizes them through their CompositeImplicitAutograd
  // decomposition instead (composite.cpp).
  m.def("custom_add.out(Tensor a, Tensor b, *, Tensor(a!) out) -> Tensor(a!)");
  m.def("mul.out(Tensor a, Tensor b, *, Tensor(a!) out) -> Tensor(a!)");
  m.def("scale_shift.out(Tensor x, float alpha, float beta, *, Tensor(a!) out) -> Tensor(a!)");
  m.def("muladd.out(Tensor a, Tensor b, float c, *, Tensor(a!) out) -> Tensor(a!)");
  m.def("_accepted_dtypes() -> str[]", &accepted_dtypes);
}
