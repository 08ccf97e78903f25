// Importing tierkit_cuda._C loads this library; its static initialisers
// register the CUDA kernels. The Python module itself is empty.
#include <Python.h>

extern "C" PyObject* PyInit__C(void) {
  static PyModuleDef module = {PyModuleDef_HEAD_INIT,
                               "_C",
                               "tierkit CUDA kernel registrations",
                               -1,
                               nullptr,
                               nullptr,
                               nullptr,
                               nullptr,
                               nullptr};
  return PyModule_Create(&module);
}
