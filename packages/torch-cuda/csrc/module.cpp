// Importing tierkit_cuda._C loads this library; its static initialisers
// register the CUDA kernels. The Python module itself is empty.
#include "tierkit_torch/empty_module.h"

TIERKIT_EMPTY_PYTHON_MODULE(_C, "tierkit CUDA kernel registrations")
