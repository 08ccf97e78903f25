// Reads a fuzzer's bytes as small integers, choices and values; past the end
// every read gives 0, so every input is a valid (if dull) case.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace tierkit_fuzz {

class Input {
 public:
  Input(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}

  std::uint8_t byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  // An integer in [lo, hi].
  std::int64_t in(std::int64_t lo, std::int64_t hi) {
    const std::uint16_t r = static_cast<std::uint16_t>(byte() | (byte() << 8));
    return lo + static_cast<std::int64_t>(r % static_cast<std::uint64_t>(hi - lo + 1));
  }
  bool flag() { return byte() & 1; }
  // Raw bits for a value of `bytes` bytes (any pattern: NaNs, subnormals, infinities).
  void bits(void* out, std::size_t bytes) {
    auto* p = static_cast<std::uint8_t*>(out);
    for (std::size_t i = 0; i < bytes; ++i) p[i] = byte();
  }
  std::size_t left() const { return size_ - pos_; }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

}  // namespace tierkit_fuzz
