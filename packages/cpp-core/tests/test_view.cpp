#include <gtest/gtest.h>

#include <vector>

#include "tierkit/checks.h"
#include "tierkit/view.h"

using tierkit::DType;
using tierkit::Shape;
using tierkit::TensorView;

TEST(Shape, NumelStrAndStrides) {
  Shape s{2, 3, 4};
  EXPECT_EQ(s.rank(), 3);
  EXPECT_EQ(s.numel(), 24);
  EXPECT_EQ(s.str(), "(2, 3, 4)");
  EXPECT_EQ(Shape{5}.str(), "(5,)");
  EXPECT_EQ(Shape{}.str(), "()");
  EXPECT_EQ(Shape{}.numel(), 1);
  EXPECT_EQ(s.contiguous_strides(), (Shape{12, 4, 1}));
}

TEST(Shape, RejectsTooManyDims) {
  EXPECT_THROW((Shape{1, 1, 1, 1, 1, 1, 1, 1, 1}), tierkit::InvalidArgument);
}

TEST(TensorView, ContiguousAccess) {
  std::vector<float> mem(6);
  auto v = TensorView::contiguous(mem.data(), 6, DType::Float32, {2, 3});
  EXPECT_TRUE(v.is_contiguous());
  EXPECT_EQ(v.numel(), 6);
  v.at<float>({1, 2}) = 7.0f;
  EXPECT_EQ(mem[5], 7.0f);
}

TEST(TensorView, StridedAndTransposed) {
  std::vector<double> mem(12);
  for (int i = 0; i < 12; ++i) mem[i] = i;
  TensorView t(mem.data(), 12, DType::Float64, {4, 3}, {1, 4});  // transpose of (3, 4)
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.at<double>({1, 2}), 9.0);
  TensorView every_other(mem.data(), 12, DType::Float64, {6}, {2}, 1);
  EXPECT_FALSE(every_other.is_contiguous());
  EXPECT_EQ(every_other.at<double>({5}), 11.0);
}

TEST(TensorView, SizeOneDimsDoNotBreakContiguity) {
  std::vector<float> mem(3);
  TensorView v(mem.data(), 3, DType::Float32, {1, 3}, {99, 1});
  EXPECT_TRUE(v.is_contiguous());
}

TEST(TensorView, NegativeStridesWithinBounds) {
  std::vector<float> mem{0, 1, 2, 3};
  TensorView rev(mem.data(), 4, DType::Float32, {4}, {-1}, 3);
  EXPECT_EQ(rev.at<float>({0}), 3.0f);
  EXPECT_EQ(rev.at<float>({3}), 0.0f);
  EXPECT_THROW(TensorView(mem.data(), 4, DType::Float32, {4}, {-1}, 2), tierkit::InvalidArgument);
}

TEST(TensorView, RejectsOutOfBoundsExtent) {
  std::vector<float> mem(6);
  try {
    TensorView(mem.data(), 6, DType::Float32, {2, 4}, {4, 1});
    FAIL();
  } catch (const tierkit::InvalidArgument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("(2, 4)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("outside the 6"), std::string::npos) << msg;
  }
  EXPECT_THROW(TensorView(mem.data(), 6, DType::Float32, {6}, {1}, 1), tierkit::InvalidArgument);
}

TEST(TensorView, RejectsBadShapes) {
  std::vector<float> mem(6);
  EXPECT_THROW(TensorView(mem.data(), 6, DType::Float32, {-1}, {1}), tierkit::InvalidArgument);
  EXPECT_THROW(TensorView(mem.data(), 6, DType::Float32, {2, 3}, {1}), tierkit::InvalidArgument);
  EXPECT_THROW(TensorView(mem.data(), 6, DType::Float32, {2}, {1}, -1), tierkit::InvalidArgument);
  EXPECT_THROW(TensorView(nullptr, 6, DType::Float32, {2}, {1}), tierkit::InvalidArgument);
}

TEST(TensorView, EmptyViewNeedsNoMemory) {
  TensorView v(nullptr, 0, DType::Float32, {0, 5}, {5, 1});
  EXPECT_EQ(v.numel(), 0);
}

TEST(TensorView, ZeroDimHoldsOneElement) {
  float x = 2.5f;
  TensorView v(&x, 1, DType::Float32, {}, {});
  EXPECT_EQ(v.numel(), 1);
  EXPECT_EQ(v.at<float>({}), 2.5f);
}

TEST(TensorView, AccessChecksDtypeRankAndRange) {
  std::vector<float> mem(6);
  auto v = TensorView::contiguous(mem.data(), 6, DType::Float32, {2, 3});
  EXPECT_THROW(v.at<double>({0, 0}), tierkit::DTypeError);
  EXPECT_THROW(v.at<float>({0}), tierkit::InvalidArgument);
  EXPECT_THROW(v.at<float>({2, 0}), tierkit::InvalidArgument);
  EXPECT_THROW(v.at<float>({0, -1}), tierkit::InvalidArgument);
}

TEST(TensorView, DataAppliesOffsetInBytes) {
  std::vector<double> mem(4);
  TensorView v(mem.data(), 4, DType::Float64, {2}, {1}, 2);
  EXPECT_EQ(v.data(), static_cast<void*>(mem.data() + 2));
}

TEST(Checks, MessagesNameArgumentExpectedAndGot) {
  using tierkit::checks::same_shape;
  try {
    same_shape("b", tierkit::Shape{3, 2}, "a", tierkit::Shape{2, 3});
    FAIL();
  } catch (const tierkit::InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "b: expected shape (2, 3) (same as a), got (3, 2)");
  }
  const std::vector<std::int64_t> got{4}, want{3};
  try {
    same_shape("b", got, "a", want, tierkit::ShapeStyle::List);
    FAIL();
  } catch (const tierkit::InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "b: expected shape [3] (same as a), got [4]");
  }
  EXPECT_THROW(tierkit::checks::same_dtype("b", DType::Float64, "a", DType::Float32), tierkit::DTypeError);
  EXPECT_THROW(tierkit::checks::accepted_dtype("a", DType::Int64), tierkit::DTypeError);
}

TEST(Checks, ReachCoversNegativeAndPositiveStrides) {
  const auto r = tierkit::reach(tierkit::Shape{3, 4}, tierkit::Shape{-4, 1});
  EXPECT_EQ(r.lo, -8);
  EXPECT_EQ(r.hi, 3);
  const auto empty = tierkit::reach(tierkit::Shape{0, 4}, tierkit::Shape{4, 1});
  EXPECT_EQ(empty.lo, 0);
  EXPECT_EQ(empty.hi, 0);
}

TEST(Checks, AbsurdSizesAndStridesAreErrorsNotOverflow) {
  const tierkit::Shape huge{0, std::int64_t{1} << 62, std::int64_t{1} << 62};
  EXPECT_EQ(huge.numel(), 0);
  EXPECT_THROW(huge.contiguous_strides(), tierkit::InvalidArgument);
  EXPECT_THROW((tierkit::Shape{std::int64_t{1} << 40, std::int64_t{1} << 40}.numel()),
               tierkit::InvalidArgument);
  std::vector<float> mem(4);
  const std::int64_t absurd = std::int64_t{1} << 62;
  EXPECT_THROW(TensorView(mem.data(), 4, DType::Float32, {4}, {absurd}), tierkit::InvalidArgument);
  EXPECT_THROW(tierkit::reach(tierkit::Shape{3, 3}, tierkit::Shape{absurd, absurd}),
               tierkit::InvalidArgument);
}
