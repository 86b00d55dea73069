// Depthwise 2-D convolution vectorised across channels, for small planes.
//
// The plane kernel (depthwise.h) vectorises along output rows; on 7- to 56-wide rows many of its vectors
// are partial and the per-plane setup weighs. Here 8 channels are transposed into one zero-padded
// [H][W][8] block, every tap is one vector FMA for 8 channels at once (full vectors whatever the plane),
// and the [OH][OW][8] result is transposed back into the NCHW planes.
#pragma once
#include <cstdint>
#include <vector>

#include "cpu/depthwise/depthwise.h"

namespace lite {

// Whether the channel-blocked kernel is the faster one for this shape (small output rows).
bool PreferDepthwiseChannelBlocks(const DepthwiseShape& s);

// The filters of a depthwise Conv with a channel multiplier of 1 in the kernel's order: per block of 8
// channels, each tap's 8 weights (single), and each tap's 8 weights twice (pairs: two pixels per 16-lane
// vector). Built once at prepare for constant weights: per block at every run it was most of the time of a
// 7x7 plane's block.
struct DepthwiseBlockFilters {
  int64_t taps = 0;
  std::vector<float> single;   // [ceil(C / 8)][taps][8], zero past C
  std::vector<float> pairs;    // [ceil(C / 8)][taps][16]
};
DepthwiseBlockFilters PackDepthwiseBlockFilters(int64_t C, int64_t taps, const float* w);

// Same contract as DepthwiseConv2D with a channel multiplier of 1, the filters packed by
// PackDepthwiseBlockFilters. With in_blocked / out_blocked, x / y are channel-blocked (NCHW8c: [N][C/8][H][W][8],
// C a multiple of 8; see core/channel_blocked_layout.h) and the kernel reads / writes its blocks without
// transposing them; a blocked input at least kDepthwiseInPlaceMinWidth wide is read in place (no zero-padded copy).
constexpr int64_t kDepthwiseInPlaceMinWidth = 14;
void DepthwiseChannelBlocks(const DepthwiseShape& s, int64_t N, int64_t C, const float* x,
                            const DepthwiseBlockFilters& filters, const float* bias, float* y, EpilogueAct act,
                            ThreadPool* pool, bool in_blocked = false, bool out_blocked = false);

}  // namespace lite
