#include "cpu/depthwise_channels.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/simd.h"

namespace lite {
namespace {

typedef float v8sf __attribute__((vector_size(32)));
constexpr int64_t kB = 8;   // channels per block: one AVX2 vector (two SSE vectors on the portable path)
constexpr int64_t kR = 4;   // output pixels computed together: independent FMA chains

inline v8sf Load(const float* p) {
  v8sf v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

struct BlockJob {
  const float* xp;   // [Hp][Wp][8] zero-padded input block
  const float* w;    // [KH*KW][8] taps for the block's 8 channels
  v8sf bias;
  int64_t Wp;
  EpilogueAct act;   // kNone, kRelu or kRelu6 (in registers)
  float* out;        // [OH][OW][8]
};

template <int R>
__attribute__((always_inline)) inline void Pixels(const DepthwiseShape& s, const BlockJob& j, int64_t oh, int64_t ow) {
  v8sf acc[R];
  for (int r = 0; r < R; ++r) acc[r] = j.bias;
  for (int64_t kh = 0; kh < s.KH; ++kh) {
    const float* row = j.xp + (oh * s.SH + kh * s.DH) * j.Wp * kB;
    for (int64_t kw = 0; kw < s.KW; ++kw) {
      const v8sf wv = Load(j.w + (kh * s.KW + kw) * kB);
      const float* px = row + (ow * s.SW + kw * s.DW) * kB;
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[r] += Load(px + r * s.SW * kB) * wv;
    }
  }
  for (int r = 0; r < R; ++r) {
    if (j.act != EpilogueAct::kNone) {
      acc[r] = acc[r] > v8sf{} ? acc[r] : v8sf{};
      if (j.act == EpilogueAct::kRelu6) acc[r] = acc[r] < v8sf{} + 6.f ? acc[r] : v8sf{} + 6.f;
    }
    std::memcpy(j.out + (oh * s.OW + ow + r) * kB, &acc[r], sizeof(v8sf));
  }
}

LITE_VECTOR_CLONES void Block(const DepthwiseShape& s, const BlockJob& j) {
  for (int64_t oh = 0; oh < s.OH; ++oh) {
    int64_t ow = 0;
    for (; ow + kR <= s.OW; ow += kR) Pixels<kR>(s, j, oh, ow);
    for (; ow < s.OW; ++ow) Pixels<1>(s, j, oh, ow);
  }
}

// dst row c (c < 8) = column c of the 8x8 block whose row r starts at src + r * src_stride.
__attribute__((always_inline)) inline void Transpose8x8(const float* src, int64_t src_stride, float* dst,
                                                        int64_t dst_stride) {
  v8sf r[8], t[8], u[8];
  for (int i = 0; i < 8; ++i) r[i] = Load(src + i * src_stride);
  for (int i = 0; i < 8; i += 2) {
    t[i] = __builtin_shufflevector(r[i], r[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
    t[i + 1] = __builtin_shufflevector(r[i], r[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = __builtin_shufflevector(t[i], t[i + 2], 0, 1, 8, 9, 4, 5, 12, 13);
    u[i + 1] = __builtin_shufflevector(t[i], t[i + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    u[i + 2] = __builtin_shufflevector(t[i + 1], t[i + 3], 0, 1, 8, 9, 4, 5, 12, 13);
    u[i + 3] = __builtin_shufflevector(t[i + 1], t[i + 3], 2, 3, 10, 11, 6, 7, 14, 15);
  }
  for (int i = 0; i < 4; ++i) {
    const v8sf lo = __builtin_shufflevector(u[i], u[i + 4], 0, 1, 2, 3, 8, 9, 10, 11);
    const v8sf hi = __builtin_shufflevector(u[i], u[i + 4], 4, 5, 6, 7, 12, 13, 14, 15);
    std::memcpy(dst + i * dst_stride, &lo, sizeof(v8sf));
    std::memcpy(dst + (i + 4) * dst_stride, &hi, sizeof(v8sf));
  }
}

// Channel planes c0..c0+cn of one image into the zero-padded [Hp][Wp][8] block (padding already zero).
LITE_VECTOR_CLONES void TransposeIn(const DepthwiseShape& s, const float* x, int64_t plane, int64_t cn, int64_t Wp,
                                    float* xp) {
  const int64_t cols = std::min(s.W, Wp - s.pad_left);
  for (int64_t h = 0; h < s.H; ++h) {
    float* dst = xp + ((h + s.pad_top) * Wp + s.pad_left) * kB;
    const float* src = x + h * s.W;
    int64_t i = 0;
    if (cn == kB)
      for (; i + 8 <= cols; i += 8) Transpose8x8(src + i, plane, dst + i * kB, kB);
    for (int64_t l = 0; l < cn; ++l)
      for (int64_t k = i; k < cols; ++k) dst[k * kB + l] = src[l * plane + k];
  }
}

// The [P][8] result back into channel planes c0..c0+cn (P floats each, `plane` apart).
LITE_VECTOR_CLONES void TransposeOut(const float* out, int64_t P, int64_t cn, float* y, int64_t plane) {
  int64_t p = 0;
  if (cn == kB)
    for (; p + 8 <= P; p += 8) Transpose8x8(out + p * kB, kB, y + p, plane);
  for (int64_t l = 0; l < cn; ++l)
    for (int64_t k = p; k < P; ++k) y[l * plane + k] = out[k * kB + l];
}

}  // namespace

// Measured on MobileNetV2's layers (1 thread, 3x3): 0.5x the plane kernel's time on 7- and 14-wide output
// rows, 0.75x on 28-wide ones at stride 2, even at stride 1; 1.6-1.8x on 56- and 112-wide rows.
bool PreferDepthwiseChannelBlocks(const DepthwiseShape& s) { return s.OW <= 28; }

void DepthwiseChannelBlocks(const DepthwiseShape& s, int64_t N, int64_t C, const float* x, const float* w,
                            const float* bias, float* y, EpilogueAct act, ThreadPool* pool) {
  const int64_t Hp = std::max(s.H + s.pad_top, (s.OH - 1) * s.SH + (s.KH - 1) * s.DH + 1);
  const int64_t Wp = std::max(s.W + s.pad_left, (s.OW - 1) * s.SW + (s.KW - 1) * s.DW + 1);
  const int64_t K = s.KH * s.KW, in_plane = s.H * s.W, out_plane = s.OH * s.OW;
  const int64_t blocks = (C + kB - 1) / kB;
  const bool in_register = act == EpilogueAct::kNone || act == EpilogueAct::kRelu || act == EpilogueAct::kRelu6;
  GemmEpilogue act_only;
  act_only.act = act;
  auto run = [&](int64_t b, int64_t e) {
    thread_local std::vector<float> xp, out;
    thread_local std::vector<float> taps;   // plain floats: std::vector does not honour a vector type's 32-byte alignment
    xp.resize(Hp * Wp * kB);
    out.resize(out_plane * kB);
    taps.resize(K * kB);
    for (int64_t t = b; t < e; ++t) {
      const int64_t n = t / blocks, c0 = (t % blocks) * kB, cn = std::min(kB, C - c0);
      // Transpose in: the padding and the lanes of missing channels are zero.
      std::fill(xp.begin(), xp.end(), 0.f);
      TransposeIn(s, x + (n * C + c0) * in_plane, in_plane, cn, Wp, xp.data());
      BlockJob j;
      for (int64_t k = 0; k < K; ++k) {
        for (int64_t l = 0; l < kB; ++l) taps[k * kB + l] = l < cn ? w[(c0 + l) * K + k] : 0.f;
      }
      float lanes[kB] = {};
      for (int64_t l = 0; l < cn && bias; ++l) lanes[l] = bias[c0 + l];
      std::memcpy(&j.bias, lanes, sizeof(v8sf));
      j.xp = xp.data();
      j.w = taps.data();
      j.Wp = Wp;
      j.act = in_register ? act : EpilogueAct::kNone;
      j.out = out.data();
      Block(s, j);
      // Transpose out into the channels' planes.
      float* planes = y + (n * C + c0) * out_plane;
      TransposeOut(out.data(), out_plane, cn, planes, out_plane);
      if (!in_register) ApplyEpilogue(planes, out_plane, 0, cn, 0, out_plane, act_only);
    }
  };
  if (pool) {
    pool->ParallelFor(N * blocks, 1, run);
  } else {
    run(0, N * blocks);
  }
}

}  // namespace lite
