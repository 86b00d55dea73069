// A 2-D depthwise convolution (one KxK filter per channel, constant symmetric int8 weights) on uint8 activation
// codes, pixel-major: channels are the vector dimension (16 per register), each output pixel sums its taps' input
// rows read in place from uint8 rows (core/u8_pixel_layout.h) or a copy of an NCHW input, padding taps skipped. The
// products (code - zero point) x weight code are summed in float32, exactly: 9 of them stay far below 2^24. The
// epilogue dequantises (input scale x weight scale per channel, bias), applies ReLU / ReLU6 and requantises to uint8
// rows, NCHW codes or float32, as the pixel-major Conv (cpu/quantized/u8_pixel_conv.h) does; so FULL_QUANT MobileNets keep
// uint8 codes from each block's expansion through its projection.
#pragma once
#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "cpu/aligned.h"
#include "cpu/conv/conv_geometry.h"
#include "cpu/quantized/qgemm.h"
#include "cpu/quantized/u8_pixel_conv.h"

namespace lite {

class U8DepthwiseConv {
 public:
  // g.C == g.M channels, 2-D. AVX-512 VNNI CPUs run it in 16-channel vectors, others in plain C++.
  static bool Supports(const ConvGeometry& g);
  // 3- or 5-wide filters at stride 1 or 2, up to 32 taps: the AVX-512 kernel's slide form (each input pixel widened
  // once per filter row, the zero point folded into the sums' start).
  static bool Slides(const ConvGeometry& g);

  // codes: C x KH x KW int8, scales: one per channel.
  U8DepthwiseConv(const ConvGeometry& g, const int8_t* codes, const float* scales);

  void Bind(ActQuant in, const float* bias);

  size_t ScratchBytes(U8Storage in, U8PixelOut out) const;

  // y = act(dequant(depthwise(x)) + bias) for one image; x uint8 codes in `in` storage; clamp 1 ReLU, 2 ReLU6.
  void Run(const uint8_t* x, U8Storage in, int clamp, void* y, U8PixelOut out, ActQuant oq, void* scratch,
           ThreadPool* pool) const;

 private:
  ConvGeometry g_;
  int64_t Cp_ = 0;                 // channels rounded up to 16
  CacheLineVector<float> w_;       // [tap][Cp_]: the weight codes as floats
  std::vector<float> scales_;      // per channel (Cp_)
  ActQuant in_;
  std::vector<float> mult_, bias_;  // from Bind (Cp_ each)
  std::vector<float> zp_sum_;       // from Bind: -input zero point x the channel's weight sum (Cp_)
};

}  // namespace lite
