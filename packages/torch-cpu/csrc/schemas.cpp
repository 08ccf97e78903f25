// The tierkit operator namespace: the op table's schemas (tierkit/op_table.h,
// shared with torch-stable), registered once, here. Kernels for each
// dispatch key live beside it (cpu_kernels.cpp; autograd, backward and the
// no-graph fast path, in autograd.cpp; the .out overloads' decomposition in
// composite.cpp) and in the torch-cuda tier; the Python face registers only
// the fake kernels (src/tierkit_torch/_registrations.py).
#include <torch/library.h>

#include "tierkit/dtype.h"
#include "tierkit/op_table.h"

TORCH_LIBRARY(tierkit, m) {
  for (const char* schema : tierkit::kOpSchemas) m.def(schema);
  for (const char* schema : tierkit::kRowReductionSchemas) m.def(schema);
  for (const char* schema : tierkit::kRowMapSchemas) m.def(schema);
  m.impl("_accepted_dtypes", &tierkit::accepted_dtype_list);  // a catch-all kernel: no tensor to dispatch on
}
