// Depthwise 2-D convolution vectorised across channels, for small planes.
//
// The plane kernel (depthwise.h) vectorises along output rows; on 7- to 56-wide rows many of its vectors
// are partial and the per-plane setup weighs. Here 8 channels are transposed into one zero-padded
// [H][W][8] block, every tap is one vector FMA for 8 channels at once (full vectors whatever the plane),
// and the [OH][OW][8] result is transposed back into the NCHW planes.
#pragma once
#include <cstdint>

#include "cpu/depthwise.h"

namespace lite {

// Whether the channel-blocked kernel is the faster one for this shape (small output rows).
bool PreferDepthwiseChannelBlocks(const DepthwiseShape& s);

// Same contract as DepthwiseConv2D with a channel multiplier of 1. With in_blocked / out_blocked, x / y are
// channel-blocked (NCHW8c: [N][C/8][H][W][8], C a multiple of 8; see core/channel_blocked_layout.h) and the
// kernel reads / writes its blocks without transposing them.
void DepthwiseChannelBlocks(const DepthwiseShape& s, int64_t N, int64_t C, const float* x, const float* w,
                            const float* bias, float* y, EpilogueAct act, ThreadPool* pool, bool in_blocked = false,
                            bool out_blocked = false);

}  // namespace lite
