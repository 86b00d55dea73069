#include "cpu/conv/blocked_pointwise.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "cpu/gemm/bf16_gemm.h"
#include "cpu/gemm/bf16_pairs.h"
#include "cpu/isa_dispatch.h"
#include "cpu/simd/simd.h"
#include "cpu/gemm/spread_prefetch.h"

#ifdef LITE_X86_SIMD
#include <immintrin.h>
#endif
#ifdef LITE_ARM64_SIMD
#include <arm_neon.h>

#include "cpu/simd/neon_asm.h"
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
  const float* w2;         // the next 16 channels' [C][16] (the AVX-512 12 x 32 tile), or null
  const float* bias;       // [16] ([32] with w2) or null
  EpilogueAct act;         // kNone, kRelu, kRelu6 or kSilu (in registers)
  float* out[4];           // where pixel 0's 8-channel blocks go (out[2..3]: w2's); null past the channels
  const float* res[4];     // the residual's blocks, laid out as out (added before the activation), or null
  int64_t out_stride;      // floats from one pixel's half to the next pixel's
  int64_t count;           // pixels stored
  const char* prefetch = nullptr;   // lines to fetch into L2 while the tile runs (the next output block's weights)
  int64_t prefetch_lines = 0;       // how many, from prefetch on
  int64_t prefetch_per_block = 0;   // how many per input channel block
  bool prefetch_once = false;       // no later task reads those weights (one pixel chunk): non-temporal
};

// A share of TileArgs::prefetch for input block b of the tile's loop.
__attribute__((always_inline)) inline void PrefetchShare(const TileArgs& t, int64_t b) {
  const int64_t first = b * t.prefetch_per_block, end = std::min(t.prefetch_lines, first + t.prefetch_per_block);
  for (int64_t l = first; l < end; ++l) PrefetchWeightLine(t.prefetch + l * 64, t.prefetch_once);
}

template <typename V, int L>
__attribute__((always_inline)) inline void TileBody(const TileArgs& t) {
  constexpr int NV = kOC / L, HV = kB / L;   // vectors per tile row, per 8-channel half
  V acc[kP][NV] = {};
  const float *p0 = t.px[0], *p1 = t.px[1], *p2 = t.px[2], *p3 = t.px[3], *p4 = t.px[4], *p5 = t.px[5];
  const float* w = t.w;
  // One input channel: its 16 weights (NV vectors) times each pixel's value, into the pixel's accumulators.
  auto channel = [&](const float* const (&ps)[kP], int c) __attribute__((always_inline)) {
    V wv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) std::memcpy(&wv[v], w + v * L, sizeof(V));
#pragma GCC unroll 6
    for (int i = 0; i < kP; ++i) {
      const float x = ps[i][c];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] += x * wv[v];
    }
    w += kOC;
  };
  for (int64_t b = 0; b < t.cblocks; ++b) {
    PrefetchShare(t, b);
    const float* ps[kP] = {p0, p1, p2, p3, p4, p5};
    if constexpr (L == 4) {
      // 4-lane vectors (ARM64's NEON): 24 accumulators leave 8 registers, and a block's eight channels unrolled let
      // GCC hoist their weight loads past them (six accumulators spilled, 0.7 stack accesses per fmla); two at a time.
#pragma GCC unroll 2
      for (int c = 0; c < kB; ++c) channel(ps, c);
    } else {
#pragma GCC unroll 8
      for (int c = 0; c < kB; ++c) channel(ps, c);
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
  if (t.res[0]) {
    for (int i = 0; i < kP && i < t.count; ++i)
      for (int h = 0; h < 2; ++h)
        for (int v = 0; t.res[h] && v < HV; ++v) {
          V r;
          std::memcpy(&r, t.res[h] + i * t.out_stride + v * L, sizeof(V));
          acc[i][h * HV + v] += r;
        }
  }
  if (t.act == EpilogueAct::kSilu) {
#pragma GCC unroll 6
    for (int i = 0; i < kP; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = FastSiluVec(acc[i][v]);
  } else if (t.act != EpilogueAct::kNone) {
#pragma GCC unroll 6
    for (int i = 0; i < kP; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        acc[i][v] = acc[i][v] < V{} ? V{} : acc[i][v];
        if (t.act == EpilogueAct::kRelu6) acc[i][v] = acc[i][v] > V{} + 6.f ? V{} + 6.f : acc[i][v];
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
constexpr int64_t kWideP = 12;   // pixels of the AVX-512 tiles (below)
void TilePortable(const TileArgs& t) { TileBody<v4sf, 4>(t); }
#ifdef LITE_X86_SIMD
__attribute__((target("avx2,fma"))) void TileAvx2(const TileArgs& t) { TileBody<v8sf, 8>(t); }

// AVX-512: up to 12 consecutive pixels (NP) x 16 (H = 1) or 32 (H = 2) channels, one or two 16-lane accumulators
// per pixel (up to 24 FMA chains; the 6-pixel tile in 16-lane vectors would have six). The pixels are read from one
// base pointer; each pixel's sums are stored as 8-channel halves. With 32 channels each step loads two weight
// vectors and NP broadcasts for 2 x NP FMAs. A chunk of pixels is cut into tiles of equal size (49 pixels: five
// of 9-10, not four of 12 and one of 12 recomputing 11).
#define LITE_PW_ROWS(F) F(0) F(1) F(2) F(3) F(4) F(5) F(6) F(7) F(8) F(9) F(10) F(11)

// A pixel's 16 sums (plus the residual's halves at rlo + at and rhi + at when rlo is set; activation applied) as two
// 8-channel halves at lo + at and hi + at (hi null: 8 channels).
__attribute__((target("avx512f"), always_inline)) inline void StorePixel(int64_t at, __m512 v, bool relu, bool relu6,
                                                                          bool silu, float* lo, float* hi,
                                                                          const float* rlo, const float* rhi) {
  if (rlo) {
    const __m256 r_hi = rhi ? _mm256_loadu_ps(rhi + at) : _mm256_setzero_ps();
    v = _mm512_add_ps(v, _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(
                                                                  _mm256_loadu_ps(rlo + at))),
                                                              _mm256_castps_pd(r_hi), 1)));
  }
  if (relu) v = _mm512_max_ps(_mm512_setzero_ps(), v);
  if (relu6) v = _mm512_min_ps(_mm512_set1_ps(6.f), v);
  if (silu) v = FastSiluVec(v);
  _mm256_storeu_ps(lo + at, _mm512_castps512_ps256(v));
  if (hi) _mm256_storeu_ps(hi + at, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}

// Two adjacent pixels' 16 sums each (vi, vj) into blocked planes, where the two pixels' 8-channel halves are
// neighbours: one 64-byte store per plane (lo + at: vi's and vj's low halves; hi + at: their high halves) instead of
// two 32-byte ones per pixel. Residual (laid out as the output) and activation as in StorePixel.
__attribute__((target("avx512f"), always_inline)) inline void StorePixelPair(int64_t at, __m512 vi, __m512 vj,
                                                                              bool relu, bool relu6, bool silu,
                                                                              float* lo, float* hi, const float* rlo,
                                                                              const float* rhi) {
  __m512 l = _mm512_shuffle_f32x4(vi, vj, 0x44), h = _mm512_shuffle_f32x4(vi, vj, 0xEE);
  if (rlo) l = _mm512_add_ps(l, _mm512_loadu_ps(rlo + at));
  if (rhi) h = _mm512_add_ps(h, _mm512_loadu_ps(rhi + at));
  if (relu) l = _mm512_max_ps(_mm512_setzero_ps(), l), h = _mm512_max_ps(_mm512_setzero_ps(), h);
  if (relu6) l = _mm512_min_ps(_mm512_set1_ps(6.f), l), h = _mm512_min_ps(_mm512_set1_ps(6.f), h);
  if (silu) l = FastSiluVec(l), h = FastSiluVec(h);
  _mm512_storeu_ps(lo + at, l);
  if (hi) _mm512_storeu_ps(hi + at, h);
}

// StorePixelPair for a whole tile with no residual and both halves present, the activation a template argument
// (kAct: 0 none, 1 ReLU, 2 ReLU6, 3 SiLU): no test per pair (the branches were a fifth of the tile's time on
// MobileNetV2's 16-channel expansion).
template <int kAct>
__attribute__((target("avx512f"), always_inline)) inline void StorePairFast(int64_t at, __m512 vi, __m512 vj,
                                                                              float* lo, float* hi) {
  __m512 l = _mm512_shuffle_f32x4(vi, vj, 0x44), h = _mm512_shuffle_f32x4(vi, vj, 0xEE);
  if (kAct == 1 || kAct == 2) l = _mm512_max_ps(_mm512_setzero_ps(), l), h = _mm512_max_ps(_mm512_setzero_ps(), h);
  if (kAct == 2) l = _mm512_min_ps(_mm512_set1_ps(6.f), l), h = _mm512_min_ps(_mm512_set1_ps(6.f), h);
  if (kAct == 3) l = FastSiluVec(l), h = FastSiluVec(h);
  _mm512_storeu_ps(lo + at, l);
  _mm512_storeu_ps(hi + at, h);
}

// The 12- and 24-accumulator tiles' common end (a0..a11, b0..b11 with H = 2): bias, activation, stores of the
// pixels counted.
#define LITE_PW_STORE(i)                                                                                   \
  if (i < NP && i < t.count) {                                                                                       \
    StorePixel(i * t.out_stride, _mm512_add_ps(a##i, bias), relu, relu6, silu, t.out[0], t.out[1], t.res[0],  \
               t.res[1]);                                                                                        \
    if (H == 2)                                                                                                  \
      StorePixel(i * t.out_stride, _mm512_add_ps(b##i, bias2), relu, relu6, silu, t.out[2], t.out[3], t.res[2], \
                 t.res[3]);                                                                                      \
  }
// Pixels i and j = i + 1 as a pair when both are stored into blocked planes, else one by one.
#define LITE_PW_STORE_PAIR(i, j)                                                                           \
  if (j < NP && j < t.count && paired) {                                                                     \
    StorePixelPair(i * kB, _mm512_add_ps(a##i, bias), _mm512_add_ps(a##j, bias), relu, relu6, silu,           \
                   t.out[0], t.out[1], t.res[0], t.res[1]);                                                  \
    if (H == 2)                                                                                              \
      StorePixelPair(i * kB, _mm512_add_ps(b##i, bias2), _mm512_add_ps(b##j, bias2), relu, relu6, silu,       \
                     t.out[2], t.out[3], t.res[2], t.res[3]);                                                \
  } else {                                                                                                   \
    LITE_PW_STORE(i)                                                                                         \
    LITE_PW_STORE(j)                                                                                         \
  }
#define LITE_PW_FAST_PAIR(i, j)                                                                            \
  if (j < NP) {                                                                                            \
    StorePairFast<kAct>(i * kB, _mm512_add_ps(a##i, bias), _mm512_add_ps(a##j, bias), t.out[0], t.out[1]);  \
    if (H == 2)                                                                                            \
      StorePairFast<kAct>(i * kB, _mm512_add_ps(b##i, bias2), _mm512_add_ps(b##j, bias2), t.out[2],         \
                          t.out[3]);                                                                       \
  }
#define LITE_PW_FAST_STORES(ACT)                                                                            \
  {                                                                                                        \
    constexpr int kAct = ACT;                                                                              \
    LITE_PW_FAST_PAIR(0, 1) LITE_PW_FAST_PAIR(2, 3) LITE_PW_FAST_PAIR(4, 5) LITE_PW_FAST_PAIR(6, 7)         \
    LITE_PW_FAST_PAIR(8, 9) LITE_PW_FAST_PAIR(10, 11)                                                      \
  }
// A whole tile of an even pixel count into blocked planes, no residual, every half there: the branch-free stores.
#define LITE_PW_EPILOGUE                                                                               \
  const __m512 bias = t.bias ? _mm512_loadu_ps(t.bias) : _mm512_setzero_ps();                          \
  const __m512 bias2 = H == 2 && t.bias ? _mm512_loadu_ps(t.bias + kOC) : _mm512_setzero_ps();         \
  const bool relu6 = t.act == EpilogueAct::kRelu6, relu = relu6 || t.act == EpilogueAct::kRelu;       \
  const bool silu = t.act == EpilogueAct::kSilu;                                                       \
  const bool paired = t.out_stride == kB;                                                              \
  if (NP % 2 == 0 && t.count == NP && paired && !t.res[0] && t.out[1] && (H == 1 || t.out[3])) {       \
    if (silu) LITE_PW_FAST_STORES(3) else if (relu6) LITE_PW_FAST_STORES(2)                            \
    else if (relu) LITE_PW_FAST_STORES(1) else LITE_PW_FAST_STORES(0)                                  \
    return;                                                                                            \
  }                                                                                                    \
  LITE_PW_STORE_PAIR(0, 1) LITE_PW_STORE_PAIR(2, 3) LITE_PW_STORE_PAIR(4, 5) LITE_PW_STORE_PAIR(6, 7)  \
  LITE_PW_STORE_PAIR(8, 9) LITE_PW_STORE_PAIR(10, 11)

template <int NP, int H>
__attribute__((target("avx512f,fma"))) void TileAvx512(const TileArgs& t) {
#define LITE_PW_ZERO(i) __m512 a##i = _mm512_setzero_ps(), b##i = a##i;
  LITE_PW_ROWS(LITE_PW_ZERO)
#undef LITE_PW_ZERO
  const float* x = t.px[0];
  const float* w = t.w;
  const float* w2 = H == 2 ? t.w2 : t.w;
  for (int64_t b = 0; b < t.cblocks; ++b, x += t.block_stride) {
    PrefetchShare(t, b);
#pragma GCC unroll 8
    for (int c = 0; c < kB; ++c, w += kOC, w2 += kOC) {
      const __m512 wv = _mm512_loadu_ps(w);
      const __m512 wv2 = _mm512_loadu_ps(w2);
#define LITE_PW_FMA(i)                                                \
  if (i < NP) {                                                       \
    const __m512 xv = _mm512_set1_ps(x[i * kB + c]);                  \
    a##i = _mm512_fmadd_ps(xv, wv, a##i);                             \
    if (H == 2) b##i = _mm512_fmadd_ps(xv, wv2, b##i);                \
  }
      LITE_PW_ROWS(LITE_PW_FMA)
#undef LITE_PW_FMA
    }
  }
  LITE_PW_EPILOGUE
}

// bf16: the same 12 x 16 tile over input channel pairs: each step broadcasts a pixel's two bf16 values (one 32-bit
// word of the converted input) against the 16 channels' weight pairs (64 bytes), vdpbf16ps into float32.
struct TileArgsBf16 {
  const uint16_t* x;       // pixel 0 of the tile in input block 0 (bf16, [blocks][Ppad][8])
  int64_t block_stride;    // values from one input channel block to the next (Ppad * 8)
  int64_t cblocks;
  const uint16_t* w;       // [C / 2][16][2]
  const uint16_t* w2;      // the next 16 channels' weights (a 12 x 32 tile), or null
  const float* bias;       // [32] (or [16]) or null
  EpilogueAct act;         // kNone, kRelu or kRelu6
  float* out[4];           // the 8-channel blocks' first pixels; null past the channels
  const float* res[4] = {};   // no residual on this path (a residual Conv at bf16 runs pixel-major)
  int64_t out_stride;
  int64_t count;           // pixels stored (the tile always computes 12)
};

// 12 pixels x 16 (H = 1) or 32 (H = 2) channels: with two weight vectors per step the tile issues 2 + 12 loads per
// 24 dot products instead of 1 + 12 per 12.
template <int H>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void TileBf16(const TileArgsBf16& t) {
  constexpr int NP = kWideP;
#define LITE_PW_ZERO(i) __m512 a##i = _mm512_setzero_ps(), b##i = a##i;
  LITE_PW_ROWS(LITE_PW_ZERO)
#undef LITE_PW_ZERO
  const uint16_t* x = t.x;
  const uint16_t* w = t.w;
  const uint16_t* w2 = H == 2 ? t.w2 : t.w;
  for (int64_t b = 0; b < t.cblocks; ++b, x += t.block_stride) {
#pragma GCC unroll 4
    for (int j = 0; j < kB / 2; ++j, w += 2 * kOC, w2 += 2 * kOC) {
      const __m512bh wv = (__m512bh)_mm512_loadu_si512(w);
      const __m512bh wv2 = (__m512bh)_mm512_loadu_si512(w2);
#define LITE_PW_DOT(i)                                                                            \
  {                                                                                               \
    int32_t pair;                                                                                 \
    std::memcpy(&pair, x + i * kB + 2 * j, 4);                                                    \
    const __m512bh xv = (__m512bh)_mm512_set1_epi32(pair);                                        \
    a##i = _mm512_dpbf16_ps(a##i, xv, wv);                                                        \
    if (H == 2) b##i = _mm512_dpbf16_ps(b##i, xv, wv2);                                           \
  }
      LITE_PW_ROWS(LITE_PW_DOT)
#undef LITE_PW_DOT
    }
  }
  LITE_PW_EPILOGUE
}
#undef LITE_PW_EPILOGUE
#undef LITE_PW_FAST_STORES
#undef LITE_PW_FAST_PAIR
#undef LITE_PW_STORE_PAIR
#undef LITE_PW_STORE
#undef LITE_PW_ROWS

#define LITE_PW_SIZES(H) TileAvx512<1, H>, TileAvx512<2, H>, TileAvx512<3, H>, TileAvx512<4, H>, TileAvx512<5, H>, \
    TileAvx512<6, H>, TileAvx512<7, H>, TileAvx512<8, H>, TileAvx512<9, H>, TileAvx512<10, H>, TileAvx512<11, H>,   \
    TileAvx512<12, H>
const TileFn kWideTiles[2][kWideP] = {{LITE_PW_SIZES(1)}, {LITE_PW_SIZES(2)}};   // [H - 1][NP - 1]
#undef LITE_PW_SIZES
#endif

#ifdef LITE_X86_SIMD
// float16 (precision_mode preferred_fp16 on AVX512-FP16: Sapphire Rapids and later): the input converted to float16 once
// per run ([N][C / 8][Ppad][8], as the bf16 path), 12 pixels x 32 output channels a tile on vfmadd231ph. A step takes one
// pair of input channels: each pixel's pair a 32-bit broadcast, times the pair's weights of 16 output channels (32
// lanes, the two depths side by side: the bf16 pairs' layout), so every multiply-add does 32 products where the
// float32 tile's do 16. float16 sums of kFp16RunPairs pairs at most (64 products a lane, one depth of each pair; 128
// channels) are added into float32, as the
// float16 GEMM's (cpu/gemm/bf16_gemm.cc), and a lane pair's two depths are added when the run ends.
constexpr int64_t kFp16Pixels = 12;
constexpr int64_t kFp16RunPairs = 64;

struct Fp16TileArgs {
  const uint16_t* x = nullptr;    // pixel 0's 8 halves of input block 0; the next block block_stride halves on
  int64_t block_stride = 0;
  int64_t cblocks = 0;
  const uint16_t* w = nullptr;    // [C / 2][16][2] halves: output channels 0-15 of the tile
  const uint16_t* w2 = nullptr;   // channels 16-31 (H = 2)
  const float* bias = nullptr;    // 32 values (zero past M), or null
  float* out[4] = {};             // per 8-channel block: pixel 0's 8 floats, or null (past M)
  const float* res[4] = {};       // the residual's blocks laid out as out, or null
  int64_t out_stride = 0;         // floats between two pixels of out / res
  int64_t count = 0;              // pixels stored
  int clamp = 0;                  // 1 ReLU, 2 ReLU6, 3 SiLU, else none
  float* total = nullptr;         // [kFp16Pixels][32] float32 sums between runs (C over 128 channels)
};

template <int H>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512fp16"))) void Fp16PointwiseTile(const Fp16TileArgs& t) {
  constexpr int R = kFp16Pixels;
  constexpr int64_t kRunBlocks = kFp16RunPairs / (kB / 2);   // input blocks per float16 run
  for (int64_t cb0 = 0; cb0 < t.cblocks; cb0 += kRunBlocks) {
    const int64_t cb1 = std::min(t.cblocks, cb0 + kRunBlocks);
    const bool first = cb0 == 0, last = cb1 == t.cblocks;
    __m512h acc[R][H];
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r)
      for (int h = 0; h < H; ++h) acc[r][h] = _mm512_setzero_ph();
    for (int64_t cb = cb0; cb < cb1; ++cb) {
      const uint16_t* xb = t.x + cb * t.block_stride;
      const uint16_t* wb = t.w + cb * (kB / 2) * 32;
      const uint16_t* wb2 = H == 2 ? t.w2 + cb * (kB / 2) * 32 : wb;
#pragma GCC unroll 4
      for (int j = 0; j < kB / 2; ++j) {   // the block's four channel pairs
        const __m512h b0 = _mm512_castsi512_ph(_mm512_loadu_si512(wb + j * 32));
        const __m512h b1 = H == 2 ? _mm512_castsi512_ph(_mm512_loadu_si512(wb2 + j * 32)) : b0;
#pragma GCC unroll 12
        for (int r = 0; r < R; ++r) {
          const __m512h av = BroadcastHalfPair(xb + r * kB + 2 * j);
          acc[r][0] = _mm512_fmadd_ph(av, b0, acc[r][0]);
          if constexpr (H == 2) acc[r][H - 1] = _mm512_fmadd_ph(av, b1, acc[r][H - 1]);
        }
      }
    }
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r)
      for (int h = 0; h < H; ++h) {
        const __m512i bits = _mm512_castph_si512(acc[r][h]);
        const __m512 x0 = _mm512_cvtxph_ps(_mm256_castsi256_ph(_mm512_castsi512_si256(bits)));
        const __m512 x1 = _mm512_cvtxph_ps(_mm256_castsi256_ph(_mm512_extracti64x4_epi64(bits, 1)));
        float* tot = t.total + r * 32 + 16 * h;
        __m512 sum = AddDepthLanes(x0, x1);
        if (!first) sum = _mm512_add_ps(sum, _mm512_loadu_ps(tot));
        if (!last) {
          _mm512_storeu_ps(tot, sum);
          continue;
        }
        if (r >= t.count) continue;
        // The epilogue in registers: bias, residual, ReLU / ReLU6 (vmaxps / vminps return their second operand where
        // either is NaN: the sum goes second, so a NaN stays NaN, as the float32 tiles'), the two 8-channel blocks
        // stored.
        if (t.bias) sum = _mm512_add_ps(sum, _mm512_loadu_ps(t.bias + 16 * h));
        __m256 half[2] = {_mm512_castps512_ps256(sum), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(sum), 1))};
        for (int k = 0; k < 2; ++k) {
          float* o = t.out[2 * h + k];
          if (!o) continue;
          __m256 v = half[k];
          if (t.res[2 * h + k]) v = _mm256_add_ps(v, _mm256_loadu_ps(t.res[2 * h + k] + r * t.out_stride));
          if (t.clamp == 3) {
            v = FastSiluVec(v);
          } else {
            if (t.clamp) v = _mm256_max_ps(_mm256_setzero_ps(), v);
            if (t.clamp == 2) v = _mm256_min_ps(_mm256_set1_ps(6.f), v);
          }
          _mm256_storeu_ps(o + r * t.out_stride, v);
        }
      }
  }
}
#endif

#ifdef LITE_ARM64_SIMD
// float16 (precision_mode preferred_fp16 on ARMv8.2 FP16): 4 pixels x 16 output channels, fmla .8h by element (each
// input channel's 16 weights two vectors, each pixel's 8 channels of a block one float16 vector converted from the
// float32 input), float16 sums over runs of 64 input channels added into float32 (as the float16 GEMM: float16 sums
// of at most 64 products). Per input block 64 fmla .8h and 8 conversions where the float32 tile issues 128 fmla.
constexpr int kHalfPixels = 4;
constexpr int64_t kHalfRunBlocks = 8;   // input blocks (64 channels) summed in float16 at a time

struct HalfTileArgs {
  const float* px[kHalfPixels];   // each pixel's 8 channels of input block 0 (a short tile repeats its last pixel)
  int64_t block_stride = 0;       // floats between input blocks (P x 8)
  int64_t cblocks = 0;
  const uint16_t* w = nullptr;    // [C][16] float16 weights of the 16 output channels
  const float* bias = nullptr;    // 16 values, or null
  float* out[2] = {};             // per 8-channel half: pixel 0's 8 floats, or null (past M)
  const float* res[2] = {};       // the residual's halves laid out as out (added before the clamp), or null
  int64_t out_stride = 0;         // floats between two pixels of out / res
  int64_t count = 0;              // pixels stored
  int clamp = 0;                  // 1 ReLU, 2 ReLU6 (in registers), else none
};

// One run of `blocks` (> 0) input blocks for the 4 pixels (p[r]: each pixel's block, `stride` bytes to the next
// block) into acc (4 pixels x 2 vectors of 8 halves): per block each pixel's 8 float32 channels converted into a
// float16 vector (v0-v3), then per channel its 16 weights (two vectors) times one lane of each pixel's vector: 64
// fmla .8h by element, the even channels' into v16-v23 (weights in v4-v5) and the odd ones' into v24-v31 (v6-v7),
// added at the end: 16 chains for four-pipe cores (V1's model: 24 cycles a block, 32 with 8 chains). In assembly:
// GCC 12 made the intrinsics' lane multiplies into dup + fmla (28 dup per 64 fmla: 58 cycles a block on N1, now 44).
#define LITE_HALF_CHANNEL(k, w0, w1, a0, a1, a2, a3, a4, a5, a6, a7)                                    \
  "ldp q" #w0 ", q" #w1 ", [%[w]], #32\n\t"                                                              \
  "fmla v" #a0 ".8h, v" #w0 ".8h, v0.h[" #k "]\n\t fmla v" #a1 ".8h, v" #w1 ".8h, v0.h[" #k "]\n\t"       \
  "fmla v" #a2 ".8h, v" #w0 ".8h, v1.h[" #k "]\n\t fmla v" #a3 ".8h, v" #w1 ".8h, v1.h[" #k "]\n\t"       \
  "fmla v" #a4 ".8h, v" #w0 ".8h, v2.h[" #k "]\n\t fmla v" #a5 ".8h, v" #w1 ".8h, v2.h[" #k "]\n\t"       \
  "fmla v" #a6 ".8h, v" #w0 ".8h, v3.h[" #k "]\n\t fmla v" #a7 ".8h, v" #w1 ".8h, v3.h[" #k "]\n\t"
#define LITE_HALF_EVEN(k) LITE_HALF_CHANNEL(k, 4, 5, 16, 17, 18, 19, 20, 21, 22, 23)
#define LITE_HALF_ODD(k) LITE_HALF_CHANNEL(k, 6, 7, 24, 25, 26, 27, 28, 29, 30, 31)
#define LITE_HALF_PIXEL(ptr, v)                                                                           \
  "ldp q8, q9, [%[" ptr "]]\n\t add %[" ptr "], %[" ptr "], %[stride]\n\t"                                \
  "fcvtn " v ".4h, v8.4s\n\t fcvtn2 " v ".8h, v9.4s\n\t"
__attribute__((target("arch=armv8.2-a+fp16"))) void HalfRun(const float* const (&p)[kHalfPixels], int64_t stride,
                                                             int64_t blocks, const uint16_t* w, uint16_t* acc) {
  const float *p0 = p[0], *p1 = p[1], *p2 = p[2], *p3 = p[3];
  uint16_t* out = acc;
  asm volatile(
      LITE_ASM_ZERO_V16_V31
      "1:\n\t"
      LITE_HALF_PIXEL("p0", "v0") LITE_HALF_PIXEL("p1", "v1") LITE_HALF_PIXEL("p2", "v2") LITE_HALF_PIXEL("p3", "v3")
      LITE_HALF_EVEN(0) LITE_HALF_ODD(1) LITE_HALF_EVEN(2) LITE_HALF_ODD(3)
      LITE_HALF_EVEN(4) LITE_HALF_ODD(5) LITE_HALF_EVEN(6) LITE_HALF_ODD(7)
      "subs %[n], %[n], #1\n\t"
      "bne 1b\n\t"
      LITE_ASM_FOLD_V24_V31_8H
      LITE_ASM_STORE4("v16", "v17", "v18", "v19", "8h") LITE_ASM_STORE4("v20", "v21", "v22", "v23", "8h")
      : [p0] "+r"(p0), [p1] "+r"(p1), [p2] "+r"(p2), [p3] "+r"(p3), [w] "+r"(w), [n] "+r"(blocks), [out] "+r"(out)
      : [stride] "r"(stride)
      : "v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9", "v16", "v17", "v18", "v19", "v20", "v21", "v22",
        "v23", "v24", "v25", "v26", "v27", "v28", "v29", "v30", "v31", "cc", "memory");
}
#undef LITE_HALF_PIXEL
#undef LITE_HALF_ODD
#undef LITE_HALF_EVEN
#undef LITE_HALF_CHANNEL

__attribute__((target("arch=armv8.2-a+fp16"))) void HalfTile(const HalfTileArgs& t) {
  constexpr int R = kHalfPixels;
  float32x4_t tot[R][4];
  for (int r = 0; r < R; ++r)
    for (int q = 0; q < 4; ++q) tot[r][q] = t.bias ? vld1q_f32(t.bias + 4 * q) : vdupq_n_f32(0.f);
  const int64_t stride = t.block_stride * static_cast<int64_t>(sizeof(float));
  for (int64_t cb0 = 0; cb0 < t.cblocks; cb0 += kHalfRunBlocks) {
    const int64_t cb1 = std::min(t.cblocks, cb0 + kHalfRunBlocks);
    const float* const px[R] = {t.px[0] + cb0 * t.block_stride, t.px[1] + cb0 * t.block_stride,
                                t.px[2] + cb0 * t.block_stride, t.px[3] + cb0 * t.block_stride};
    alignas(16) uint16_t halves[R * 2 * 8];
    HalfRun(px, stride, cb1 - cb0, t.w + cb0 * kB * kOC, halves);
    float16x8_t acc[R][2];
    for (int r = 0; r < R; ++r)
      for (int h = 0; h < 2; ++h) acc[r][h] = vreinterpretq_f16_u16(vld1q_u16(halves + (r * 2 + h) * 8));
    for (int r = 0; r < R; ++r) {
      tot[r][0] = vaddq_f32(tot[r][0], vcvt_f32_f16(vget_low_f16(acc[r][0])));
      tot[r][1] = vaddq_f32(tot[r][1], vcvt_high_f32_f16(acc[r][0]));
      tot[r][2] = vaddq_f32(tot[r][2], vcvt_f32_f16(vget_low_f16(acc[r][1])));
      tot[r][3] = vaddq_f32(tot[r][3], vcvt_high_f32_f16(acc[r][1]));
    }
  }
  for (int r = 0; r < R; ++r) {
    if (r >= t.count) break;
    for (int h = 0; h < 2; ++h) {
      if (!t.out[h]) continue;
      float32x4_t lo = tot[r][2 * h], hi = tot[r][2 * h + 1];
      if (t.res[h]) {
        lo = vaddq_f32(lo, vld1q_f32(t.res[h] + r * t.out_stride));
        hi = vaddq_f32(hi, vld1q_f32(t.res[h] + r * t.out_stride + 4));
      }
      if (t.clamp) {   // fmax returns a NaN operand: a NaN keeps its NaN, as the float32 tiles' comparisons do
        lo = vmaxq_f32(lo, vdupq_n_f32(0.f)), hi = vmaxq_f32(hi, vdupq_n_f32(0.f));
        if (t.clamp == 2) lo = vminq_f32(lo, vdupq_n_f32(6.f)), hi = vminq_f32(hi, vdupq_n_f32(6.f));
      }
      vst1q_f32(t.out[h] + r * t.out_stride, lo);
      vst1q_f32(t.out[h] + r * t.out_stride + 4, hi);
    }
  }
}
#endif

// One task of the reduced-precision tiles' runs (RunBf16, RunFp16X86): (image, pixel chunk, 32-channel output block),
// block-minor, so a thread reuses a chunk's input for every block.
struct HalfTask {
  int64_t n, chunk, m0, mcount;
  bool two;   // a second 16-channel half
  HalfTask(int64_t t, int64_t chunks, int64_t oblocks, int64_t M)
      : n(t / (chunks * oblocks)), chunk(t / oblocks % chunks), m0(t % oblocks * 2 * kOC),
        mcount(std::min(2 * kOC, M - m0)), two(mcount > kOC) {}
};

#ifdef LITE_X86_SIMD
// The blocked input as bf16 or float16 halves, once per run: [N][C / 8][Ppad][8], the padding pixels zero (a buffer
// of the calling thread's, read by the run's tasks).
const uint16_t* ToHalfBlocks(const float* x, int64_t N, int64_t cblocks, int64_t P, int64_t ppad, HalfFormat format,
                             ThreadPool* pool) {
  thread_local std::vector<uint16_t> halves;
  halves.resize(static_cast<size_t>(N * cblocks * ppad * kB));
  uint16_t* h = halves.data();
  auto convert = [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) FloatsToHalves(x + b * P * kB, P * kB, ppad * kB, h + b * ppad * kB, format, 1.f);
  };
  if (pool) pool->ParallelFor(N * cblocks, 1, convert); else convert(0, N * cblocks);
  return h;
}

// A tile's sums (pixels x channels, 32 floats a pixel) into an NCHW output (channels x pixels), the residual added.
void StoreTransposed(const float* sums, int64_t count, int64_t mcount, int64_t P, const float* res, float* out) {
  for (int64_t j = 0; j < mcount; ++j)
    for (int64_t i = 0; i < count; ++i) out[j * P + i] = sums[i * 2 * kOC + j] + (res ? res[j * P + i] : 0.f);
}
#endif

// The bias of output channels [m0, m0 + mcount) padded with zeros to 32 in block_bias, or null without a bias.
const float* BlockBias(const float* bias, int64_t m0, int64_t mcount, float* block_bias) {
  if (!bias) return nullptr;
  if (mcount == 2 * kOC) return bias + m0;   // whole: no copy
  std::fill(block_bias, block_bias + 2 * kOC, 0.f);
  std::copy(bias + m0, bias + m0 + mcount, block_bias);
  return block_bias;
}

// An activation the tiles do not apply (not ReLU/ReLU6), over pixels [p0, p1) of channels [m0, m0 + mcount) of one
// image's output y (P pixels per channel), after the tiles stored them.
void ActivationAfter(EpilogueAct act, bool blocked, float* y, int64_t P, int64_t m0, int64_t mcount, int64_t p0,
                     int64_t p1) {
  GemmEpilogue only;
  only.act = act;
  if (blocked) {   // elementwise: each 8-channel block's run is one row
    for (int64_t b = m0 / kB; b < (m0 + mcount) / kB; ++b)
      ApplyEpilogue(y + b * P * kB, 0, 0, 1, p0 * kB, (p1 - p0) * kB, only);
  } else {
    ApplyEpilogue(y, P, m0, mcount, p0, p1 - p0, only);
  }
}

#ifdef LITE_X86_SIMD
// The float16 tiles on AVX512-FP16 CPUs: LITE_FP16_POINTWISE=0 keeps the float32 tiles there (A/B).
bool Fp16TilesRule() {
  static const bool on = [] {
    const char* v = std::getenv("LITE_FP16_POINTWISE");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return on;
}
#endif

}  // namespace

// The bf16 tiles are AVX512_BF16 code: elsewhere (ARM's BF16) the float32 tiles serve (bf16 permits the rounding,
// it does not require it). The float16 tiles are ARM64's (FP16 arithmetic) and AVX512-FP16's.
BlockedPointwiseConv::BlockedPointwiseConv(int64_t C, int64_t M, const float* w, bool bf16, bool fp16)
    : C_(C), M_(M), bf16_(bf16 && CpuHasAvx512Bf16()), fp16_(fp16 && !bf16_ && HalfTilesAvailable()) {
  const int64_t blocks = (M + kOC - 1) / kOC;
  if (fp16_) {
    packed_w16_.assign(static_cast<size_t>(blocks * C * kOC), 0);
#ifdef LITE_X86_SIMD
    // AVX512-FP16: pairs of input channels side by side, [ceil(M / 16)][C / 2][16][2] (see Fp16PointwiseTile)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t c = 0; c < C; ++c)
        packed_w16_[(((m / kOC) * (C / 2) + c / 2) * kOC + m % kOC) * 2 + c % 2] = FloatToFp16(w[m * C + c]);
#else
    for (int64_t m = 0; m < M; ++m)
      for (int64_t c = 0; c < C; ++c) packed_w16_[((m / kOC) * C + c) * kOC + m % kOC] = FloatToFp16(w[m * C + c]);
#endif
    return;
  }
  if (bf16_) {
    packed_w16_.assign(static_cast<size_t>(blocks * C * kOC), 0);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t c = 0; c < C; ++c)
        packed_w16_[(((m / kOC) * (C / 2) + c / 2) * kOC + m % kOC) * 2 + c % 2] = FloatToBf16(w[m * C + c]);
    return;
  }
  packed_w_.assign(static_cast<size_t>(blocks * C * kOC), 0.f);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t c = 0; c < C; ++c) packed_w_[((m / kOC) * C + c) * kOC + m % kOC] = w[m * C + c];
}

void BlockedPointwiseConv::Run(int64_t N, int64_t P, const float* x, const float* bias, EpilogueAct act,
                               bool out_blocked, float* y, ThreadPool* pool, const float* residual) const {
  if (bf16_) {
    if (residual) throw std::logic_error("bf16 blocked pointwise convolution takes no residual");
    return RunBf16(N, P, x, bias, act, out_blocked, y, pool);
  }
  if (fp16_) return RunFp16(N, P, x, bias, act, out_blocked, y, pool, residual);
  static const TileFn tile = PickIsaKernel<TileFn>(TilePortable, LITE_IF_X86_SIMD(TileAvx2), nullptr).fn;
  static const bool wide = PickIsaKernel<TileFn>(nullptr, nullptr, LITE_IF_X86_SIMD(kWideTiles[0][0])).fn != nullptr;
  // Chunks of kChunkTiles x 6 pixels, the last one taking the remainder (a short chunk of its own would read every
  // weight of the block again for a few pixels: MobileNetV2's 49-pixel planes).
  // Shallow products (16-40 input channels) take longer chunks, as many whole 48-pixel runs as 16 KiB of input holds,
  // up to 192 pixels: fewer tasks, each with its fixed costs (MobileNetV2's 16-channel expansion 0.96x the time,
  // MobileNetV2 0.983x at two threads).
  int64_t chunk_px = std::max(kChunkTiles * kP, std::min<int64_t>(192, (4096 / C_) / (kChunkTiles * kP) *
                                                                              (kChunkTiles * kP)));
  int64_t chunks = std::max<int64_t>(1, P / chunk_px);
  // With the AVX-512 tiles, output channels are taken 32 at a time (the last 16 alone).
  const int64_t ob_width = wide ? 2 * kOC : kOC, oblocks = (M_ + ob_width - 1) / ob_width;
  // Too few tasks to deal out evenly (MobileNetV2's 7x7 reductions to 160 channels: 5 output blocks, 3 + 2 at two
  // threads): a pixel chunk per thread instead, each reading all the weights (those layers 0.86-0.95x the time at
  // two threads, MobileNetV2 0.992x; 16-channel tiles, the other way to even the deal, ran 1.3x slower).
  const int64_t threads = pool ? pool->size() : 1;
  if (threads > 1 && (N * chunks * oblocks) % threads != 0 && N * chunks * oblocks < 4 * threads &&
      P >= threads * 4 * kP) {
    chunks = threads;
    chunk_px = (P / threads + 2 * kP - 1) / (2 * kP) * (2 * kP);
  }
  // An NCHW output's residual is added in the transposing copy, so its activation comes after that.
  const bool act_in_tile = (act == EpilogueAct::kNone || act == EpilogueAct::kRelu || act == EpilogueAct::kRelu6 ||
                            act == EpilogueAct::kSilu) && !(residual && !out_blocked);
  // Tasks (image, pixel chunk, output block), block-minor: a thread reuses a chunk's input for every block.
  pool->ParallelFor(N * chunks * oblocks, 1, [&](int64_t tb, int64_t te) {
    alignas(64) float sums[2 * kP * 2 * kOC];
    alignas(64) float block_bias[2 * kOC];
    for (int64_t t = tb; t < te; ++t) {
      const int64_t n = t / (chunks * oblocks), chunk = t / oblocks % chunks, ob = t % oblocks;
      const int64_t m0 = ob * ob_width, mcount = std::min(ob_width, M_ - m0), halves = (mcount + kOC - 1) / kOC;
      const float* xn = x + n * C_ * P;
      float* yn = y + n * M_ * P;
      const float* rn = residual ? residual + n * M_ * P : nullptr;
      const float* w0 = packed_w_.data() + (m0 / kOC) * C_ * kOC;
      TileArgs a;
      a.prefetch_once = WeightPrefetchNonTemporal() && N * chunks == 1;
      a.block_stride = P * kB;
      a.cblocks = C_ / kB;
      a.act = act_in_tile ? act : EpilogueAct::kNone;
      a.bias = BlockBias(bias, m0, mcount, block_bias);
      // The output's 8-channel blocks for the tile at pixel p0 (NCHW: the local sums, 32 floats per pixel).
      auto set_outputs = [&](int64_t p0, int first_block) {
        for (int h = 0; h < 4; ++h) {
          const int64_t blk = first_block + h, at = (m0 / kB + blk) * P * kB + p0 * kB;
          a.out[h] = blk * kB >= mcount ? nullptr : out_blocked ? yn + at : sums + blk * kB;
          a.res[h] = blk * kB >= mcount || !out_blocked || !rn ? nullptr : rn + at;
        }
        a.out_stride = out_blocked ? kB : 2 * kOC;
      };
      const int64_t p_begin = chunk * chunk_px, p_end = chunk + 1 == chunks ? P : p_begin + chunk_px;
      // With the AVX-512 tiles, the chunk in equal tiles of up to 12 pixels; else in 6-pixel tiles.
      const int64_t wide_tiles = (p_end - p_begin + kWideP - 1) / kWideP;
      // On the first chunk the next output block's weights (the task that follows, on this or the other thread) come
      // from L3 or memory: each tile prefetches its share of them into L2, a few lines per input block (all at the
      // tile's start, the prefetches queued behind each other and held up the tile's own loads: 960-channel
      // reductions 1.1x slower).
      const int64_t tiles = wide ? wide_tiles : (p_end - p_begin + kP - 1) / kP;
      const char* next_w = nullptr;
      int64_t next_lines = 0, lines_per_tile = 0, line = 0;
      if (chunk == 0 && m0 + ob_width < M_) {   // later chunks find the weights in L2 (1.05x slower with it)
        next_w = reinterpret_cast<const char*>(w0 + (ob_width / kOC) * C_ * kOC);
        next_lines = std::min(ob_width, M_ - m0 - ob_width) * C_ * static_cast<int64_t>(sizeof(float)) / 64;
        lines_per_tile = (next_lines + tiles - 1) / tiles;
      }
      for (int64_t p0 = p_begin, tile_no = 0; p0 < p_end; ++tile_no) {
        const int64_t share = std::min(next_lines - line, lines_per_tile);
        a.prefetch = next_w + line * 64;
        a.prefetch_lines = share;
        a.prefetch_per_block = (share + a.cblocks - 1) / a.cblocks;
        line += share;
        const int64_t count = wide ? (p_end - p_begin) * (tile_no + 1) / wide_tiles - (p0 - p_begin)
                                   : std::min(kP, p_end - p0);
        for (int64_t i = 0; i < kP; ++i) a.px[i] = xn + (p0 + std::min(i, count - 1)) * kB;
        a.count = count;
        if (wide) {
#ifdef LITE_X86_SIMD
          a.w = w0;
          a.w2 = halves == 2 ? w0 + C_ * kOC : nullptr;
          set_outputs(p0, 0);
          kWideTiles[halves - 1][count - 1](a);
#endif
        } else {   // the 6-pixel tile, 16 channels per call
          const float* full_bias = a.bias;
          for (int64_t h = 0; h < halves; ++h) {
            a.w = w0 + h * C_ * kOC;
            a.bias = full_bias ? full_bias + h * kOC : nullptr;
            set_outputs(p0, static_cast<int>(2 * h));
            tile(a);
            a.prefetch_lines = 0;   // the tile's share, fetched by its first half
          }
          a.bias = full_bias;
        }
        if (!out_blocked) {   // the tile holds pixels x channels; NCHW wants channels x pixels
          float* out = yn + m0 * P + p0;
          if (rn) {
            const float* res = rn + m0 * P + p0;
            for (int64_t j = 0; j < mcount; ++j)
              for (int64_t i = 0; i < count; ++i) out[j * P + i] = sums[i * 2 * kOC + j] + res[j * P + i];
          } else {
            for (int64_t j = 0; j < mcount; ++j)
              for (int64_t i = 0; i < count; ++i) out[j * P + i] = sums[i * 2 * kOC + j];
          }
        }
        p0 += count;
      }
      if (!act_in_tile) ActivationAfter(act, out_blocked, yn, P, m0, mcount, p_begin, p_end);
    }
  });
}

void BlockedPointwiseConv::RunBf16(int64_t N, int64_t P, const float* x, const float* bias, EpilogueAct act,
                                   bool out_blocked, float* y, ThreadPool* pool) const {
#ifdef LITE_X86_SIMD
  constexpr int64_t kT = kWideP;   // pixels per tile, always computed (the converted input is padded to a multiple)
  // Output blocks are taken 32 channels at a time (the last 16 alone).
  const int64_t cblocks = C_ / kB, ppad = (P + kT - 1) / kT * kT, oblocks = (M_ + 2 * kOC - 1) / (2 * kOC);
  const uint16_t* xb = ToHalfBlocks(x, N, cblocks, P, ppad, HalfFormat::kBf16, pool);
  const int64_t chunk_px = 4 * kT, chunks = (ppad + chunk_px - 1) / chunk_px;
  const bool act_in_tile = act == EpilogueAct::kNone || act == EpilogueAct::kRelu || act == EpilogueAct::kRelu6;
  pool->ParallelFor(N * chunks * oblocks, 1, [&](int64_t tb, int64_t te) {
    alignas(64) float sums[kT * 2 * kOC];
    alignas(64) float block_bias[2 * kOC];
    for (int64_t t = tb; t < te; ++t) {
      const HalfTask k(t, chunks, oblocks, M_);
      const int64_t m0 = k.m0, mcount = k.mcount;
      float* yn = y + k.n * M_ * P;
      TileArgsBf16 a;
      a.block_stride = ppad * kB;
      a.cblocks = cblocks;
      a.w = packed_w16_.data() + (m0 / kOC) * C_ * kOC;
      a.w2 = k.two ? a.w + C_ * kOC : nullptr;
      a.act = act_in_tile ? act : EpilogueAct::kNone;
      a.bias = BlockBias(bias, m0, mcount, block_bias);
      const auto tile = k.two ? TileBf16<2> : TileBf16<1>;
      const int64_t p_begin = k.chunk * chunk_px, p_end = std::min(P, p_begin + chunk_px);
      for (int64_t p0 = p_begin; p0 < p_end; p0 += kT) {
        const int64_t count = std::min(kT, p_end - p0);
        a.x = xb + k.n * cblocks * ppad * kB + p0 * kB;
        a.count = count;
        if (out_blocked) {
          for (int h = 0; h < 4; ++h)
            a.out[h] = h * kB < mcount ? yn + (m0 / kB + h) * P * kB + p0 * kB : nullptr;
          a.out_stride = kB;
          tile(a);
          continue;
        }
        for (int h = 0; h < 4; ++h) a.out[h] = h * kB < mcount ? sums + h * kB : nullptr;
        a.out_stride = 2 * kOC;
        tile(a);
        StoreTransposed(sums, count, mcount, P, nullptr, yn + m0 * P + p0);
      }
      if (!act_in_tile && p_begin < p_end) ActivationAfter(act, out_blocked, yn, P, m0, mcount, p_begin, p_end);
    }
  });
#else
  (void)N, (void)P, (void)x, (void)bias, (void)act, (void)out_blocked, (void)y, (void)pool;
  throw std::logic_error("bf16 pointwise convolution needs AVX512_BF16");
#endif
}

bool BlockedPointwiseConv::UseHalfTiles(int64_t C, int64_t M) {
  if (!HalfTilesAvailable()) return false;
#ifdef LITE_X86_SIMD
  return C >= 32 && M >= 32;
#else
  (void)C, (void)M;
  return true;
#endif
}

bool BlockedPointwiseConv::HalfTilesAvailable() {
#ifdef LITE_X86_SIMD
  if (Fp16TilesRule() && CpuHasAvx512Fp16()) return true;
#endif
  return CpuArmFeatures().fp16;   // (all false off ARM64)
}

void BlockedPointwiseConv::RunFp16(int64_t N, int64_t P, const float* x, const float* bias, EpilogueAct act,
                                   bool out_blocked, float* y, ThreadPool* pool, const float* residual) const {
#ifdef LITE_ARM64_SIMD
  const int64_t cblocks = C_ / kB, oblocks = (M_ + kOC - 1) / kOC;
  const int64_t chunk_px = kChunkTiles * kP, chunks = (P + chunk_px - 1) / chunk_px;
  // An NCHW output's residual is added in the transposing copy, so its activation comes after that.
  const bool act_in_tile = (act == EpilogueAct::kNone || act == EpilogueAct::kRelu || act == EpilogueAct::kRelu6) &&
                           !(residual && !out_blocked);
  const int clamp = !act_in_tile ? 0 : act == EpilogueAct::kRelu ? 1 : act == EpilogueAct::kRelu6 ? 2 : 0;
  // Tasks (image, pixel chunk, output block), block-minor: a thread reuses a chunk's input for every block.
  auto tasks = [&](int64_t tb, int64_t te) {
    alignas(16) float sums[kHalfPixels * kOC];
    alignas(16) float block_bias[kOC];
    for (int64_t t = tb; t < te; ++t) {
      const int64_t n = t / (chunks * oblocks), chunk = t / oblocks % chunks, ob = t % oblocks;
      const int64_t m0 = ob * kOC, mcount = std::min(kOC, M_ - m0);
      const float* xn = x + n * C_ * P;
      float* yn = y + n * M_ * P;
      const float* rn = residual ? residual + n * M_ * P : nullptr;
      HalfTileArgs a;
      a.block_stride = P * kB;
      a.cblocks = cblocks;
      a.w = packed_w16_.data() + ob * C_ * kOC;
      a.clamp = clamp;
      if (bias && mcount < kOC) {
        std::fill(block_bias, block_bias + kOC, 0.f);
        std::copy(bias + m0, bias + m0 + mcount, block_bias);
        a.bias = block_bias;
      } else {
        a.bias = bias ? bias + m0 : nullptr;
      }
      const int64_t p_begin = chunk * chunk_px, p_end = std::min(P, p_begin + chunk_px);
      for (int64_t p0 = p_begin; p0 < p_end; p0 += kHalfPixels) {
        const int64_t count = std::min<int64_t>(kHalfPixels, p_end - p0);
        for (int64_t i = 0; i < kHalfPixels; ++i) a.px[i] = xn + (p0 + std::min(i, count - 1)) * kB;
        a.count = count;
        for (int h = 0; h < 2; ++h) {
          const bool used = h * kB < mcount;
          const int64_t at = (m0 / kB + h) * P * kB + p0 * kB;
          a.out[h] = !used ? nullptr : out_blocked ? yn + at : sums + h * kB;
          a.res[h] = used && out_blocked && rn ? rn + at : nullptr;
        }
        a.out_stride = out_blocked ? kB : kOC;
        HalfTile(a);
        if (out_blocked) continue;
        float* out = yn + m0 * P + p0;   // the tile holds pixels x channels; NCHW wants channels x pixels
        const float* res = rn ? rn + m0 * P + p0 : nullptr;
        for (int64_t j = 0; j < mcount; ++j)
          for (int64_t i = 0; i < count; ++i) out[j * P + i] = sums[i * kOC + j] + (res ? res[j * P + i] : 0.f);
      }
      if (!act_in_tile && p_begin < p_end) ActivationAfter(act, out_blocked, yn, P, m0, mcount, p_begin, p_end);
    }
  };
  if (pool) pool->ParallelFor(N * chunks * oblocks, 1, tasks); else tasks(0, N * chunks * oblocks);
#elif defined(LITE_X86_SIMD)
  RunFp16X86(N, P, x, bias, act, out_blocked, y, pool, residual);
#else
  (void)N, (void)P, (void)x, (void)bias, (void)act, (void)out_blocked, (void)y, (void)pool, (void)residual;
  throw std::logic_error("float16 pointwise convolution needs ARM64 FP16 or AVX512-FP16 arithmetic");
#endif
}

#ifdef LITE_X86_SIMD
void BlockedPointwiseConv::RunFp16X86(int64_t N, int64_t P, const float* x, const float* bias, EpilogueAct act,
                                      bool out_blocked, float* y, ThreadPool* pool, const float* residual) const {
  constexpr int64_t kT = kFp16Pixels;
  const int64_t cblocks = C_ / kB, ppad = (P + kT - 1) / kT * kT, oblocks = (M_ + 2 * kOC - 1) / (2 * kOC);
  const uint16_t* xh = ToHalfBlocks(x, N, cblocks, P, ppad, HalfFormat::kFp16, pool);
  const int64_t chunk_px = 4 * kT, chunks = (ppad + chunk_px - 1) / chunk_px;
  // An NCHW output's residual is added in the transposing copy, so its activation comes after that.
  const bool act_in_tile = (act == EpilogueAct::kNone || act == EpilogueAct::kRelu || act == EpilogueAct::kRelu6 ||
                            act == EpilogueAct::kSilu) && !(residual && !out_blocked);
  const int clamp = !act_in_tile ? 0 : act == EpilogueAct::kRelu ? 1 : act == EpilogueAct::kRelu6 ? 2
                    : act == EpilogueAct::kSilu ? 3 : 0;
  auto tasks = [&](int64_t tb, int64_t te) {
    alignas(64) float total[kT * 2 * kOC];
    alignas(64) float sums[kT * 2 * kOC];
    alignas(64) float block_bias[2 * kOC];
    for (int64_t t = tb; t < te; ++t) {
      const HalfTask k(t, chunks, oblocks, M_);
      const int64_t m0 = k.m0, mcount = k.mcount;
      float* yn = y + k.n * M_ * P;
      const float* rn = residual ? residual + k.n * M_ * P : nullptr;
      Fp16TileArgs a;
      a.block_stride = ppad * kB;
      a.cblocks = cblocks;
      a.w = packed_w16_.data() + (m0 / kOC) * C_ * kOC;
      a.w2 = k.two ? a.w + C_ * kOC : nullptr;
      a.bias = BlockBias(bias, m0, mcount, block_bias);
      a.clamp = clamp;
      a.total = total;
      const int64_t p_begin = k.chunk * chunk_px, p_end = std::min(P, p_begin + chunk_px);
      for (int64_t p0 = p_begin; p0 < p_end; p0 += kT) {
        const int64_t count = std::min(kT, p_end - p0);
        a.x = xh + k.n * cblocks * ppad * kB + p0 * kB;
        a.count = count;
        for (int q = 0; q < 4; ++q) {
          const bool used = q * kB < mcount;
          const int64_t at = (m0 / kB + q) * P * kB + p0 * kB;
          a.out[q] = !used ? nullptr : out_blocked ? yn + at : sums + q * kB;
          a.res[q] = used && out_blocked && rn ? rn + at : nullptr;
        }
        a.out_stride = out_blocked ? kB : 2 * kOC;
        if (k.two) Fp16PointwiseTile<2>(a); else Fp16PointwiseTile<1>(a);
        if (!out_blocked) StoreTransposed(sums, count, mcount, P, rn ? rn + m0 * P + p0 : nullptr, yn + m0 * P + p0);
      }
      if (!act_in_tile && p_begin < p_end) ActivationAfter(act, out_blocked, yn, P, m0, mcount, p_begin, p_end);
    }
  };
  if (pool) pool->ParallelFor(N * chunks * oblocks, 1, tasks); else tasks(0, N * chunks * oblocks);
}
#endif

}  // namespace lite
