// Cache-line alignment for kernel buffers. std::vector's memory is the allocator's 16 bytes aligned (a block over
// malloc's mmap threshold sits 16 bytes past a page), so a 64-byte vector load from it straddles two lines: the
// float32 GEMM's tiles ran 10-20% slower on B panels so placed (Intel Xeon, AVX-512).
#pragma once
#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

namespace lite {

constexpr size_t kCacheLineBytes = 64;

// The first 64-byte boundary at or after a pointer: kernels that pad a std::vector by 16 floats and then read it
// in whole cache lines.
template <typename T>
T* AlignTo64(T* p) {
  return reinterpret_cast<T*>((reinterpret_cast<uintptr_t>(p) + 63) & ~uintptr_t{63});
}

// An allocator whose blocks start on a 64-byte boundary.
template <typename T>
struct CacheLineAllocator {
  using value_type = T;
  static constexpr std::align_val_t kAlignment{kCacheLineBytes};
  CacheLineAllocator() = default;
  template <typename U>
  CacheLineAllocator(const CacheLineAllocator<U>&) {}   // NOLINT: allocators convert implicitly
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlignment)); }
  void deallocate(T* p, size_t) noexcept { ::operator delete(p, kAlignment); }
  template <typename U>
  bool operator==(const CacheLineAllocator<U>&) const { return true; }
  template <typename U>
  bool operator!=(const CacheLineAllocator<U>&) const { return false; }
};

// A std::vector whose data() is 64-byte aligned: packed panels and tiles that kernels read a cache line at a time.
template <typename T>
using CacheLineVector = std::vector<T, CacheLineAllocator<T>>;

}  // namespace lite
