// From the op table's row reductions (tierkit/op_table.h: TIERKIT_ROW_REDUCTIONS
// and row_info::<name>) to the C++ functions the dispatcher registers. An
// entry of P parameters (none, weight, or weight and bias) is registered as
//   op:       at::Tensor f(x, const std::optional<at::Tensor>&... (P), Scalar s)
//   add:      std::tuple<at::Tensor, at::Tensor> f(x, residual, params..., Scalar)
//   add_:     at::Tensor f(x, residual, params..., Scalar)
//   forward:  std::tuple<y, stats> f(x, params..., double eps)  (no eps role: f(x, params...))
//   backward: std::tuple<dx, dparam... (P)> f(grad, x, params..., stats)
// with Scalar its eps (std::optional<double>: torch's default; double: the
// entry's) or its dim (int64_t; the building blocks run along the last dim).
// Each tier's generic implementation `Impl<Entry>` receives the parameters
// as an array (Params): one template per tier and dispatch key, none per op.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "tierkit/op_table.h"

namespace tierkit_torch {

using OptTensor = std::optional<at::Tensor>;
template <std::size_t P>
using Params = std::array<OptTensor, P>;

// One entry: its row_info (names, defaults, formulas), its core row kind
// (Kind: tierkit::kernels::<Functor> on the CPU; a tier passes its own), and
// the argument types.
template <typename Info_, typename Kind_, std::size_t P>
struct RowEntry {
  using Info = Info_;
  using Kind = Kind_;
  static constexpr std::size_t kParams = P;
  static constexpr std::size_t kStats = std::tuple_size_v<std::decay_t<decltype(Info::stats)>>;
  using Scalar = std::conditional_t<Info::has_dim, int64_t,
                                    std::conditional_t<Info::eps_optional, std::optional<double>, double>>;
  // "tierkit::<overload>", for messages and lookups: built while the
  // library loads (a guarded function-local static would be a fork hazard:
  // op_handle.h).
  static const char* op_name() { return kNames<0>.c_str(); }
  static const char* add_name() { return kNames<1>.c_str(); }
  static const char* add_inplace_name() { return kNames<2>.c_str(); }
  static const char* forward_name() { return kNames<3>.c_str(); }
  static const char* backward_name() { return kNames<4>.c_str(); }

 private:
  template <int K>
  static inline const std::string kNames = std::string("tierkit::") + (K == 0   ? Info::name
                                                                       : K == 1 ? Info::add_name
                                                                       : K == 2 ? Info::add_inplace_name
                                                                       : K == 3 ? Info::forward_name
                                                                                : Info::backward_name);
};

template <typename Impl, typename Seq>
struct RowSignaturesOver;

template <typename Impl, std::size_t... I>
struct RowSignaturesOver<Impl, std::index_sequence<I...>> {
  template <std::size_t>
  using Opt = const OptTensor&;
  template <std::size_t>
  using Out = at::Tensor;
  using E = typename Impl::Entry;
  using Scalar = typename E::Scalar;

  static at::Tensor op(const at::Tensor& x, Opt<I>... p, Scalar s) { return Impl::op(x, {p...}, s); }
  static std::tuple<at::Tensor, at::Tensor> add(const at::Tensor& x, const at::Tensor& residual, Opt<I>... p,
                                                Scalar s) {
    return Impl::add(x, residual, {p...}, s);
  }
  static at::Tensor add_(const at::Tensor& x, const at::Tensor& residual, Opt<I>... p, Scalar s) {
    return Impl::add_(x, residual, {p...}, s);
  }
  static std::tuple<at::Tensor, at::Tensor> forward(const at::Tensor& x, Opt<I>... p, double eps) {
    return Impl::forward(x, {p...}, eps);
  }
  static std::tuple<at::Tensor, at::Tensor> forward_no_eps(const at::Tensor& x, Opt<I>... p) {
    return Impl::forward(x, {p...}, 0.0);
  }
  static std::tuple<at::Tensor, Out<I>...> backward(const at::Tensor& grad, const at::Tensor& x, Opt<I>... p,
                                                    const at::Tensor& stats) {
    return Impl::backward(grad, x, {p...}, stats);
  }
  // The same as function types, for calling an overload through the dispatcher.
  using OpFn = at::Tensor(const at::Tensor&, Opt<I>..., Scalar);
  using AddFn = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, Opt<I>..., Scalar);
  using AddInplaceFn = at::Tensor(const at::Tensor&, const at::Tensor&, Opt<I>..., Scalar);
  using ForwardFn =
      std::conditional_t<E::Info::has_eps,
                         std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, Opt<I>..., double),
                         std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, Opt<I>...)>;
  // Calls the forward building block through handle h (its eps where it has one).
  template <typename H>
  static std::tuple<at::Tensor, at::Tensor> call_forward(const H& h, const at::Tensor& x,
                                                         const Params<sizeof...(I)>& p, double eps) {
    if constexpr (E::Info::has_eps)
      return h.call(x, p[I]..., eps);
    else
      return h.call(x, p[I]...);
  }
  using BackwardFn = std::tuple<at::Tensor, Out<I>...>(const at::Tensor&, const at::Tensor&, Opt<I>...,
                                                       const at::Tensor&);
};

template <typename Impl>
using RowSignatures = RowSignaturesOver<Impl, std::make_index_sequence<Impl::Entry::kParams>>;

// Only the function types of an entry's overloads (OpFn, ForwardFn, ...).
template <typename E>
struct EntryOnly {
  using Entry = E;
};
template <typename E>
using RowFunctionTypes = RowSignatures<EntryOnly<E>>;

// Registers Impl<Entry>'s kernels of every overload of the entry with `m`.
template <template <typename> class Impl, typename E, typename Library>
void register_row_entry(Library& m) {
  using S = RowSignatures<Impl<E>>;
  m.impl(E::Info::name, &S::op);
  if constexpr (E::Info::fused_add) {
    m.impl(E::Info::add_name, &S::add);
    m.impl(E::Info::add_inplace_name, &S::add_);
  }
  if constexpr (E::Info::has_eps)
    m.impl(E::Info::forward_name, &S::forward);
  else
    m.impl(E::Info::forward_name, &S::forward_no_eps);
  m.impl(E::Info::backward_name, &S::backward);
}

// A tuple of P + 1 tensors from an array (the backward's return).
template <std::size_t N, std::size_t... I>
auto tuple_of(const std::array<at::Tensor, N>& a, std::index_sequence<I...>) {
  return std::make_tuple(a[I]...);
}
template <std::size_t N>
auto tuple_of(const std::array<at::Tensor, N>& a) {
  return tuple_of(a, std::make_index_sequence<N>{});
}
template <typename... Ts>
std::array<at::Tensor, sizeof...(Ts)> tuple_to_array(const std::tuple<Ts...>& t) {
  return std::apply([](const auto&... v) { return std::array<at::Tensor, sizeof...(Ts)>{v...}; }, t);
}
// The backward's return type for P parameters: (dx, dparam...).
template <std::size_t P>
using Grads = decltype(tuple_of(std::declval<std::array<at::Tensor, P + 1>>()));

}  // namespace tierkit_torch
