#include "cpu/large_pages.h"

#include <cstdlib>
#include <cstring>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace lite {

bool WantsLargePages(size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  static const bool enabled = [] {
    const char* v = std::getenv("LITE_LARGE_PAGES");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return enabled && bytes >= kLargePageBytes;
#else
  (void)bytes;
  return false;
#endif
}

void* AllocateMaybeLarge(size_t bytes) {
  const size_t rounded = bytes ? (bytes + 63) / 64 * 64 : 64;
  if (!WantsLargePages(rounded)) return std::aligned_alloc(64, rounded);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  const size_t whole = (rounded + kLargePageBytes - 1) / kLargePageBytes * kLargePageBytes;
  void* p = std::aligned_alloc(kLargePageBytes, whole);
  // Advice only: where THP is off ("never") the pages stay small and nothing else changes.
  if (p) ::madvise(p, whole, MADV_HUGEPAGE);
  return p;
#else
  return std::aligned_alloc(64, rounded);
#endif
}

}  // namespace lite
