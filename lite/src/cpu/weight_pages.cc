#include "cpu/weight_pages.h"

#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace lite {
namespace {

size_t RoundUp(size_t bytes) { return (bytes + kWeightMapBytes - 1) / kWeightMapBytes * kWeightMapBytes; }

}  // namespace

void* AllocateWeightBytes(size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (bytes >= kWeightMapBytes) {
    // Map 2 MB more than needed, keep the 2 MB-aligned part and return the rest, so huge pages can back all of it.
    const size_t size = RoundUp(bytes), span = size + kWeightMapBytes;
    void* base = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) throw std::bad_alloc();
    const uintptr_t start = reinterpret_cast<uintptr_t>(base);
    const uintptr_t aligned = (start + kWeightMapBytes - 1) & ~(uintptr_t{kWeightMapBytes} - 1);
    if (aligned > start) munmap(base, aligned - start);
    const uintptr_t tail = aligned + size, end = start + span;
    if (end > tail) munmap(reinterpret_cast<void*>(tail), end - tail);
    madvise(reinterpret_cast<void*>(aligned), size, MADV_HUGEPAGE);   // advice: refused, it is 4 KB pages
    return reinterpret_cast<void*>(aligned);
  }
#endif
  // 64-byte aligned: the kernels read weight panels in whole cache lines (operator new's 16 bytes made every 64-byte
  // load of a sub-2 MB panel straddle two lines).
  return ::operator new(bytes, std::align_val_t{kCacheLineBytes});
}

void FreeWeightBytes(void* p, size_t bytes) noexcept {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (bytes >= kWeightMapBytes) {
    munmap(p, RoundUp(bytes));
    return;
  }
#endif
  ::operator delete(p, std::align_val_t{kCacheLineBytes});
}

}  // namespace lite
