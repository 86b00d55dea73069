// Large (2 MiB) pages for big buffers: packed weights and the activation arena. A ResNet-50 streams ~100 MB of
// weights per inference and its convolutions read activation rows thousands of bytes apart; with 4 KiB pages
// both miss the TLB constantly (measured: ResNet-50 0.95-0.98x the time with large pages). Linux only, through
// transparent huge pages in "madvise" mode (the common default); elsewhere, or with LITE_LARGE_PAGES=0, plain
// 64-byte aligned memory.
#pragma once
#include <cstddef>
#include <cstdlib>
#include <new>

namespace lite {

constexpr size_t kLargePageBytes = size_t(2) << 20;

// Whether buffers of `bytes` get large pages (at least one whole large page, and not turned off).
bool WantsLargePages(size_t bytes);

// Memory for `bytes`, 64-byte aligned; when WantsLargePages, 2 MiB aligned and advised as huge-page memory
// before anything touches it. Release with std::free. Null on failure.
void* AllocateMaybeLarge(size_t bytes);

// std::vector allocator over AllocateMaybeLarge (packed weights).
template <typename T>
struct LargePageAllocator {
  using value_type = T;
  LargePageAllocator() = default;
  template <typename U>
  LargePageAllocator(const LargePageAllocator<U>&) {}
  T* allocate(size_t n) {
    void* p = AllocateMaybeLarge(n * sizeof(T));
    if (!p) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t) { std::free(p); }
  template <typename U>
  bool operator==(const LargePageAllocator<U>&) const { return true; }
  template <typename U>
  bool operator!=(const LargePageAllocator<U>&) const { return false; }
};

}  // namespace lite
