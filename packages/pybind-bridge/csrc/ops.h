#pragma once

#include <pybind11/pybind11.h>

namespace tierkit_bridge {
namespace py = pybind11;

void bind_ops(py::module_& m);
// The row reductions (rms_norm.cpp).
void bind_norms(py::module_& m);
// The thread cap set_num_threads() sets (0: every pool thread).
unsigned max_threads();
// Whether allocating ops take their output from core's caching allocator.
void set_output_caching(bool enabled);
bool output_caching();
}  // namespace tierkit_bridge
