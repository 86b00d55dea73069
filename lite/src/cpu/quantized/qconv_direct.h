// Direct 8-bit integer convolution on AVX-512 VNNI CPUs: no im2col.
//
// The uint8 input is copied once into a padded, channel-quad layout: 4 channels of a pixel side by side (the operand
// vpdpbusd multiplies), the borders holding the zero point; with stride S the padded plane is split into S x S
// phases (rows and columns by their index mod S), so every tap reads a phase at unit stride. Output pixels are
// numbered on the phase width (f = oh * Wq + ow, the columns past each output row computed and dropped), so tap
// (kh, kw) of 16 consecutive outputs is 64 contiguous bytes of one phase plane, at f + (kh / S) * Wq + kw / S: the
// kernel reads its B operand in place. The weights are reordered tap-major (depth = taps x channel quads). The sums
// are the same exact integers as the im2col path's; the dequantisation and epilogue are shared with it
// (FinishQuantizedRows).
#pragma once
#include <cstdint>

#include "core/thread_pool.h"
#include "cpu/gemm/gemm.h"
#include "cpu/quantized/qgemm.h"

namespace lite {

struct QDirectGeometry {
  int64_t C = 0, H = 0, W = 0;               // input channels and plane
  int64_t KH = 0, KW = 0, pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  int64_t SH = 1, SW = 1;                    // strides
  int64_t Hp() const { return H + pad_top + pad_bottom; }
  int64_t Wp() const { return W + pad_left + pad_right; }
  int64_t OH() const { return (Hp() - KH) / SH + 1; }
  int64_t OW() const { return (Wp() - KW) / SW + 1; }
  int64_t Hq() const { return (Hp() + SH - 1) / SH; }   // a phase plane's rows and columns
  int64_t Wq() const { return (Wp() + SW - 1) / SW; }
  int64_t quads() const { return (C + 3) / 4; }
  // Pixels per phase plane: the plane, then slack for the last 32-pixel tile's reads past it, rounded to 16 and to an odd
  // number of cache lines (consecutive depth groups read planes apart: a 4 KiB multiple would map them all to one
  // L1 set; ResNet-50's stride-2 3x3 layer on 28x28 ran 1.7x slower so).
  int64_t phase_pixels() const { return ((Hq() * Wq() + 32 + 15) / 32 * 2 + 1) * 16; }
  int64_t quad_bytes() const { return quads() * SH * SW * phase_pixels() * 4; }
};

// Whether the direct kernel runs here (AVX-512 VNNI, not capped by LITE_CPU_ISA).
bool QconvDirectAvailable();

// Conv weights packed as A rows (PackQWeights, depth C * KH * KW in ONNX order) reordered tap-major for the direct
// kernel: depth KH * KW * quads() * 4, channels past C zero.
QWeights TapMajorQWeights(const QWeights& w, const QDirectGeometry& g);

// x: C planes of H x W uint8 codes; writes g.quad_bytes() bytes at dst ([quad][phase][Hq][Wq][4]; borders and slack
// = zero_point).
void PadToChannelQuads(const uint8_t* x, uint8_t zero_point, const QDirectGeometry& g, uint8_t* dst, ThreadPool* pool);

// C[M, OH * OW] = epilogue(dequant(W x im2col(input))) from the quads x PadToChannelQuads wrote; w from TapMajorQWeights.
// Bias (M floats) may be null; ep holds the activation and a float32 residual (row stride ep.ld_residual), q the
// uint8 output and/or residual, as QgemmWeightsByAct takes them.
void QconvDirect(const QWeights& w, const uint8_t* x, const QDirectGeometry& g, ActQuant aq, const float* bias,
                 float* C, const GemmEpilogue& ep, ThreadPool* pool, const QuantizedIO& q);

}  // namespace lite
