// bfloat16 GEMM for Context precision_mode "preferred_bf16" on CPUs with AVX512_BF16 (or ARM BF16): both operands
// rounded to bf16 (round to nearest even), products of depth pairs summed in float32 by vdpbf16ps (bfdot), the
// epilogue (bias, residual, activation) in float32. Where the CPU has AMX-BF16 the same layouts feed tile products
// (TDPBF16PS, 32 x 32 per step of 16 pairs). Twice the float32 FMA rate per instruction, half the operand
// bytes. The same layouts hold IEEE float16 values for "preferred_fp16" (HalfFormat::kFp16) on ARM64 CPUs with FP16
// arithmetic: products summed in float16 (fmla .8h), 32 depth pairs at a time, each run of them then added into
// float32 sums; and on x86 CPUs with AVX512-FP16: vfmadd231ph on broadcast depth pairs (a float16 lane per depth of
// a pair), 64 pairs a run, then float32.
#pragma once
#include <cstdint>
#include <vector>

#include "cpu/weight_pages.h"
#include "core/thread_pool.h"
#include "cpu/gemm/gemm.h"

namespace lite {

// Whether this CPU runs the bf16 kernels (AVX512_BF16 or ARM BF16, not capped by LITE_CPU_ISA).
bool Bf16GemmAvailable();
// The 16-bit format of the packed operands: bfloat16, or IEEE float16.
enum class HalfFormat { kBf16, kFp16 };
// Whether this CPU runs the float16 kernels (ARM64 with FP16 arithmetic or x86 with AVX512-FP16, not capped by
// LITE_CPU_ISA).
bool Fp16GemmAvailable();
// float32 -> IEEE float16, rounding to nearest even (overflow to infinity, NaN stays NaN); and back.
uint16_t FloatToFp16(float x);
float Fp16ToFloat(uint16_t h);
// n floats (times alpha) in `format` into out, zeros up to n_padded.
void FloatsToHalves(const float* x, int64_t n, int64_t n_padded, uint16_t* out, HalfFormat format, float alpha = 1.f);

// float32 -> bf16, rounding to nearest even (as vcvtne2ps2bf16); a NaN stays a (quiet) NaN.
uint16_t FloatToBf16(float x);
float Bf16ToFloat(uint16_t h);
// n floats (times alpha) as bf16 (nearest even) into out, zeros up to n_padded (vectorised where the bf16 kernels
// run).
void FloatsToBf16(const float* x, int64_t n, int64_t n_padded, uint16_t* out, float alpha = 1.f);

constexpr int64_t kBf16NR = 32;   // columns per B panel: two 16-lane vectors

// B (K x N, a constant weight) in the kernel's layout: ceil(N / 32) panels of ceil(K / 2) depth pairs, each pair
// 32 columns x 2 values (column j's k and k + 1 side by side); padding is zero.
// mmla (ARM64 BF16, bf16 values: what PackBf16B makes there): each two pairs (2i, 2i + 1) of a panel re-laid for
// bfmmla, the 16-column halves one after the other, in each 8 column pairs of [column 2c's 4 depths][column
// 2c + 1's]; an odd last pair keeps the pair layout. The panel's size and the pairs' place in it are the same.
struct Bf16PanelsB {
  int64_t K = 0, N = 0, pairs = 0;
  HalfFormat format = HalfFormat::kBf16;
  bool mmla = false;
  WeightVector<uint16_t> data;
};
// Whether products in `format` run on AMX tiles here (bf16 with AMX-BF16; else the vector kernels).
bool Bf16ProductsOnAmx(HalfFormat format);
Bf16PanelsB PackBf16B(bool trans_b, int64_t K, int64_t N, const float* B, int64_t ldb,
                      HalfFormat format = HalfFormat::kBf16);
// The same from 16-bit values of `format` (K x N row-major, their raw bits): a weight the file stores as bfloat16
// (float16), laid out as is.
Bf16PanelsB PackBf16BFromHalves(int64_t K, int64_t N, const uint16_t* B, HalfFormat format = HalfFormat::kBf16);
// Whether the bf16 products take B in the bfmmla layout (ARM64 with BF16); PackBf16B packs bf16 values so there.
bool BfmmlaAvailable();
// B re-laid into the bfmmla layout (mmla, where BfmmlaAvailable() and its values are bf16) or back into depth pairs:
// the same products either way, bit for bit (bfmmla sums a column's pairs in the order bfdot does).
void SetBfmmlaOrder(Bf16PanelsB& b, bool mmla);

// A (M x K, a constant weight: Conv's filters) as bf16 rows of ld = K rounded up to even values, zero-padded; where
// AMX takes bf16 products, in its tile order instead (amx_steps > 0 steps of 32 depth values: 32-row blocks of 1 KiB
// tiles, zeros past M and K).
struct Bf16RowsA {
  int64_t M = 0, K = 0, ld = 0, amx_steps = 0;
  HalfFormat format = HalfFormat::kBf16;
  std::vector<uint16_t> data;
};
Bf16RowsA ToBf16Rows(int64_t M, int64_t K, const float* A, int64_t lda, HalfFormat format = HalfFormat::kBf16);

// C[M, N] = act(alpha op(A) B + bias + residual) (beta 0), or C += ... (beta 1), B packed once (MatMul, Gemm).
void Bf16GemmPackedB(bool trans_a, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                     const Bf16PanelsB& b, float beta, float* C, int64_t ldc, const GemmEpilogue& ep,
                     ThreadPool* pool);

// C[M, N] = act(A B + bias + residual) with A the bf16 weight rows and B produced block by block by `b` (Conv: the
// implicit im2col of its input), or read from a K x N matrix (B, ldb: a pointwise Conv's input).
void Bf16GemmRowsA(const Bf16RowsA& a, int64_t N, const BPacker& b, float* C, int64_t ldc, const GemmEpilogue& ep,
                   ThreadPool* pool);
void Bf16GemmRowsA(const Bf16RowsA& a, int64_t N, const float* B, int64_t ldb, float* C, int64_t ldc,
                   const GemmEpilogue& ep, ThreadPool* pool);

// B produced block by block in the Bf16PanelsB layout by its owner: a weight stored in another form (int4 codes and
// their scales) decoded per task, so it is read from memory in its compact form and never held whole as bf16.
class Bf16PanelPacker {
 public:
  virtual ~Bf16PanelPacker() = default;
  // Rows [k0, k0 + kc) x columns [n0, n0 + nc) (k0 a multiple of 32, n0 of 32) as ceil(nc / 32) panels of
  // ceil(kc / 2) depth pairs, panel after panel; values past kc, past nc and past the weight's K are zero.
  virtual void Pack(int64_t k0, int64_t kc, int64_t n0, int64_t nc, uint16_t* dst) const = 0;
};

// C[M, N] = epilogue(A B) with A float32 (rounded to bf16 once per product) and B from `b`, block by block (every
// value of B made once per product). Requires Bf16GemmAvailable().
void Bf16GemmPackerB(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const Bf16PanelPacker& b,
                     float* C, int64_t ldc, const GemmEpilogue& ep, ThreadPool* pool);

// Rows up to which Bf16SkinnyGemm takes a product (ConstantMatrix: a decode step).
constexpr int64_t kBf16SkinnyMaxRows = 8;
// C[M, N] = epilogue(A B) for M <= kBf16SkinnyMaxRows (cpu/gemm/bf16_skinny_gemm.cc): A rounded to bf16 once, each 64 bytes
// of B's panels read once for all rows (vdpbf16ps). Requires Bf16GemmAvailable().
void Bf16SkinnyGemm(int64_t M, const float* A, int64_t lda, const Bf16PanelsB& b, float* C, int64_t ldc,
                    const GemmEpilogue& ep, ThreadPool* pool);

// C[M, N] = A B, or C += A B with `accumulate`, on the calling thread (attention's products): A bf16 rows (lda
// values apart, the depth K padded to an even count with zeros), or with a_tiles A in AMX tile order (AmxTileOrder;
// lda unused); B in the Bf16PanelsB layout: ceil(N / 32) panels of ceil(K / 2) depth pairs at b_panels (the padding
// zero).
void Bf16GemmPanelsInline(const uint16_t* a, int64_t lda, int64_t M, int64_t K, const uint16_t* b_panels,
                          int64_t N, bool accumulate, float* C, int64_t ldc, bool a_tiles = false);

// AMX tile order for a bf16 A operand (where CpuHasAmxBf16()): 32-row blocks, each ceil(K / 32) steps of two 16-row
// x 32-value tiles (1 KiB each); values past K zero. AmxTileValues: its size for `rows` rows; AmxTileOrder: rows
// [0, rows) of x (ldx apart, times alpha) into it (rows past `rows` in the last block left as they are: never stored
// by the products).
int64_t AmxTileValues(int64_t rows, int64_t K);
void AmxTileOrder(const float* x, int64_t rows, int64_t K, int64_t ldx, float alpha, uint16_t* tiles);

}  // namespace lite
