// Depthwise 3x3 convolution on small planes (output rows of up to 14 pixels) from and to channel-blocked tensors
// (NCHW8c), on AVX-512 CPUs.
//
// Two 8-channel blocks go side by side in one 16-lane vector per pixel: each pair of blocks is copied into a
// zero-padded [Hp][Wp][16] buffer (in L1), and each output row is computed in strips of up to 8 pixels, eight
// accumulators against the nine taps' weight vectors held in registers, one load per multiply-add. The general
// channel-block kernel (cpu/depthwise/depthwise_channels.h) runs such rows in pixel pairs, a 7-pixel row as three pairs and
// a masked half with edge logic per row, and took twice OpenVINO's time on MobileNetV2's 7x7 layers.
#pragma once
#include <cstdint>

#include "core/thread_pool.h"
#include "cpu/depthwise/depthwise.h"
#include "cpu/gemm/gemm.h"

namespace lite {

// 3x3, dilation 1, stride 1 or 2, output rows of 1-14 pixels, C a multiple of 8, on a CPU with AVX-512.
bool DepthwiseSmallPlanesSupported(const DepthwiseShape& s, int64_t C);

// x, y: N images of C channels, blocked; filters: [C/8][9][8] (DepthwiseBlockFilters::single); bias may be null.
void DepthwiseSmallPlanes(const DepthwiseShape& s, int64_t N, int64_t C, const float* x, const float* filters,
                          const float* bias, float* y, EpilogueAct act, ThreadPool* pool);

}  // namespace lite
