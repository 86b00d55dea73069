// 3x3 stride-1 convolution for one group by Winograd F(4x4, 3x3); input and output NCHW or channel-blocked.
//
// Each 4x4 tile of output pixels comes from a 6x6 tile of input: the input tile and the filter are
// transformed (B^T d B, G g G^T), multiplied elementwise over the 36 positions and summed over input
// channels, then transformed back (A^T m A). The channel sums are 36 independent GEMMs, one per position
// ([M x C] transformed filters, packed once, times [C x tiles] transformed inputs), so the products cost
// 36 multiply-adds per tile and channel pair instead of 144: 4x fewer than direct convolution.
//
// The transforms run vectorised across a row of tiles: input rows are split into four column phases
// (x = 4t + j), so every operand of a transform is a contiguous run over t. Tile rows are processed in
// chunks so the transformed inputs and products of a chunk stay within a few MiB.
//
// A channel-blocked input is transposed row by row into eight channel lines before the split into column phases; a
// blocked output takes eight channels' tiles at a time, each output row transposed back into the blocked row.
//
// Threads: with 16+ tiles each (ResNet-50's 56x56 and 28x28 layers at two threads), each thread takes a band of
// whole tile rows through all three steps, reading and writing its own part of the plane as the layers around
// it do. Smaller planes (14x14: 8 tiles each, where both threads would read all 9 MB of transformed filters)
// split each step instead: input channels, positions, output channels.
//
// Float32 rounding: the transforms' constants (up to 8 and 1/24) cost about 1e-5 to 1e-4 of the output's
// scale against direct summation; Supports() keeps it to layers where it measures faster.
#pragma once
#include <cstdint>
#include <vector>

#include "cpu/conv/conv_geometry.h"
#include "cpu/gemm/bf16_gemm.h"

namespace lite {

class WinogradConv3x3 : public GroupConvolution {
 public:
  static constexpr int64_t kTile = 4;        // output pixels per tile side
  static constexpr int64_t kPositions = 36;  // 6 x 6 transform positions

  // 3x3, stride 1, dilation 1, any padding.
  static bool Supports(const ConvGeometry& g);

  // Transforms and packs w (M x C x 3 x 3) once.
  // half (ARM64 with FP16 arithmetic / BF16, compute precision float16 / bfloat16): the 36 products on the
  // float16 / bf16 GEMM (the transformed filters as rows of `format`, each position's transformed inputs converted per
  // block), the transforms in float32.
  WinogradConv3x3(const ConvGeometry& g, const float* w, ConvLayouts layouts = {}, bool half = false,
                  HalfFormat format = HalfFormat::kFp16);
  // Whether `half` takes effect here for `format`: ARM64 with FP16 / BF16 (x86 keeps float32 products here: its bf16
  // models run Bf16WinogradConv between bf16 rows; its AVX512-FP16 is not measured with this).
  static bool HalfProductsAvailable(HalfFormat format = HalfFormat::kFp16);

  size_t ScratchBytes() const override;
  void Run(const float* x, const float* bias, const float* residual, EpilogueAct act, float* y, float* scratch,
           ThreadPool* pool) const override;

 private:
  // With `threads` threads, whether each takes whole tile rows (enough tiles each) rather than every step split.
  bool SplitsByRows(int64_t threads) const;
  // Tile rows [ty0, ty0 + rows): transforms, products and the output with its epilogue; scratch: ScratchBytes().
  void RunChunk(const float* x, const float* bias, const float* residual, EpilogueAct act, float* y, int64_t ty0,
                int64_t rows, float* scratch, ThreadPool* pool) const;

  ConvGeometry g_;
  ConvLayouts layouts_;
  int64_t tiles_h_ = 0, tiles_w_ = 0;  // output tiles down and across
  int64_t lanes_ = 0;                  // tiles of a row rounded up to whole vectors (transform width)
  int64_t phase_len_ = 0;              // floats per column phase of a split input row (>= tiles_w_ + 1)
  int64_t chunk_rows_ = 0;             // tile rows transformed and multiplied together
  std::vector<std::vector<float>> packed_u_;   // per position: the transformed filters as a packed GEMM A
  std::vector<Bf16RowsA> half_u_;              // half: per position, the transformed filters as float16 / bf16 rows
};

}  // namespace lite
