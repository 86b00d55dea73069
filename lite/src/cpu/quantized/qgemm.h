// 8-bit integer GEMM for quantised MatMul/Gemm/Conv: uint8 activation codes x int8 weight codes, int32 sums,
// dequantised to float32 in the tile epilogue (scale, zero-point correction, bias; then activation/residual).
//
// Weights are symmetric per output channel with codes in [-64, 63] (7 bits): on AVX2 the kernel multiplies with
// vpmaddubsw, whose int16 pair sums saturate beyond 32767; 255 * 64 * 2 = 32640 never does, so the integer
// result is exact (ONNX Runtime's reduce_range makes the same trade on CPUs without VNNI).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "core/thread_pool.h"
#include "cpu/gemm/gemm.h"

namespace lite {

constexpr int kQWeightMin = -64, kQWeightMax = 63;
// Weights within [-32, 31] ("narrow": 6-bit codes, int4 codes) let the AVX2 tile add the int16 pair sums of two
// depth groups before widening them (255 * 32 * 2 * 2 = 32640 still fits): three multiply-port operations per 64
// products instead of four.
constexpr int kQNarrowMin = -32, kQNarrowMax = 31;
constexpr int64_t kQgemmNR = 16;   // columns per packed panel

// q = clamp(round(x * (1 / scale)) + zero_point, 0, 255) (ONNX QuantizeLinear with a uint8 output, but with the
// reciprocal's multiply for the division: the two differ by an ulp, a code only at an exact half).
struct ActQuant {
  float scale = 1.f;
  int32_t zero_point = 0;
};

// y as a uint8 code of q: round half to even, saturated to [0, 255], NaN to 0 (the integer kernels' epilogues do the
// same on 16 lanes: cpu/quantized/requantize_avx512.h).
uint8_t QuantizeValue(float y, ActQuant q);

// The asymmetric uint8 parameters covering [lo, hi] (widened to include 0, so zero is exact).
ActQuant ChooseActQuant(float lo, float hi);
// Min and max of x (n > 0); NaNs are ignored.
void MinMax(const float* x, int64_t n, float* lo, float* hi, ThreadPool* pool);
// Quantises rows of x (rows x cols, row stride ldx) into out (row stride ldo); columns [cols, ldo) get zero_point.
void QuantizeRowsU8(const float* x, int64_t rows, int64_t cols, int64_t ldx, ActQuant q, uint8_t* out, int64_t ldo,
                    ThreadPool* pool);

// K rounded up to the 4 values one 32-bit lane multiplies.
inline int64_t QDepth4(int64_t K) { return (K + 3) / 4 * 4; }

// Int8 weights of `outputs` channels x `depth` values, in the layout the kernels read.
struct QWeights {
  int64_t outputs = 0, depth = 0, depth4 = 0;
  int64_t block = 0;                 // > 0: one scale per `block` depth values of an output (int4 groups)
  bool as_b = false;                 // packed as B panels (MatMul/Gemm) or as A rows (Conv)
  bool narrow = false;               // every code within [kQNarrowMin, kQNarrowMax]
  bool mmla = false;                 // as_b on ARM I8MM: each pair of depth groups laid out for smmla (see PackQWeights)
  std::vector<int8_t> codes;         // as_b: panels of kQgemmNR outputs x depth4, 4 values per output in turn
  std::vector<float> scale;          // per block (block-major: [block][output]) or per output channel
  std::vector<int32_t> sums;         // the sums of those codes (zero-point correction), laid out as scale
  int64_t blocks() const { return block > 0 ? (depth + block - 1) / block : 1; }
};

// Packs codes given as code(output o, depth k) = codes[o * so + k * sk]; `scales` holds one value per output,
// or with block > 0 (a multiple of 4, as_b only) blocks() x outputs values, block-major. Throws
// std::invalid_argument when a code lies outside [kQWeightMin, kQWeightMax].
QWeights PackQWeights(const int8_t* codes, int64_t outputs, int64_t depth, int64_t so, int64_t sk,
                      const float* scales, bool as_b, int64_t block = 0);

// Writes 4 rows of 16 bytes (k = 0..3) as one 64-byte panel group: 16 columns x their 4 values in turn.
void InterleaveK4(const uint8_t* r0, const uint8_t* r1, const uint8_t* r2, const uint8_t* r3, uint8_t* dst);

// Bytes of the B panels for depth K, N columns (activation panels of the Conv orientation).
inline int64_t QPanelBytes(int64_t K, int64_t N) { return QDepth4(K) * ((N + kQgemmNR - 1) / kQgemmNR) * kQgemmNR; }

// MatMul orientation: C[M, N] = dequant(A[M, K] x W^T) with A the uint8 codes of the activations (row stride
// lda >= depth4, the padding columns holding aq.zero_point) and W packed as_b. Bias (N floats) may be null;
// ep's residual and activation apply after dequantisation (its biases must be null).
void QgemmActByWeights(int64_t M, const uint8_t* a, int64_t lda, ActQuant aq, const QWeights& w, const float* bias,
                       float* C, int64_t ldc, const GemmEpilogue& ep, ThreadPool* pool);
// Which path QgemmActByWeights takes for (w, ep) here (profiles): "qgemm_amx" / "qgemm_vnni" (AMX or AVX-512 VNNI
// tiles, the epilogue in registers), else "qgemm" (the general tiles).
const char* QgemmActByWeightsName(const QWeights& w, const GemmEpilogue& ep);

// Uint8 codes in place of QgemmWeightsByAct's float32 output and/or residual (activations a file carries quantised).
struct QuantizedIO {
  uint8_t* out = nullptr;              // set: the output as codes of out_quant (row stride ldc); C is not written
  ActQuant out_quant;
  const uint8_t* residual = nullptr;   // set: the residual addend as codes of residual_quant (row stride ld_residual)
  int64_t ld_residual = 0;
  ActQuant residual_quant;
  bool active() const { return out != nullptr || residual != nullptr; }
};

// Conv orientation: C[M, N] = dequant(W x B) with W packed as rows (outputs = M) and B the uint8 activation codes
// packed as panels (QPanelBytes(K, N) bytes). Bias (M floats) may be null. With `q` the output is requantised to
// uint8 (after the residual and the activation) and/or the residual read from uint8 codes. On ARM I8MM CPUs the
// panels are re-laid in place for smmla (their contents are the caller's scratch afterwards).
void QgemmWeightsByAct(const QWeights& w, int64_t N, uint8_t* b_panels, ActQuant aq, const float* bias, float* C,
                       int64_t ldc, const GemmEpilogue& ep, ThreadPool* pool, const QuantizedIO& q = {});

// QgemmWeightsByAct with the activation panels built as the product goes: pack(p0, p1, dst) writes panels
// [p0, p1) (QPanelBytes layout, the first at dst). On VNNI CPUs with enough columns for the threads, each task packs
// its own 4 panels into an L1-sized buffer and multiplies them by every weight row (no whole-plane panel buffer
// written out to L2/L3 and read back); otherwise all panels are packed into `panels` (QPanelBytes(w.depth, N)
// bytes) first.
void QgemmWeightsByActPacking(const QWeights& w, int64_t N, const std::function<void(int64_t, int64_t, uint8_t*)>& pack,
                              uint8_t* panels, ActQuant aq, const float* bias, float* C, int64_t ldc,
                              const GemmEpilogue& ep, ThreadPool* pool, const QuantizedIO& q = {});

// The Conv epilogue after dequantisation, on a tile of `rows` rows of kQgemmNR floats (the first `cols` used; rewritten
// in place): residual (float32 from ep or uint8 codes from q), activation, then float32 into C or uint8 codes into
// q.out, at rows row0 + r and columns col0 + j (row stride ldc; the residual's ep.ld_residual / q.ld_residual).
void FinishQuantizedRows(float* tile, int rows, int64_t cols, int64_t row0, int64_t col0, const GemmEpilogue& ep,
                         const QuantizedIO& q, float* C, int64_t ldc);

}  // namespace lite
