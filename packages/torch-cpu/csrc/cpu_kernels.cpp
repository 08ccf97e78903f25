// CPU kernels for every tierkit op: checks, then core's kernels on views of
// the tensors' memory, split by at::parallel_for. Contiguous operands take
// core's vectorized loop; strided/expanded/transposed ones are walked in
// place (no .contiguous() copy: measured slower here, one extra pass).
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "tierkit/huge_pages.h"
#include "tierkit_torch/checks.h"
#include "view.h"

namespace tierkit_torch {
namespace {

constexpr auto kCPU = c10::DeviceType::CPU;

at::Tensor new_output(const at::Tensor& like) {
  // Contiguous whatever the input's layout: the result of an elementwise op
  // on a transposed tensor is a fresh tensor, as for torch's own ops when
  // the input is not dense.
  at::Tensor out = at::empty(like.sizes(), like.options().memory_format(c10::MemoryFormat::Contiguous));
  // Fresh and untouched: for large outputs, page faults cost more than the
  // kernel; huge pages make them 512x fewer (see tierkit/huge_pages.h).
  tierkit::advise_huge_pages(out.data_ptr(), out.nbytes());
  return out;
}

// The binary ops share their checks and output; `kernel` is core's entry point.
template <typename Kernel>
at::Tensor binary(const char* op, const at::Tensor& a, const at::Tensor& b, const Kernel& kernel) {
  check_first(op, a, "a", kCPU);
  check_like(op, b, "b", a, "a");
  at::Tensor out = new_output(a);
  kernel(as_view(as_core_input(a)), as_view(as_core_input(b)), as_view(out));
  return out;
}

at::Tensor custom_add_cpu(const at::Tensor& a, const at::Tensor& b) {
  return binary("tierkit::custom_add", a, b, [](const auto& va, const auto& vb, const auto& vo) {
    tierkit::kernels::add(va, vb, vo, AtenRunner{});
  });
}

at::Tensor mul_cpu(const at::Tensor& a, const at::Tensor& b) {
  return binary("tierkit::mul", a, b, [](const auto& va, const auto& vb, const auto& vo) {
    tierkit::kernels::mul(va, vb, vo, AtenRunner{});
  });
}

at::Tensor scale_shift_cpu(const at::Tensor& x, double alpha, double beta) {
  check_first("tierkit::scale_shift", x, "x", kCPU);
  at::Tensor out = new_output(x);
  tierkit::kernels::scale_shift(as_view(as_core_input(x)), alpha, beta, as_view(out), AtenRunner{});
  return out;
}

at::Tensor muladd_cpu(const at::Tensor& a, const at::Tensor& b, double c) {
  return binary("tierkit::muladd", a, b, [c](const auto& va, const auto& vb, const auto& vo) {
    tierkit::kernels::muladd(va, vb, c, vo, AtenRunner{});
  });
}

void add_out_cpu(const at::Tensor& a, const at::Tensor& b, const at::Tensor& out) {
  check_add_out(a, b, out, kCPU);
  if (out.dim() > tierkit::kMaxRank && !out.is_contiguous()) {
    at::Tensor tmp = custom_add_cpu(a, b);
    out.copy_(tmp);
    return;
  }
  tierkit::kernels::add(as_view(as_core_input(a)), as_view(as_core_input(b)), as_view(out), AtenRunner{});
}

}  // namespace

TORCH_LIBRARY_IMPL(tierkit, CPU, m) {
  m.impl("custom_add", &custom_add_cpu);
  m.impl("mul", &mul_cpu);
  m.impl("scale_shift", &scale_shift_cpu);
  m.impl("muladd", &muladd_cpu);
  m.impl("add_out", &add_out_cpu);
}

}  // namespace tierkit_torch
