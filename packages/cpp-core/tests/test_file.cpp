#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <string>
#include <system_error>
#include <type_traits>

#include "tierkit/file.h"

using tierkit::File;

namespace {
std::string temp_path(const char* name) {
  return ::testing::TempDir() + "tierkit_" + name + "_" + std::to_string(::getpid());
}
bool fd_is_open(int fd) { return ::fcntl(fd, F_GETFD) != -1; }
}  // namespace

TEST(File, WriteThenReadBack) {
  const std::string path = temp_path("rw");
  {
    File f(path, File::Mode::Write);
    f.write("hello tierkit", 13);
  }
  File f(path, File::Mode::Read);
  EXPECT_EQ(f.size(), 13u);
  char buf[32] = {};
  EXPECT_EQ(f.read(buf, sizeof buf), 13u);
  EXPECT_STREQ(buf, "hello tierkit");
  EXPECT_EQ(f.read(buf, sizeof buf), 0u);  // end of file
  std::remove(path.c_str());
}

TEST(File, ErrorNamesPathAndErrno) {
  try {
    File f("/nonexistent/dir/file.bin", File::Mode::Read);
    FAIL();
  } catch (const std::system_error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("/nonexistent/dir/file.bin"), std::string::npos) << msg;
    EXPECT_NE(msg.find("No such file"), std::string::npos) << msg;
    EXPECT_EQ(e.code().value(), ENOENT);
  }
}

TEST(File, ClosesOnScopeExitAndOnException) {
  const std::string path = temp_path("close");
  int fd = -1;
  try {
    File f(path, File::Mode::Write);
    fd = f.fd();
    EXPECT_TRUE(fd_is_open(fd));
    throw std::runtime_error("unwind");
  } catch (const std::runtime_error&) {
  }
  EXPECT_FALSE(fd_is_open(fd));
  std::remove(path.c_str());
}

TEST(File, MoveTransfersTheDescriptor) {
  static_assert(!std::is_copy_constructible_v<File>);
  const std::string path = temp_path("move");
  File a(path, File::Mode::Write);
  const int fd = a.fd();
  File b(std::move(a));
  EXPECT_FALSE(a.is_open());  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(b.fd(), fd);
  File c;
  c = std::move(b);
  EXPECT_EQ(c.fd(), fd);
  c.close();
  EXPECT_FALSE(fd_is_open(fd));
  EXPECT_THROW(c.write("x", 1), std::system_error);  // closed: clear error, no crash
  std::remove(path.c_str());
}
