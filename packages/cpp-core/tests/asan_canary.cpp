// Built only in sanitizer builds. Writes one element past a heap Buffer:
// ASan must report it, or the sanitizer run proves nothing.
#include <cstdio>

#include "tierkit/buffer.h"

int main() {
  tierkit::Buffer b(16 * sizeof(int));
  volatile int* p = b.as<int>();
  p[16] = 42;  // deliberate heap-buffer-overflow: 64 bytes asked, 64 allocated
  std::puts("canary: the overflow was NOT caught");
  return 0;
}
