#include "cpu/blocked_pointwise.h"

#include <algorithm>
#include <cstring>

#include "cpu/isa_dispatch.h"

#ifdef LITE_X86_SIMD
#include <immintrin.h>
#endif

namespace lite {
namespace {

typedef float v4sf __attribute__((vector_size(16)));
typedef float v8sf __attribute__((vector_size(32)));

constexpr int64_t kP = BlockedPointwiseConv::kPixels;
constexpr int64_t kOC = BlockedPointwiseConv::kChannels;
constexpr int64_t kB = 8;            // channels per block of the layout
constexpr int64_t kChunkTiles = 8;   // pixel tiles per task: their input stays in L1/L2 across output blocks

struct TileArgs {
  const float* px[kP];     // each pixel's 8 channels of input block 0 (a short tile repeats its last pixel)
  int64_t block_stride;    // floats from one input channel block to the next (P * 8)
  int64_t cblocks;         // input channel blocks
  const float* w;          // [C][16]
  const float* bias;       // [16] or null
  EpilogueAct act;         // kNone, kRelu or kRelu6 (in registers)
  float* out[2];           // where pixel 0's two 8-channel halves go; out[1] null when only 8 channels remain
  int64_t out_stride;      // floats from one pixel's half to the next pixel's
  int64_t count;           // pixels stored
};

template <typename V, int L>
__attribute__((always_inline)) inline void TileBody(const TileArgs& t) {
  constexpr int NV = kOC / L, HV = kB / L;   // vectors per tile row, per 8-channel half
  V acc[kP][NV] = {};
  const float *p0 = t.px[0], *p1 = t.px[1], *p2 = t.px[2], *p3 = t.px[3], *p4 = t.px[4], *p5 = t.px[5];
  const float* w = t.w;
  for (int64_t b = 0; b < t.cblocks; ++b) {
    const float* ps[kP] = {p0, p1, p2, p3, p4, p5};
#pragma GCC unroll 8
    for (int c = 0; c < kB; ++c, w += kOC) {
      V wv[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) std::memcpy(&wv[v], w + v * L, sizeof(V));
#pragma GCC unroll 6
      for (int i = 0; i < kP; ++i) {
        const float x = ps[i][c];
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[i][v] += x * wv[v];
      }
    }
    p0 += t.block_stride, p1 += t.block_stride, p2 += t.block_stride;
    p3 += t.block_stride, p4 += t.block_stride, p5 += t.block_stride;
  }
  if (t.bias) {
    V bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) std::memcpy(&bv[v], t.bias + v * L, sizeof(V));
#pragma GCC unroll 6
    for (int i = 0; i < kP; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] += bv[v];
  }
  if (t.act != EpilogueAct::kNone) {
#pragma GCC unroll 6
    for (int i = 0; i < kP; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        acc[i][v] = acc[i][v] > V{} ? acc[i][v] : V{};
        if (t.act == EpilogueAct::kRelu6) acc[i][v] = acc[i][v] < V{} + 6.f ? acc[i][v] : V{} + 6.f;
      }
  }
#pragma GCC unroll 6
  for (int i = 0; i < kP; ++i) {
    if (i >= t.count) break;
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      if (!t.out[h]) continue;
#pragma GCC unroll 2
      for (int v = 0; v < HV; ++v) std::memcpy(t.out[h] + i * t.out_stride + v * L, &acc[i][h * HV + v], sizeof(V));
    }
  }
}

using TileFn = void (*)(const TileArgs&);
void TilePortable(const TileArgs& t) { TileBody<v4sf, 4>(t); }
#ifdef LITE_X86_SIMD
__attribute__((target("avx2,fma"))) void TileAvx2(const TileArgs& t) { TileBody<v8sf, 8>(t); }

// AVX-512: 12 consecutive pixels x 16 channels, one 16-lane accumulator per pixel (twelve FMA chains; the 6-pixel
// tile in 16-lane vectors would have six). The pixels are read from one base pointer (a full tile only: the
// last pixels of a plane go through the 6-pixel tile); each pixel's 16 sums are stored as its two 8-channel halves.
constexpr int64_t kWideP = 12;
#define LITE_PW_ROWS(F) F(0) F(1) F(2) F(3) F(4) F(5) F(6) F(7) F(8) F(9) F(10) F(11)
__attribute__((target("avx512f,fma"))) void TileAvx512(const TileArgs& t) {
#define LITE_PW_ZERO(i) __m512 a##i = _mm512_setzero_ps();
  LITE_PW_ROWS(LITE_PW_ZERO)
#undef LITE_PW_ZERO
  const float* x = t.px[0];
  const float* w = t.w;
  for (int64_t b = 0; b < t.cblocks; ++b, x += t.block_stride) {
#pragma GCC unroll 8
    for (int c = 0; c < kB; ++c, w += kOC) {
      const __m512 wv = _mm512_loadu_ps(w);
#define LITE_PW_FMA(i) a##i = _mm512_fmadd_ps(_mm512_set1_ps(x[i * kB + c]), wv, a##i);
      LITE_PW_ROWS(LITE_PW_FMA)
#undef LITE_PW_FMA
    }
  }
  const __m512 bias = t.bias ? _mm512_loadu_ps(t.bias) : _mm512_setzero_ps();
  const bool relu = t.act != EpilogueAct::kNone, relu6 = t.act == EpilogueAct::kRelu6;
#define LITE_PW_STORE(i)                                                                                  \
  {                                                                                                       \
    __m512 v = _mm512_add_ps(a##i, bias);                                                                 \
    if (relu) v = _mm512_max_ps(v, _mm512_setzero_ps());                                                  \
    if (relu6) v = _mm512_min_ps(v, _mm512_set1_ps(6.f));                                                 \
    _mm256_storeu_ps(t.out[0] + i * t.out_stride, _mm512_castps512_ps256(v));                             \
    if (t.out[1])                                                                                         \
      _mm256_storeu_ps(t.out[1] + i * t.out_stride, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))); \
  }
  LITE_PW_ROWS(LITE_PW_STORE)
#undef LITE_PW_STORE
}
#undef LITE_PW_ROWS
#endif

}  // namespace

BlockedPointwiseConv::BlockedPointwiseConv(int64_t C, int64_t M, const float* w) : C_(C), M_(M) {
  const int64_t blocks = (M + kOC - 1) / kOC;
  packed_w_.assign(static_cast<size_t>(blocks * C * kOC), 0.f);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t c = 0; c < C; ++c) packed_w_[((m / kOC) * C + c) * kOC + m % kOC] = w[m * C + c];
}

void BlockedPointwiseConv::Run(int64_t N, int64_t P, const float* x, const float* bias, EpilogueAct act,
                               bool out_blocked, float* y, ThreadPool* pool) const {
  static const TileFn tile = PickIsaKernel<TileFn>(TilePortable, LITE_IF_X86_SIMD(TileAvx2), nullptr).fn;
  static const TileFn wide = PickIsaKernel<TileFn>(nullptr, nullptr, LITE_IF_X86_SIMD(TileAvx512)).fn;
  // Chunks of kChunkTiles x 6 pixels, the last one taking the remainder (a short chunk of its own would read every
  // weight of the block again for a few pixels: MobileNetV2's 49-pixel planes).
  const int64_t chunk_px = kChunkTiles * kP, chunks = std::max<int64_t>(1, P / chunk_px);
  const int64_t oblocks = (M_ + kOC - 1) / kOC;
  const bool act_in_tile = act == EpilogueAct::kNone || act == EpilogueAct::kRelu || act == EpilogueAct::kRelu6;
  GemmEpilogue act_only;
  act_only.act = act;
  // Tasks (image, pixel chunk, output block), block-minor: a thread reuses a chunk's input for every block.
  pool->ParallelFor(N * chunks * oblocks, 1, [&](int64_t tb, int64_t te) {
    alignas(64) float sums[2 * kP * kOC];
    alignas(64) float block_bias[kOC];
    for (int64_t t = tb; t < te; ++t) {
      const int64_t n = t / (chunks * oblocks), chunk = t / oblocks % chunks, ob = t % oblocks;
      const int64_t m0 = ob * kOC, mcount = std::min(kOC, M_ - m0);
      const float* xn = x + n * C_ * P;
      float* yn = y + n * M_ * P;
      TileArgs a;
      a.block_stride = P * kB;
      a.cblocks = C_ / kB;
      a.w = packed_w_.data() + ob * C_ * kOC;
      a.act = act_in_tile ? act : EpilogueAct::kNone;
      a.bias = nullptr;
      if (bias) {
        std::fill(block_bias, block_bias + kOC, 0.f);
        std::copy(bias + m0, bias + m0 + mcount, block_bias);
        a.bias = block_bias;
      }
      const int64_t p_begin = chunk * chunk_px, p_end = chunk + 1 == chunks ? P : p_begin + chunk_px;
      for (int64_t p0 = p_begin; p0 < p_end;) {
        // 12 pixels at once where the ISA has the wide tile: the chunk's last 12 pixels for its tail (recomputing
        // a few: the same values, in this task); up to 6 with the other tiles or in chunks under 12 pixels.
        const bool twelve = wide && p_end - p_begin >= 2 * kP;
        if (twelve) p0 = std::min(p0, p_end - 2 * kP);
        const int64_t count = twelve ? 2 * kP : std::min(kP, p_end - p0);
        for (int64_t i = 0; i < kP; ++i) a.px[i] = xn + (p0 + std::min(i, count - 1)) * kB;
        a.count = count;
        const TileFn run = twelve ? wide : tile;
        if (out_blocked) {
          a.out[0] = yn + (m0 / kB) * P * kB + p0 * kB;
          a.out[1] = mcount > kB ? a.out[0] + P * kB : nullptr;
          a.out_stride = kB;
          run(a);
          p0 += count;
          continue;
        }
        a.out[0] = sums;
        a.out[1] = sums + kB;
        a.out_stride = kOC;
        run(a);
        float* out = yn + m0 * P + p0;   // the tile holds pixels x channels; NCHW wants channels x pixels
        for (int64_t j = 0; j < mcount; ++j)
          for (int64_t i = 0; i < count; ++i) out[j * P + i] = sums[i * kOC + j];
        p0 += count;
      }
      if (!act_in_tile) {
        if (out_blocked) {   // an activation alone is elementwise: each 8-channel block's run is one row
          for (int64_t b = m0 / kB; b < (m0 + mcount) / kB; ++b)
            ApplyEpilogue(yn + b * P * kB, 0, 0, 1, p_begin * kB, (p_end - p_begin) * kB, act_only);
        } else {
          ApplyEpilogue(yn, P, m0, mcount, p_begin, p_end - p_begin, act_only);
        }
      }
    }
  });
}

}  // namespace lite
