// File: a move-only POSIX file descriptor that is closed on every path.
// Errors are std::system_error naming the path and the errno text.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <string>
#include <system_error>
#include <utility>

namespace tierkit {

class File {
 public:
  enum class Mode { Read, Write, Append, ReadWrite };

  File() = default;
  File(std::string path, Mode mode) : path_(std::move(path)) {
    int flags = O_CLOEXEC;
    switch (mode) {
      case Mode::Read: flags |= O_RDONLY; break;
      case Mode::Write: flags |= O_WRONLY | O_CREAT | O_TRUNC; break;
      case Mode::Append: flags |= O_WRONLY | O_CREAT | O_APPEND; break;
      case Mode::ReadWrite: flags |= O_RDWR | O_CREAT; break;
    }
    fd_ = ::open(path_.c_str(), flags, 0644);
    if (fd_ < 0) fail("open");
  }
  File(File&& other) noexcept : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}
  File& operator=(File&& other) noexcept {
    if (this != &other) {
      close_quietly();
      fd_ = std::exchange(other.fd_, -1);
      path_ = std::move(other.path_);
    }
    return *this;
  }
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File() { close_quietly(); }

  bool is_open() const noexcept { return fd_ >= 0; }
  int fd() const noexcept { return fd_; }
  const std::string& path() const noexcept { return path_; }

  // Reads up to n bytes; returns how many were read (0 at end of file).
  std::size_t read(void* out, std::size_t n) {
    require_open("read");
    for (;;) {
      const ssize_t got = ::read(fd_, out, n);
      if (got >= 0) return static_cast<std::size_t>(got);
      if (errno != EINTR) fail("read");
    }
  }

  // Writes all n bytes or throws.
  void write(const void* data, std::size_t n) {
    require_open("write");
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t put = ::write(fd_, p, n);
      if (put < 0) {
        if (errno == EINTR) continue;
        fail("write");
      }
      p += put;
      n -= static_cast<std::size_t>(put);
    }
  }

  std::size_t size() const {
    require_open("size");
    struct stat st{};
    if (::fstat(fd_, &st) != 0) fail("stat");
    return static_cast<std::size_t>(st.st_size);
  }

  // Closes now and reports a failed close (which can mean lost writes).
  void close() {
    if (fd_ < 0) return;
    const int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) fail("close");
  }

 private:
  void close_quietly() noexcept {
    if (fd_ >= 0) ::close(std::exchange(fd_, -1));
  }
  void require_open(const char* what) const {
    if (fd_ < 0)
      throw std::system_error(EBADF, std::generic_category(), std::string(what) + " on a closed File");
  }
  [[noreturn]] void fail(const char* what) const {
    const int err = errno;
    throw std::system_error(err, std::generic_category(), std::string(what) + " '" + path_ + "'");
  }

  int fd_ = -1;
  std::string path_;
};

}  // namespace tierkit
