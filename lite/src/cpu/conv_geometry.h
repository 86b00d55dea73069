// The shape of one group of a 2-D convolution, as the direct CPU kernels take it.
#pragma once
#include <cstdint>

namespace lite {

struct ConvGeometry {
  int64_t C = 0, H = 0, W = 0;      // input channels (of this group) and plane
  int64_t M = 0, OH = 0, OW = 0;    // output channels (of this group) and plane
  int64_t KH = 1, KW = 1, SH = 1, SW = 1, DH = 1, DW = 1, pad_top = 0, pad_left = 0;
};

}  // namespace lite
