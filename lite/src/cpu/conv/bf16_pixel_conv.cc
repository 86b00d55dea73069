// bf16 pixel-major convolution: see bf16_pixel_conv.h. Register tile: R <= 8 output pixels x 32 output channels
// (16 zmm of float32 sums, as the bf16 GEMM's tile), a depth pair of each pixel broadcast from its input row.
// Blocking: a task owns a run of output pixels and up to four 32-channel panels; per depth block (whole taps, or
// part of one tap's channels, <= 128 pairs) a panel's weights (<= 16 KiB) stay in L1 while the pixel rows stream
// (cpu/conv/pixel_tiling.h's ForEachPixelTile).
#include "cpu/conv/bf16_pixel_conv.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <utility>

#include "cpu/amx.h"
#include "cpu/gemm/bf16_pairs.h"
#include "cpu/isa_dispatch.h"
#include "cpu/simd/vmath.h"
#include "cpu/conv/pixel_depth_loop.h"
#include "cpu/onednn/onednn_library.h"
#include "cpu/simd/transpose8x8.h"

#ifdef LITE_X86_SIMD
#include <immintrin.h>
#endif

namespace lite {
namespace {

constexpr int kTileRows = 8;
// Depth pairs per block: a 32-column panel's share is 16 KiB, in L1 beside the input rows a tile streams (ResNet-50
// bf16: 0.977x the time of 256 pairs, 1.02x that of 64 or 96).
constexpr int64_t kBlockPairs = 128;
// AMX: tiles of up to 32 pixels (two 16-row A tiles); depth blocks of up to 1024 pairs (a panel's share 128 KiB, in
// L2: a tile's sums go through memory once per block).
constexpr int64_t kAmxTileRows = 32;
constexpr int64_t kAmxBlockPairs = 1024;

// Where a tile's sums go (partial sums; after the last depth block 8-channel blocks of the blocked layout, block j
// of row r at y + j * plane + 8 pixel[r], or bf16 rows), and what is applied after the last depth block.
struct TileOut {
  float* y = nullptr;                  // block 0 of the tile's first channel
  const int32_t* pixel = nullptr;      // the output pixel of each of the tile's rows
  int64_t plane = 0;
  int blocks = 4;                      // blocks of 8 channels stored (1-4)
  float* partial = nullptr;            // the sums of the depth blocks so far: row r at partial + 32 r
  bool accumulate = false;             // start from the partial sums of the previous depth blocks (else the bias)
  bool final = true;                   // the last depth block: apply the epilogue and store the result, not partials
  const float* col_bias = nullptr;     // per output channel, at the tile's first (the first depth block's start)
  const float* residual = nullptr;     // blocked like y, at block 0 of the tile's first channel
  const uint16_t* residual16 = nullptr;   // or bf16 rows (ld16 apart), at the tile's first channel
  const float* residual_nchw = nullptr;   // or NCHW planes (plane floats apart), at the tile's first channel
  uint16_t* y16 = nullptr;             // the result as bf16 rows (ld16 apart) at the first channel, instead of y
  int64_t ld16 = 0;
  int clamp = 0;                       // 1 ReLU, 2 ReLU6, 3 SiLU
  const char* prefetch = nullptr;      // lines of the next panel's weights to fetch during the depth loop
  int64_t prefetch_lines = 0;
  uint32_t last_mask = 0xFFFFFFFFu;    // ANDed into each run's last pair (a stem's odd run: see FewChannelLayout)
};

#ifdef LITE_X86_SIMD
#define LITE_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

LITE_BF16_TARGET inline __m512 Join(__m256 lo, __m256 hi) {
  return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1));
}
LITE_BF16_TARGET inline __m256 UpperHalf(__m512 v) {
  return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
}
// Blocks j and j + 1 of pixel row `at` (block j + 1 only if it is stored) as one 16-lane vector.
LITE_BF16_TARGET inline __m512 LoadPair(const float* at, int64_t plane, int j, int blocks) {
  const __m256 a = j < blocks ? _mm256_loadu_ps(at + j * plane) : _mm256_setzero_ps();
  const __m256 b = j + 1 < blocks ? _mm256_loadu_ps(at + (j + 1) * plane) : _mm256_setzero_ps();
  return Join(a, b);
}
LITE_BF16_TARGET inline void StorePair(float* at, int64_t plane, int j, int blocks, __m512 v) {
  if (j < blocks) _mm256_storeu_ps(at + j * plane, _mm512_castps512_ps256(v));
  if (j + 1 < blocks) _mm256_storeu_ps(at + (j + 1) * plane, UpperHalf(v));
}
// 16 bf16 values (the lanes of mask m) as float32. A full mask loads without one (masked accesses cost more on
// AMD cores).
LITE_BF16_TARGET inline __m512 LoadBf16(const uint16_t* at, __mmask16 m) {
  if (m == 0xFFFF) return Bf16x16ToFloats(at);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, at)), 16));
}

// The residual (channel-blocked, bf16 rows or NCHW planes: whichever o holds) added to the first `rows` (<= R) rows'
// two 16-channel halves. Every loop over r is unrolled (an index known at compile time keeps lo / hi in registers).
template <int R>
LITE_BF16_TARGET __attribute__((always_inline)) inline void AddResidualRows(__m512 (&lo)[R], __m512 (&hi)[R],
                                                                           const TileOut& o, __mmask16 m0,
                                                                           __mmask16 m1, int rows = R) {
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    if (r >= rows) break;
    if (o.residual) {
      lo[r] = _mm512_add_ps(lo[r], LoadPair(o.residual + o.pixel[r] * 8, o.plane, 0, o.blocks));
      hi[r] = _mm512_add_ps(hi[r], LoadPair(o.residual + o.pixel[r] * 8, o.plane, 2, o.blocks));
    } else if (o.residual16) {
      const uint16_t* res = o.residual16 + o.pixel[r] * o.ld16;
      lo[r] = _mm512_add_ps(lo[r], LoadBf16(res, m0));
      hi[r] = _mm512_add_ps(hi[r], LoadBf16(res + 16, m1));
    } else if (o.residual_nchw) {   // one value from each of 32 planes (a residual read once, from a graph input)
      const __m512i lanes16 = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                                 _mm512_set1_epi32(static_cast<int32_t>(o.plane / 8)));
      const float* res = o.residual_nchw + o.pixel[r];
      lo[r] = _mm512_add_ps(lo[r], _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m0, lanes16, res, 4));
      hi[r] = _mm512_add_ps(hi[r], _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m1, lanes16, res + 16 * (o.plane / 8), 4));
    }
  }
}

// ReLU / ReLU6 / SiLU, then the first `rows` (<= R) rows stored: rows of 8 x blocks bf16 values (rounded to nearest even), or
// their channel blocks.
template <int R>
LITE_BF16_TARGET __attribute__((always_inline)) inline void StoreFinalRows(__m512 (&lo)[R], __m512 (&hi)[R],
                                                                          const TileOut& o, int lanes, int rows = R) {
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    if (r >= rows) break;
    if (o.clamp == 3) {   // SiLU (YOLO's Convs): bf16 rows out, the chain stays bf16
      lo[r] = FastSiluVec(lo[r]), hi[r] = FastSiluVec(hi[r]);
    } else if (o.clamp) {
      lo[r] = _mm512_max_ps(_mm512_setzero_ps(), lo[r]), hi[r] = _mm512_max_ps(_mm512_setzero_ps(), hi[r]);
      if (o.clamp == 2)
        lo[r] = _mm512_min_ps(_mm512_set1_ps(6.f), lo[r]), hi[r] = _mm512_min_ps(_mm512_set1_ps(6.f), hi[r]);
    }
    if (o.y16) {
      const __m512i v = (__m512i)_mm512_cvtne2ps_pbh(hi[r], lo[r]);
      uint16_t* at = o.y16 + o.pixel[r] * o.ld16;
      if (lanes >= 32) {
        _mm512_storeu_si512(at, v);
      } else {
        _mm512_mask_storeu_epi16(at, static_cast<__mmask32>((1u << lanes) - 1), v);
      }
      continue;
    }
    float* at = o.y + o.pixel[r] * 8;
    StorePair(at, o.plane, 0, o.blocks, lo[r]);
    StorePair(at, o.plane, 2, o.blocks, hi[r]);
  }
}

// R pixels x 32 channels over `segments` runs of seg_pairs depth pairs: run s reads pixel r's input row at
// xp + off[r * taps + s] + c0 (bf16, pair p at 2p); b: the panel's pairs for the whole block, 64 values each. A run
// whose R rows are all the zero row (a tap in the padding for every pixel of the tile) is skipped.
template <int R>
LITE_BF16_TARGET void PixelTile(const uint16_t* xp, const int32_t* off, int64_t taps, int32_t zero_row,
                                int64_t segments, int64_t seg_pairs, int64_t c0, const uint16_t* b,
                                const TileOut& o) {
  const int lanes = 8 * o.blocks;
  const __mmask16 m0 = lanes >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << lanes) - 1);
  const __mmask16 m1 = lanes >= 32 ? 0xFFFF : lanes <= 16 ? 0 : static_cast<__mmask16>((1u << (lanes - 16)) - 1);
  // The sums start from the previous depth blocks' partial sums (register order: two plain loads a row), or from
  // the bias plus the residual: no additions after the loop, and the residual's loads have the whole depth loop to
  // arrive (ResNet-50 bf16's 64-channel expansions waited on them in the epilogue).
  __m512 lo[R], hi[R];
  if (o.accumulate) {
    LoadPartialSums(lo, hi, o.partial);
  } else {
    __m512 bias0 = _mm512_setzero_ps(), bias1 = bias0;
    if (o.col_bias) bias0 = _mm512_maskz_loadu_ps(m0, o.col_bias), bias1 = _mm512_maskz_loadu_ps(m1, o.col_bias + 16);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) lo[r] = bias0, hi[r] = bias1;
    AddResidualRows<R>(lo, hi, o, m0, m1);
  }
  if (lanes <= 16) {   // a panel of <= 16 channels (MobileNetV2's 16-channel stem output, 144 = 4 x 32 + 16)
    PixelDepthLoop<R, 2, Bf16Dot, __m512, true>(lo, hi, xp, off, taps, zero_row, segments, seg_pairs, c0, b,
                                                o.prefetch, o.prefetch_lines, o.last_mask);
  } else {
    PixelDepthLoop<R, 2, Bf16Dot>(lo, hi, xp, off, taps, zero_row, segments, seg_pairs, c0, b, o.prefetch,
                                  o.prefetch_lines, o.last_mask);
  }
  if (!o.final) {
    StorePartialSums(lo, hi, o.partial);
    return;
  }
  StoreFinalRows<R>(lo, hi, o, lanes);
}

// AMX (TDPBF16PS): up to 32 pixels x 32 channels per tile, the sums in tmm0-3 (pixels 0-15 / 16-31 x channels 0-15 /
// 16-31), over the block's runs in steps of 16 depth pairs. A step's A tiles are gathered: each pixel's 64 bytes of
// its input row for the run's tap (AVX-512 loads into a 2 KiB buffer, two buffers in turn so the next gather does
// not wait on the tile loads of this one), a run's last partial step masked to its pairs (zeros past them: never
// another tap's values, whose weights here are another's). B's tiles are the panel's two 16-channel halves in place
// (128-byte pair rows), a partial step's from a zero-padded copy. The sums are stored once per tile and finished per
// row: partial sums or bias and residual added, then ReLU / ReLU6 and the store, as PixelTile does in registers.
// seg_stride: pairs between the segments' weights, seg_pairs or more; padded to whole steps with zeros (a stem's), a
// segment's last partial step reads its B tiles in place (else from a zero-padded copy, made per step).
LITE_BF16_TARGET void AmxPixelTile(int64_t rows, const uint16_t* xp, const int32_t* off, int64_t taps,
                                   const AmxTapRows* tap_rows, int64_t segments, int64_t seg_pairs, int64_t seg_stride,
                                   int64_t c0, const uint16_t* b, const TileOut& o) {
  alignas(64) uint16_t a_buf[2][32 * 32];
  alignas(64) uint16_t b_rest[16 * 64];
  alignas(64) float sums[32 * 32];
  const bool two = rows > 16;
  AmxZeroSums();
  const int64_t steps_per_run = (seg_pairs + 15) / 16;
  const int64_t total_steps = segments * steps_per_run;
  const int64_t fetch_per_step = total_steps ? (o.prefetch_lines + total_steps - 1) / total_steps : 0;
  int64_t fetched = 0;
  int buf = 0;
  const bool padded_steps = seg_stride >= (seg_pairs + 15) / 16 * 16;
  for (int64_t s = 0; s < segments; ++s, b += seg_stride * 64) {
    if (tap_rows[s].padding) continue;
    // A 16-row half whose input rows for this tap lie evenly apart (consecutive pixels of one output row, or any run
    // of a 1x1 Conv's pixels) is loaded as a tile straight from them, `even[h]` bytes apart; the gather through
    // a_buf is left for halves that cross an output row, the padding, or the tile's last rows, and for a run's last
    // partial step (whose values past the run must read as zeros). ResNet-50 bf16 at one thread: 15.2 -> 14.8-14.9 ms.
    const int32_t* even = tap_rows[s].even;
    for (int64_t p0 = 0; p0 < seg_pairs; p0 += 16) {
      const int64_t left = std::min<int64_t>(16, seg_pairs - p0);
      // A stem's odd run (o.last_mask) ends in half a pair: the value past it is the next run's, masked off too.
      const int64_t values = 2 * left - (o.last_mask != 0xFFFFFFFFu && p0 + left == seg_pairs ? 1 : 0);
      const __mmask32 m = values == 32 ? 0xFFFFFFFFu : static_cast<__mmask32>((1ull << values) - 1);
      const bool whole = values == 32;
      const uint16_t* a_at[2];
      int64_t a_stride[2];
      if (AmxStepRows(xp, off, taps, s, c0 + 2 * p0, rows, two, whole, even, m, a_buf[buf], a_at, a_stride))
        buf ^= 1;
      const uint16_t* bs = b + p0 * 64;
      if (left < 16 && !padded_steps) {
        std::memcpy(b_rest, bs, left * 128);
        std::memset(b_rest + left * 64, 0, (16 - left) * 128);
        bs = b_rest;
      }
      for (int64_t l = 0; l < fetch_per_step && fetched < o.prefetch_lines; ++l, ++fetched)
        _mm_prefetch(o.prefetch + fetched * 64, _MM_HINT_T1);
      AmxStep<AmxDot::kBf16>(a_at[0], two ? a_at[1] : nullptr, a_stride[0], bs, bs + 32, 128, two,
                             two ? a_stride[1] : 0);
    }
  }
  AmxStoreSums(sums, two);
  const int lanes = 8 * o.blocks;
  const __mmask16 m0 = lanes >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << lanes) - 1);
  const __mmask16 m1 = lanes >= 32 ? 0xFFFF : lanes <= 16 ? 0 : static_cast<__mmask16>((1u << (lanes - 16)) - 1);
  __m512 bias0 = _mm512_setzero_ps(), bias1 = bias0;
  if (!o.accumulate && o.col_bias)
    bias0 = _mm512_maskz_loadu_ps(m0, o.col_bias), bias1 = _mm512_maskz_loadu_ps(m1, o.col_bias + 16);
  for (int64_t r0 = 0; r0 < rows; r0 += 8) {   // 8 rows at a time through PixelTile's epilogue
    const int n = static_cast<int>(std::min<int64_t>(8, rows - r0));
    TileOut chunk = o;
    chunk.pixel = o.pixel + r0;
    __m512 lo[8], hi[8];
#pragma GCC unroll 8
    for (int r = 0; r < 8; ++r) {
      if (r >= n) break;
      lo[r] = _mm512_load_ps(sums + (r0 + r) * 32), hi[r] = _mm512_load_ps(sums + (r0 + r) * 32 + 16);
      if (o.accumulate) {
        lo[r] = _mm512_add_ps(lo[r], _mm512_loadu_ps(o.partial + (r0 + r) * 32));
        hi[r] = _mm512_add_ps(hi[r], _mm512_loadu_ps(o.partial + (r0 + r) * 32 + 16));
      } else {
        lo[r] = _mm512_add_ps(lo[r], bias0), hi[r] = _mm512_add_ps(hi[r], bias1);
      }
    }
    if (!o.accumulate) AddResidualRows<8>(lo, hi, chunk, m0, m1, n);
    if (o.final) {
      StoreFinalRows<8>(lo, hi, chunk, lanes, n);
      continue;
    }
#pragma GCC unroll 8
    for (int r = 0; r < 8; ++r) {
      if (r >= n) break;
      _mm512_storeu_ps(o.partial + (r0 + r) * 32, lo[r]);
      _mm512_storeu_ps(o.partial + (r0 + r) * 32 + 16, hi[r]);
    }
  }
}

// Two pixels' 8 channels (16 floats at src) as bf16 at dst0 and dst1.
LITE_BF16_TARGET inline void TwoPixelsToBf16(const float* src, uint16_t* dst0, uint16_t* dst1) {
  const __m256i h = (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(src));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst0), _mm256_castsi256_si128(h));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst1), _mm256_extracti128_si256(h, 1));
}

// Pixels [p0, p1) of a blocked input (C / 8 blocks of HW x 8) into pixel-major rows of C bf16 values, ld apart. Eight pixels
// at a time across every block: each pixel's row is written whole while the blocks' lines (4 each) are read once.
LITE_BF16_TARGET void BlockedRows(const float* x, int64_t C, int64_t HW, int64_t p0, int64_t p1, int64_t ld,
                                  uint16_t* xp) {
  int64_t p = p0;
  for (; p + 8 <= p1; p += 8)
    for (int64_t j = 0; j < C / 8; ++j) {
      const float* src = x + j * HW * 8 + p * 8;
      uint16_t* dst = xp + p * ld + j * 8;
      for (int i = 0; i < 8; i += 2) TwoPixelsToBf16(src + i * 8, dst + i * ld, dst + (i + 1) * ld);
    }
  for (; p < p1; ++p)
    for (int64_t j = 0; j < C / 8; ++j)
      for (int i = 0; i < 8; ++i) xp[p * ld + j * 8 + i] = FloatToBf16(x[j * HW * 8 + p * 8 + i]);
}

// Pixels [p0, p1) of an NCHW input into pixel-major rows: 8 channels x 8 pixels transposed in registers at a time,
// 8 pixels across every channel band before the next 8, so each pixel's row is written whole while it is in L1 (band
// by band over the whole plane, a 1x1 Conv reading a 56x56 x 256 NCHW input took 1.14x the time).
LITE_BF16_TARGET void NchwRows(const float* x, int64_t C, int64_t HW, int64_t p0, int64_t p1, int64_t ld,
                               uint16_t* xp) {
  alignas(64) float tile[64];
  int64_t p = p0;
  for (; p + 8 <= p1; p += 8)
    for (int64_t j = 0; j < C / 8; ++j) {
      Transpose8x8(x + j * 8 * HW + p, HW, tile, 8);   // tile row i: pixel p + i's 8 channels
      for (int i = 0; i < 8; i += 2) TwoPixelsToBf16(tile + i * 8, xp + (p + i) * ld + j * 8, xp + (p + i + 1) * ld + j * 8);
    }
  for (; p < p1; ++p)
    for (int64_t c = 0; c < C; ++c) xp[p * ld + c] = FloatToBf16(x[c * HW + p]);
}

// One 8-channel block (P pixels x 8) as 8 planes of P at y.
LITE_BF16_TARGET void BlockToPlanes(const float* src, int64_t P, float* y) {
  int64_t p = 0;
  for (; p + 8 <= P; p += 8) Transpose8x8(src + p * 8, 8, y + p, P);
  for (; p < P; ++p)
    for (int i = 0; i < 8; ++i) y[i * P + p] = src[p * 8 + i];
}

using TileFn = void (*)(const uint16_t*, const int32_t*, int64_t, int32_t, int64_t, int64_t, int64_t,
                        const uint16_t*, const TileOut&);
const TileFn kTiles[kTileRows + 1] = {nullptr,       PixelTile<1>, PixelTile<2>, PixelTile<3>, PixelTile<4>,
                                      PixelTile<5>,  PixelTile<6>, PixelTile<7>, PixelTile<8>};
#endif

// Values between the input copy's pixel rows: C, but one cache line more when C values are a multiple of 1 KiB (the
// rows a tile reads would otherwise share a few L1 sets with its weight panel: C = 2048 put all eight in one).
// While oneDNN's AMX convolutions take bf16 rows (kernels/conv.cc UseOneDnn), rows are C apart always: its kernels
// read dense nhwc only.
int64_t RowStride(int64_t C) {
  static const bool dense = CpuHasAmxBf16() && OneDnn() != nullptr;
  return (C * 2) % 1024 == 0 && !dense ? C + 32 : C;
}

// The few-channel copy's padded plane: every tap of every output pixel inside it.
int64_t PaddedRows(const ConvGeometry& g) { return std::max(g.pad_top + g.H, (g.OH - 1) * g.SH + (g.KH - 1) * g.DH + 1); }
int64_t PaddedCols(const ConvGeometry& g) { return std::max(g.pad_left + g.W, (g.OW - 1) * g.SW + g.KW); }

// Few channels (a stem's 1-4): the padded copy's layout. A filter row's KW taps read one run of KW x cp values, cp
// values a pixel. Three channels are stored tight where every run then starts on a pair (an even column stride): a
// 7x7 stem's run is 21 values, 11 pairs with the value past its end masked off, where padding each pixel to 4 values
// made 14 pairs (ResNet-50 bf16's stem 0.8x the time); otherwise 2 or 4 values a pixel. Rows are an even number of
// values apart, so every run starts on a pair.
struct FewChannelLayout {
  int64_t cp = 4, row_values = 0, run_pairs = 0;
  bool odd_run = false;   // KW x cp is odd: the last pair's second value is the next pixel's, masked off
  explicit FewChannelLayout(const ConvGeometry& g) {
    cp = g.C <= 2 ? 2 : g.C == 3 && g.SW % 2 == 0 ? 3 : 4;
    row_values = (PaddedCols(g) * cp + 1) / 2 * 2;
    run_pairs = (g.KW * cp + 1) / 2;
    odd_run = g.KW * cp % 2 != 0;
  }
  // Values in the copy, and a pair beyond: an odd run at the end of the last row reads one value past it.
  int64_t Values(const ConvGeometry& g) const { return PaddedRows(g) * row_values + 2; }
};

#ifdef LITE_X86_SIMD
// Input row ih of an NCHW input with C <= 4 channels into row ih + pad_top of the padded copy (cp values a pixel,
// row_values a row, columns from pad_left): eight pixels at a time, each pixel's channels assembled in one 32- or
// 64-bit lane; three tight channels sixteen pixels at a time, interleaved by two word permutes.
LITE_BF16_TARGET void FewChannelRow(const float* x, const ConvGeometry& g, int64_t ih, int64_t row_values, int64_t cp,
                                    uint16_t* xp) {
  const int64_t HW = g.H * g.W;
  uint16_t* dst = xp + (ih + g.pad_top) * row_values + g.pad_left * cp;
  const float* src = x + ih * g.W;
  int64_t iw = 0;
  if (cp == 3) {
    // Output value j of 48 is pixel j / 3's channel j % 3: from ab (channels 0 and 1, words 0-15 and 16-31) or c
    // (channel 2, words 32-47 of the permute's pair of sources).
    alignas(64) static const uint16_t kFirst[32] = {0, 16, 32, 1, 17, 33, 2, 18, 34, 3, 19, 35, 4, 20, 36, 5,
                                                    21, 37, 6, 22, 38, 7, 23, 39, 8, 24, 40, 9, 25, 41, 10, 26};
    alignas(64) static const uint16_t kSecond[32] = {42, 11, 27, 43, 12, 28, 44, 13, 29, 45, 14, 30, 46, 15, 31, 47,
                                                     0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0,  0};
    const __m512i first = _mm512_load_si512(kFirst), second = _mm512_load_si512(kSecond);
    for (; iw + 16 <= g.W; iw += 16) {
      const __m256i a = (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(src + iw));
      const __m256i b = (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(src + HW + iw));
      const __m256i c = (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(src + 2 * HW + iw));
      const __m512i ab = _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
      const __m512i cc = _mm512_castsi256_si512(c);
      _mm512_storeu_si512(dst + iw * 3, _mm512_permutex2var_epi16(ab, first, cc));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + iw * 3 + 32),
                          _mm512_castsi512_si256(_mm512_permutex2var_epi16(ab, second, cc)));
    }
    for (; iw < g.W; ++iw)
      for (int64_t ch = 0; ch < 3; ++ch) dst[iw * 3 + ch] = FloatToBf16(src[ch * HW + iw]);
    return;
  }
  for (; iw + 8 <= g.W; iw += 8) {
    if (cp == 4) {
      __m512i px = _mm512_setzero_si512();
      for (int64_t c = 0; c < g.C; ++c) {
        const __m128i h = (__m128i)_mm256_cvtneps_pbh(_mm256_loadu_ps(src + c * HW + iw));
        px = _mm512_or_si512(px, _mm512_slli_epi64(_mm512_cvtepu16_epi64(h), static_cast<unsigned>(16 * c)));
      }
      _mm512_storeu_si512(dst + iw * 4, px);
    } else {
      __m256i px = _mm256_setzero_si256();
      for (int64_t c = 0; c < g.C; ++c) {
        const __m128i h = (__m128i)_mm256_cvtneps_pbh(_mm256_loadu_ps(src + c * HW + iw));
        px = _mm256_or_si256(px, _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), static_cast<int>(16 * c)));
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + iw * 2), px);
    }
  }
  for (; iw < g.W; ++iw)
    for (int64_t c = 0; c < g.C; ++c) dst[iw * cp + c] = FloatToBf16(src[c * HW + iw]);
}
#endif

}  // namespace

void FewChannelsToNhwcBf16(const float* x, int64_t C, int64_t H, int64_t W, int64_t h0, int64_t h1, uint16_t* out) {
  if (C < 2 || C > 4) throw std::logic_error("FewChannelsToNhwcBf16: 2-4 channels");
#ifdef LITE_X86_SIMD
  if (CpuHasAvx512Bf16()) {   // FewChannelRow's tight layouts (cp = C) are nhwc
    ConvGeometry g;   // its planes stay H x W apart; row r of the shifted input is row h0 + r
    g.C = C, g.H = H, g.W = W;
    for (int64_t r = 0; r < h1 - h0; ++r) FewChannelRow(x + h0 * W, g, r, W * C, C, out);
    return;
  }
#endif
  for (int64_t ih = h0; ih < h1; ++ih)
    for (int64_t iw = 0; iw < W; ++iw)
      for (int64_t c = 0; c < C; ++c) out[((ih - h0) * W + iw) * C + c] = FloatToBf16(x[(c * H + ih) * W + iw]);
}

bool Bf16PixelConv::Supports(const ConvGeometry& g) {
#ifdef LITE_X86_SIMD
  if (!CpuHasAvx512Bf16() || g.C <= 0 || g.M <= 0 || g.M % 8 != 0) return false;
  if (g.C % 8 == 0) return (g.H * g.W + 1) * RowStride(g.C) < std::numeric_limits<int32_t>::max();
  return g.C <= 4 && g.DW == 1 && PaddedRows(g) * (PaddedCols(g) * 4 + 2) < std::numeric_limits<int32_t>::max();
#else
  (void)g;
  return false;
#endif
}

Bf16PixelConv::Bf16PixelConv(const ConvGeometry& g, const float* w)
    : g_(g), P_(g.OH * g.OW), taps_(g.KH * g.KW), few_channels_(g.C % 8 != 0),
      amx_(CpuHasAmxBf16()) {
  if (!Supports(g)) throw std::logic_error("Bf16PixelConv: unsupported geometry or CPU without AVX512_BF16");
  if (few_channels_) {
    BuildFewChannels(w);
    return;
  }
  const int64_t C = g.C, M = g.M, K = taps_ * C;
  off_stride_ = taps_;
  // Offsets of the input row each (output pixel, tap) reads; taps falling in the padding read the zero row.
  PixelTiling tiling = amx_ ? TileOutputPixels(g, RowStride(C), kAmxTileRows, /*by_padding=*/false)
                            : TileOutputPixels(g, RowStride(C), kTileRows);
  pixel_of_ = std::move(tiling.pixel_of);
  tiles_ = std::move(tiling.tiles);
  offsets_ = std::move(tiling.offsets);
  zero_row_ = tiling.zero_row;
  if (amx_) tap_rows_ = AmxTapRowsOf(tiles_, offsets_.data(), off_stride_, zero_row_, sizeof(uint16_t));
  blocks_ = SplitPixelDepth(taps_, C / 2, 2, amx_ ? kAmxBlockPairs : kBlockPairs);
  // W^T with depth (tap, channel): column m of row t * C + c is w[m][c][t].
  std::vector<float> wt(static_cast<size_t>(M * K));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t t = 0; t < taps_; ++t) wt[m * K + t * C + c] = w[(m * C + c) * taps_ + t];
  w_ = PackBf16B(true, K, M, wt.data(), K);
}

// A stem (1-4 channels): the input copy has its padding in it (zero rows and columns around the plane), so the KW taps
// of one filter row read one run of KW x cp values (FewChannelLayout): one segment per filter row (a 7x7 stem over 3
// channels: 7 runs of 11 pairs, not 49 of 2), the weights of padding values zero.
void Bf16PixelConv::BuildFewChannels(const float* w) {
  const ConvGeometry& g = g_;
  const FewChannelLayout layout(g);
  // On AMX each segment's weights take whole 16-pair steps (zeros past the run): its last step's B tiles are read
  // in place (a per-step zero-padded copy of them: ResNet-50's bf16 stem 1.09 -> 0.75 ms at one thread without it).
  const int64_t cp = layout.cp, seg_pairs = amx_ ? (layout.run_pairs + 15) / 16 * 16 : layout.run_pairs;
  const int64_t M = g.M, K = g.KH * 2 * seg_pairs;
  if (amx_) few_run_pairs_ = layout.run_pairs;
  few_last_mask_ = layout.odd_run ? 0x0000FFFFu : 0xFFFFFFFFu;   // the first value of the pair: the low half
  off_stride_ = g.KH;
  zero_row_ = -1;   // no tap reads outside the copy
  pixel_of_.resize(static_cast<size_t>(P_));
  for (int64_t p = 0; p < P_; ++p) pixel_of_[p] = static_cast<int32_t>(p);
  SplitIntoTiles(0, P_, amx_ ? kAmxTileRows : kTileRows, &tiles_);
  offsets_.resize(static_cast<size_t>(P_ * g.KH));
  for (int64_t oh = 0; oh < g.OH; ++oh)
    for (int64_t ow = 0; ow < g.OW; ++ow)
      for (int64_t kh = 0; kh < g.KH; ++kh)
        offsets_[(oh * g.OW + ow) * g.KH + kh] =
            static_cast<int32_t>((oh * g.SH + kh * g.DH) * layout.row_values + ow * g.SW * cp);
  if (amx_) tap_rows_ = AmxTapRowsOf(tiles_, offsets_.data(), off_stride_, zero_row_, sizeof(uint16_t));
  const int64_t per = std::max<int64_t>(1, (amx_ ? kAmxBlockPairs : kBlockPairs) / seg_pairs);
  for (int64_t kh = 0; kh < g.KH; kh += per) blocks_.push_back({kh, std::min(per, g.KH - kh), 0, seg_pairs, kh * seg_pairs});
  // Depth k = kh * 2 seg_pairs + kw * cp + c: filter row kh's run, value by value.
  std::vector<float> wt(static_cast<size_t>(M * K), 0.f);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t kh = 0; kh < g.KH; ++kh)
        for (int64_t kw = 0; kw < g.KW; ++kw)
          wt[m * K + kh * 2 * seg_pairs + kw * cp + c] = w[((m * g.C + c) * g.KH + kh) * g.KW + kw];
  w_ = PackBf16B(true, K, M, wt.data(), K);
}

int64_t Bf16PixelConv::Bf16RowStride(int64_t C) { return RowStride(C); }

size_t Bf16PixelConv::Bf16RowsBytes(int64_t C, int64_t HW) {
  return static_cast<size_t>((HW + 1) * RowStride(C)) * sizeof(uint16_t);
}

size_t Bf16PixelConv::InputCopyBytes(bool rows_in) const {
  if (rows_in) return 0;
  const int64_t values = few_channels_ ? FewChannelLayout(g_).Values(g_) : (g_.H * g_.W + 1) * RowStride(g_.C);
  return static_cast<size_t>((values * 2 + 63) / 64 * 64);
}

size_t Bf16PixelConv::ScratchBytes(bool rows_in, bool nchw_out) const {
  return InputCopyBytes(rows_in) + StagingBytes(nchw_out) + PartialBytes();
}

// An NCHW output's blocked result before its transposition.
size_t Bf16PixelConv::StagingBytes(bool nchw_out) const {
  return nchw_out ? static_cast<size_t>(g_.M * P_) * sizeof(float) : 0;
}

// The partial sums between depth blocks: per 32-channel panel, per position, 32 floats.
size_t Bf16PixelConv::PartialBytes() const {
  if (blocks_.size() < 2) return 0;
  return static_cast<size_t>((g_.M + kBf16NR - 1) / kBf16NR * P_ * kBf16NR) * sizeof(float);
}

void Bf16PixelConv::ToPixelMajor(const float* x, bool in_blocked, uint16_t* xp, ThreadPool* pool) const {
#ifdef LITE_X86_SIMD
  if (few_channels_) {   // NCHW (under 8 channels cannot be blocked)
    const FewChannelLayout layout(g_);
    std::memset(xp, 0, static_cast<size_t>(layout.Values(g_)) * sizeof(uint16_t));
    auto rows = [&](int64_t r0, int64_t r1) {
      for (int64_t ih = r0; ih < r1; ++ih) FewChannelRow(x, g_, ih, layout.row_values, layout.cp, xp);
    };
    if (pool) pool->ParallelFor(g_.H, 4, rows); else rows(0, g_.H);
    return;
  }
  const int64_t C = g_.C, HW = g_.H * g_.W, ld = RowStride(C);
  auto rows = [&](int64_t b0, int64_t b1) {   // unit: 8 pixels
    const int64_t p0 = b0 * 8, p1 = std::min(HW, b1 * 8);
    if (in_blocked) BlockedRows(x, C, HW, p0, p1, ld, xp); else NchwRows(x, C, HW, p0, p1, ld, xp);
  };
  const int64_t units = (HW + 7) / 8;
  if (pool && pool->size() > 1 && HW * C > 16384) pool->ParallelFor(units, 4, rows); else rows(0, units);
  std::memset(xp + HW * ld, 0, static_cast<size_t>(C) * sizeof(uint16_t));
#else
  (void)x, (void)in_blocked, (void)xp, (void)pool;
#endif
}

void Bf16PixelConv::BlockedToNchw(const float* yb, float* y, const GemmEpilogue& ep, ThreadPool* pool) const {
#ifdef LITE_X86_SIMD
  const int64_t P = P_;
  auto blocks = [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      BlockToPlanes(yb + j * P * 8, P, y + j * 8 * P);
      if (ep.residual || ep.act != EpilogueAct::kNone) ApplyEpilogue(y, P, j * 8, 8, 0, P, ep);   // while in L1
    }
  };
  if (pool) pool->ParallelFor(g_.M / 8, 2, blocks); else blocks(0, g_.M / 8);
#else
  (void)yb, (void)y, (void)ep, (void)pool;
#endif
}

void Bf16PixelConv::Run(const void* x, PixelStorage in, const float* bias, const void* residual, PixelStorage res,
                        EpilogueAct act, void* y, PixelStorage out, void* scratch, ThreadPool* pool) const {
#ifdef LITE_X86_SIMD
  const bool register_act = act == EpilogueAct::kNone || act == EpilogueAct::kRelu || act == EpilogueAct::kRelu6 ||
                            act == EpilogueAct::kSilu;
  if ((out == PixelStorage::kBf16Rows && !register_act) || (in == PixelStorage::kBf16Rows && few_channels_))
    throw std::logic_error("Bf16PixelConv: unsupported combination of storages");
  const uint16_t* xp = static_cast<const uint16_t*>(x);
  if (in != PixelStorage::kBf16Rows) {
    uint16_t* copy = static_cast<uint16_t*>(scratch);
    ToPixelMajor(static_cast<const float*>(x), in == PixelStorage::kBlocked, copy, pool);
    xp = copy;
  }
  const size_t copy_bytes = InputCopyBytes(in == PixelStorage::kBf16Rows);
  const bool out_blocked = out == PixelStorage::kBlocked;
  float* yb = out_blocked ? static_cast<float*>(y)
                          : reinterpret_cast<float*>(static_cast<char*>(scratch) + copy_bytes);
  float* partials = reinterpret_cast<float*>(static_cast<char*>(scratch) + copy_bytes +
                                             StagingBytes(out == PixelStorage::kNchw));
  uint16_t* y16 = out == PixelStorage::kBf16Rows ? static_cast<uint16_t*>(y) : nullptr;
  const int64_t ld16 = RowStride(g_.M);
  const float* res_blocked = res == PixelStorage::kBlocked ? static_cast<const float*>(residual) : nullptr;
  const uint16_t* res16 = res == PixelStorage::kBf16Rows ? static_cast<const uint16_t*>(residual) : nullptr;
  // An NCHW residual: added in the tiles unless the output is NCHW too (then with the activation after the
  // transposition, a plane at a time).
  const float* res_nchw =
      res == PixelStorage::kNchw && out != PixelStorage::kNchw ? static_cast<const float*>(residual) : nullptr;
  const int64_t M = g_.M, P = P_, panels = (M + kBf16NR - 1) / kBf16NR;
  // In registers: the bias, a blocked or bf16 residual, and on a blocked or bf16 output ReLU / ReLU6; an NCHW output
  // gets its activation (and an NCHW residual) as the blocks are transposed, another activation a pass after.
  const int clamp = out == PixelStorage::kNchw || !register_act ? 0
                    : act == EpilogueAct::kRelu ? 1 : act == EpilogueAct::kRelu6 ? 2
                    : act == EpilogueAct::kSilu ? 3 : 0;
  auto setup = [&](int64_t d, int64_t q) {
    const int64_t m0 = q * kBf16NR;
    const bool last = d + 1 == static_cast<int64_t>(blocks_.size());
    TileOut o;
    o.plane = P * 8;
    o.blocks = static_cast<int>(std::min<int64_t>(4, (M - m0) / 8));
    o.accumulate = d > 0;
    o.final = last;
    o.col_bias = d == 0 && bias ? bias + m0 : nullptr;
    if (last) o.clamp = clamp;
    o.y = yb + (m0 / 8) * P * 8;
    if (d == 0) {   // the residual starts the sums
      o.residual = res_blocked ? res_blocked + (m0 / 8) * P * 8 : nullptr;
      o.residual16 = res16 ? res16 + m0 : nullptr;
      o.residual_nchw = res_nchw ? res_nchw + m0 * P : nullptr;
    }
    o.ld16 = ld16;
    if (last) o.y16 = y16 ? y16 + m0 : nullptr;
    return o;
  };
  auto tile = [&](TileOut& o, int64_t d, int64_t q, int64_t ti, const char* weights, const char* next,
                  int64_t lines) {
    o.prefetch = next;
    o.prefetch_lines = lines;
    o.last_mask = few_last_mask_;
    const PixelDepthBlock& db = blocks_[d];
    const PixelTileSpan& span = tiles_[ti];
    o.pixel = pixel_of_.data() + span.pos;
    o.partial = partials + (q * P + span.pos) * kBf16NR;
    if (amx_) {
      AmxPixelTile(span.rows, xp, offsets_.data() + span.pos * off_stride_ + db.tap0, off_stride_,
                   tap_rows_.data() + ti * off_stride_ + db.tap0, db.segments, few_run_pairs_ ? few_run_pairs_ : db.units, db.units, db.c0,
                   reinterpret_cast<const uint16_t*>(weights), o);
      return;
    }
    kTiles[span.rows](xp, offsets_.data() + span.pos * off_stride_ + db.tap0, off_stride_, zero_row_, db.segments,
                      db.units, db.c0, reinterpret_cast<const uint16_t*>(weights), o);
  };
  ForEachPixelTile(P, static_cast<int64_t>(tiles_.size()), blocks_, panels, w_.data.data(),
                   w_.pairs * 64 * static_cast<int64_t>(sizeof(uint16_t)), pool, setup, tile, amx_);

  if (y16) {   // the row of zeros the next Conv's padding taps read
    std::memset(y16 + P * ld16, 0, static_cast<size_t>(ld16) * sizeof(uint16_t));
  } else if (out == PixelStorage::kNchw) {
    GemmEpilogue ep;
    ep.residual = res == PixelStorage::kNchw ? static_cast<const float*>(residual) : nullptr;
    ep.ld_residual = P;
    ep.act = act;
    BlockedToNchw(yb, static_cast<float*>(y), ep, pool);
  } else if (!register_act) {
    GemmEpilogue ep;
    ep.act = act;
    const int64_t n = M * P;
    float* yf = static_cast<float*>(y);
    auto part = [&](int64_t b0, int64_t b1) { ApplyEpilogue(yf, n, 0, 1, b0 * 4096, std::min(n, b1 * 4096) - b0 * 4096, ep); };
    const int64_t units = (n + 4095) / 4096;
    if (pool) pool->ParallelFor(units, 1, part); else part(0, units);
  }
#else
  (void)x, (void)in, (void)bias, (void)residual, (void)res, (void)act, (void)y, (void)out, (void)scratch, (void)pool;
  throw std::logic_error("Bf16PixelConv needs an x86 build with AVX512_BF16");
#endif
}

}  // namespace lite
