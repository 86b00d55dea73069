// 3x3 stride-1 convolution at precision bfloat16 by Winograd F(2x2, 3x3), on bf16 rows (pixel-major activations,
// core/bf16_pixel_layout.h) in and out.
//
// Each 2x2 tile of output pixels comes from a 4x4 tile of input: the input tile and the filter are transformed
// (V = B^T d B, U = G g G^T), multiplied elementwise over the 16 positions and summed over input channels, then
// transformed back (Y = A^T m A). The channel sums are 16 independent products, one per position ([tiles x C]
// transformed inputs times [C x M] transformed filters), 16 multiply-adds per tile and channel pair where direct
// convolution takes 36: 2.25x fewer. F(2x2, 3x3)'s transforms only add and halve (B and A hold 0 and +-1, G also
// 1/2), so rounding the transformed input and filter to bf16 costs about what rounding the input and filter does in
// the direct kernel; F(4x4, 3x3)'s constants (up to 8 and 1/24) would not survive bf16's 8-bit significand.
//
// With pixel-major rows every step runs across 16 channels in a vector and needs no transposition: the input
// transform reads a tile's 16 input rows and writes the 16 positions' rows of the tile's transformed channels; the
// products are the pixel-major kernel's register tiles (cpu/conv/pixel_depth_loop.h: 8 tiles x 32 channels, vdpbf16ps)
// over the transformed rows; the output transform reads a tile's 16 positions' sums and writes its 4 pixels' rows
// with the bias, the residual and ReLU/ReLU6 in registers. Tile rows are processed in chunks: small enough for L2
// where the transformed filters are small, as large as those (up to 4 MB) where they are not, since every chunk
// reads all of them again.
#pragma once
#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "cpu/aligned.h"
#include "cpu/gemm/bf16_gemm.h"
#include "cpu/conv/conv_geometry.h"

namespace lite {

class Bf16WinogradConv {
 public:
  static constexpr int64_t kPositions = 16;   // 4 x 4 transform positions

  // 3x3, stride 1, dilation 1, C a multiple of 16 from 32 to 1024, M a multiple of 32, output planes of 2x2 and up,
  // and a CPU with the bf16 kernels. Measured against the direct pixel-major kernel (one layer, one thread): 0.48-0.62x
  // the time with 64-1024 channels on 7x7 to 56x56 planes, 0.81x with 64-128 channels on 7x7 (the 4x4 tiles cover
  // 8x8), 0.85x at 32 channels; 1.13x at 16 channels in (so not there).
  static bool Supports(const ConvGeometry& g);

  // w: M x C x 3 x 3 float32, transformed (in double) and rounded to bf16 once.
  Bf16WinogradConv(const ConvGeometry& g, const float* w);

  // With `threads` threads: per worker, one chunk's transformed inputs and sums.
  size_t ScratchBytes(int threads) const;

  // y (bf16 rows of M) = act(conv(x) + bias + residual) for one image; x and residual bf16 rows (residual of M
  // channels, may be null; it may be y itself: each tile reads its pixels' residual before it writes them), act
  // None, ReLU or ReLU6. Writes y's row of zeros.
  void Run(const uint16_t* x, const float* bias, const uint16_t* residual, EpilogueAct act, uint16_t* y,
           void* scratch, ThreadPool* pool) const;

 private:
  int64_t ChunkTiles() const { return chunk_rows_ * tiles_w_; }
  size_t ChunkBytes() const;
  // Tile rows [ty0, ty0 + rows) through all three steps; with `pool` each step split over its threads.
  void RunChunk(const uint16_t* x, const float* bias, const uint16_t* residual, int clamp, uint16_t* y, int64_t ty0,
                int64_t rows, char* scratch, ThreadPool* pool) const;

  ConvGeometry g_;
  int64_t tiles_h_ = 0, tiles_w_ = 0;   // output tiles down and across
  int64_t chunk_rows_ = 0;              // tile rows a chunk transforms and multiplies together
  int64_t ld_in_ = 0, ld_out_ = 0;      // bf16 row strides of the input and output (and of the transformed rows)
  int64_t panels_ = 0;                  // 32-channel panels of M
  int64_t pairs_ = 0;                   // depth pairs: C / 2
  CacheLineVector<uint16_t> u_;         // per position, U's C x M in the bf16 GEMM's panels (Bf16PanelsB layout)
};

}  // namespace lite
