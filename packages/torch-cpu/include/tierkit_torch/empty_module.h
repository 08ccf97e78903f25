// The Python side of an operator library: an empty extension module whose
// import loads the shared library, so its static initialisers (the
// TORCH_LIBRARY registrations) run. Used by torch-cpu's and torch-cuda's _C.
#pragma once

#include <Python.h>

// Defines PyInit_<name> returning an empty module with docstring `doc`.
#define TIERKIT_EMPTY_PYTHON_MODULE(name, doc)                                               \
  extern "C" PyObject* PyInit_##name(void) {                                                 \
    static PyModuleDef module = {                                                            \
        PyModuleDef_HEAD_INIT, #name, doc, -1, nullptr, nullptr, nullptr, nullptr, nullptr}; \
    return PyModule_Create(&module);                                                         \
  }
