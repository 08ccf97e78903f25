#include <cstdio>
#include <vector>

#include "tierkit/core.h"

int main() {
  std::vector<float> a{1, 2, 3}, b{10, 20, 30}, out(3);
  auto view = [](std::vector<float>& v) {
    return tierkit::TensorView::contiguous(v.data(), 3, tierkit::DType::Float32, {3});
  };
  tierkit::kernels::add(view(a), view(b), view(out));
  std::printf("%g %g %g\n", out[0], out[1], out[2]);
  return out[2] == 33.0f ? 0 : 1;
}
