// The tierkit operator namespace: every schema, defined once, here. Kernels
// for each dispatch key live beside it (cpu_kernels.cpp, autograd.cpp) and in
// the torch-cuda tier; the Python face registers the fake kernels and the
// autograd formulas (src/tierkit_torch/_registrations.py).
#include <Python.h>
#include <torch/library.h>

TORCH_LIBRARY(tierkit, m) {
  m.def("custom_add(Tensor a, Tensor b) -> Tensor");
  m.def("scale_shift(Tensor x, float alpha, float beta) -> Tensor");
  m.def("muladd(Tensor a, Tensor b, float c) -> Tensor");
  m.def("mul(Tensor a, Tensor b) -> Tensor");
  m.def("add_out(Tensor a, Tensor b, Tensor(a!) out) -> ()");
}

// Importing tierkit_torch._C loads this library, whose static initialisers
// run the registrations above. The module itself is empty; with the limited
// API it serves every CPython >= 3.9.
extern "C" PyObject* PyInit__C(void) {
  static PyModuleDef module = {PyModuleDef_HEAD_INIT,
                               "_C",
                               "tierkit operator registrations (see torch.ops.tierkit)",
                               -1,
                               nullptr,
                               nullptr,
                               nullptr,
                               nullptr,
                               nullptr};
  return PyModule_Create(&module);
}
