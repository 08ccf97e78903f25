#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <new>
#include <type_traits>

#include "tierkit/buffer.h"

using tierkit::Buffer;

TEST(Buffer, AllocatesWithDefaultAlignment) {
  Buffer b(100);
  ASSERT_NE(b.data(), nullptr);
  EXPECT_EQ(b.size(), 100u);
  EXPECT_EQ(b.alignment(), 64u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data()) % 64, 0u);
  std::memset(b.data(), 0xab, b.size());  // the whole size is writable
}

TEST(Buffer, HonoursLargerAlignment) {
  for (std::size_t align : {8u, 16u, 128u, 4096u}) {
    Buffer b(3, align);
    EXPECT_EQ(b.alignment(), align);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data()) % align, 0u) << align;
  }
}

TEST(Buffer, RejectsNonPowerOfTwoAlignment) {
  EXPECT_THROW(Buffer(16, 48), tierkit::InvalidArgument);
  EXPECT_THROW(Buffer(16, 0), tierkit::InvalidArgument);
  try {
    Buffer(16, 3);
    FAIL();
  } catch (const tierkit::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("alignment"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("got 3"), std::string::npos);
  }
}

TEST(Buffer, ZeroSizeIsEmptyAndValid) {
  Buffer b(0);
  EXPECT_EQ(b.size(), 0u);
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(b.data(), nullptr);
}

TEST(Buffer, ImpossibleAllocationThrowsBadAlloc) {
  EXPECT_THROW(Buffer(std::size_t{1} << 60), std::bad_alloc);
  EXPECT_THROW(Buffer(~std::size_t{0}), tierkit::OutOfMemory);
  try {
    Buffer b(std::size_t{1} << 60);
  } catch (const tierkit::OutOfMemory& e) {
    EXPECT_NE(std::string(e.what()).find("1152921504606846976"), std::string::npos);
  }
}

TEST(Buffer, IsMoveOnly) {
  static_assert(!std::is_copy_constructible_v<Buffer>);
  static_assert(!std::is_copy_assignable_v<Buffer>);
  static_assert(std::is_nothrow_move_constructible_v<Buffer>);
  static_assert(std::is_nothrow_move_assignable_v<Buffer>);
}

TEST(Buffer, MoveLeavesSourceEmpty) {
  Buffer a(32);
  void* p = a.data();
  Buffer b(std::move(a));
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(b.size(), 32u);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): the contract under test
  EXPECT_EQ(a.size(), 0u);
  EXPECT_TRUE(a.empty());
  Buffer c(8);
  c = std::move(b);  // frees c's old block (ASan/LSan would see a leak or double free)
  EXPECT_EQ(c.data(), p);
  EXPECT_EQ(b.size(), 0u);
  a = Buffer(4);  // a moved-from Buffer is reusable
  EXPECT_EQ(a.size(), 4u);
}

TEST(Buffer, SelfMoveAssignKeepsData) {
  Buffer a(16);
  void* p = a.data();
  Buffer& ref = a;
  a = std::move(ref);
  EXPECT_EQ(a.data(), p);
  EXPECT_EQ(a.size(), 16u);
}

TEST(Buffer, TypedAccess) {
  Buffer b(10 * sizeof(double));
  EXPECT_EQ(b.count<double>(), 10u);
  double* d = b.as<double>();
  for (int i = 0; i < 10; ++i) d[i] = i * 0.5;
  const Buffer& cb = b;
  EXPECT_DOUBLE_EQ(cb.as<double>()[9], 4.5);
}

TEST(Buffer, WrapRunsDeleterExactlyOnce) {
  static int storage[8];
  int calls = 0;
  void* seen = nullptr;
  {
    Buffer b = Buffer::wrap(storage, sizeof storage, [&](void* p) {
      ++calls;
      seen = p;
    });
    EXPECT_EQ(b.data(), storage);
    Buffer moved = std::move(b);  // moving must not run the deleter
    EXPECT_EQ(calls, 0);
  }
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen, storage);
}

TEST(Buffer, WrapWithoutDeleterIsNonOwning) {
  int x[4] = {1, 2, 3, 4};
  {
    Buffer b = Buffer::wrap(x, sizeof x, nullptr);
  }
  EXPECT_EQ(x[3], 4);  // still ours, nothing freed
}

TEST(Buffer, WrapRejectsNullWithSize) {
  EXPECT_THROW(Buffer::wrap(nullptr, 8, nullptr), tierkit::InvalidArgument);
  EXPECT_NO_THROW(Buffer::wrap(nullptr, 0, nullptr));
}

TEST(Buffer, ResetFreesNow) {
  int calls = 0;
  static char mem[4];
  Buffer b = Buffer::wrap(mem, 4, [&](void*) { ++calls; });
  b.reset();
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(b.empty());
}

TEST(Buffer, AddressAlignment) {
  alignas(64) static char mem[128];
  EXPECT_GE(Buffer::address_alignment(mem), 64u);
  EXPECT_EQ(Buffer::address_alignment(mem + 4), 4u);
  EXPECT_EQ(Buffer::address_alignment(mem + 1), 1u);
}
