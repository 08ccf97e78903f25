// Elementwise kernels, templated on the element type: the loops that run
// the op table's functors (tierkit/functors.h, the arithmetic a contributor
// writes), apart from them.
//
// Two layers:
//  * contiguous range loops (`add(a, b, out, n)` ...) written so the compiler
//    vectorizes them for float/double: no loop-carried dependency, unit
//    stride, and `omp simd` because `out` may alias an input exactly;
//  * TensorView entry points that check shapes, dtypes and overlap, take the
//    contiguous loop when every operand is contiguous, walk strides
//    otherwise, and split the work over the shared ThreadPool.
// 16-bit floats compute in float and round once on store. The CPU's level
// and its targets (simd_level.h), each level's copy of a loop body
// (simd_copies.h), the 16-bit conversions (simd_convert.h) and the
// streaming rule (streaming.h) have files of their own.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <type_traits>
#include <utility>

#include "tierkit/checks.h"
#include "tierkit/dtype.h"
#include "tierkit/error.h"
#include "tierkit/functors.h"
#include "tierkit/op_table.h"
#include "tierkit/parallel.h"
#include "tierkit/simd_convert.h"  // the 16-bit vector conversions
#include "tierkit/simd_copies.h"   // each vector level's copy of a loop
#include "tierkit/simd_level.h"    // which level runs, and the targets that build one
#include "tierkit/streaming.h"     // when an output goes around the cache
#include "tierkit/view.h"
#include "tierkit/vmath.h"

// `omp simd` asserts no loop-carried dependency (true even when out is an
// input: element i only reads element i) and, with -fopenmp-simd (which the
// tierkit::core CMake target adds), makes GCC vectorize at -O2 too, where its
// "very cheap" cost model would otherwise refuse loops that need a tail.
#if defined(__GNUC__) || defined(__clang__)
#define TIERKIT_VECTORIZE_LOOP _Pragma("omp simd")
#else
#define TIERKIT_VECTORIZE_LOOP
#endif

namespace tierkit::kernels {

// ---- contiguous loops ------------------------------------------------------

// Ops whose arithmetic, not memory, limits their loops (an exp, a
// division: SiluMulOp says so with kComputeBound): map_contiguous runs
// them at the widest vector level for float and double too, and the
// strided loops in their FMA build.
template <typename Op, typename = void>
struct compute_bound : std::false_type {};
template <typename Op>
struct compute_bound<Op, std::void_t<decltype(Op::kComputeBound)>> : std::bool_constant<Op::kComputeBound> {};

// Ops of the form outer(inner(a), rest...) whose inner part costs most
// (silu_mul: silu(a), an exp and a division; then one product) declare
// `static C inner(C a)` and `C outer(C inner_a, C rest...) const`, with
// operator() == outer(inner(a), rest...). A 16-bit a has only 65536
// values, so the vector loops over 16-bit storage gather inner(a) from a
// table of all of them (inner_table, built at load, 256 KiB for each
// type and op: in each shared library that includes these headers with
// hidden visibility, once a process where they are exported) and compute
// only outer. The table holds the functor's own float results, computed in
// the IEEE default mode, so the bits are the computed ones (the scalar tails
// and the strided loops compute), but for the sign and payload of a NaN made
// from two NaN operands, which IEEE 754 leaves unspecified and the loops'
// operand orders differ in (tested: a NaN at every position); a caller in another mode (flush-to-zero or
// denormals-are-zero, torch.set_flush_denormal; another rounding) gets the
// computed loop, which follows it. Measured on one Intel Xeon (Sapphire Rapids)
// core, silu_mul over 2^16 in-cache randn elements, computed vs table side
// by side: bfloat16 0.87 -> 0.49 ns an element with AVX-512, 1.4-1.7 ->
// 0.62-0.73 with AVX2; float16 0.84 -> 0.52 with AVX-512. The table's lines
// that a tensor's values touch stay in L1/L2 (uniformly random bit
// patterns, the worst case: 1.4 ns, still faster). Not measured on AMD
// CPUs. Gathers are slow on CPUs with Intel's Gather Data Sampling
// microcode mitigation (Skylake to Ice Lake): there the table may not pay.
// Only an inner computed in float counts (a wider one would be rounded to
// float in the table: a rounding the functor does not do).
template <typename Op, typename = void>
struct has_inner : std::false_type {};
template <typename Op>
struct has_inner<Op, std::enable_if_t<std::is_same_v<decltype(Op::inner(std::declval<float>())), float>>>
    : std::true_type {};
// Not inlined: the vector copies are flattened (simd_copies.h), and its
// first call builds the table with every level's loops.
template <typename T, typename Op>
__attribute__((noinline)) const float* inner_table();
template <typename First, typename...>
struct first_of {
  using type = First;
};

// Whether the calling thread's SSE control register (MXCSR) is in the IEEE
// default mode: round to nearest, no flush-to-zero (bit 15), no
// denormals-are-zero (bit 6). Only then does a table built in that mode
// give the bits this thread would compute. IeeeFloatMode holds that mode
// for its lifetime (exceptions masked) and restores the caller's register,
// flags and all, after.
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__) && !defined(__CUDACC__)
inline bool ieee_float_mode() { return (_mm_getcsr() & 0xE040u) == 0; }
class IeeeFloatMode {
 public:
  IeeeFloatMode() : saved_(_mm_getcsr()) { _mm_setcsr(0x1f80u); }
  ~IeeeFloatMode() { _mm_setcsr(saved_); }
  IeeeFloatMode(const IeeeFloatMode&) = delete;
  IeeeFloatMode& operator=(const IeeeFloatMode&) = delete;

 private:
  unsigned saved_;
};
#else
inline bool ieee_float_mode() { return true; }  // no table loop is built here
struct IeeeFloatMode {};
#endif
// outer(inner_a, rest...) as a functor: what the 16-bit blocks apply to the
// gathered values.
template <typename Op>
struct OuterOp {
  const Op& op;
  template <typename... C>
  float operator()(float inner_a, C... rest) const {
    return op.outer(inner_a, rest...);
  }
};
// inner(a) alone, for building the table with the float loops.
template <typename Op>
struct InnerOp {
  static constexpr bool kComputeBound = true;
  float operator()(float a) const { return Op::inner(a); }
};

#define TIERKIT_MAP_LOOP \
  TIERKIT_VECTORIZE_LOOP \
  for (std::int64_t i = 0; i < n; ++i) store_compute(out + i, op(load_compute(in + i)...));

#ifdef TIERKIT_SIMD_DISPATCH
namespace detail {
// The op's loop, vectorized by the compiler at the copy's level (float, double).
template <typename T, typename Op, typename... In>
struct MapBody {
  static constexpr bool kUnrolled = true;
  template <typename W>
  static void run(const Op& op, T* out, std::int64_t n, const In*... in) {
    TIERKIT_MAP_LOOP
  }
};

// The 16-bit types in blocks: kBlock16 elements of each input converted to
// float in aligned stack buffers by explicit vector conversions, the op's
// plain float loop over the block (vectorized like float's own), the
// results converted back. GCC's vectorization of the mixed-width loop
// (16-bit loads, float arithmetic) spilled registers once an op had an exp
// in it: bfloat16 silu_mul over 1e6 elements on one AMD Zen 4 core took
// 0.50 ns an element with AVX-512 (1.0 with AVX2), float's own loop 0.26;
// blocked, 0.30 (with vexp_sigmoid). A plain add: 0.12 -> 0.08 ns.
// (On Zen 3 a first float16 version that staged blocks through scalar
// conversions was 3.5x slower than converting a vector at a time; these
// conversions are vectors.) The block is read whole before it is written,
// so out may alias an input exactly. The conversions: simd_convert.h.
inline constexpr std::int64_t kBlock16 = 256;

template <typename Op, std::size_t N, std::size_t... K>
__attribute__((always_inline)) inline void apply_block(const Op& op, const float (&src)[N][kBlock16],
                                                       float* dst, std::int64_t m,
                                                       std::index_sequence<K...>) {
  TIERKIT_VECTORIZE_LOOP
  for (std::int64_t j = 0; j < m; ++j) dst[j] = op(src[K][j]...);
}
// The block's op: outer alone where src[0] holds gathered inner(a) values
// (`gathered`: an op with an inner part, its table in use), else op whole.
template <typename Op, std::size_t N, typename Seq>
__attribute__((always_inline)) inline void apply_block_of(const Op& op, bool gathered,
                                                          const float (&src)[N][kBlock16], float* dst,
                                                          std::int64_t m, Seq seq) {
  if constexpr (has_inner<Op>::value)
    if (gathered) return apply_block(OuterOp<Op>{op}, src, dst, m, seq);
  apply_block(op, src, dst, m, seq);
}

// The last elements (fewer than W::kLanes) go through the scalar
// conversions, which give the same bits. An op with an inner part
// (has_inner) gets its first block from inner_table instead (where there is
// a block, and in the IEEE default mode). `stream`: whole blocks' results go
// out a line at a time around the cache (streaming_stores_16bit), converted
// into `lines` first: a converter's own store is half a line (AVX-512) or a
// quarter (AVX2), and non-temporal partial lines combine worse than whole ones.
template <typename T, typename Op, typename... In>
struct Map16Body {
  static constexpr bool kUnrolled = true;
  template <typename W>
  static void run(const Op& op, T* out, std::int64_t n, bool stream, const In*... in) {
    constexpr std::int64_t kLanes = W::kLanes;
    constexpr bool kTable = has_inner<Op>::value;
    const float* table = nullptr;
    if constexpr (kTable) {
      static_assert(std::is_same_v<typename first_of<In...>::type, T>,
                    "the table is indexed by the first input's bits: it must be of T");
      if (n >= kLanes && ieee_float_mode()) table = inner_table<T, Op>();
    }
    alignas(64) float src[sizeof...(In)][kBlock16];
    alignas(64) float dst[kBlock16];
    alignas(64) T lines[kBlock16];
    std::int64_t i = 0;
    if (stream)
      for (; i < n && reinterpret_cast<std::uintptr_t>(out + i) % 64 != 0; ++i)
        store_compute(out + i, op(load_compute(in + i)...));
    while (n - i >= kLanes) {
      const std::int64_t m = std::min<std::int64_t>(kBlock16, (n - i) / kLanes * kLanes);
      std::size_t k = 0;
      (
          (void)[&](const auto* p, float* to) {
            if (table && to == src[0]) {
              for (std::int64_t j = 0; j < m; j += kLanes) W::gather(p + i + j, table, to + j);
            } else {
              for (std::int64_t j = 0; j < m; j += kLanes) W::to(p + i + j, to + j);
            }
          }(in, src[k++]),
          ...);
      apply_block_of(op, table != nullptr, src, dst, m, std::index_sequence_for<In...>{});
      if (stream && m % kLine16 == 0) {
        for (std::int64_t j = 0; j < m; j += kLanes) W::from(dst + j, lines + j);
        for (std::int64_t j = 0; j < m; j += kLine16) W::stream_line(lines + j, out + i + j);
      } else {
        for (std::int64_t j = 0; j < m; j += kLanes) W::from(dst + j, out + i + j);
      }
      i += m;
    }
    for (; i < n; ++i) store_compute(out + i, op(load_compute(in + i)...));
    if (stream) _mm_sfence();
  }
};

// Streaming (non-temporal) stores for float and double: the op's loop
// writes a 256-byte block on the stack (vectorized as MapBody's), whose
// lines then go to `out` with 256-bit (AVX2) or 512-bit (AVX-512) streams,
// around the cache (measured on an Intel Xeon, two threads, 3.15e8-element
// scale: 256-bit 28-31 GB/s, 512-bit 33-35).
// An ordinary store first reads the destination's line into the cache (a
// read for ownership), so a kernel that writes memory moves 1.5x (unary) or
// 1.33x (binary) the bytes it must; measured with the bench's compiled
// STREAM on two AMD Zen 4 cores: scale 39 GB/s ordinary, 58 non-temporal.
// Only where the output will not be in the cache for its reader anyway:
// map_contiguous asks streaming_stores() (below). Scalar head up to a
// 64-byte boundary of `out`, so each streamed group fills a whole line;
// scalar tail; a fence, so the stores are visible before the chunk reports
// done. Reads the block's inputs before writing it: out may alias an input
// exactly.
template <typename T, typename Op, typename... In>
struct StreamingBody {
  static constexpr bool kUnrolled = true;
  template <typename W>
  static void run(const Op& op, T* out, std::int64_t n, const In*... in) {
    constexpr std::int64_t kBlock = 256 / sizeof(T);
    constexpr std::int64_t kLine = 64 / sizeof(T);
    alignas(64) T block[kBlock];
    std::int64_t i = 0;
    for (; i < n && reinterpret_cast<std::uintptr_t>(out + i) % 64 != 0; ++i)
      store_compute(out + i, op(load_compute(in + i)...));
    for (; n - i >= kBlock; i += kBlock) {
      TIERKIT_VECTORIZE_LOOP
      for (std::int64_t j = 0; j < kBlock; ++j) block[j] = op(load_compute(in + i + j)...);
      for (std::int64_t j = 0; j < kBlock; j += kLine) W::stream_line(block + j, out + i + j);
    }
    for (; i < n; ++i) store_compute(out + i, op(load_compute(in + i)...));
    _mm_sfence();
  }
};
}  // namespace detail
#endif

// out[i] = op(in[i]...) over n contiguous elements.
template <typename T, typename Op, typename... In>
void map_contiguous(const Op& op, T* out, std::int64_t n, const In*... in) {
#ifdef TIERKIT_SIMD_DISPATCH
  using detail::SimdLevel;
  const bool stream = streaming_stores<T>(n, sizeof...(In) + 1);
  if constexpr (sizeof(T) == 2) {
    if (detail::run_at_level<detail::Map16Body<T, Op, In...>, T>(op, out, n, stream, in...)) return;
  } else {
    if (stream && detail::run_at_level<detail::StreamingBody<T, Op, In...>, T>(op, out, n, in...)) return;
    // AVX-512 pays for compute-bound ops (silu_mul's exp and division:
    // float over 2^14 in-cache elements on one Intel Xeon core, 0.85-1.04 ns
    // an element with AVX2, 0.53-0.63 with AVX-512, side by side); other float
    // and double loops are memory-bound, where it measured 5-10% slower than
    // AVX2 (Intel, 64M-element add: 12.2 vs 13.5 GB/s on one core).
    constexpr SimdLevel cap = compute_bound<Op>::value ? SimdLevel::Avx512 : SimdLevel::Avx2;
    if (detail::run_at_level<detail::MapBody<T, Op, In...>, T, cap>(op, out, n, in...)) return;
  }
#endif
  TIERKIT_MAP_LOOP
}
#undef TIERKIT_MAP_LOOP

// Op::inner(x) for every bit pattern x of the 16-bit type T, in float
// (has_inner above): built on first use by the float loops (the scalar
// functor's bits) in the IEEE default mode whatever the first caller's,
// then kept for the life of the process (never freed, so no loop can
// outlive it at exit).
template <typename T, typename Op>
__attribute__((noinline)) const float* inner_table() {
  static_assert(sizeof(T) == 2, "a table of every value exists for 16-bit types only");
  static const float* const table = [] {
    [[maybe_unused]] const IeeeFloatMode mode;
    constexpr std::int64_t kValues = 65536;
    float* values = new float[kValues];
    for (std::int64_t u = 0; u < kValues; ++u) {
      const T x = T::from_bits(static_cast<std::uint16_t>(u));
      values[u] = load_compute(&x);
    }
    map_contiguous(InnerOp<Op>{}, values, kValues, static_cast<const float*>(values));
    return values;
  }();
  return table;
}

// Every lazily built static above, built while the library that includes
// this header loads (an inline variable's initializer runs then, in every
// shared object with a copy), not on first use: a fork() while another
// thread is inside a first use (a DataLoader forking its workers while a
// thread runs its first bfloat16 silu_mul) would leave the child waiting
// forever on that static's guard. About 1 ms at load: the CPU queries, the
// environment, and the 16-bit tables of every op of the op table that has
// an inner part (two of 256 KiB each).
#ifdef TIERKIT_SIMD_DISPATCH
template <typename Op>
void build_inner_tables() {
  if constexpr (has_inner<Op>::value) {
    (void)inner_table<Half, Op>();
    (void)inner_table<BFloat16, Op>();
  }
}
inline bool build_statics_at_load() {
  (void)detail::simd_level();
  (void)detail::cpu_has_16bit_simd();
  (void)detail::cpu_has_avx512bf16();
  (void)detail::cpu_has_avx512bf16_dq();
  (void)hardware_threads();
  (void)streaming_threshold();
#define TIERKIT_BUILD_TABLES(name, Functor, n_tensors, n_scalars) build_inner_tables<Functor##Op<float>>();
  TIERKIT_POINTWISE_OPS(TIERKIT_BUILD_TABLES)
#undef TIERKIT_BUILD_TABLES
  return true;
}
#else
inline bool build_statics_at_load() {
  (void)hardware_threads();
  (void)streaming_threshold();
  return true;
}
#endif
inline const bool kStaticsBuiltAtLoad = build_statics_at_load();

// The functor F<C> of an op with float arguments `scalars` (schema order).
template <template <typename> class F, typename C, std::size_t M, std::size_t... J>
F<C> make_functor(const std::array<double, M>& scalars, std::index_sequence<J...>) {
  return F<C>{static_cast<C>(scalars[J])...};
}
template <template <typename> class F, typename C, std::size_t M>
F<C> make_functor(const std::array<double, M>& scalars) {
  return make_functor<F, C>(scalars, std::make_index_sequence<M>{});
}

template <typename T>
void add(const T* a, const T* b, T* out, std::int64_t n) {
  map_contiguous(AddOp<compute_t<T>>{}, out, n, a, b);
}
template <typename T>
void mul(const T* a, const T* b, T* out, std::int64_t n) {
  map_contiguous(MulOp<compute_t<T>>{}, out, n, a, b);
}
template <typename T>
void silu_mul(const T* a, const T* b, T* out, std::int64_t n) {
  map_contiguous(SiluMulOp<compute_t<T>>{}, out, n, a, b);
}
template <typename T>
void scale_shift(const T* x, compute_t<T> alpha, compute_t<T> beta, T* out, std::int64_t n) {
  map_contiguous(ScaleShiftOp<compute_t<T>>{alpha, beta}, out, n, x);
}
template <typename T>
void muladd(const T* a, const T* b, compute_t<T> c, T* out, std::int64_t n) {
  map_contiguous(MulAddOp<compute_t<T>>{c}, out, n, a, b);
}

// ---- the driver shared by every view entry point (checks: tierkit/checks.h) --

namespace detail {

// Pointer to the element at row-major linear index `linear` of `v`.
template <typename T>
T* element_at(const TensorView& v, std::int64_t linear) {
  std::int64_t pos = 0;
  for (int d = v.rank() - 1; d >= 0; --d) {
    const std::int64_t size = v.shape()[d];
    pos += (linear % size) * v.strides()[d];
    linear /= size;
  }
  return static_cast<T*>(v.data()) + pos;
}

// Contiguous chunk [lo, hi): the vectorized loop on offset pointers.
template <typename T, typename Op, std::size_t N, std::size_t... K>
void map_chunk(const Op& op, const TensorView& out, const TensorView* const (&ins)[N], std::int64_t lo,
               std::int64_t hi, std::index_sequence<K...>) {
  map_contiguous(op, static_cast<T*>(out.data()) + lo, hi - lo,
                 (static_cast<const T*>(ins[K]->data()) + lo)...);
}

// Element-by-element over [begin, end) in row-major order of `out`, walking
// each operand's strides; runs along the innermost dimension step by stride.
template <typename T, typename Op, std::size_t N, std::size_t... K>
struct StridedBody {
  template <typename W>
  static void run(const Op& op, const TensorView& out, const TensorView* const (&ins)[N], std::int64_t begin,
                  std::int64_t end, std::int64_t inner, std::int64_t so, const std::int64_t (&si)[N]) {
    for (std::int64_t i = begin; i < end;) {
      const std::int64_t count = std::min(inner - i % inner, end - i);
      T* o = element_at<T>(out, i);
      const T* in[N] = {element_at<const T>(*ins[K], i)...};
      for (std::int64_t k = 0; k < count; ++k)
        store_compute(o + k * so, op(load_compute(in[K] + k * si[K])...));
      i += count;
    }
  }
};

template <typename T, typename Op, std::size_t N, std::size_t... K>
void map_strided(const Op& op, const TensorView& out, const TensorView* const (&ins)[N], std::int64_t begin,
                 std::int64_t end, std::index_sequence<K...>) {
  const int rank = out.rank();
  const std::int64_t inner = rank == 0 ? 1 : out.shape()[rank - 1];
  const std::int64_t so = rank == 0 ? 0 : out.strides()[rank - 1];
  const std::int64_t si[N] = {(rank == 0 ? 0 : ins[K]->strides()[rank - 1])...};
  using Body = StridedBody<T, Op, N, K...>;
#ifdef TIERKIT_SIMD_DISPATCH
  // A compute-bound op's rows at AVX2, where its std::fma is an instruction,
  // not a call into libm (the same bits either way).
  if constexpr (compute_bound<Op>::value)
    if (run_at_level<Body, T, SimdLevel::Avx2>(op, out, ins, begin, end, inner, so, si)) return;
#endif
  Body::template run<void>(op, out, ins, begin, end, inner, so, si);
}

// Roughly 64 KiB of float per chunk: big enough to amortise the hand-off,
// small enough to keep two cores busy on mid-size inputs.
inline constexpr std::int64_t kGrain = 16384;

// The one driver behind every view entry point: check, dispatch on dtype,
// pick the contiguous or strided loop, hand the range to `run`.
// `make_op(C{})` builds the operation for compute type C.
template <std::size_t N, typename Runner, typename MakeOp>
void map_views(const TensorView& out, const TensorView* const (&ins)[N], const char* const (&names)[N],
               const Runner& run, MakeOp make_op) {
  checks::accepted_dtype("out", out.dtype());
  checks::writable_layout(out);
  for (std::size_t k = 0; k < N; ++k) checks::operand(out, *ins[k], names[k]);
  dispatch_accepted(out.dtype(), "out", [&](auto tag) {
    using T = decltype(tag);
    const auto op = make_op(compute_t<T>{});
    bool contiguous = out.is_contiguous();
    for (std::size_t k = 0; k < N; ++k) contiguous = contiguous && ins[k]->is_contiguous();
    const auto seq = std::make_index_sequence<N>{};
    run(out.numel(), kGrain, [&](std::int64_t lo, std::int64_t hi) {
      if (contiguous) {
        map_chunk<T>(op, out, ins, lo, hi, seq);
      } else {
        map_strided<T>(op, out, ins, lo, hi, seq);
      }
    });
  });
}

}  // namespace detail

// ---- view entry points ------------------------------------------------------
// `run(n, grain, fn)` decides how [0, n) is split; fn(lo, hi) does a chunk.
// The default is core's ThreadPool; a host framework passes its own (the
// torch tier passes at::parallel_for, so torch.set_num_threads governs it).

struct PoolRunner {
  unsigned max_threads = 0;  // 0: every pool thread; 1: the calling thread only
  template <typename Fn>
  void operator()(std::int64_t n, std::int64_t grain, const Fn& fn) const {
    if (n <= 0) return;
    // One chunk's worth (the pool would run it inline anyway) or one thread
    // allowed: call it here, without building the pool's std::function
    // (measured: 0.9k instructions a call at n=1e3, a fifth of the bridge's).
    if (n < 2 * grain || max_threads == 1) return fn(0, n);
    ThreadPool::global().parallel_for(0, n, grain, fn, max_threads);
  }
};

template <typename Runner = PoolRunner>
void add(const TensorView& a, const TensorView& b, const TensorView& out, const Runner& run = {}) {
  detail::map_views(out, {&a, &b}, {"a", "b"}, run, [](auto c) { return AddOp<decltype(c)>{}; });
}

template <typename Runner = PoolRunner>
void mul(const TensorView& a, const TensorView& b, const TensorView& out, const Runner& run = {}) {
  detail::map_views(out, {&a, &b}, {"a", "b"}, run, [](auto c) { return MulOp<decltype(c)>{}; });
}

template <typename Runner = PoolRunner>
void silu_mul(const TensorView& a, const TensorView& b, const TensorView& out, const Runner& run = {}) {
  detail::map_views(out, {&a, &b}, {"a", "b"}, run, [](auto c) { return SiluMulOp<decltype(c)>{}; });
}

template <typename Runner = PoolRunner>
void scale_shift(const TensorView& x, double alpha, double beta, const TensorView& out,
                 const Runner& run = {}) {
  detail::map_views(out, {&x}, {"x"}, run, [=](auto c) {
    using C = decltype(c);
    return ScaleShiftOp<C>{static_cast<C>(alpha), static_cast<C>(beta)};
  });
}

template <typename Runner = PoolRunner>
void muladd(const TensorView& a, const TensorView& b, double c, const TensorView& out,
            const Runner& run = {}) {
  detail::map_views(out, {&a, &b}, {"a", "b"}, run, [=](auto z) {
    using C = decltype(z);
    return MulAddOp<C>{static_cast<C>(c)};
  });
}

// Any op's functor F<C> over views: `in` (named `names` in errors), its
// float arguments `scalars`, into `out`. What the tiers' generic code calls
// for every pointwise op of the op table.
template <template <typename> class F, std::size_t N, std::size_t M, typename Runner = PoolRunner>
void pointwise(const std::array<const TensorView*, N>& in, const std::array<const char*, N>& names,
               const std::array<double, M>& scalars, const TensorView& out, const Runner& run = {}) {
  const TensorView* ins[N];
  const char* ns[N];
  for (std::size_t k = 0; k < N; ++k) {
    ins[k] = in[k];
    ns[k] = names[k];
  }
  detail::map_views(out, ins, ns, run, [&](auto c) { return make_functor<F, decltype(c)>(scalars); });
}

}  // namespace tierkit::kernels
