#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tierkit/kernels.h"

using tierkit::BFloat16;
using tierkit::DType;
using tierkit::Half;
using tierkit::Shape;
using tierkit::TensorView;
namespace k = tierkit::kernels;

namespace {

template <typename T>
std::vector<T> random_values(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-100.0f, 100.0f);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(dist(gen));
  return v;
}

template <typename T>
TensorView view1d(std::vector<T>& v) {
  return TensorView::contiguous(v.data(), static_cast<std::int64_t>(v.size()), tierkit::dtype_of_v<T>,
                                {static_cast<std::int64_t>(v.size())});
}

template <typename T>
bool same_bits(T a, T b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

const std::int64_t kLengths[] = {0, 1, 7, 1025, 100003};

}  // namespace

template <typename T>
class ContiguousKernels : public ::testing::Test {};
using FloatTypes = ::testing::Types<float, double, Half, BFloat16>;
TYPED_TEST_SUITE(ContiguousKernels, FloatTypes);

// The kernels must equal the scalar reference (compute in compute_t, round
// once) bit for bit, at lengths that exercise empty, tail-only, vector body
// plus tail, and the multi-threaded split.
TYPED_TEST(ContiguousKernels, AddMatchesScalarReference) {
  using T = TypeParam;
  using C = tierkit::compute_t<T>;
  for (std::int64_t n : kLengths) {
    auto a = random_values<T>(n, 1), b = random_values<T>(n, 2);
    std::vector<T> out(n);
    k::add(view1d(a), view1d(b), view1d(out));
    for (std::int64_t i = 0; i < n; ++i)
      ASSERT_TRUE(same_bits(out[i], static_cast<T>(C(a[i]) + C(b[i])))) << n << " " << i;
  }
}

TYPED_TEST(ContiguousKernels, ScaleShiftMatchesScalarReference) {
  using T = TypeParam;
  using C = tierkit::compute_t<T>;
  for (std::int64_t n : kLengths) {
    auto x = random_values<T>(n, 3);
    std::vector<T> out(n);
    k::scale_shift(view1d(x), 1.5, -0.25, view1d(out));
    for (std::int64_t i = 0; i < n; ++i)
      ASSERT_TRUE(same_bits(out[i], static_cast<T>(C(1.5) * C(x[i]) + C(-0.25)))) << n << " " << i;
  }
}

TYPED_TEST(ContiguousKernels, MulAddMatchesScalarReference) {
  using T = TypeParam;
  using C = tierkit::compute_t<T>;
  for (std::int64_t n : kLengths) {
    auto a = random_values<T>(n, 4), b = random_values<T>(n, 5);
    std::vector<T> out(n);
    k::muladd(view1d(a), view1d(b), 3.0, view1d(out));
    for (std::int64_t i = 0; i < n; ++i)
      ASSERT_TRUE(same_bits(out[i], static_cast<T>(C(a[i]) * C(b[i]) + C(3.0)))) << n << " " << i;
  }
}

TYPED_TEST(ContiguousKernels, MulMatchesScalarReference) {
  using T = TypeParam;
  using C = tierkit::compute_t<T>;
  for (std::int64_t n : kLengths) {
    auto a = random_values<T>(n, 6), b = random_values<T>(n, 7);
    std::vector<T> out(n);
    k::mul(view1d(a), view1d(b), view1d(out));
    for (std::int64_t i = 0; i < n; ++i)
      ASSERT_TRUE(same_bits(out[i], static_cast<T>(C(a[i]) * C(b[i])))) << n << " " << i;
  }
}

TEST(Kernels, RawPointerLoopsOddLengths) {
  for (std::int64_t n : {0, 1, 3, 17, 1029}) {
    auto a = random_values<double>(n, 8), b = random_values<double>(n, 9);
    std::vector<double> out(n);
    k::add(a.data(), b.data(), out.data(), n);
    for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], a[i] + b[i]);
    k::scale_shift(a.data(), 2.0, 1.0, out.data(), n);
    for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], 2.0 * a[i] + 1.0);
  }
}

TEST(Kernels, StridedTransposedInputs) {
  // a is a (3, 5) transpose of a (5, 3) buffer; b is every other element of a
  // longer buffer reshaped to (3, 5); out is contiguous.
  auto abuf = random_values<float>(15, 10), bbuf = random_values<float>(30, 11);
  std::vector<float> out(15);
  TensorView a(abuf.data(), 15, DType::Float32, {3, 5}, {1, 3});
  TensorView b(bbuf.data(), 30, DType::Float32, {3, 5}, {10, 2}, 1);
  auto o = TensorView::contiguous(out.data(), 15, DType::Float32, {3, 5});
  k::add(a, b, o);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j)
      ASSERT_EQ(out[i * 5 + j], abuf[j * 3 + i] + bbuf[1 + i * 10 + j * 2]) << i << "," << j;
}

TEST(Kernels, StridedOutputAndBroadcastStrideZero) {
  std::vector<double> row{1, 2, 3, 4};  // broadcast over 3 rows by stride 0
  std::vector<double> x(12);
  for (int i = 0; i < 12; ++i) x[i] = i;
  std::vector<double> out(24, -1.0);
  TensorView b(row.data(), 4, DType::Float64, {3, 4}, {0, 1});
  TensorView a(x.data(), 12, DType::Float64, {3, 4}, {4, 1});
  TensorView o(out.data(), 24, DType::Float64, {3, 4}, {8, 2});  // every other slot
  k::muladd(a, b, 0.5, o);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) ASSERT_EQ(out[i * 8 + j * 2], x[i * 4 + j] * row[j] + 0.5);
  EXPECT_EQ(out[1], -1.0);  // the gaps are untouched
}

TEST(Kernels, LargeStridedUsesEveryElement) {
  const std::int64_t rows = 300, cols = 257;  // > one parallel chunk, odd row length
  auto buf = random_values<float>(rows * cols, 12);
  std::vector<float> out(rows * cols);
  TensorView xt(buf.data(), rows * cols, DType::Float32, {cols, rows}, {1, cols});
  auto o = TensorView::contiguous(out.data(), rows * cols, DType::Float32, {cols, rows});
  k::scale_shift(xt, -2.0, 3.0, o);
  for (std::int64_t i = 0; i < cols; ++i)
    for (std::int64_t j = 0; j < rows; ++j) ASSERT_EQ(out[i * rows + j], -2.0f * buf[j * cols + i] + 3.0f);
}

TEST(Kernels, ZeroDimViews) {
  float a = 1.5f, b = 2.0f, out = 0;
  TensorView va(&a, 1, DType::Float32, {}, {}), vb(&b, 1, DType::Float32, {}, {}),
      vo(&out, 1, DType::Float32, {}, {});
  k::mul(va, vb, vo);
  EXPECT_EQ(out, 3.0f);
}

TEST(Kernels, InPlaceIsAllowed) {
  auto a = random_values<float>(1025, 13);
  const auto b = random_values<float>(1025, 14);
  auto expected = a;
  for (std::size_t i = 0; i < a.size(); ++i) expected[i] += b[i];
  auto bc = b;
  k::add(view1d(a), view1d(bc), view1d(a));
  EXPECT_EQ(a, expected);
}

TEST(Kernels, PartialOverlapIsRejected) {
  std::vector<float> mem(20);
  auto a = TensorView::contiguous(mem.data(), 20, DType::Float32, {10});
  TensorView shifted(mem.data(), 20, DType::Float32, {10}, {1}, 1);
  try {
    k::scale_shift(a, 1.0, 1.0, shifted);
    FAIL();
  } catch (const tierkit::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("out: overlaps input 'x'"), std::string::npos) << e.what();
  }
}

// The overlap rule is exact: layouts whose byte ranges meet but that share
// no element (interleaved, column blocks) are computed, as aten and numpy do;
// a shared element at another index is refused before anything is written.
TEST(Kernels, LayoutsSharingNoElementAreComputed) {
  std::vector<float> base(12);
  for (std::size_t i = 0; i < base.size(); ++i) base[i] = static_cast<float>(i);
  TensorView evens(base.data(), 11, DType::Float32, {6}, {2});
  TensorView odds(base.data() + 1, 11, DType::Float32, {6}, {2});
  k::scale_shift(odds, 2.0, 0.0, evens);  // out = base[::2], x = base[1::2]
  for (std::size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(base[2 * i], 2.0f * (2 * i + 1)) << i;
    EXPECT_EQ(base[2 * i + 1], static_cast<float>(2 * i + 1)) << i;  // the input is untouched
  }
  // Columns 0-1 and 2-3 of one 3x4 matrix.
  std::vector<float> m(12, 1.0f);
  TensorView left(m.data(), 10, DType::Float32, {3, 2}, {4, 1});
  TensorView right(m.data() + 2, 10, DType::Float32, {3, 2}, {4, 1});
  k::add(left, left, right);
  EXPECT_EQ(m[2], 2.0f);
  EXPECT_EQ(m[0], 1.0f);
}

TEST(Kernels, AnElementSharedAtAnotherIndexIsRefusedUntouched) {
  std::vector<float> mem(8);
  for (std::size_t i = 0; i < mem.size(); ++i) mem[i] = static_cast<float>(i);
  const auto before = mem;
  TensorView shifted(mem.data() + 2, 6, DType::Float32, {3},
                     {2});                                   // 2 4 6: element 0 of it is out's element 1
  TensorView out3(mem.data(), 5, DType::Float32, {3}, {2});  // 0 2 4
  EXPECT_THROW(k::scale_shift(shifted, 1.0, 1.0, out3), tierkit::InvalidArgument);
  EXPECT_EQ(mem, before);
}

TEST(Kernels, ShapeMismatchNamesBothShapes) {
  std::vector<float> a(6), b(6), out(6);
  auto va = TensorView::contiguous(a.data(), 6, DType::Float32, {2, 3});
  auto vb = TensorView::contiguous(b.data(), 6, DType::Float32, {3, 2});
  auto vo = TensorView::contiguous(out.data(), 6, DType::Float32, {2, 3});
  try {
    k::add(va, vb, vo);
    FAIL();
  } catch (const tierkit::InvalidArgument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("b: expected shape (2, 3)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("got (3, 2)"), std::string::npos) << msg;
  }
}

TEST(Kernels, DtypeMismatchAndIntegerDtypesAreTypeErrors) {
  std::vector<float> a(4), out(4);
  std::vector<double> d(4);
  std::vector<std::int32_t> ia(4), iout(4);
  try {
    k::add(view1d(a), view1d(d), view1d(out));
    FAIL();
  } catch (const tierkit::DTypeError& e) {
    EXPECT_NE(std::string(e.what()).find("b: expected dtype float32"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("got float64"), std::string::npos);
  }
  try {
    k::add(view1d(ia), view1d(ia), view1d(iout));
    FAIL();
  } catch (const tierkit::DTypeError& e) {
    EXPECT_NE(std::string(e.what()).find("int32"), std::string::npos);
  }
}

TEST(Kernels, NanInfAndSignedZeroPropagate) {
  std::vector<float> a{NAN, INFINITY, -0.0f, -INFINITY}, b{1.0f, 1.0f, -0.0f, INFINITY};
  std::vector<float> out(4);
  k::add(view1d(a), view1d(b), view1d(out));
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_EQ(out[1], INFINITY);
  EXPECT_TRUE(std::signbit(out[2]) && out[2] == 0.0f);
  EXPECT_TRUE(std::isnan(out[3]));
}

TEST(Kernels, OutputWithZeroStrideIsRejected) {
  std::vector<float> a(4), one(1);
  TensorView expanded_out(one.data(), 1, DType::Float32, {4}, {0});
  try {
    k::add(view1d(a), view1d(a), expanded_out);
    FAIL();
  } catch (const tierkit::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("out: has stride 0 in dimension 0"), std::string::npos) << e.what();
  }
}

TEST(Kernels, EmptyOutputWithZeroStrideIsFine) {
  // numpy reports strides (0, 4) for some empty arrays: nothing is written.
  TensorView empty_out(nullptr, 0, DType::Float32, {2, 0}, {0, 1});
  EXPECT_NO_THROW(k::add(empty_out, empty_out, empty_out));
}

TEST(Kernels, CustomRunnerDecidesTheSplit) {
  // A host framework's parallel_for stands in for the pool: it sees the whole
  // range once, and the chunks it hands back cover it.
  std::vector<std::pair<std::int64_t, std::int64_t>> chunks;
  auto runner = [&](std::int64_t n, std::int64_t grain, const auto& fn) {
    EXPECT_GT(grain, 0);
    for (std::int64_t lo = 0; lo < n; lo += 1000) {
      chunks.emplace_back(lo, std::min(n, lo + 1000));
      fn(lo, std::min(n, lo + 1000));
    }
  };
  auto x = random_values<float>(4500, 15);
  std::vector<float> out(4500);
  k::scale_shift(view1d(x), 3.0, 0.5, view1d(out), runner);
  EXPECT_EQ(chunks.size(), 5u);
  for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(out[i], 3.0f * x[i] + 0.5f);
}

// The rule behind map_contiguous's streaming stores: never for an empty
// loop, from streaming_threshold() bytes moved (inputs and output), which
// TIERKIT_STREAMING_STORES=on makes 0 (CTest's
// ContiguousKernels.streaming_stores runs the kernels so); the 16-bit types
// by their bytes too, where their vector loops run.
TEST(StreamingStores, FromTheThresholdByBytes) {
  EXPECT_FALSE(k::streaming_stores<float>(0, 3));
  EXPECT_FALSE(k::streaming_stores<BFloat16>(0, 3));
  const std::size_t t = k::streaming_threshold();
  if (t == SIZE_MAX || !k::streaming_stores<float>(std::int64_t{1} << 40, 3))
    GTEST_SKIP() << "no streaming here";
  const auto n = static_cast<std::int64_t>(t / (3 * sizeof(float)));
  EXPECT_TRUE(k::streaming_stores<float>(n + 1, 3));
  EXPECT_TRUE(k::streaming_stores<double>(n / 2 + 1, 3));
#ifdef TIERKIT_SIMD_DISPATCH  // (elsewhere nothing streams: skipped above)
  EXPECT_EQ(k::streaming_stores<BFloat16>(2 * n + 2, 3), k::detail::cpu_has_16bit_simd());
  EXPECT_EQ(k::streaming_stores<Half>(2 * n + 2, 3), k::detail::cpu_has_16bit_simd());
#endif
  if (t > 0) {
    EXPECT_FALSE(k::streaming_stores<float>(n / 2, 3));
    EXPECT_FALSE(k::streaming_stores<BFloat16>(n, 3));
  }
  const char* mode = std::getenv("TIERKIT_STREAMING_STORES");
  if (mode && std::string(mode) == "on") {
    EXPECT_TRUE(k::streaming_stores<float>(1, 2));
  }
}

// In place, at every offset of `out` from a 64-byte boundary (the loop's
// scalar head) and lengths with and without a scalar tail after its
// blocks; the 16-bit loops' whole-line blocks (32 elements a line) too.
template <typename T>
void streamed_in_place_at_every_alignment() {
  using C = tierkit::compute_t<T>;
  const std::int64_t line = 64 / static_cast<std::int64_t>(sizeof(T));
  for (std::int64_t offset = 0; offset < line; ++offset) {
    for (std::int64_t n :
         {std::int64_t{1}, std::int64_t{1023}, std::int64_t{1024 + 17}, std::int64_t{5000}}) {
      auto x = random_values<T>(static_cast<std::size_t>(offset + n), 11);
      const auto before = x;
      k::scale_shift(x.data() + offset, C(2), C(1), x.data() + offset, n);
      for (std::int64_t i = 0; i < offset + n; ++i) {
        T want = before[static_cast<std::size_t>(i)];
        if (i >= offset) tierkit::store_compute(&want, C(2) * tierkit::load_compute(&want) + C(1));
        ASSERT_TRUE(same_bits(x[static_cast<std::size_t>(i)], want)) << offset << " " << n << " " << i;
      }
    }
  }
}
TEST(StreamingStores, InPlaceAtEveryAlignment) {
  streamed_in_place_at_every_alignment<float>();
  streamed_in_place_at_every_alignment<tierkit::BFloat16>();
  streamed_in_place_at_every_alignment<tierkit::Half>();
}

// An op that declares an inner function of its first input (has_inner): the
// 16-bit loops take inner(a) from a table of every value, and must still
// give the scalar functor's bits, for a unary op (outer of inner_a alone),
// a ternary one, in place, and at every level CTest caps the host to.
namespace {
struct SquareOp {  // unary: outer(inner(x)) = x*x + 1
  static float inner(float x) { return x * x; }
  float outer(float sq) const { return sq + 1.0f; }
  float operator()(float x) const { return outer(inner(x)); }
};
struct ShiftedRatioOp {  // ternary: (1 / (1 + |a|)) * b - c
  float scale;
  static float inner(float a) { return 1.0f / (1.0f + std::fabs(a)); }
  float outer(float r, float b, float c) const { return r * b * scale - c; }
  float operator()(float a, float b, float c) const { return outer(inner(a), b, c); }
};

template <typename T, typename Op, typename... In>
void table_matches_functor(const Op& op, const In&... in) {
  const std::int64_t n = 65536 + 7;  // every pattern of a, and a scalar tail
  std::vector<T> a(n);
  for (std::int64_t i = 0; i < n; ++i) a[i] = T::from_bits(static_cast<std::uint16_t>(i * 7 + 3));
  std::vector<T> out(n);
  k::map_contiguous(op, out.data(), n, static_cast<const T*>(a.data()), in.data()...);
  for (std::int64_t i = 0; i < n; ++i) {
    T want;
    tierkit::store_compute(&want, op(tierkit::load_compute(&a[i]), tierkit::load_compute(&in[i])...));
    ASSERT_TRUE(same_bits(out[i], want)) << "i=" << i << " a bits " << std::hex << a[i].bits;
  }
  k::map_contiguous(op, a.data(), n, static_cast<const T*>(a.data()), in.data()...);  // in place
  EXPECT_TRUE(std::memcmp(a.data(), out.data(), n * sizeof(T)) == 0);
}

template <typename T>
void inner_tables() {
  static_assert(k::has_inner<SquareOp>::value && k::has_inner<k::SiluMulOp<float>>::value);
  static_assert(!k::has_inner<k::AddOp<float>>::value);
  table_matches_functor<T>(SquareOp{});
  const std::int64_t n = 65536 + 7;
  auto b = random_values<T>(n, 3), c = random_values<T>(n, 4);
  table_matches_functor<T>(ShiftedRatioOp{0.75f}, b, c);
  // The tables themselves hold the functors' float results for every
  // pattern (silu_mul's own: its all-patterns kernel test pairs each a with
  // one b, where an entry off by an ulp seldom changes the 16-bit result).
  const float* square = k::inner_table<T, SquareOp>();
  const float* silu = k::inner_table<T, k::SiluMulOp<float>>();
  for (std::uint32_t u = 0; u < 65536; ++u) {
    const T x = T::from_bits(static_cast<std::uint16_t>(u));
    const float a = tierkit::load_compute(&x);
    ASSERT_TRUE(same_bits(square[u], SquareOp::inner(a))) << std::hex << u;
    ASSERT_TRUE(same_bits(silu[u], k::SiluMulOp<float>::inner(a))) << std::hex << u;
  }
}

#if defined(__x86_64__)
// inner(a) * 2^100 * b: its inner results are subnormal for |a| < 2^-6, so
// a flush-to-zero or denormals-are-zero mode changes them (to 0).
struct TinyOp {
  static float inner(float a) { return a * 0x1p-120f; }
  float outer(float s, float b) const { return s * 0x1p100f * b; }
  float operator()(float a, float b) const { return outer(inner(a), b); }
};
constexpr unsigned kFtz = 0x8000u, kDaz = 0x0040u;
// Sets MXCSR's mode bits for a scope (restores the register after).
class FloatModeScope {
 public:
  explicit FloatModeScope(unsigned bits) : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | bits); }
  ~FloatModeScope() { _mm_setcsr(saved_); }

 private:
  unsigned saved_;
};
#endif
}  // namespace

TEST(VectorizedKernels, InnerTableHalfMatchesScalarFunctor) { inner_tables<Half>(); }
TEST(VectorizedKernels, InnerTableBFloat16MatchesScalarFunctor) { inner_tables<BFloat16>(); }

#if defined(__x86_64__)
// A table first built by a thread that flushes denormals still holds the
// IEEE results (the first caller's mode must not stay in it), and a caller
// in a flushing mode gets what it would compute in that mode, not the table.
TEST(VectorizedKernels, InnerTableKeepsNoCallersFloatMode) {
  const std::int64_t n = 65536 + 7;
  auto b = random_values<BFloat16>(n, 5);
  auto b16 = random_values<Half>(n, 5);
  const float* table;
  {
    const FloatModeScope mode(kFtz | kDaz);
    table = k::inner_table<BFloat16, TinyOp>();  // its first use
  }
  int subnormal = 0;
  for (std::uint32_t u = 0; u < 65536; ++u) {
    const BFloat16 x = BFloat16::from_bits(static_cast<std::uint16_t>(u));
    const float a = tierkit::load_compute(&x);
    ASSERT_TRUE(same_bits(table[u], TinyOp::inner(a))) << std::hex << u;
    subnormal += std::fpclassify(table[u]) == FP_SUBNORMAL;
  }
  EXPECT_GT(subnormal, 1000);  // the test means something
  table_matches_functor<BFloat16>(TinyOp{}, b);
  for (unsigned bits : {kFtz, kDaz, kFtz | kDaz}) {
    SCOPED_TRACE(bits);
    const FloatModeScope mode(bits);
    table_matches_functor<BFloat16>(TinyOp{}, b);
    table_matches_functor<Half>(TinyOp{}, b16);
  }
  // Rounding toward zero: bfloat16 only. float16's scalar conversion rounds
  // a subnormal half with a float add, which follows the mode; F16C's
  // rounds to nearest whatever it is.
  const FloatModeScope mode(0x6000u);
  table_matches_functor<BFloat16>(TinyOp{}, b);
}
#endif

TEST(Checks, BroadcastShapeIsNumpysRule) {
  using tierkit::checks::broadcast_shape;
  using V = std::vector<std::int64_t>;
  EXPECT_EQ(broadcast_shape("b", V{3, 1}, "a", V{1, 4}), (V{3, 4}));
  EXPECT_EQ(broadcast_shape("b", V{}, "a", V{5}), (V{5}));
  EXPECT_EQ(broadcast_shape("b", V{2, 3, 4}, "a", V{4}), (V{2, 3, 4}));
  EXPECT_EQ(broadcast_shape("b", V{0, 3}, "a", V{1, 3}), (V{0, 3}));
  try {
    broadcast_shape("b", V{3}, "a", V{4});
    FAIL();
  } catch (const tierkit::InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "b: expected a shape that broadcasts with [3] (a), got [4]");
  }
}

// The level core dispatches to is the CPU's own, read from CPUID: the x86
// emulation session (tests-core-x86-baseline) runs this suite on qemu CPU
// models and names the level each has in TIERKIT_EXPECT_SIMD (Westmere:
// baseline, no AVX; Haswell: avx2, no AVX-512); with TIERKIT_SIMD set, the
// lower of the two. "none" where core does not dispatch (aarch64, or x86
// built for AVX2 and up). Skipped where nobody says what to expect.
TEST(SimdDispatch, PicksTheLevelOfTheCpu) {
  const char* expected = std::getenv("TIERKIT_EXPECT_SIMD");
  if (!expected) GTEST_SKIP() << "TIERKIT_EXPECT_SIMD unset (the emulation sessions name the CPU's level)";
  std::string want = expected;
#ifdef TIERKIT_SIMD_DISPATCH
  const char* cap = std::getenv("TIERKIT_SIMD");
  if (cap && std::string(cap) == "baseline") want = "baseline";
  if (cap && std::string(cap) == "avx2" && want == "avx512") want = "avx2";
  const char* got = "baseline";
  switch (k::detail::simd_level()) {
    case k::detail::SimdLevel::Avx512: got = "avx512"; break;
    case k::detail::SimdLevel::Avx2: got = "avx2"; break;
    case k::detail::SimdLevel::Baseline: break;
  }
  EXPECT_EQ(got, want);
  // The 16-bit loops' own test (F16C, AVX2, FMA): on every x86 CPU with
  // AVX2 (Haswell on), on none without AVX.
  if (want == "baseline" && !cap) {
    EXPECT_FALSE(k::detail::cpu_has_16bit_simd());
  }
  if (want != "baseline") {
    EXPECT_TRUE(k::detail::cpu_has_16bit_simd());
  }
  if (want != "avx512" && !cap) {
    EXPECT_FALSE(k::detail::cpu_has_avx512bf16());
  }
#else
  EXPECT_EQ(std::string("none"), want) << "core does not dispatch in this build";
#endif
}
