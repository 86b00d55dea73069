#include "cpu/conv/direct_conv.h"

#include "cpu/conv/blocked_rows.h"
#include "cpu/isa_dispatch.h"
#include "cpu/conv/phase_split.h"

#include <algorithm>
#include <cstring>

namespace lite {
namespace {

typedef float v4sf __attribute__((vector_size(16)));
typedef float v8sf __attribute__((vector_size(32)));
typedef float v16sf __attribute__((vector_size(64)));

constexpr int64_t kJ = DirectConv2D::kChannels;
constexpr int kMaxVectors = 4;   // pixel vectors per tile: 24 accumulators, 4 loads + 6 broadcasts per 24 FMAs
constexpr int64_t kTapChunk = 256;   // weights of a chunk (256 x 6 floats, 6 KiB) stay in L1 along a row

struct TileArgs {
  int64_t taps;             // taps in this chunk
  const int64_t* off;       // their offsets from the row base
  const float* x;           // row base + first pixel of the tile
  const float* w;           // [taps][6]
  float* acc;               // [6][NV * L] running sums across chunks
  bool first, last;
  // Used on the last chunk: the output tile.
  float* y;                 // channel m0, row oh, pixel ow0
  int64_t plane;            // OH * OW
  int64_t channels, pixels; // valid counts (<= 6, <= NV * L)
  const float* bias;        // at m0, or null
  const float* residual;    // like y, or null
  EpilogueAct act;          // applied here when ReLU/ReLU6/none
};

// acc[j][v]: output channel j (of 6), pixels [v*L, v*L + L) of the tile's NV * L pixels. Per tap: NV vector
// loads of input pixels and six weight broadcasts for 6 NV FMAs. A row is cut into tiles of four vectors and
// one of as many as its rest needs (112 pixels: 64 + 48), so no vector is computed for nothing.
template <typename V, int L, int NV>
__attribute__((always_inline)) inline void TileBody(const TileArgs& t) {
  V acc[kJ][NV];
#pragma GCC unroll 6
  for (int j = 0; j < kJ; ++j)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      if (t.first) {
        acc[j][v] = V{};
      } else {
        std::memcpy(&acc[j][v], t.acc + (j * NV + v) * L, sizeof(V));
      }
    }
#pragma GCC unroll 2
  for (int64_t k = 0; k < t.taps; ++k) {
    V xv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) std::memcpy(&xv[v], t.x + t.off[k] + v * L, sizeof(V));
    const float* wk = t.w + k * kJ;
#pragma GCC unroll 6
    for (int j = 0; j < kJ; ++j) {
      const float wj = wk[j];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[j][v] += wj * xv[v];
    }
  }
  if (!t.last) {
#pragma GCC unroll 6
    for (int j = 0; j < kJ; ++j)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) std::memcpy(t.acc + (j * NV + v) * L, &acc[j][v], sizeof(V));
    return;
  }
  // The tile's destination in locals: through t, every vector store (a memcpy, which may alias anything) made the
  // compiler read t.y and t.plane again before the next one.
  float* const y = t.y;
  const int64_t plane = t.plane;
  if (t.channels == kJ && t.pixels == NV * L) {
    // A full tile: one test per epilogue step for the whole tile (the stems' 27-taps tiles felt the per-vector
    // tests), every operand read before the first store.
    if (t.bias) {
#pragma GCC unroll 6
      for (int j = 0; j < kJ; ++j) {
        const float b = t.bias[j];
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[j][v] += b;
      }
    }
    if (t.residual) {
#pragma GCC unroll 6
      for (int j = 0; j < kJ; ++j)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) {
          V res;
          std::memcpy(&res, t.residual + j * t.plane + v * L, sizeof(V));
          acc[j][v] += res;
        }
    }
    if (t.act != EpilogueAct::kNone) {
#pragma GCC unroll 6
      for (int j = 0; j < kJ; ++j)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) {
          acc[j][v] = acc[j][v] < V{} ? V{} : acc[j][v];
          if (t.act == EpilogueAct::kRelu6) acc[j][v] = acc[j][v] > V{} + 6.f ? V{} + 6.f : acc[j][v];
        }
    }
#pragma GCC unroll 6
    for (int j = 0; j < kJ; ++j)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) std::memcpy(y + j * plane + v * L, &acc[j][v], sizeof(V));
    return;
  }
  for (int64_t j = 0; j < t.channels; ++j) {
    for (int v = 0; v < NV; ++v) {
      const int64_t p0 = v * L, n = std::min<int64_t>(L, t.pixels - p0);
      if (n <= 0) break;
      V r = acc[j][v];
      if (t.bias) r += t.bias[j];
      float* out = y + j * plane + p0;
      if (n == L) {
        if (t.residual) {
          V res;
          std::memcpy(&res, t.residual + j * t.plane + p0, sizeof(V));
          r += res;
        }
        if (t.act != EpilogueAct::kNone) {
          r = r < V{} ? V{} : r;
          if (t.act == EpilogueAct::kRelu6) r = r > V{} + 6.f ? V{} + 6.f : r;
        }
        std::memcpy(out, &r, sizeof(V));
      } else {
        float tmp[L];
        std::memcpy(tmp, &r, sizeof(V));
        for (int64_t p = 0; p < n; ++p) {
          float e = tmp[p] + (t.residual ? t.residual[j * t.plane + p0 + p] : 0.f);
          if (t.act == EpilogueAct::kRelu) e = e < 0.f ? 0.f : e;
          if (t.act == EpilogueAct::kRelu6) e = std::min(std::max(e, 0.f), 6.f);
          out[p] = e;
        }
      }
    }
  }
}

using TileFn = void (*)(const TileArgs&);
template <int NV>
void TilePortable(const TileArgs& t) { TileBody<v4sf, 4, NV>(t); }
#ifdef LITE_X86_SIMD
template <int NV>
__attribute__((target("avx2,fma"))) void TileAvx2(const TileArgs& t) { TileBody<v8sf, 8, NV>(t); }
template <int NV>
__attribute__((target("avx512f,fma"))) void TileAvx512(const TileArgs& t) { TileBody<v16sf, 16, NV>(t); }
#endif

// The tile kernels of one ISA, by pixel vectors (1 to kMaxVectors).
struct TileKernels {
  TileFn fn[kMaxVectors + 1];
  int64_t lanes;
};

const TileKernels& Kernel() {
  static const TileKernels k = [] {
#define LITE_TILE(NV) \
  PickIsaKernel<TileFn>(TilePortable<NV>, LITE_IF_X86_SIMD(TileAvx2<NV>), LITE_IF_X86_SIMD(TileAvx512<NV>))
    const auto one = LITE_TILE(1);
    return TileKernels{{nullptr, one.fn, LITE_TILE(2).fn, LITE_TILE(3).fn, LITE_TILE(4).fn}, one.lanes};
#undef LITE_TILE
  }();
  return k;
}

}  // namespace

DirectConv2D::DirectConv2D(const ConvGeometry& s, const float* w, ConvLayouts layouts)
    : s_(s), layouts_(layouts), lanes_(Kernel().lanes) {
  // The padded, phase-split input (cpu/conv/phase_split.h), long enough for the last (partial) vector of pixels.
  const int64_t ow_padded = (s.OW + lanes_ - 1) / lanes_ * lanes_;
  split_ = MakePhaseSplitLayout(s.C, s.H, s.W, s.OH, s.KH, s.SH, s.DH, s.pad_top, s.pad_left, s.KW, s.SW, s.DW,
                                ow_padded);
  K_ = s.C * s.KH * s.KW;
  for (int64_t c = 0; c < s.C; ++c)
    for (int64_t kh = 0; kh < s.KH; ++kh)
      for (int64_t kw = 0; kw < s.KW; ++kw)
        tap_offset_.push_back((c * split_.Hp + kh * s.DH) * split_.RowLength() + split_.ColumnOffset(kw * s.DW));
  const int64_t blocks = (s.M + kJ - 1) / kJ;
  packed_w_.assign(static_cast<size_t>(blocks * K_ * kJ), 0.f);
  for (int64_t m = 0; m < s.M; ++m)
    for (int64_t k = 0; k < K_; ++k) packed_w_[((m / kJ) * K_ + k) * kJ + m % kJ] = w[m * K_ + k];
}

size_t DirectConv2D::ScratchBytes() const { return static_cast<size_t>(split_.Floats()) * sizeof(float); }

void DirectConv2D::Run(const float* x, const float* bias, const float* residual, EpilogueAct act, float* y,
                       float* scratch, ThreadPool* pool) const {
  const ConvGeometry& s = s_;
  const int64_t L = lanes_;
  PhaseSplitCopy(split_, x, scratch, pool);
  const int64_t seg_px = kMaxVectors * L;   // pixels of a full tile; the row's last tile takes what is left
  const int64_t blocks = (s.M + kJ - 1) / kJ, segs = (s.OW + seg_px - 1) / seg_px, plane = s.OH * s.OW;
  const bool in_register = act == EpilogueAct::kNone || act == EpilogueAct::kRelu || act == EpilogueAct::kRelu6;
  if (layouts_.out_blocked) return RunBlocked(scratch, bias, act, in_register, y, pool);
  // Tasks: (channel block, output row). Along the row, tap chunks keep their weights in L1.
  pool->ParallelFor(blocks * s.OH, 1, [&](int64_t tb, int64_t te) {
    thread_local std::vector<float> accs;
    if (accs.size() < static_cast<size_t>(segs * kJ * seg_px)) accs.resize(segs * kJ * seg_px);
    for (int64_t t = tb; t < te; ++t) {
      const int64_t blk = t / s.OH, oh = t % s.OH;
      const int64_t m0 = blk * kJ, mcount = std::min(kJ, s.M - m0);
      RowTile(scratch, oh, m0, mcount, bias, residual ? residual + (m0 * s.OH + oh) * s.OW : nullptr,
              in_register ? act : EpilogueAct::kNone, y + (m0 * s.OH + oh) * s.OW, plane, accs.data());
      if (!in_register) {
        GemmEpilogue ep;
        ep.act = act;
        for (int64_t j = 0; j < mcount; ++j) ApplyEpilogue(y + (m0 + j) * plane + oh * s.OW, s.OW, 0, 1, 0, s.OW, ep);
      }
    }
  });
}

void DirectConv2D::RowTile(const float* split, int64_t oh, int64_t m0, int64_t mcount, const float* bias,
                           const float* residual, EpilogueAct act, float* y, int64_t plane, float* accs) const {
  const auto& kernel = Kernel();
  const ConvGeometry& s = s_;
  const int64_t L = lanes_, seg_px = kMaxVectors * L, segs = (s.OW + seg_px - 1) / seg_px;
  TileArgs a;
  a.plane = plane;
  a.channels = mcount;
  a.bias = bias ? bias + m0 : nullptr;
  a.act = act;
  const float* row = split + oh * s.SH * split_.RowLength();
  const float* wb = packed_w_.data() + (m0 / kJ) * K_ * kJ;
  for (int64_t k0 = 0; k0 < K_; k0 += kTapChunk) {
    a.taps = std::min(kTapChunk, K_ - k0);
    a.off = tap_offset_.data() + k0;
    a.w = wb + k0 * kJ;
    a.first = k0 == 0;
    a.last = k0 + a.taps >= K_;
    for (int64_t seg = 0; seg < segs; ++seg) {
      const int64_t ow0 = seg * seg_px;
      a.x = row + ow0;
      a.acc = accs + seg * kJ * seg_px;
      a.pixels = std::min(seg_px, s.OW - ow0);
      a.y = y + ow0;
      a.residual = residual ? residual + ow0 : nullptr;
      kernel.fn[(a.pixels + L - 1) / L](a);
    }
  }
}

// A blocked output: each task computes 24 channels (four 6-channel tiles, three 8-channel blocks) of one output row
// into a buffer of channel rows, then transposes them into the blocks' rows (the epilogue's activation, when not in
// the tiles, after).
void DirectConv2D::RunBlocked(const float* split, const float* bias, EpilogueAct act, bool in_register, float* y,
                              ThreadPool* pool) const {
  constexpr int64_t kGroup = 24, kB = 8;
  const ConvGeometry& s = s_;
  const int64_t L = lanes_, seg_px = kMaxVectors * L, segs = (s.OW + seg_px - 1) / seg_px;
  const int64_t groups = (s.M + kGroup - 1) / kGroup;
  pool->ParallelFor(groups * s.OH, 1, [&](int64_t tb, int64_t te) {
    thread_local std::vector<float> accs, rows;
    if (accs.size() < static_cast<size_t>(segs * kJ * seg_px)) accs.resize(segs * kJ * seg_px);
    if (rows.size() < static_cast<size_t>(kGroup * s.OW)) rows.resize(kGroup * s.OW);
    for (int64_t t = tb; t < te; ++t) {
      // Row-major: a last group of fewer channels (MobileNetV2's 32: 24 + 8) in every thread's share.
      const int64_t g0 = t % groups * kGroup, oh = t / groups, gcount = std::min(kGroup, s.M - g0);
      for (int64_t m0 = g0; m0 < g0 + gcount; m0 += kJ)
        RowTile(split, oh, m0, std::min(kJ, g0 + gcount - m0), bias, nullptr, in_register ? act : EpilogueAct::kNone,
                rows.data() + (m0 - g0) * s.OW, s.OW, accs.data());
      for (int64_t b = 0; b < gcount / kB; ++b) {
        float* out = y + ((g0 / kB + b) * s.OH + oh) * s.OW * kB;
        LinesToBlockedRow(rows.data() + b * kB * s.OW, s.OW, s.OW, out);
        if (!in_register) BlockedRowEpilogue(out, s.OW, nullptr, nullptr, act);
      }
    }
  });
}

}  // namespace lite
