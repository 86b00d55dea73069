// A 2-D depthwise convolution (one KxK filter per channel, constant weights) at precision bfloat16 between bf16 rows
// (core/bf16_pixel_layout.h: pixel-major, Bf16PixelConv::Bf16RowStride(C) values a pixel, then a row of zeros):
// channels are the vector dimension, each output pixel sums its taps' input rows read in place (padding taps read the
// zero row) on bf16 dot products of tap pairs (vdpbf16ps) or float32 FMAs (weights rounded to bf16, float32 sums),
// then bias and ReLU / ReLU6 and the result rounded to bf16 rows. So a MobileNet block's expansion, depthwise and
// projection all keep bf16 rows, which the pixel-major bf16 Convs read and write: half the bytes of the float32
// channel-blocked tensors the depthwise layers otherwise pulled the chain into (and no conversion of each
// projection's input).
#pragma once
#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "cpu/aligned.h"
#include "cpu/conv/conv_geometry.h"

namespace lite {

class Bf16RowsDepthwise {
 public:
  // g.C == g.M channels, a multiple of 8 (whole bf16 row blocks), 2-D, on a CPU with the bf16 kernels (AVX512_BF16).
  static bool Supports(const ConvGeometry& g);

  // Which form the products take: float32 FMAs on two channels' halves of each 32-bit lane on Intel cores (measured
  // faster there), tap pairs on vdpbf16ps elsewhere; LITE_BF16_DEPTHWISE=fma|pairs picks one on any CPU.
  static bool FmaForm();

  // w: C x KH x KW float32.
  Bf16RowsDepthwise(const ConvGeometry& g, const float* w);

  // y = act(depthwise(x) + bias) for one image, x and y bf16 rows (each with its row of zeros after the pixels);
  // clamp 0 none, 1 ReLU, 2 ReLU6. bias may be null.
  void Run(const uint16_t* x, const float* bias, int clamp, uint16_t* y, ThreadPool* pool) const;

 private:
  ConvGeometry g_;
  int64_t chunks_ = 0, pairs_ = 0;   // 32-channel chunks; pairs of taps (an odd last one with a zero weight)
  bool fma_ = false;                 // the float32-FMA form (FmaForm), else tap pairs on vdpbf16ps
  CacheLineVector<uint16_t> w_;      // pairs: bf16 weight pairs [pair][chunk][64] (the kernel's lane order)
  CacheLineVector<float> w32_;       // FMA: bf16-rounded weights as float32 [tap][chunk][32] (even, then odd channels)
};

}  // namespace lite
