#include "cpu/simd/transpose_block.h"

#include "cpu/simd/simd.h"
#include "cpu/simd/transpose8x8.h"

namespace lite {

LITE_VECTOR_CLONES void TransposeBlock(const float* src, int64_t src_ld, int64_t rows, int64_t cols, float* dst,
                                       int64_t dst_ld) {
  int64_t r = 0;
  for (; r + 8 <= rows; r += 8) {
    int64_t c = 0;
    for (; c + 8 <= cols; c += 8) Transpose8x8(src + r * src_ld + c, src_ld, dst + c * dst_ld + r, dst_ld);
    for (; c < cols; ++c)
      for (int64_t i = 0; i < 8; ++i) dst[c * dst_ld + r + i] = src[(r + i) * src_ld + c];
  }
  for (; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * dst_ld + r] = src[r * src_ld + c];
}

}  // namespace lite
