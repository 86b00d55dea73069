// Products with int8/int4-stored weights in integer arithmetic (Context dynamic_quant, on CPUs with AVX512-VNNI or AVX2):
// each row of the activations is quantised on the fly to int8, symmetrically, one scale per block of depth values
// (the weight's own blocks of rows, or blocks of kDqColumnBlock when its scales are per column or per tensor), and
// vpdpbusd multiplies 64 code pairs an instruction into int32 sums, which become float32 once per block:
//   y[m, n] = sum over blocks b of  sa[m, b] * sw[b, n] * (sum_k a[m, k] * u[k, n]  -  z[b, n] * sum_k a[m, k])
// with a the activation codes, u the weight codes as unsigned values and z their (unsigned) zero point. This is the
// scheme of llama.cpp's Q8_0 activations and ONNX Runtime's MatMulNBits accuracy level 4: the weight codes are read
// as they are stored (int4 as nibbles, widened by a mask and a shift), four times the multiply rate of float32
// FMAs for prompts and batches, and for int4 the decode step's arithmetic drops below its memory traffic. AVX2 CPUs
// run the same sums with vpmaddubsw + vpmaddwd on 256-bit registers (dynamic_quant_gemm.cc says how they stay exact).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "cpu/weight_pages.h"
#include "core/thread_pool.h"
#include "cpu/gemm/gemm.h"
#include "format/weight_storage.h"

namespace lite {

// Depth values per activation scale when the weight has no blocks of rows (per-column or per-tensor scales).
constexpr int64_t kDqColumnBlock = 128;

// Whether this CPU runs these kernels (AVX512-VNNI, or AVX2 below it; LITE_CPU_ISA=portable turns them off).
bool DqGemmAvailable();

// LITE_DQ_TALL_PRODUCTS, read once ("" when unset): how products of more than 8 rows run, overriding the CPU's choice
// ("integer", "float": dq_float_prompts.h, "bf16": dq_bf16_prompts.h).
const std::string& DqTallProductsOverride();

// A K x N weight as ceil(N / 16) panels of 16 columns, each contiguous: int8 codes as 4 rows x 16 columns in 64
// bytes (byte 4j + r: row r of column j, unsigned: code + 128); int4 codes as 8 rows x 16 columns in 64 bytes (byte
// 4j + r: row r in its low nibble, row 4 + r in its high one, unsigned: code + 8). Rows past K are zero.
struct DqWeights {
  int bits = 8;
  int64_t K = 0, N = 0, panels = 0;
  int64_t block = 0, blocks = 0;   // depth values per activation scale (a multiple of 8) and their count
  int64_t panel_bytes = 0;
  WeightVector<uint8_t> data;      // panel p at p * panel_bytes
  int64_t scale_groups = 1;        // blocks (the weight's scales per block) or 1 (one scale per column for all)
  std::vector<float> scales;       // [panels][scale_groups][16]
  std::vector<float> zeros;        // unsigned zero points, laid out as scales; empty when every one is `zero`
  float zero = 0.f;
  const uint8_t* panel(int64_t p) const { return data.data() + p * panel_bytes; }
  size_t bytes() const { return data.size() + (scales.size() + zeros.size()) * sizeof(float); }
};

// Why a stored K x N record cannot take this path ("" when it can): int8/int4 codes per tensor, per column or per
// block of rows (a multiple of 8 rows); anything else keeps the float32-activation path.
std::string DqWeightsUnsupported(const StoredWeight& w);
DqWeights MakeDqWeights(const StoredWeight& w);

// C[M, N] = epilogue(A[M, K] x W), A quantised per row and block as above (any M: rows in chunks of 8 share each
// weight panel while it is in cache). Requires DqGemmAvailable(). A block holding a NaN or an infinity makes its
// row's outputs NaN. Where DqTallProductInFloat (dq_float_prompts.h: int8 codes, more than 8 rows, a CPU whose integer
// multiplies are no faster than its FMAs) the product is the float32 GEMM's on the decoded weight instead; where
// DqTallProductInBf16 (dq_bf16_prompts.h: int4 codes, 32 rows or more, AMX-BF16) the bf16 tiles' on the decoded
// weight and the activations rounded to bf16 (a non-finite activation then reaches the outputs as in a float
// product: +-Inf, or NaN where it meets a zero weight or an opposite infinity).
void DqGemm(int64_t M, const float* A, int64_t lda, const DqWeights& w, float* C, int64_t ldc,
            const GemmEpilogue& epilogue, ThreadPool* pool);

// The activation side, exposed for tests of the scheme: row m's codes (K rounded up to 8, zero-padded), and per
// block its scale and the sum of its codes. codes = round-half-even(x / scale), scale = max |x| / 127.
struct DqActivations {
  int64_t rows = 0, ld = 0, blocks = 0;
  std::vector<int8_t> codes;   // from its first 64-byte boundary (`first`): AMX tile rows that straddle two cache
  int64_t first = 0;           // lines load at a third of the rate
  std::vector<float> scale;    // [rows][blocks]
  std::vector<int32_t> sum;    // [rows][blocks]
  const int8_t* row(int64_t m) const { return codes.data() + first + m * ld; }
  int8_t* row(int64_t m) { return codes.data() + first + m * ld; }
};
// Rows are split over `pool`'s threads where there are enough of them. `ld` > 0: the codes' row stride (at least K
// rounded up to 8); `row_align`: rows of zero codes added up to its multiple (the AMX tiles read whole 32-row blocks).
void QuantizeActivations(int64_t M, int64_t K, const float* A, int64_t lda, int64_t block, DqActivations* out,
                         ThreadPool* pool = nullptr, int64_t ld = 0, int64_t row_align = 1);

}  // namespace lite
