// Single-precision GEMM: packed, cache-blocked, register-tiled, multi-threaded, with a fused epilogue.
#pragma once
#include <cstdint>
#include <vector>

#include "cpu/weight_pages.h"
#include "core/thread_pool.h"

namespace lite {

// kGelu: erf form; kGeluTanh: its tanh approximation; kQuickGelu: x * sigmoid(1.702 x).
enum class EpilogueAct { kNone, kRelu, kRelu6, kSigmoid, kTanh, kHardSwish, kGelu, kSilu, kGeluTanh, kQuickGelu };

// Applied to each output tile right after its last product, while it is in L1:
// C = act(C + row_bias[i] + col_bias[j] + residual[i, j]) * multiplier[i, j].
struct GemmEpilogue {
  const float* row_bias = nullptr;   // one value per row of C (Conv output channels)
  const float* col_bias = nullptr;   // one value per column of C (FullyConnected)
  const float* residual = nullptr;   // an M x N matrix added before the activation (a residual branch)
  int64_t ld_residual = 0;
  EpilogueAct act = EpilogueAct::kNone;
  const float* multiplier = nullptr;   // an M x N matrix multiplied after the activation (a gated linear unit)
  int64_t ld_multiplier = 0;
};

// The activations the GEMM kernels (float32, bf16, integer) apply to a tile in registers, polynomials included; any
// other runs on the stored tile.
inline bool ActivationInRegisters(EpilogueAct act) {
  return act == EpilogueAct::kNone || act == EpilogueAct::kRelu || act == EpilogueAct::kRelu6 ||
         act == EpilogueAct::kGelu || act == EpilogueAct::kSilu;
}

// Register-tile geometry: B is consumed in panels of kGemmNR columns, k-major inside a panel.
constexpr int64_t kGemmNR = 16;
// Depth of one K block of a pre-packed B (PackBInto): the blocks lie one after another, each all N columns. 384 on
// x86-64 (a 384-deep product, Whisper-tiny's projections, one block: C written once; measured on a Xeon), 256 on ARM64,
// where a 6-row A panel and a 16-column B panel of 384 would not share a Cortex-A55's 32 KB L1.
#if defined(__aarch64__)
constexpr int64_t kGemmKC = 256;
#else
constexpr int64_t kGemmKC = 384;
#endif

// Produces blocks of op(B) on demand in the packed panel layout, so B never has to exist as a matrix
// (convolution packs straight from its input: implicit im2col).
class BPacker {
 public:
  virtual ~BPacker() = default;
  // Writes rows [k0, k0 + kc) x columns [n0, n0 + nc) as ceil(nc / kGemmNR) panels of kc x kGemmNR floats,
  // panel after panel; columns past nc in the last panel are zero.
  virtual void Pack(int64_t k0, int64_t kc, int64_t n0, int64_t nc, float* dst) const = 0;
  // Starts fetching part `part` of `parts` of the memory Pack(k0, kc, n0, nc) will read into L2, so packing
  // the next block does not stall on L3 or memory. Called once per register tile of the block before it.
  virtual void Prefetch(int64_t /*k0*/, int64_t /*kc*/, int64_t /*n0*/, int64_t /*nc*/, int64_t /*part*/,
                        int64_t /*parts*/) const {}
};

// C[M,N] = alpha * op(A) * op(B) + beta * C, then bias and activation.
// op(X) = X or X^T; lda/ldb/ldc are row strides of the matrices as stored. beta = 0 ignores C's contents.
// pool may be null (single-threaded).
void Sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc, const GemmEpilogue& epilogue,
           ThreadPool* pool);

// Packs op(A) (M x K, scaled by alpha) once, for repeated products with the same A (constant weights).
std::vector<float> PackAOnce(bool trans_a, int64_t M, int64_t K, float alpha, const float* A, int64_t lda);

// The PackAOnce layout written into caller-owned memory of PackedAFloats(M, K) floats.
int64_t PackedAFloats(int64_t M, int64_t K);
void PackAInto(bool trans_a, int64_t M, int64_t K, float alpha, const float* A, int64_t lda, float* dst);

// Sgemm with A pre-packed by PackAOnce (same M, K; alpha already applied).
void SgemmPackedA(const float* packed_a, int64_t M, int64_t N, int64_t K, bool trans_b, const float* B, int64_t ldb,
                  float beta, float* C, int64_t ldc, const GemmEpilogue& epilogue, ThreadPool* pool);

// Packs op(B) (K x N) once, for repeated products with the same B (constant weights).
WeightVector<float> PackBOnce(bool trans_b, int64_t K, int64_t N, const float* B, int64_t ldb);

// The PackBOnce layout written into caller-owned memory of PackedBFloats(K, N) floats (scratch arenas).
int64_t PackedBFloats(int64_t K, int64_t N);
void PackBInto(bool trans_b, int64_t K, int64_t N, const float* B, int64_t ldb, float* dst);

// Sgemm with B pre-packed by PackBOnce or PackBInto (same K, N).
void SgemmPackedB(bool trans_a, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                  const float* packed_b, float beta, float* C, int64_t ldc, const GemmEpilogue& epilogue,
                  ThreadPool* pool);

// C = A' * B' (or C += A' * B' with accumulate) with both operands pre-packed (PackAInto / PackBInto layouts),
// for fused kernels that pack once and multiply many small blocks: one thread, no epilogue, no work split, so
// a 256 x 96 x 64 product costs its register tiles and little else.
void SgemmPackedTiles(const float* packed_a, const float* packed_b, int64_t M, int64_t N, int64_t K, bool accumulate,
                      float* C, int64_t ldc);

// C = A' * B with A pre-packed by PackAOnce and B produced by `b` (K x N).
void SgemmPackedAWithPacker(const float* packed_a, int64_t M, int64_t N, int64_t K, const BPacker& b, float* C,
                            int64_t ldc, const GemmEpilogue& epilogue, ThreadPool* pool);

// C = act(alpha * op(A) * B + bias ...) with B produced by `b` (K x N) block by block, for weights kept compressed
// (cpu/gemm/skinny_gemm.h's PanelMatrixPacker: decoded into each packed block, never whole).
void SgemmWithBPacker(bool trans_a, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                      const BPacker& b, float beta, float* C, int64_t ldc, const GemmEpilogue& epilogue,
                      ThreadPool* pool);

// The micro-kernel ISA chosen for this CPU: "avx512f", "avx2+fma" or "portable".
const char* GemmIsa();

// Applies bias and activation to an M x N block of C in place.
void ApplyEpilogue(float* C, int64_t ldc, int64_t row0, int64_t rows, int64_t col0, int64_t cols,
                   const GemmEpilogue& e);

// Writes a tile of `rows` x kGemmNR sums (tile[r * kGemmNR + j], the first `cols` columns used; rewritten in place)
// into C's rows 0.. at column col0, after the epilogue (whose row 0 is C's). The epilogue runs on the tile, so its
// operands (a residual that may alias C) are read before C is written.
void StoreTileWithEpilogue(float* tile, int rows, int64_t col0, int64_t cols, float* C, int64_t ldc,
                           const GemmEpilogue& ep);

}  // namespace lite
