// advise_huge_pages: ask Linux to back a fresh, untouched allocation with
// transparent huge pages. A new large output is dominated by first-touch
// page faults (one per 4 KiB page); with THP in "madvise" mode (the default
// on many distributions) the advice turns 512 faults into one. numpy does the
// same for its large arrays. Best effort: no-op elsewhere or on failure.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace tierkit {

inline constexpr std::size_t kHugePageAdviceMin = std::size_t{4} << 20;  // as numpy: 4 MiB

inline void advise_huge_pages(void* data, std::size_t size) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (data == nullptr || size < kHugePageAdviceMin) return;
  constexpr std::uintptr_t kHuge = std::uintptr_t{2} << 20;
  const auto begin = (reinterpret_cast<std::uintptr_t>(data) + kHuge - 1) & ~(kHuge - 1);
  const auto end = (reinterpret_cast<std::uintptr_t>(data) + size) & ~(kHuge - 1);
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
  (void)data;
  (void)size;
#endif
}

}  // namespace tierkit
