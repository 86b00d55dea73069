// Depthwise 2-D convolution (one filter per channel, NCHW), any kernel size, stride and dilation.
#pragma once
#include <cstdint>

#include "core/thread_pool.h"
#include "cpu/gemm/gemm.h"

namespace lite {

struct DepthwiseShape {
  int64_t H = 0, W = 0, OH = 0, OW = 0;       // input and output plane sizes
  int64_t KH = 1, KW = 1, SH = 1, SW = 1, DH = 1, DW = 1;
  int64_t pad_top = 0, pad_left = 0;          // bottom/right padding follows from OH/OW
};

// y[n, c] = act(bias[c] + sum_{kh,kw} w[c, kh, kw] * x[n, c, oh*SH - pad_top + kh*DH, ow*SW - pad_left + kw*DW]),
// zero outside the input. `channel_multiplier` output channels read each input channel (w has C*mult filters).
void DepthwiseConv2D(const DepthwiseShape& s, int64_t N, int64_t C, int64_t channel_multiplier, const float* x,
                     const float* w, const float* bias, float* y, EpilogueAct act, ThreadPool* pool);

}  // namespace lite
