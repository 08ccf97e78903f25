// The benchmark's limit: McCalpin's STREAM kernels (copy, scale, add, triad)
// over float32, compiled at bench time (stream_lib.py) with the compiler and
// flags core's consumers use (-O3, tierkit_core.cxx_flags()), and split the
// way core's ops split their work: core's ThreadPool, core's grain, one
// chunk inline below two grains. Like core's kernels, the vector loops are
// compiled for AVX2 and AVX-512 through target attributes and the level is
// picked at run time (kernels.h's simd_level, TIERKIT_SIMD honoured).
//
// Two store forms: ordinary stores (what core's kernels do: the destination
// line is read before it is written, traffic STREAM does not count) and
// non-temporal stores (_mm*_stream_ps: no read for ownership, the line goes
// straight to memory). The bench takes the faster of the two as the limit.
//
// The arrays belong to a handle: allocated by core's Buffer (2 MiB aligned,
// huge pages advised, as core's outputs are) and first touched by the same
// threads, in the same chunks, that later run the kernels.
#include <tierkit/buffer.h>
#include <tierkit/kernels.h>
#include <tierkit/parallel.h>

#include <cstdint>
#include <ctime>
#include <exception>
#include <memory>

#if defined(__x86_64__)
#include <immintrin.h>
#define TK_STREAM_X86 1
#endif

// As kernels.h: GCC unrolls the vector loops (Clang interleaves by itself).
#if defined(__GNUC__) && !defined(__clang__)
#define TK_UNROLLED , optimize("unroll-loops")
#else
#define TK_UNROLLED
#endif

namespace {

enum Kernel : int { kCopy = 0, kScale = 1, kAdd = 2, kTriad = 3 };

// dst[i] = f(i) for the kernel k, element by element; `s` is the scalar.
#define TK_STREAM_BODY(STORE)                                                                             \
  switch (k) {                                                                                            \
    case kCopy: TIERKIT_VECTORIZE_LOOP for (std::int64_t i = lo; i < hi; ++i) c[i] = a[i]; break;         \
    case kScale: TIERKIT_VECTORIZE_LOOP for (std::int64_t i = lo; i < hi; ++i) b[i] = s * c[i]; break;    \
    case kAdd: TIERKIT_VECTORIZE_LOOP for (std::int64_t i = lo; i < hi; ++i) c[i] = a[i] + b[i]; break;   \
    default: TIERKIT_VECTORIZE_LOOP for (std::int64_t i = lo; i < hi; ++i) a[i] = b[i] + s * c[i]; break; \
  }

void plain_baseline(int k, float* __restrict a, float* __restrict b, float* __restrict c, float s,
                    std::int64_t lo, std::int64_t hi) {
  TK_STREAM_BODY()
}

#if defined(TIERKIT_SIMD_DISPATCH)
__attribute__((target("avx2") TK_UNROLLED)) void plain_avx2(int k, float* __restrict a, float* __restrict b,
                                                            float* __restrict c, float s, std::int64_t lo,
                                                            std::int64_t hi) {
  TK_STREAM_BODY()
}
__attribute__((target("avx2,avx512f,avx512bw,avx512vl") TK_UNROLLED)) void plain_avx512(
    int k, float* __restrict a, float* __restrict b, float* __restrict c, float s, std::int64_t lo,
    std::int64_t hi) {
  TK_STREAM_BODY()
}
#endif

#if defined(TK_STREAM_X86)
// Non-temporal stores want an aligned destination: scalar head up to the
// vector boundary, streamed body, scalar tail, then a fence so the stores
// are visible before the chunk reports done. One body, expanded inside each
// target-attributed function (a helper without the attribute would not
// inline the intrinsics: calls with vectors passed through memory).
inline float* destination(int k, float* a, float* b, float* c) {
  return k == kCopy ? c : k == kScale ? b : k == kAdd ? c : a;
}
inline void scalar_at(int k, float* a, float* b, float* c, float s, std::int64_t j) {
  switch (k) {
    case kCopy: c[j] = a[j]; break;
    case kScale: b[j] = s * c[j]; break;
    case kAdd: c[j] = a[j] + b[j]; break;
    default: a[j] = b[j] + s * c[j]; break;
  }
}
#define TK_NT_BODY(W, VEC, LOAD, SET1, MUL, ADD, STREAM)                                      \
  float* dst = destination(k, a, b, c);                                                       \
  std::int64_t i = lo;                                                                        \
  for (; i < hi && reinterpret_cast<std::uintptr_t>(dst + i) % (W * sizeof(float)) != 0; ++i) \
    scalar_at(k, a, b, c, s, i);                                                              \
  const std::int64_t body = i + (hi - i) / W * W;                                             \
  const VEC vs = SET1(s);                                                                     \
  switch (k) {                                                                                \
    case kCopy:                                                                               \
      for (; i < body; i += W) STREAM(c + i, LOAD(a + i));                                    \
      break;                                                                                  \
    case kScale:                                                                              \
      for (; i < body; i += W) STREAM(b + i, MUL(vs, LOAD(c + i)));                           \
      break;                                                                                  \
    case kAdd:                                                                                \
      for (; i < body; i += W) STREAM(c + i, ADD(LOAD(a + i), LOAD(b + i)));                  \
      break;                                                                                  \
    default:                                                                                  \
      for (; i < body; i += W) STREAM(a + i, ADD(LOAD(b + i), MUL(vs, LOAD(c + i))));         \
      break;                                                                                  \
  }                                                                                           \
  for (; i < hi; ++i) scalar_at(k, a, b, c, s, i);                                            \
  _mm_sfence();

void nt_baseline(int k, float* a, float* b, float* c, float s, std::int64_t lo, std::int64_t hi) {
  TK_NT_BODY(4, __m128, _mm_loadu_ps, _mm_set1_ps, _mm_mul_ps, _mm_add_ps, _mm_stream_ps)
}
#if defined(TIERKIT_SIMD_DISPATCH)
__attribute__((target("avx2"))) void nt_avx2(int k, float* a, float* b, float* c, float s, std::int64_t lo,
                                             std::int64_t hi) {
  TK_NT_BODY(8, __m256, _mm256_loadu_ps, _mm256_set1_ps, _mm256_mul_ps, _mm256_add_ps, _mm256_stream_ps)
}
__attribute__((target("avx2,avx512f,avx512bw,avx512vl"))) void nt_avx512(int k, float* a, float* b, float* c,
                                                                         float s, std::int64_t lo,
                                                                         std::int64_t hi) {
  TK_NT_BODY(16, __m512, _mm512_loadu_ps, _mm512_set1_ps, _mm512_mul_ps, _mm512_add_ps, _mm512_stream_ps)
}
#endif
#endif

using Chunk = void (*)(int, float*, float*, float*, float, std::int64_t, std::int64_t);

Chunk pick(bool nontemporal) {
#if defined(TIERKIT_SIMD_DISPATCH)
  using tierkit::kernels::detail::SimdLevel;
  switch (tierkit::kernels::detail::simd_level()) {
    case SimdLevel::Avx512: return nontemporal ? nt_avx512 : plain_avx512;
    case SimdLevel::Avx2: return nontemporal ? nt_avx2 : plain_avx2;
    default: break;
  }
#endif
#if defined(TK_STREAM_X86)
  return nontemporal ? nt_baseline : plain_baseline;
#else
  return nontemporal ? nullptr : plain_baseline;
#endif
}

struct Stream {
  std::int64_t n;
  unsigned threads;
  tierkit::Buffer a, b, c;
  std::unique_ptr<tierkit::ThreadPool> pool;

  template <typename Fn>
  void run(const Fn& fn) {
    // As core's PoolRunner: below two grains, or on one thread, inline.
    const std::int64_t grain = tierkit::kernels::detail::kGrain;
    if (n < 2 * grain || threads == 1) return fn(std::int64_t{0}, n);
    pool->parallel_for(0, n, grain, fn, threads);
  }
};

constexpr std::size_t kAlign = std::size_t{2} << 20;  // whole huge pages

}  // namespace

extern "C" {

// A handle with three arrays of n floats, first touched (a = 1, b = 2, c = 0,
// as STREAM) by a pool of `threads` threads. Null on failure.
void* tk_stream_new(std::int64_t n, int threads) {
  if (n <= 0 || threads <= 0) return nullptr;
  try {
    const auto bytes = static_cast<std::size_t>(n) * sizeof(float);
    auto h = std::make_unique<Stream>(Stream{
        n, static_cast<unsigned>(threads), tierkit::Buffer(bytes, kAlign), tierkit::Buffer(bytes, kAlign),
        tierkit::Buffer(bytes, kAlign), std::make_unique<tierkit::ThreadPool>(threads)});
    h->threads = std::min(h->threads, h->pool->size());
    float* a = h->a.as<float>();
    float* b = h->b.as<float>();
    float* c = h->c.as<float>();
    h->run([&](std::int64_t lo, std::int64_t hi) {
      for (std::int64_t i = lo; i < hi; ++i) {
        a[i] = 1.0f;
        b[i] = 2.0f;
        c[i] = 0.0f;
      }
    });
    return h.release();
  } catch (const std::exception&) {
    return nullptr;
  }
}

void tk_stream_free(void* handle) { std::unique_ptr<Stream>(static_cast<Stream*>(handle)); }

// 0: a, 1: b, 2: c.
float* tk_stream_array(void* handle, int which) {
  auto* h = static_cast<Stream*>(handle);
  return which == 0 ? h->a.as<float>() : which == 1 ? h->b.as<float>() : h->c.as<float>();
}

int tk_stream_threads(void* handle) { return static_cast<int>(static_cast<Stream*>(handle)->threads); }

// Runs kernel `kernel` (0 copy, 1 scale, 2 add, 3 triad) `calls` times with
// ordinary (nontemporal = 0) or non-temporal stores; returns the seconds a
// call (CLOCK_MONOTONIC around all of them), or a negative number when the
// store form is not available here or a chunk failed.
double tk_stream_run(void* handle, int kernel, int nontemporal, std::int64_t calls, double scalar) {
  auto* h = static_cast<Stream*>(handle);
  const Chunk chunk = pick(nontemporal != 0);
  if (chunk == nullptr || kernel < kCopy || kernel > kTriad || calls <= 0) return -1.0;
  float* a = h->a.as<float>();
  float* b = h->b.as<float>();
  float* c = h->c.as<float>();
  const auto s = static_cast<float>(scalar);
  timespec t0{}, t1{};
  try {
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (std::int64_t r = 0; r < calls; ++r)
      h->run([&](std::int64_t lo, std::int64_t hi) { chunk(kernel, a, b, c, s, lo, hi); });
    clock_gettime(CLOCK_MONOTONIC, &t1);
  } catch (const std::exception&) {
    return -2.0;
  }
  const double seconds =
      static_cast<double>(t1.tv_sec - t0.tv_sec) + 1e-9 * static_cast<double>(t1.tv_nsec - t0.tv_nsec);
  return seconds / static_cast<double>(calls);
}

// core's ThreadPool::default_threads(): the bridge's thread count.
int tk_stream_default_threads() { return static_cast<int>(tierkit::ThreadPool::default_threads()); }

// "avx512", "avx2" or "baseline": the vector level the kernels run at.
const char* tk_stream_simd() {
#if defined(TIERKIT_SIMD_DISPATCH)
  using tierkit::kernels::detail::SimdLevel;
  switch (tierkit::kernels::detail::simd_level()) {
    case SimdLevel::Avx512: return "avx512";
    case SimdLevel::Avx2: return "avx2";
    default: break;
  }
#endif
  return "baseline";
}

}  // extern "C"
