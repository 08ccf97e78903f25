// From the op table (tierkit/op_table.h) to the C++ functions the dispatcher
// registers. An op of N tensor and M float arguments is registered as
//   at::Tensor  f(const at::Tensor&... (N), double... (M))
//   at::Tensor& f_out(const at::Tensor&..., double..., at::Tensor& out)
// and each tier's generic implementation `Impl` receives the arguments as
// arrays: Impl::functional(tensors, scalars), Impl::out(tensors, scalars, out,
// name, resize). One template per tier and dispatch key instead of one
// hand-written function per op.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include "tierkit/op_table.h"
#include "tierkit_torch/op_handle.h"

#include <array>
#include <atomic>
#include <cstddef>
#include <string>
#include <utility>

namespace tierkit_torch {

template <typename Info>
inline constexpr std::size_t kTensors = std::tuple_size_v<std::decay_t<decltype(Info::tensors)>>;
template <typename Info>
inline constexpr std::size_t kScalars = std::tuple_size_v<std::decay_t<decltype(Info::scalars)>>;

template <typename Info, std::size_t N = kTensors<Info>>
using TensorArgs = std::array<const at::Tensor*, N>;
template <typename Info, std::size_t M = kScalars<Info>>
using ScalarArgs = std::array<double, M>;

// "tierkit::<op>" and "tierkit::<op>.out", built while the library loads
// (not as guarded function-local statics: see op_handle.h on fork()).
template <typename Info>
inline const std::string kQualifiedName = std::string("tierkit::") + Info::name;
template <typename Info>
inline const std::string kQualifiedOutName = kQualifiedName<Info> + ".out";
template <typename Info>
const char* qualified_name(bool out_overload) {
  return out_overload ? kQualifiedOutName<Info>.c_str() : kQualifiedName<Info>.c_str();
}

template <typename Impl, typename Tensors, typename Scalars>
struct SignaturesOver;

template <typename Impl, std::size_t... I, std::size_t... J>
struct SignaturesOver<Impl, std::index_sequence<I...>, std::index_sequence<J...>> {
  template <std::size_t>
  using Tensor = const at::Tensor&;
  template <std::size_t>
  using Double = double;
  using Info = typename Impl::Info;

  static at::Tensor functional(Tensor<I>... t, Double<J>... s) { return Impl::functional({&t...}, {s...}); }
  static at::Tensor& out(Tensor<I>... t, Double<J>... s, at::Tensor& out) {
    return Impl::out({&t...}, {s...}, out, qualified_name<Info>(true), /*resize=*/true);
  }
  // A writer (add_out): the .out overload's signature under its own name,
  // `out` never resized.
  template <const char* Name>
  static at::Tensor& writer(Tensor<I>... t, Double<J>... s, at::Tensor& out) {
    return Impl::out({&t...}, {s...}, out, Name, /*resize=*/false);
  }
};

template <typename Impl>
using Signatures = SignaturesOver<Impl, std::make_index_sequence<kTensors<typename Impl::Info>>,
                                  std::make_index_sequence<kScalars<typename Impl::Info>>>;

// The same two signatures as function types, for calling an op's overloads
// unboxed through the dispatcher (a kernel that redispatches): a boxed call
// builds a stack of IValues and costs ~1.5k instructions a call more.
template <typename Info, typename Tensors = std::make_index_sequence<kTensors<Info>>,
          typename Scalars = std::make_index_sequence<kScalars<Info>>>
struct TypedCall;

template <typename Info, std::size_t... I, std::size_t... J>
struct TypedCall<Info, std::index_sequence<I...>, std::index_sequence<J...>> {
  template <std::size_t>
  using Tensor = const at::Tensor&;
  template <std::size_t>
  using Double = double;
  using Functional = at::Tensor(Tensor<I>..., Double<J>...);
  using Out = at::Tensor&(Tensor<I>..., Double<J>..., at::Tensor&);

  // The functional overload through the dispatcher, from the key below the
  // caller's (autograd's redispatch, the composite .out's functional call).
  static at::Tensor functional(const TensorArgs<Info>& t, const ScalarArgs<Info>& s) {
    static std::atomic<const c10::OperatorHandle*> slot{nullptr};
    const auto op = op_handle<Functional>(slot, qualified_name<Info>(false));
    return op.call(*t[I]..., s[J]...);
  }
  static at::Tensor& out(const c10::TypedOperatorHandle<Out>& op, const TensorArgs<Info>& t,
                         const ScalarArgs<Info>& s, at::Tensor& out) {
    return op.call(*t[I]..., s[J]..., out);
  }
};

// The out writers' qualified names ("tierkit::add_out"): the template
// argument of their kernels (Signatures<...>::writer<k_add_out>), which
// find the op by it, in every library that registers one.
#define TIERKIT_WRITER_NAME(name, of, Functor) inline constexpr char k_##name[] = "tierkit::" #name;
TIERKIT_OUT_WRITERS(TIERKIT_WRITER_NAME)
#undef TIERKIT_WRITER_NAME

}  // namespace tierkit_torch
