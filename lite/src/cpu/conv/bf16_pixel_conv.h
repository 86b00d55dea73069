// A 2-D convolution (one group, constant weights) at precision bfloat16, computed pixel-major with no column
// matrix: the input is rounded once per run into a pixel-major bf16 copy (pixel p's C channels side by side, plus
// one row of zeros for padding taps), unless it is stored so already (bf16 rows, core/bf16_pixel_layout.h), and
// every register tile of 7-8 output pixels x 32 output channels reads, per tap, each pixel's row of that copy in
// place (an offset table built at prepare says which input pixel a tap of an output pixel reads, or the zero row)
// against the weights packed once as bf16 panels (tap-major depth). Output channels are the vector dimension, so no
// tile computes padding columns whatever the plane's size (the channel-major bf16 GEMM computed 224 columns for a
// 14x14 plane's 196 and 64 for 7x7's 49), and nothing is packed per run but the input copy. Tiles group output
// pixels by the taps they lose to the padding, and skip the taps that are padding for all their rows. Stems (1-4
// input channels) read a copy with the padding in it, one contiguous run per filter row. The tile writes 8-channel
// blocks straight into a channel-blocked output (NCHW8c, core/channel_blocked_layout.h) or into scratch that one
// transposing pass turns into NCHW, or bf16 rows; bias, the residual and ReLU/ReLU6 are applied in registers
// (an NCHW output's activation and NCHW residual in its transposing pass), other activations in a pass after.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "core/thread_pool.h"
#include "cpu/gemm/bf16_gemm.h"
#include "cpu/conv/conv_geometry.h"
#include "cpu/conv/pixel_tiling.h"

namespace lite {

// How Bf16PixelConv finds an activation: NCHW float32, channel-blocked float32 (NCHW8c), or bf16 rows (the
// input copy's own format, core/bf16_pixel_layout.h: per image OH x OW rows of Bf16RowStride(C) values, then a row
// of zeros).
enum class PixelStorage { kNchw, kBlocked, kBf16Rows };

// Rows [h0, h1) of an NCHW float32 input of 2-4 channels (H x W planes) as bf16 pixels of C values each (nhwc, `out`
// at row h0), rounded to nearest even: a stem's input as oneDNN's nhwc bf16 convolution reads it.
void FewChannelsToNhwcBf16(const float* x, int64_t C, int64_t H, int64_t W, int64_t h0, int64_t h1, uint16_t* out);

class Bf16PixelConv {
 public:
  // The row stride (values) and the bytes per image of an activation of C channels and HW pixels as bf16 rows.
  static int64_t Bf16RowStride(int64_t C);
  static size_t Bf16RowsBytes(int64_t C, int64_t HW);

  // Output channels a multiple of 8 (whole blocks); input channels too, or at most 4 (a stem's, without dilation
  // along the width); offsets of the input copy within int32, and a CPU with the bf16 kernels (Bf16GemmAvailable).
  static bool Supports(const ConvGeometry& g);

  // w: M x C x KH x KW float32, packed (rounded to bf16) once.
  Bf16PixelConv(const ConvGeometry& g, const float* w);

  // The input copy (unless the input is bf16 rows already: rows_in), an NCHW output's blocked result before its
  // transposition (with nchw_out), and the partial sums between depth blocks (kept in register order: two plain
  // loads and stores per tile row; ResNet-50 bf16 0.973x the time of accumulating in the output's blocked layout).
  size_t ScratchBytes(bool rows_in, bool nchw_out) const;

  // y (M x OH x OW) = act(conv(x) + bias + residual) for one image, each stored as `in`, `res`, `out` say. bias
  // and residual may be null. bf16 rows out need act None, ReLU or ReLU6 (the values are rounded in registers) and x
  // in general form (8-channel multiples: bf16 rows never hold a stem's input). An NCHW residual beside another
  // output is gathered in the tiles (a graph input as the first block's residual: without, its one NCHW tensor
  // pulled every block of the chain back to NCHW).
  void Run(const void* x, PixelStorage in, const float* bias, const void* residual, PixelStorage res, EpilogueAct act,
           void* y, PixelStorage out, void* scratch, ThreadPool* pool) const;

  bool amx() const { return amx_; }   // on AMX tiles (else vdpbf16ps)

 private:
  void BuildFewChannels(const float* w);
  size_t InputCopyBytes(bool rows_in) const;
  size_t StagingBytes(bool nchw_out) const;
  size_t PartialBytes() const;
  void ToPixelMajor(const float* x, bool in_blocked, uint16_t* xp, ThreadPool* pool) const;
  // The blocked result yb as NCHW y, with the epilogue's residual (NCHW) and activation per block.
  void BlockedToNchw(const float* yb, float* y, const GemmEpilogue& ep, ThreadPool* pool) const;

  ConvGeometry g_;
  int64_t P_ = 0, taps_ = 0;
  bool few_channels_ = false;      // 1-4 input channels: a padded copy, a segment per filter row (BuildFewChannels)
  bool amx_ = false;               // AMX tiles of up to 32 pixels (AmxPixelTile) instead of the vdpbf16ps ones
  uint32_t few_last_mask_ = 0xFFFFFFFFu;   // ANDed into each segment's last pair (an odd run of values)
  int64_t few_run_pairs_ = 0;   // AMX stems: each segment's pairs, its weights padded to 16-pair steps (units)
  int64_t off_stride_ = 0;         // offsets per output pixel: one per tap, or per filter row with few channels
  std::vector<int32_t> pixel_of_;  // [position]: the output pixel computed there (tiles group pixels by padding)
  std::vector<PixelTileSpan> tiles_;
  std::vector<int32_t> offsets_;   // [position][tap]: the value offset of the input row it reads
  int32_t zero_row_ = 0;           // the offset of the row of zeros after the input's pixels
  std::vector<PixelDepthBlock> blocks_;   // units: channel pairs
  // AMX tiles: per [tile][offset column], whether every row reads the zero row and, per 16-row half, the bytes
  // between its rows' inputs where they lie evenly apart (0: gathered). Fixed by the geometry, so made once here
  // rather than per tile and depth block (scanning 64 offsets per tap held ResNet-50 bf16's 64-channel 3x3 Convs).
  std::vector<AmxTapRows> tap_rows_;
  Bf16PanelsB w_;                  // W^T (taps x C by M), depth k = tap * C + c
};

}  // namespace lite
