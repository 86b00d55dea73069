// The shape of one group of a 2-D convolution, and the interface of the direct kernels that run one.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/thread_pool.h"
#include "cpu/gemm/gemm.h"

namespace lite {

struct ConvGeometry {
  int64_t C = 0, H = 0, W = 0;      // input channels (of this group) and plane
  int64_t M = 0, OH = 0, OW = 0;    // output channels (of this group) and plane
  int64_t KH = 1, KW = 1, SH = 1, SW = 1, DH = 1, DW = 1, pad_top = 0, pad_left = 0;
};

// Which sides of a convolution are channel-blocked (NCHW8c, [C/8][H][W][8]: core/channel_blocked_layout.h) rather
// than NCHW; a residual is laid out as the output. A blocked side needs its channel count in whole blocks of 8.
struct ConvLayouts {
  bool in_blocked = false;
  bool out_blocked = false;
};

// A convolution of one group whose weights were packed when it was built.
class GroupConvolution {
 public:
  virtual ~GroupConvolution() = default;
  virtual size_t ScratchBytes() const = 0;
  // y (M x OH x OW) = act(conv(x) + bias + residual); bias and residual (M x OH x OW) may be null.
  virtual void Run(const float* x, const float* bias, const float* residual, EpilogueAct act, float* y,
                   float* scratch, ThreadPool* pool) const = 0;
};

}  // namespace lite
