// Memory for weights laid out once at load (packed GEMM panels, code panels, bf16 pairs): blocks of 2 MB or more are
// mapped fresh, 2 MB-aligned, and advised into huge pages before they are first written (Linux transparent huge
// pages in "madvise" mode, a common default, then back them with 2 MB pages). A decode step streams every weight
// byte once; with 4 KB pages that is a TLB miss every 4 KB, and the page walks held one thread 15% (float32) to 40%
// (int8) below (llama.cpp's mapped weights sit in huge pages of the page cache). Fresh mappings matter: advice on
// memory malloc hands back after reuse comes too late, its pages already faulted in 4 KB.
#pragma once
#include <cstddef>
#include <new>
#include <vector>

#include "cpu/aligned.h"

namespace lite {

// Bytes from which weight storage is mapped on its own (smaller blocks come from operator new).
constexpr size_t kWeightMapBytes = size_t{2} << 20;

void* AllocateWeightBytes(size_t bytes);          // throws std::bad_alloc
void FreeWeightBytes(void* p, size_t bytes) noexcept;

template <typename T>
struct WeightAllocator {
  using value_type = T;
  WeightAllocator() = default;
  template <typename U>
  WeightAllocator(const WeightAllocator<U>&) {}   // NOLINT: allocators convert implicitly
  T* allocate(size_t n) { return static_cast<T*>(AllocateWeightBytes(n * sizeof(T))); }
  void deallocate(T* p, size_t n) noexcept { FreeWeightBytes(p, n * sizeof(T)); }
  template <typename U>
  bool operator==(const WeightAllocator<U>&) const { return true; }
  template <typename U>
  bool operator!=(const WeightAllocator<U>&) const { return false; }
};

template <typename T>
using WeightVector = std::vector<T, WeightAllocator<T>>;

}  // namespace lite
