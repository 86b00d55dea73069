// A 2-D convolution of one group with constant weights, computed pixel-major: Y^T (P x M) = cols^T (P x K) *
// W^T (K x M), with W^T packed once as the GEMM's B, then Y^T transposed into the NCHW output with bias,
// residual and activation. For small output planes (ResNet-50's 14x14 and 7x7 stages): the channel-major product
// (M x P, pixels as columns) packs the input as B on every run, and with 49 pixels its last register tile
// computes 32 columns for 17 (0.77 of its FMAs useful); pixel-major, the weights are the pre-packed operand
// and every column tile is whole (output channels are multiples of 32).
#pragma once
#include <cstdint>
#include <vector>

#include "cpu/gemm/bf16_gemm.h"
#include "cpu/conv/conv_geometry.h"

namespace lite {

class PixelMajorConv : public GroupConvolution {
 public:
  // Packs w (M x C x KH x KW) as the K x M matrix W^T, once: for the float32 GEMM, or with bf16 for the bf16 one
  // (precision bfloat16: the columns are rounded to bf16 as the product reads them).
  PixelMajorConv(const ConvGeometry& s, const float* w, bool bf16 = false, HalfFormat format = HalfFormat::kBf16);

  size_t ScratchBytes() const override;   // Y^T, and the column matrix unless the input is read in place
  void Run(const float* x, const float* bias, const float* residual, EpilogueAct act, float* y, float* scratch,
           ThreadPool* pool) const override;

 private:
  bool OneTap() const;   // 1x1 without padding: the columns are the input's (sampled) pixels
  // 1x1, stride 1: the input (C x P) is cols^T already, read as a transposed A.
  bool InputIsColumns() const;
  void SampleStrided(const float* x, float* sampled, ThreadPool* pool) const;
  void BuildColumns(const float* x, float* pixels, float* cols, ThreadPool* pool) const;

  ConvGeometry s_;
  int64_t K_ = 0, P_ = 0;
  WeightVector<float> packed_wt_;
  Bf16PanelsB bf16_wt_;   // in place of packed_wt_ at precision bfloat16
  bool bf16_ = false;
};

}  // namespace lite
