// What each schema of the op table (op_table.h) tells a graph compiler about
// its operator, as plain flags: core knows no torch; the torch tiers turn
// them into at::Tag when they register the schemas.
//  * pointwise: each output element depends on the same-index elements of the
//    (broadcast) inputs only: every op of the pointwise kind, the .out and
//    add_out writers included, as aten tags add.out.
//  * flexible_layout: the op takes inputs of any strides (every kernel here
//    reads strided or makes its own contiguous copy), so Inductor may keep
//    the layouts it chose instead of forcing the eager ones (what an untagged
//    custom op gets: needs_exact_strides). Not for the ops that mutate an
//    argument: a mutated tensor's layout is the caller's.
#pragma once

namespace tierkit {

struct OpTags {
  bool pointwise = false;
  bool flexible_layout = false;
};

// Whether a schema mutates an argument (an alias annotation "(a!)").
constexpr bool schema_mutates(const char* schema) {
  for (const char* s = schema; *s; ++s)
    if (s[0] == '(' && s[1] == 'a' && s[2] == '!') return true;
  return false;
}

// `pointwise_kind`: the schema is one of kOpSchemas (the pointwise kind).
constexpr OpTags op_tags(const char* schema, bool pointwise_kind) {
  return OpTags{pointwise_kind, !schema_mutates(schema)};
}

}  // namespace tierkit
