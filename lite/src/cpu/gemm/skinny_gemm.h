// Products of a few rows with a constant weight: a decoding step's tokens (one per sequence) times a layer's
// weight. With so few rows the product is bound by reading the weight, not by arithmetic, so here the weight is
// read exactly once, front to back in the order it lies in memory, in the form it is stored in (float16 or
// bfloat16 halves, int8 or int4 codes with scales), and widened to float32 in registers.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cpu/weight_pages.h"
#include "core/thread_pool.h"
#include "cpu/gemm/gemm.h"
#include "format/weight_storage.h"

namespace lite {

// Rows up to which a product takes the skinny path (every row's accumulators stay in registers).
constexpr int64_t kSkinnyMaxRows = 8;

enum class PanelCodes { kFloat16, kBFloat16, kInt8, kInt4 };

// A K x N weight as ceil(N / 16) panels of K rows x 16 columns, each panel contiguous (columns past N are zero),
// with its scales: value(k, n) = scale(g, n) * (code(k, n) - zero(g, n)) for the group g = k / group of rows.
// int8 codes are signed (unsigned ones are shifted at build time, their zero points with them); int4 codes are
// unsigned (code + 8) in octets of 8 rows x 16 columns, 64 bytes, one 32-bit lane per column, and their scales and
// zero points are those of the values 1 + code/16 the kernels widen them to.
struct PanelMatrix {
  PanelCodes codes = PanelCodes::kInt8;
  int64_t K = 0, N = 0, panels = 0;
  int64_t group = 0, groups = 0;   // rows per scale and their count (halves: K and 1, no scales)
  int64_t row_bytes = 0;           // bytes of one row of a panel: 32 halves, 16 int8 codes (int4: 64 per 8 rows)
  int64_t panel_bytes = 0;
  WeightVector<uint8_t> data;      // panel p at p * panel_bytes (+ 64 bytes of slack past the last)
  std::vector<float> scales;       // [panels][groups][16]; empty for halves
  std::vector<float> zeros;        // the same; empty when every zero point is `zero`
  float zero = 0.f;                // the one zero point of every entry (symmetric int4: 1.5), when they are equal
  const uint8_t* panel(int64_t p) const { return data.data() + p * panel_bytes; }
  size_t bytes() const { return data.size() + (scales.size() + zeros.size()) * sizeof(float); }
};

// Whether a stored K x N record can be laid out as panels: halves, or int8/int4 codes with one scale per tensor,
// per column, or per block of rows of each column (blocks along K, axis 0). Other layouts (blocks along N)
// return a reason.
std::string PanelMatrixUnsupported(const StoredWeight& w);
PanelMatrix MakePanelMatrix(const StoredWeight& w);

// The scales and zero points of such an int8/int4 record per (16-column panel, group of rows, column), laid out
// [panels][groups][16] with zeros past N; each zero point raised by `offset` (the codes' move to unsigned or
// signed values). `zeros` is left empty when every zero point is `zero` (a scalar: a float per block less to read).
struct PanelScales {
  std::vector<float> scales, zeros;
  float zero = 0.f;
};
PanelScales ReadPanelScales(const StoredWeight& w, int64_t panels, int64_t groups, int32_t offset);

// C[M, N] = epilogue(A[M, K] x W) for M <= kSkinnyMaxRows.
void SkinnyGemm(int64_t M, const float* A, int64_t lda, const PanelMatrix& w, float* C, int64_t ldc,
                const GemmEpilogue& epilogue, ThreadPool* pool);

// The same with a float32 B packed by PackBOnce / PackBInto (K blocks of kGemmKC rows, 16-column panels).
void SkinnyGemmPackedB(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* packed_b, float* C,
                       int64_t ldc, const GemmEpilogue& epilogue, ThreadPool* pool);

// Decodes blocks of a PanelMatrix into the GEMM's panel layout, for products of many rows (a prompt).
class PanelMatrixPacker : public BPacker {
 public:
  explicit PanelMatrixPacker(std::shared_ptr<const PanelMatrix> w) : w_(std::move(w)) {}
  void Pack(int64_t k0, int64_t kc, int64_t n0, int64_t nc, float* dst) const override;
  const PanelMatrix& matrix() const { return *w_; }

 private:
  std::shared_ptr<const PanelMatrix> w_;
};

}  // namespace lite
