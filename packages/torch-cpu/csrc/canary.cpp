// Built into the library only for the sanitizer run (TIERKIT_SANITIZE_BUILD):
// an op that overflows a heap block on purpose. The sanitize session calls it
// in a subprocess and fails unless ASan reports it.
#ifdef TIERKIT_SANITIZE_BUILD
#include <torch/library.h>

#include "tierkit/buffer.h"

namespace {
void asan_canary() {
  tierkit::Buffer b(64);
  volatile char* p = static_cast<char*>(b.data());
  p[64] = 1;
}
}  // namespace

TORCH_LIBRARY_FRAGMENT(tierkit, m) { m.def("_asan_canary() -> ()", &asan_canary); }
#endif
