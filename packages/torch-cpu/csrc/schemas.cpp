// The tierkit operator namespace: the op table's schemas (tierkit/op_table.h,
// shared with torch-stable), registered once, here. Kernels for each
// dispatch key live beside it (cpu_kernels.cpp; autograd, backward and the
// no-graph fast path, in autograd.cpp; the .out overloads' decomposition in
// composite.cpp) and in the torch-cuda tier; the Python face registers only
// the fake kernels (src/tierkit_torch/_registrations.py).
#include <torch/library.h>

#include <vector>

#include "tierkit/dtype.h"
#include "tierkit/op_table.h"
#include "tierkit/op_tags.h"

namespace {
// core's flags for a schema as torch's tags (tierkit/op_tags.h says why).
std::vector<at::Tag> tags_of(const char* schema, bool pointwise_kind) {
  const tierkit::OpTags t = tierkit::op_tags(schema, pointwise_kind);
  std::vector<at::Tag> tags;
  if (t.pointwise) tags.push_back(at::Tag::pointwise);
  if (t.flexible_layout) tags.push_back(at::Tag::flexible_layout);
  return tags;
}
}  // namespace

TORCH_LIBRARY(tierkit, m) {
  // The tags as an lvalue: an rvalue vector would bind to def(schema, kernel)'s template.
  const auto def = [&m](const char* schema, bool pointwise_kind) {
    const std::vector<at::Tag> tags = tags_of(schema, pointwise_kind);
    m.def(schema, tags);
  };
  for (const char* schema : tierkit::kOpSchemas) def(schema, true);
  for (const char* schema : tierkit::kRowReductionSchemas) def(schema, false);
  for (const char* schema : tierkit::kRowMapSchemas) def(schema, false);
  for (const char* schema : tierkit::kRowInPlaceSchemas) def(schema, false);
  m.impl("_accepted_dtypes", &tierkit::accepted_dtype_list);  // a catch-all kernel: no tensor to dispatch on
}
