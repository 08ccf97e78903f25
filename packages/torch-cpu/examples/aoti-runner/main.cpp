// aoti_runner OPS_LIBRARY... PACKAGE INPUTS OUTPUTS
//
// Loads each tierkit operator library (tierkit_torch.library_path(), then
// tierkit_cuda's for GPU models) so the TORCH_LIBRARY registrations run, then
// the AOTInductor package, runs it on the tensors in INPUTS and writes the
// results to OUTPUTS. No Python anywhere in the process.
//
// Tensor files are a tiny raw format (written and read by the deploy test):
// an int64 count, then per tensor an int64 rank, int64 sizes, float32 data.
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ops/empty.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

namespace {

std::vector<at::Tensor> read_tensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  auto read_i64 = [&] {
    std::int64_t v = 0;
    in.read(reinterpret_cast<char*>(&v), sizeof v);
    if (!in) throw std::runtime_error(path + ": truncated");
    return v;
  };
  std::vector<at::Tensor> tensors(static_cast<std::size_t>(read_i64()));
  for (auto& t : tensors) {
    std::vector<std::int64_t> sizes(static_cast<std::size_t>(read_i64()));
    for (auto& s : sizes) s = read_i64();
    t = at::empty(sizes, at::kFloat);
    in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
    if (!in) throw std::runtime_error(path + ": truncated data");
  }
  return tensors;
}

void write_tensors(const std::string& path, const std::vector<at::Tensor>& tensors) {
  std::ofstream out(path, std::ios::binary);
  auto write_i64 = [&](std::int64_t v) { out.write(reinterpret_cast<const char*>(&v), sizeof v); };
  write_i64(static_cast<std::int64_t>(tensors.size()));
  for (const auto& t : tensors) {
    const at::Tensor c = t.to(at::kCPU, at::kFloat).contiguous();
    write_i64(c.dim());
    for (auto s : c.sizes()) write_i64(s);
    out.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.nbytes()));
  }
  if (!out) throw std::runtime_error("cannot write " + path);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::cerr << "usage: " << argv[0] << " OPS_LIBRARY... PACKAGE INPUTS OUTPUTS\n";
    return 2;
  }
  try {
    // RTLD_GLOBAL is not needed (the package calls the ops through the
    // dispatcher, by name); RTLD_NOW reports a missing symbol here, not later.
    for (int i = 1; i < argc - 3; ++i) {
      if (!dlopen(argv[i], RTLD_NOW)) {
        std::cerr << "cannot load operator library " << argv[i] << ": " << dlerror() << "\n";
        return 1;
      }
    }
    torch::inductor::AOTIModelPackageLoader loader(argv[argc - 3]);
    const std::vector<at::Tensor> outputs = loader.run(read_tensors(argv[argc - 2]));
    write_tensors(argv[argc - 1], outputs);
  } catch (const std::exception& e) {
    std::cerr << "aoti_runner: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
