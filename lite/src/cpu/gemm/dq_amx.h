// Tall dynamic-quant products (prompts, prefill chunks) on AMX tiles, for CPUs with AMX-INT8.
//
// TDPBSSD multiplies signed int8 codes, 16 x 16 x 64 a tile instruction: the activations' codes (DqActivations, read
// in place) are its A; B is each task's weight panels staged once as signed bytes in a per-thread buffer (int8 codes
// less 128, int4 nibbles widened less 8: a DqWeights panel's 64-byte steps, 4 depth rows x 16 columns at byte 4j + r,
// are exactly AMX's B tile rows). Each block of depth (one activation scale) gets its own int32 tile sums, which become
// float32 as the AVX512-VNNI kernels' do, with the same operations in the same order, and the epilogue runs in
// registers as theirs: the outputs equal theirs bit for bit. Blocks of 64k depth values take 64-deep steps; blocks of
// 32 (int4's usual) 32-deep ones (half-depth A and B tiles, at half the rate: a tile product costs the same either way).
#pragma once
#include <cstdint>

#include "core/thread_pool.h"
#include "cpu/gemm/dynamic_quant_gemm.h"
#include "cpu/gemm/gemm.h"

namespace lite {

// Whether a product of `rows` rows with `w` runs here: AMX-INT8 (not turned off by LITE_CPU_ISA), more rows than the
// vector kernels' register tile (8), blocks of a multiple of 32 depth values.
bool DqAmxTakes(const DqWeights& w, int64_t rows);

// What DqAmxGemm needs of the activations' codes: rows `ld` bytes apart, a multiple of 64 at least the depth rounded
// up to the step, and whole 32-row blocks (the padding zero).
int64_t DqAmxCodesStride(const DqWeights& w);
constexpr int64_t kDqAmxRowAlign = 32;

// C[M, N] = epilogue(A x W) for a.rows rows quantised with the stride and row padding above. Requires DqAmxTakes.
void DqAmxGemm(const DqActivations& a, const DqWeights& w, float* C, int64_t ldc, const GemmEpilogue& ep,
               ThreadPool* pool);

}  // namespace lite
