// A float matrix transposed by 8x8 register blocks (cpu/simd/transpose8x8.h) with scalar edges.
#pragma once
#include <cstdint>

namespace lite {

// dst (cols x rows, dst_ld apart) = src (rows x cols, src_ld apart) transposed. Cloned per ISA so the blocks use
// 256-bit shuffles where the CPU has them (0.5x the time of SSE pairs).
void TransposeBlock(const float* src, int64_t src_ld, int64_t rows, int64_t cols, float* dst, int64_t dst_ld);

}  // namespace lite
