// Warm memory for tierkit's fresh CPU outputs: at::Tensors whose storage
// comes from core's caching allocator (tierkit/caching_allocator.h), so an
// op that allocates its result in a loop reuses pages already faulted in
// instead of paying a page fault per 4 KiB of a new output (a fresh 256 MB
// output made scale_shift(x) take 1.75x its .out form).
//
// The tensors are ordinary torch tensors: the storage has a c10::Allocator
// (resize_ grows it through the same cache), pickling and share_memory_()
// copy the bytes as for any CPU tensor, and a dead tensor's block goes back
// to the cache (bounded by core's cap, 1 GiB by default; beyond it blocks
// go back to the system). Small outputs (under kWarmMinBytes) and everything
// while the switch is off (TIERKIT_WARM_OUTPUTS=0 in the environment, or
// tierkit_torch.allocator.set_enabled(False)) come from torch's own CPU
// allocator, as before.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>

namespace tierkit_torch {

inline constexpr std::size_t kWarmMinBytes = std::size_t{1} << 20;

// A fresh, uninitialised CPU tensor: contiguous, or with the given strides.
at::Tensor warm_empty(c10::IntArrayRef sizes, const c10::TensorOptions& options);
at::Tensor warm_empty_strided(c10::IntArrayRef sizes, c10::IntArrayRef strides,
                              const c10::TensorOptions& options);

}  // namespace tierkit_torch
