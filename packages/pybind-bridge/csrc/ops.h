#pragma once

#include <pybind11/pybind11.h>

#include "tierkit/view.h"

namespace tierkit_bridge {
namespace py = pybind11;

void bind_ops(py::module_& m);
// The row reductions, one function per op-table entry (rows.cpp).
void bind_rows(py::module_& m);
// The thread cap set_num_threads() sets (0: every pool thread).
unsigned max_threads();
// A fresh C-contiguous output of `like`'s shape and dtype, presented as the
// pointwise ops present theirs (numpy for numpy, torch for torch, else a Buffer).
py::object new_output_like(const py::handle& first_input, const tierkit::TensorView& like);
// The same where `like`'s dtype is not the first input's.
py::object new_output_of_dtype(const py::handle& first_input, const tierkit::TensorView& like);
// Tells torch that `out` was written (its version counter), as out= ops do.
void note_written(const py::object& out);
// numpy's MaskedArray type once numpy.ma is imported (before that, no masked
// array exists); null otherwise. Shared by the pointwise ops and the rows.
PyTypeObject* masked_array_type();
// Whether allocating ops take their output from core's caching allocator.
void set_output_caching(bool enabled);
bool output_caching();
}  // namespace tierkit_bridge
