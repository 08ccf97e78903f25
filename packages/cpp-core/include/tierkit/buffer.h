// Buffer: a move-only owner of one block of bytes. Either tierkit allocated
// it (aligned, freed with the matching free) or it wraps memory someone else
// owns, carrying the deleter that gives it back (as c10::DataPtr does); a
// Buffer never needs to know which.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <utility>

#include "tierkit/error.h"
#include "tierkit/huge_pages.h"

namespace tierkit {

inline constexpr std::size_t kDefaultAlignment = 64;

constexpr bool is_power_of_two(std::size_t x) { return x != 0 && (x & (x - 1)) == 0; }

class Buffer {
 public:
  // Called once with data() when the Buffer lets go of external memory.
  using Deleter = std::function<void(void*)>;

  Buffer() noexcept = default;

  // Allocates `size` bytes aligned to `alignment` (a power of two, at least
  // pointer-sized). Zero bytes is a valid, empty Buffer with a null data().
  explicit Buffer(std::size_t size, std::size_t alignment = kDefaultAlignment)
      : size_(size), alignment_(alignment) {
    check(is_power_of_two(alignment) && alignment >= sizeof(void*),
          "alignment: expected a power of two >= ", sizeof(void*), ", got ", alignment);
    if (size == 0) return;
    // aligned_alloc wants a size that is a multiple of the alignment.
    const std::size_t rounded = (size + alignment - 1) & ~(alignment - 1);
    if (rounded < size) throw OutOfMemory(detail::concat("Buffer: cannot allocate ", size, " bytes"));
    void* p = std::aligned_alloc(alignment, rounded);
    if (p == nullptr) {
      throw OutOfMemory(detail::concat("Buffer: cannot allocate ", size, " bytes aligned to ", alignment));
    }
    data_ = make_owned(p, [](void* q) { std::free(q); });
    advise_huge_pages(p, rounded);  // before anything touches the pages
  }

  // Wraps memory this Buffer does not allocate; `deleter(data)` runs when the
  // Buffer is destroyed or reset. `alignment` reports the largest power of
  // two dividing the address.
  static Buffer wrap(void* data, std::size_t size, Deleter deleter) {
    check(data != nullptr || size == 0, "data: expected non-null pointer for ", size, " bytes");
    Buffer b;
    b.size_ = size;
    b.alignment_ = data == nullptr ? kDefaultAlignment : address_alignment(data);
    if (data != nullptr) b.data_ = make_owned(data, std::move(deleter));
    return b;
  }

  Buffer(Buffer&& other) noexcept
      : data_(std::move(other.data_)),
        size_(std::exchange(other.size_, 0)),
        alignment_(std::exchange(other.alignment_, kDefaultAlignment)) {}

  Buffer& operator=(Buffer&& other) noexcept {
    if (this != &other) {
      data_ = std::move(other.data_);
      size_ = std::exchange(other.size_, 0);
      alignment_ = std::exchange(other.alignment_, kDefaultAlignment);
    }
    return *this;
  }

  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() = default;

  void* data() noexcept { return data_.get(); }
  const void* data() const noexcept { return data_.get(); }
  template <typename T>
  T* as() noexcept {
    return static_cast<T*>(data_.get());
  }
  template <typename T>
  const T* as() const noexcept {
    return static_cast<const T*>(data_.get());
  }
  // Number of whole T that fit.
  template <typename T>
  std::size_t count() const noexcept {
    return size_ / sizeof(T);
  }

  std::size_t size() const noexcept { return size_; }
  std::size_t alignment() const noexcept { return alignment_; }
  bool empty() const noexcept { return size_ == 0; }

  // Frees (or hands back) the memory now; the Buffer is then empty.
  void reset() noexcept { *this = Buffer(); }

  static std::size_t address_alignment(const void* p) noexcept {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    return a == 0 ? 0 : static_cast<std::size_t>(a & (~a + 1));
  }

 private:
  struct Release {
    Deleter fn;
    void operator()(void* p) const {
      if (fn) fn(p);
    }
  };
  using Owned = std::unique_ptr<void, Release>;
  static Owned make_owned(void* p, Deleter d) { return Owned(p, Release{std::move(d)}); }

  Owned data_{nullptr, Release{}};
  std::size_t size_ = 0;
  std::size_t alignment_ = kDefaultAlignment;
};

}  // namespace tierkit
