// Direct 8-bit integer convolution for stride-1 Convs on AVX-512 VNNI CPUs: no im2col.
//
// The uint8 input is copied once into a padded, channel-quad layout: [C/4][Hp][Wp][4] (4 channels of a pixel side by
// side, the borders holding the zero point), which is exactly the operand vpdpbusd multiplies. Output pixels are
// numbered on the padded width (f = oh * Wp + ow, the KW - 1 columns past each row computed and dropped), so tap
// (kh, kw) of 16 consecutive outputs is 64 contiguous bytes at f + kh * Wp + kw of each quad plane: the kernel reads
// its B operand in place. The weights are reordered tap-major (depth = taps x channel quads). The sums are the same
// exact integers as the im2col path's; the dequantisation and epilogue are shared with it (FinishQuantizedRows).
#pragma once
#include <cstdint>

#include "core/thread_pool.h"
#include "cpu/gemm.h"
#include "cpu/qgemm.h"

namespace lite {

struct QDirectGeometry {
  int64_t C = 0, H = 0, W = 0;               // input channels and plane
  int64_t KH = 0, KW = 0, pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  int64_t Hp() const { return H + pad_top + pad_bottom; }
  int64_t Wp() const { return W + pad_left + pad_right; }
  int64_t OH() const { return Hp() - KH + 1; }
  int64_t OW() const { return Wp() - KW + 1; }
  int64_t quads() const { return (C + 3) / 4; }
  // Pixels per quad plane: the padded plane, then slack for the last tile's reads past it, rounded to 16.
  int64_t plane_pixels() const { return (Hp() * Wp() + 16 + 15) / 16 * 16; }
  int64_t quad_bytes() const { return quads() * plane_pixels() * 4; }
};

// Whether the direct kernel runs here (AVX-512 VNNI, not capped by LITE_CPU_ISA).
bool QconvDirectAvailable();

// Conv weights packed as A rows (PackQWeights, depth C * KH * KW in ONNX order) reordered tap-major for the direct
// kernel: depth KH * KW * quads() * 4, channels past C zero.
QWeights TapMajorQWeights(const QWeights& w, const QDirectGeometry& g);

// x: C planes of H x W uint8 codes; writes g.quad_bytes() bytes at dst (borders and slack = zero_point).
void PadToChannelQuads(const uint8_t* x, uint8_t zero_point, const QDirectGeometry& g, uint8_t* dst, ThreadPool* pool);

// C[M, OH * OW] = epilogue(dequant(W x im2col(x))) from the quads PadToChannelQuads wrote; w from TapMajorQWeights.
// Bias (M floats) may be null; ep holds the activation and a float32 residual (row stride ep.ld_residual), q the
// uint8 output and/or residual, as QgemmWeightsByAct takes them.
void QconvDirect(const QWeights& w, const uint8_t* quads, const QDirectGeometry& g, ActQuant aq, const float* bias,
                 float* C, const GemmEpilogue& ep, ThreadPool* pool, const QuantizedIO& q);

}  // namespace lite
