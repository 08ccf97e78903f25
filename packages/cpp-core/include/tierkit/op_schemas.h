// The tierkit operators' signatures, in torch's schema language: the one list
// every torch tier registers (torch-cpu in the `tierkit` namespace,
// torch-stable in `tierkit_stable`), so both expose the same operators with
// the same arguments. Plain text: core knows no torch; the tiers hand these
// strings to their own registration API.
#pragma once

namespace tierkit {

inline constexpr const char* kOpSchemas[] = {
    "custom_add(Tensor a, Tensor b) -> Tensor",
    "scale_shift(Tensor x, float alpha, float beta) -> Tensor",
    "muladd(Tensor a, Tensor b, float c) -> Tensor",
    "mul(Tensor a, Tensor b) -> Tensor",
    // Returns `out`, as aten's out= ops do: torch's negative/conjugate-bit
    // fallback (MathBitsFallback.h) writes back a mutated argument only
    // through the op's return, and asserts on a mutating op returning nothing.
    "add_out(Tensor a, Tensor b, Tensor(a!) out) -> Tensor(a!)",
    // out= overloads in aten's convention: keyword-only `out`, returned. Not
    // tagged `out`: with the tag, torch 2.14's inductor lowers the functional
    // ops to these overloads and, in AOTInductor's C++ wrapper, calls C shims
    // (aoti_torch_cpu_<op>) that custom ops do not have. torch.compile
    // functionalizes them through their CompositeImplicitAutograd
    // decomposition instead.
    "custom_add.out(Tensor a, Tensor b, *, Tensor(a!) out) -> Tensor(a!)",
    "mul.out(Tensor a, Tensor b, *, Tensor(a!) out) -> Tensor(a!)",
    "scale_shift.out(Tensor x, float alpha, float beta, *, Tensor(a!) out) -> Tensor(a!)",
    "muladd.out(Tensor a, Tensor b, float c, *, Tensor(a!) out) -> Tensor(a!)",
    // The accepted dtypes' names (core's dtype table), for the Python fake
    // kernels' checks and messages.
    "_accepted_dtypes() -> str[]",
};

}  // namespace tierkit
