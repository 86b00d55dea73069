// Pointwise (1x1, stride 1, unpadded) convolution reading a channel-blocked input (NCHW8c, see
// core/channel_blocked_layout.h), writing either layout.
//
// The register tile is 6 pixels x 16 output channels, as in the GEMM micro-kernel, but nothing is packed per
// run: with 8 channels of a pixel side by side, the 6 pixels' inputs for one channel block are 48 floats in a
// row, so every input load is a broadcast from a line that the tile's other loads share. A blocked output is
// stored straight from the registers (two vectors per pixel); a plain NCHW output goes through a transposed
// copy. On MobileNetV2's projection layers (large K, 16-160 output channels) this beats packing the input
// for the GEMM; its real gain is downstream, where the depthwise kernel reads the blocks without transposes.
#pragma once
#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "cpu/aligned.h"
#include "cpu/gemm/gemm.h"

namespace lite {

class BlockedPointwiseConv {
 public:
  static constexpr int64_t kPixels = 6;     // pixels per register tile
  static constexpr int64_t kChannels = 16;  // output channels per register tile (two 8-channel blocks)

  // w: M x C (C and M multiples of 8), packed once into [ceil(M / 16)][C][16]; with bf16 (compute precision
  // bfloat16, AVX512_BF16 CPUs) as bf16 pairs [ceil(M / 16)][C / 2][16][2] instead, and each run converts the
  // blocked input to bf16 once and multiplies with vdpbf16ps (12 pixels x 16 channels, float32 sums).
  // With fp16 (compute precision float16) on ARM64 CPUs with FP16 arithmetic (HalfTilesAvailable): float16 weights
  // [ceil(M / 16)][C][16], 4 pixels x 16 channels on fmla .8h, the input converted per tile, float16 sums of at most
  // 64 products added into float32; residual and activations as in float32. On AVX512-FP16 CPUs: float16 weights as
  // pairs of input channels [ceil(M / 16)][C / 2][16][2], the input converted to float16 once per run, 12 pixels x 32
  // channels on vfmadd231ph, float16 sums of at most 64 products a lane (128 channels) added into float32.
  BlockedPointwiseConv(int64_t C, int64_t M, const float* w, bool bf16 = false, bool fp16 = false);
  static bool HalfTilesAvailable();
  // Whether the float16 tiles run a C -> M layer at precision float16: on ARM64 wherever they are available; on
  // AVX512-FP16 from 32 channels in and out (below that, MobileNetV2's 16-24-channel layers on 112x112 and 56x56
  // planes, the per-run conversion of the input outweighs the products: 1.05-1.7x the float32 tiles' time).
  static bool UseHalfTiles(int64_t C, int64_t M);
  // "blocked_pointwise", with "_bf16" / "_fp16" where the reduced-precision tiles run (profiles).
  const char* Name() const {
    return bf16_ ? "blocked_pointwise_bf16" : fp16_ ? "blocked_pointwise_fp16" : "blocked_pointwise";
  }

  // x: N images of C channels x P pixels, blocked. y: M x P per image, blocked when out_blocked, else NCHW.
  // y = act(conv(x) + bias + residual); bias and residual may be null; the residual is laid out as y (float32
  // only: a bf16 instance takes none).
  void Run(int64_t N, int64_t P, const float* x, const float* bias, EpilogueAct act, bool out_blocked, float* y,
           ThreadPool* pool, const float* residual = nullptr) const;

 private:
  void RunBf16(int64_t N, int64_t P, const float* x, const float* bias, EpilogueAct act, bool out_blocked, float* y,
               ThreadPool* pool) const;
  void RunFp16(int64_t N, int64_t P, const float* x, const float* bias, EpilogueAct act, bool out_blocked, float* y,
               ThreadPool* pool, const float* residual) const;
  void RunFp16X86(int64_t N, int64_t P, const float* x, const float* bias, EpilogueAct act, bool out_blocked,
                  float* y, ThreadPool* pool, const float* residual) const;

  int64_t C_, M_;
  bool bf16_ = false;
  bool fp16_ = false;
  CacheLineVector<float> packed_w_;
  CacheLineVector<uint16_t> packed_w16_;   // bf16 pairs, or float16 values (fp16_)
};

}  // namespace lite
