// Exception types shared by every tier. Bindings map them to their host's
// idioms: InvalidArgument -> ValueError, DTypeError -> TypeError,
// OutOfMemory (a std::bad_alloc) -> MemoryError.
#pragma once

#include <new>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace tierkit {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A value is unusable: wrong shape, overlap, bad alignment, out of bounds.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// An element type is not one the operation accepts.
class DTypeError : public Error {
 public:
  using Error::Error;
};

// An allocation could not be satisfied. Derives from std::bad_alloc so code
// that already handles allocation failure keeps working, but carries a
// message saying how much was asked for.
class OutOfMemory : public std::bad_alloc {
 public:
  explicit OutOfMemory(std::string message) : message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

namespace detail {
template <typename... Parts>
std::string concat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}
}  // namespace detail

// Throws E with the parts streamed together when `condition` is false.
// Its arguments are evaluated even when the check passes: pass only cheap
// parts (numbers, literals). A message part that costs something (a shape
// spelled out, a list of names) goes through `if (!ok) fail(...)`, which
// builds it only on the error path — these checks run on every call.
template <typename E = InvalidArgument, typename... Parts>
void check(bool condition, const Parts&... parts) {
  if (!condition) throw E(detail::concat(parts...));
}

template <typename E = InvalidArgument, typename... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  throw E(detail::concat(parts...));
}

}  // namespace tierkit
