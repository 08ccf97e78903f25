// What torch-cpu's three C++ autograd files (autograd.cpp for the pointwise
// ops, row_autograd.cpp, row_map_autograd.cpp) ask of a tensor before they
// build a node: does it need a gradient, can it be saved, has it a tangent.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/AutogradState.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/saved_variable.h>

namespace tierkit_torch {
namespace autograd_support {

using torch::autograd::Node;
using torch::autograd::SavedVariable;
using torch::autograd::variable_list;

inline bool requires_grad(const at::Tensor& t) { return t.defined() && t.requires_grad(); }

// t, or a normal copy of an inference tensor (which cannot be saved for backward).
inline at::Tensor saveable(const at::Tensor& t) { return t.is_inference() ? t.clone() : t; }

// Has a forward-mode tangent at level 0 (torch.func.jvp, forward_ad, jacfwd).
inline bool has_tangent(const at::Tensor& t) {
  return t.defined() && c10::AutogradState::get_tls_state().get_fw_grad_mode() &&
         t._fw_grad(/*level=*/0).defined();
}

}  // namespace autograd_support
}  // namespace tierkit_torch
