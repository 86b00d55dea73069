// Rows of a channel-blocked tensor (NCHW8c: a row of n pixels of one 8-channel block is n x 8 floats) to and from
// eight NCHW rows, and the epilogue of a blocked row. For kernels whose arithmetic runs per channel plane (the
// Winograd transforms, the NCHW max pool) but whose neighbours keep the activations blocked. Compiled for AVX2
// where the CPU has it (8x8 transposes in registers; the baseline's SSE pairs went through the stack).
#pragma once
#include <cstdint>

#include "cpu/gemm/gemm.h"

namespace lite {

// dst + c * ld (c < 8): the n pixels of channel c of the blocked row src (n x 8 floats).
void BlockedRowToLines(const float* src, int64_t n, float* dst, int64_t ld);

// The blocked row dst (n x 8 floats) from eight lines of n pixels, src + c * ld for channel c.
void LinesToBlockedRow(const float* src, int64_t ld, int64_t n, float* dst);

// y[p][c] = act(y[p][c] + bias[c] + residual[p][c]) over a blocked row of n pixels; bias (8 values) and residual
// (laid out as y) may be null.
void BlockedRowEpilogue(float* y, int64_t n, const float* bias, const float* residual, EpilogueAct act);

// LinesToBlockedRow then BlockedRowEpilogue, the epilogue in registers (ReLU, ReLU6 or none; other activations as
// a second pass). residual must not overlap dst.
void StoreLinesAsBlockedRow(const float* src, int64_t ld, int64_t n, const float* bias, const float* residual,
                            EpilogueAct act, float* dst);

}  // namespace lite
