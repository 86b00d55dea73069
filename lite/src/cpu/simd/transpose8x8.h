// 8x8 float transposes in GCC vector registers (v8sf shuffles): always inline, so they compile in the caller's ISA
// (AVX2 where the caller has the target attribute; SSE pairs on the baseline).
#pragma once
#include <cstdint>
#include <cstring>

namespace lite {

typedef float v8sf_t __attribute__((vector_size(32)));

__attribute__((always_inline)) inline v8sf_t LoadV8(const float* p) {
  v8sf_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// dst[c] (c < 8) = column c of the 8x8 block whose row r starts at src + r * src_stride; each destination
// row at its own address (8 pixels spread over short rows).
__attribute__((always_inline)) inline void Transpose8x8To(const float* src, int64_t src_stride, float* const* dst) {
  v8sf_t r[8], t[8], u[8];
  for (int i = 0; i < 8; ++i) r[i] = LoadV8(src + i * src_stride);
  for (int i = 0; i < 8; i += 2) {
    t[i] = __builtin_shufflevector(r[i], r[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
    t[i + 1] = __builtin_shufflevector(r[i], r[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = __builtin_shufflevector(t[i], t[i + 2], 0, 1, 8, 9, 4, 5, 12, 13);
    u[i + 1] = __builtin_shufflevector(t[i], t[i + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    u[i + 2] = __builtin_shufflevector(t[i + 1], t[i + 3], 0, 1, 8, 9, 4, 5, 12, 13);
    u[i + 3] = __builtin_shufflevector(t[i + 1], t[i + 3], 2, 3, 10, 11, 6, 7, 14, 15);
  }
  for (int i = 0; i < 4; ++i) {
    const v8sf_t lo = __builtin_shufflevector(u[i], u[i + 4], 0, 1, 2, 3, 8, 9, 10, 11);
    const v8sf_t hi = __builtin_shufflevector(u[i], u[i + 4], 4, 5, 6, 7, 12, 13, 14, 15);
    std::memcpy(dst[i], &lo, sizeof(v8sf_t));
    std::memcpy(dst[i + 4], &hi, sizeof(v8sf_t));
  }
}

// dst row c (c < 8) = column c of the 8x8 block whose row r starts at src + r * src_stride.
__attribute__((always_inline)) inline void Transpose8x8(const float* src, int64_t src_stride, float* dst,
                                                        int64_t dst_stride) {
  float* rows[8];
  for (int i = 0; i < 8; ++i) rows[i] = dst + i * dst_stride;
  Transpose8x8To(src, src_stride, rows);
}

}  // namespace lite
