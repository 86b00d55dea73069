// Direct 2-D convolution for one group, vectorised over output channels; input and output NCHW or channel-blocked.
//
// The register tile is 6-8 output pixels x two vectors of output channels. Per filter tap it loads two
// vectors of packed weights (aligned, sequential) and broadcasts the pixels' input values: 12 FMAs per 8 loads
// for 6 pixels, the GEMM micro-kernel's ratio, but with no im2col and no packing of the input. The height is the
// one that fits the plane (7 for 7x7 and 14x14 planes: no tile computes a repeated pixel). Each pixel of a
// tile keeps its own input pointer, so a tile may span output rows and any stride or dilation reads
// directly; padding is handled once by a zero-padded copy of the input (skipped when there is none).
// With the input never packed, this beats implicit-im2col GEMM on 3x3 and strided convolutions, whose
// packing costs as much as the products when the layer has few output channels. A channel-blocked input only
// changes the tap offsets (pixels 8 floats apart); a blocked output is the tile's rows stored 8 channels at a time.
// Between channel blocks (8 | C, 64 | M) on Intel AVX-512 CPUs the tile is wide instead: 6 pixels x 64 channels (24
// FMAs per 10 loads where 8 x 32 does 16 per 10), the depth in chunks of two input blocks with the sums carried
// between chunks (RunWide): ResNet-50's stride-2 and 7x7-plane 3x3 layers 0.75-0.93x the two-vector tile's time.
#pragma once
#include <cstdint>
#include <vector>

#include "cpu/aligned.h"
#include "cpu/conv/conv_geometry.h"

namespace lite {

class PixelTileConv2D : public GroupConvolution {
 public:
  static constexpr int64_t kMaxPixels = 12;   // output pixels per register tile, at most (AVX-512 one-vector tiles)

  // Packs w (M x C x KH x KW) once: into blocks of 2 vectors of output channels x every tap, or for the wide tiles
  // into 64-channel groups x 8-channel input blocks.
  PixelTileConv2D(const ConvGeometry& g, const float* w, ConvLayouts layouts = {});

  // Whether channel-blocked layers (8 | C, 64 | M) take the wide tiles on this CPU (see RunWide): AVX-512, Intel by
  // default (LITE_CONV_WIDE_TILES=0 / 1 decides on any CPU).
  static bool WideTilesAvailable();

  size_t ScratchBytes() const override;   // the zero-padded input copy (0 when there is no padding)
  void Run(const float* x, const float* bias, const float* residual, EpilogueAct act, float* y, float* scratch,
           ThreadPool* pool) const override;

 private:
  // Floats between neighbouring pixels of the input (and the channels of one of its planes): 8 when blocked.
  int64_t PixelStride() const { return layouts_.in_blocked ? 8 : 1; }
  // The padded copy (or x itself): what the tiles read.
  const float* PaddedInput(const float* x, float* scratch, ThreadPool* pool) const;
  void RunWide(const float* src, const float* bias, const float* residual, EpilogueAct act, float* y,
               ThreadPool* pool) const;

  ConvGeometry g_;
  ConvLayouts layouts_;
  int64_t lanes_ = 8;                // output channels per vector for the chosen ISA
  int64_t block_ = 16;               // output channels per register tile (2 vectors; 1 for layers of <= 1 vector)
  int64_t rows_ = 6;                 // output pixels per register tile
  int64_t Hp_ = 0, Wp_ = 0, K_ = 0;  // padded plane and taps
  bool padded_ = false;              // whether Run makes a zero-padded copy
  std::vector<float> packed_w_;      // [ceil(M / block)][K][block]
  std::vector<int64_t> tap_offset_;  // per tap k = (c, kh, kw): offset from a pixel's input origin
  // Wide tiles: 6 pixels x 64 output channels, the depth walked one 8-channel input block at a time.
  bool wide_ = false;
  CacheLineVector<float> wide_w_;       // [M / 64][C / 8][KH][KW][8][64]
  std::vector<int64_t> pixel_origin_;   // per output pixel: its input origin in the padded blocked plane
};

}  // namespace lite
