// 3x3 stride-1 convolution by Winograd F(4x4, 3x3) or F(2x2, 3x3) across channel blocks (NCHW8c), with the channel
// sums as products of the tiles by the weights. Either side may be NCHW instead: a band of its rows is converted
// to or from blocks per chunk of tile rows (8x8 transposes), the epilogue applied to the NCHW rows.
//
// The arithmetic is WinogradConv3x3's (the same transforms, the same 36 positions), laid out the other way round:
// - the transforms run across the 8 channels of a block, one tile at a time: a tile's 6 x 6 input pixels are 36
//   vectors of the blocked input as it lies (no rows transposed into channel lines, no column phases), and its 4 x 4
//   output pixels are stored straight into the output's blocks with the bias, residual and activation applied;
// - the channel sums of a position are [tiles x C] transformed inputs times [C x M] transformed filters (packed as a
//   GEMM's B once): the tiles are the broadcast side and the filters the vector side, so a 6 x 64 register tile
//   takes 6 broadcasts and 4 filter vectors for 24 FMAs. WinogradConv3x3 broadcasts the filters against vectors of
//   tiles: with ResNet-50's 16-49 tiles per plane its 12 x 16 and 6 x 32 tiles spent a broadcast for every one or two
//   FMAs (measured on a Xeon: the same products 0.66 against 0.82 ms on 14x14 x 256, 0.40 against 0.62 on 28x28 x
//   128).
//
// Tiles are taken in chunks whose transformed inputs and sums stay in L2 (or in one chunk past it where streaming the
// transformed filters once per chunk would cost more: wide layers on small planes). Threads take bands of chunks where
// each gets 16+ tiles and the transformed filters are at most 64 KiB a tile; otherwise they split each step
// (ResNet-50's 14x14 layers: their 4.2 MB of transformed filters then streams once, half to each thread).
#pragma once
#include <cstdint>

#include "cpu/conv/conv_geometry.h"
#include "cpu/weight_pages.h"

namespace lite {

class WinogradBlockedConv3x3 : public GroupConvolution {
 public:
  // Whether Winograd layers with whole 8-channel blocks take this kernel rather than WinogradConv3x3 (see the .cc).
  static bool Enabled();
  // 3x3, stride 1, dilation 1, any padding; input and output channels in whole blocks of 8.
  static bool Supports(const ConvGeometry& g);

  // Transforms and packs w (M x C x 3 x 3) once. tile: 4 for F(4x4, 3x3) (36 positions), 2 for F(2x2, 3x3) (16
  // positions: 2.25x fewer products than direct summation where F(4x4) has 4x, and 16/36 of its transformed filters).
  // layouts: which sides are channel-blocked; an NCHW side is converted a band of rows at a time (chunks of whole
  // tile rows), residual laid out as the output.
  WinogradBlockedConv3x3(const ConvGeometry& g, const float* w, int tile = 4,
                         ConvLayouts layouts = ConvLayouts{true, true});

  size_t ScratchBytes() const override;
  // x: [C/8][H][W][8] or NCHW; y, residual: [M/8][OH][OW][8] or NCHW (as the layouts say).
  void Run(const float* x, const float* bias, const float* residual, EpilogueAct act, float* y, float* scratch,
           ThreadPool* pool) const override;

 private:
  // A chunk of tiles [t0, t0 + n) and its buffers (in the work area): transformed inputs v ([n][positions][C]), sums q
  // ([n][positions][M]); where a side is NCHW, the blocked band of its rows (input rows [in_r0, in_r1), output rows
  // [out_r0, out_r1)) and the chunk's first tile row ty0.
  struct Chunk {
    int64_t t0 = 0, n = 0, ty0 = 0, in_r0 = 0, in_r1 = 0, out_r0 = 0, out_r1 = 0;
    float *v = nullptr, *q = nullptr, *in_band = nullptr, *out_band = nullptr;
  };
  // Whether a side is NCHW: chunks are then whole tile rows, converted a band of rows at a time.
  bool Bands() const { return !layouts_.in_blocked || !layouts_.out_blocked; }
  // With `threads` threads, whether each takes a band of tiles through all three steps rather than every step split.
  bool SplitsByTiles(int64_t threads) const;
  Chunk ChunkOf(int64_t t0, int64_t n, float* work) const;
  // Tiles [t0, t0 + n) through all three steps on one thread; work: WorkFloats() floats.
  void RunTiles(const float* x, const float* bias, const float* residual, EpilogueAct act, float* y, int64_t t0,
                int64_t n, float* work) const;
  // The chunk's transformed inputs for input blocks [b0, b1).
  void InputTiles(const float* x, const Chunk& c, int64_t b0, int64_t b1) const;
  // The channel sums of positions [p0, p1): q[p] = v[p] x the position's filters.
  void Products(const Chunk& c, int64_t p0, int64_t p1) const;
  // Output blocks [b0, b1) of the chunk's tiles from their sums, epilogue applied.
  void OutputTiles(const Chunk& c, int64_t b0, int64_t b1, const float* bias, const float* residual, EpilogueAct act,
                   float* y) const;
  int64_t InBandFloats() const;
  int64_t OutBandFloats() const;
  int64_t WorkFloats() const {
    return positions_ * chunk_tiles_ * (g_.C + g_.M) + InBandFloats() + OutBandFloats();
  }

  ConvGeometry g_;
  ConvLayouts layouts_;
  int tile_ = 4;                       // output pixels per tile side
  int64_t positions_ = 36;             // (tile + 2)^2 transform positions
  int64_t tiles_h_ = 0, tiles_w_ = 0;  // output tiles down and across
  int64_t chunk_tiles_ = 0;            // tiles transformed and multiplied together
  WeightVector<float> packed_u_;   // per position (u_stride_ apart): the transformed filters (C x M) as a packed B
  int64_t u_stride_ = 0;
};

}  // namespace lite
