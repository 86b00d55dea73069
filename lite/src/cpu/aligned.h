// The first 64-byte boundary at or after a pointer: kernels that pad a std::vector by 16 floats and then read it
// in whole cache lines (a vector's own alignment is the allocator's 16 bytes).
#pragma once
#include <cstdint>

namespace lite {

template <typename T>
T* AlignTo64(T* p) {
  return reinterpret_cast<T*>((reinterpret_cast<uintptr_t>(p) + 63) & ~uintptr_t{63});
}

}  // namespace lite
