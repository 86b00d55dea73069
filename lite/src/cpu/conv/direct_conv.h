// Direct 2-D convolution for one group (NCHW in, NCHW out) with no im2col and no activation packing.
// The register tile is 6 output channels x up to four vectors of consecutive output pixels of a row: per
// filter tap it loads the pixels' input values (from a zero-padded copy of the input split by stride phase, so
// any stride reads contiguously) and broadcasts 6 packed weights: 24 FMAs per 10 loads in a full tile.
// The tile is stored straight into the NCHW output with bias, residual and activation applied; a channel-blocked
// output (stems before a depthwise Conv or a max pool) takes 24 channels of a row at a time through a buffer of
// channel rows transposed into the blocks (no residual there).
#pragma once
#include <cstdint>
#include <vector>

#include "cpu/conv/conv_geometry.h"
#include "cpu/conv/phase_split.h"

namespace lite {

class DirectConv2D : public GroupConvolution {
 public:
  static constexpr int64_t kChannels = 6;   // output channels per register tile

  // Packs w (M x C x KH x KW) into blocks of 6 output channels x every tap, once.
  DirectConv2D(const ConvGeometry& s, const float* w, ConvLayouts layouts = {});

  size_t ScratchBytes() const override;   // the padded, phase-split input copy
  void Run(const float* x, const float* bias, const float* residual, EpilogueAct act, float* y, float* scratch,
           ThreadPool* pool) const override;

 private:
  // One output row of channels [m0, m0 + mcount) (at most 6) into y (channel rows `plane` apart), from the
  // phase-split input; accs: the running sums across tap chunks.
  void RowTile(const float* split, int64_t oh, int64_t m0, int64_t mcount, const float* bias, const float* residual,
               EpilogueAct act, float* y, int64_t plane, float* accs) const;
  void RunBlocked(const float* split, const float* bias, EpilogueAct act, bool in_register, float* y,
                  ThreadPool* pool) const;

  ConvGeometry s_;
  ConvLayouts layouts_;
  int64_t lanes_ = 8;                // pixels per vector for the chosen ISA
  PhaseSplitLayout split_;           // the padded, phase-split input copy
  int64_t K_ = 0;                    // taps
  std::vector<float> packed_w_;      // [ceil(M/6)][K][6]
  std::vector<int64_t> tap_offset_;  // per tap k = (c, kh, kw): offset in the phase-split copy
};

}  // namespace lite
