// uint8 pixel-major convolution: see u8_pixel_conv.h. Register tile: R <= 8 output pixels x 32 output channels (16
// zmm of int32 sums), a channel quad of each pixel broadcast from its input row. Blocking as the bf16 kernel's: a task
// owns a run of output pixels and up to four 32-channel panels; per depth block (whole taps, or part of one tap's
// channels, <= 128 quads) a panel's weights (<= 16 KiB) stay in L1 while the pixel rows stream
// (cpu/conv/pixel_tiling.h's ForEachPixelTile).
#include "cpu/quantized/u8_pixel_conv.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <stdexcept>

#include "core/channel_blocked_layout.h"
#include "cpu/amx.h"
#include "cpu/isa_dispatch.h"
#include "cpu/conv/pixel_depth_loop.h"
#include "cpu/onednn/onednn_library.h"
#include "cpu/simd/transpose8x8.h"
#include "cpu/simd/vmath.h"

#ifdef LITE_X86_SIMD
#include <immintrin.h>
#endif

namespace lite {
namespace {

constexpr int kTileRows = 8;
constexpr int64_t kPanel = 32;          // output channels per weight panel
constexpr int64_t kQuadBytes = kPanel * 4;
constexpr int64_t kBlockQuads = 128;    // depth quads per block: a panel's share is 16 KiB
// AMX: tiles of up to 32 pixels in raster order; depth blocks of up to 1024 quads (a panel's share 128 KiB, in L2).
constexpr int64_t kAmxTileRows = 32;
constexpr int64_t kAmxBlockQuads = 1024;

// Where a tile's sums go and what is applied after the last depth block.
struct TileOut {
  const int32_t* pixel = nullptr;      // the output pixel of each of the tile's rows
  int32_t* partial = nullptr;          // the sums of the depth blocks so far: row r at partial + 32 r
  bool accumulate = false;             // start from the partial sums of the previous depth blocks
  bool final = true;                   // the last depth block: the epilogue and the store, not partials
  uint16_t lo_mask = 0xFFFF;           // channels 0-15 of the panel present (an 8-channel last panel: 0-7)
  uint16_t hi_mask = 0xFFFF;           // channels 16-31 present (a last panel of 16 / 24 channels: none / 16-23)
  const int32_t* sum_init = nullptr;   // where the first depth block's sums start: -(zero point x weight sums of the
                                       // tile's taps), at the tile's first channel
  const float* mult = nullptr;         // input scale x weight scale, at the first channel
  const float* bias = nullptr;
  const uint8_t* residual = nullptr;   // uint8 rows (ld_res apart) at the first channel: value = code x rs + shift
  int64_t ld_res = 0;
  float res_scale = 0.f, res_shift = 0.f;
  uint8_t* y8 = nullptr;               // uint8 rows (ld8 apart) at the first channel, or
  int64_t ld8 = 0;
  // uint8 out: the scales folded into code units (Bound's q_mult / q_add): code = round(sum x q_mult + q_add [+ residual
  // code x q_res_scale]), at least q_floor (ReLU's zero point, or 0), at most q_ceil (ReLU6's 6 as a code, or 255);
  // q_cap: capped at 512 before rounding (Bound::q_cap), where a NaN then ends as q_floor and +inf as 255.
  const float* q_mult = nullptr;
  const float* q_add = nullptr;
  float q_res_scale = 0.f;
  uint8_t q_floor = 0, q_ceil = 255;
  bool q_cap = true;
  float* yf = nullptr;                 // float32 rows (ldf apart) at the first channel, or with yf_block
  int64_t ldf = 0;
  int64_t yf_block = 0;                // NCHW8c: yf at the panel's first 8-channel block, the next ones this far apart
  int yf_blocks = 4;                   // ... of which the panel has this many (its channels / 8)
  int clamp = 0;                       // 1 ReLU, 2 ReLU6, 3 SiLU
  float out_scale = 1.f, out_zero = 0.f;   // uint8 out with SiLU: the codes' scale and zero point (to real units)
  const char* prefetch = nullptr;      // lines of the next panel's weights to fetch during the depth loop
  int64_t prefetch_lines = 0;
};

#ifdef LITE_X86_SIMD
#define LITE_VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))

// vpdpbusd: 16 int32 sums += 16 quads of uint8 x int8 products.
struct VnniDot {
  LITE_VNNI_TARGET static inline __m512i Step(__m512i acc, __m512i x, __m512i w) {
    return _mm512_dpbusd_epi32(acc, x, w);
  }
};

// 16 float32 channels as two 8-channel blocks (NCHW8c), `stride` floats apart; only the first when n is 1.
LITE_VNNI_TARGET __attribute__((always_inline)) inline void StoreBlockHalves(float* at, int64_t stride, __m512 v,
                                                                             int n) {
  _mm256_storeu_ps(at, _mm512_castps512_ps256(v));
  if (n > 1) _mm256_storeu_ps(at + stride, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}

// The 32 residual codes at res (those of a last panel's channels: lo_mask, hi_mask) as floats.
LITE_VNNI_TARGET __attribute__((always_inline)) inline void LoadResidualCodes(const uint8_t* res, __mmask16 lo_mask,
                                                                              __mmask16 hi_mask, __m512& v0,
                                                                              __m512& v1) {
  const __m128i lo_codes = lo_mask == 0xFFFF ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(res))
                                             : _mm_maskz_loadu_epi8(lo_mask, res);
  v0 = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(lo_codes));
  const __m128i hi_codes = hi_mask == 0xFFFF ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(res + 16))
                                             : _mm_maskz_loadu_epi8(hi_mask, res + 16);
  v1 = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(hi_codes));
}

// Rows [0, rows) of a tile's int32 sums (the zero point's share already out: they started at sum_init) times mult
// plus add, per channel: the float epilogue's first step.
template <int R>
LITE_VNNI_TARGET __attribute__((always_inline)) inline void ScaleSums(const __m512i (&lo)[R], const __m512i (&hi)[R],
                                                                     const float* mult, const float* add, int rows,
                                                                     __m512 (&f0)[R], __m512 (&f1)[R]) {
  const __m512 mul0 = _mm512_loadu_ps(mult), mul1 = _mm512_loadu_ps(mult + 16);
  const __m512 add0 = _mm512_loadu_ps(add), add1 = _mm512_loadu_ps(add + 16);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    if (r >= rows) break;
    f0[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo[r]), mul0, add0);
    f1[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi[r]), mul1, add1);
  }
}

// The epilogue into uint8 codes, in code units throughout (Bind folds the scales, the zero point and the
// residual's shift into q_mult / q_add), two rows of 32 channels at a time: per 16 sums a conversion and an FMA (a
// second for the residual), the rounding conversion, then per two rows two saturating packs into int16, one into
// uint8 (which saturates every int32 into [0, 255]), the clamps as byte max / min where they clamp anything
// (rounding is monotonic: clamping the rounded code equals rounding the clamped value) and one permutation back into
// channel order (the packs interleave 128-bit lanes): 4 vector operations per 16 sums where converting each row alone
// (vpmovusdb, two operations) took 8.5 (a 64 -> 256 1x1 Conv + ReLU on 56x56 at one thread, AMX tiles: 0.135 ->
// 0.100 ms; 256 -> 64: 0.053 -> 0.044; VNNI tiles 0.229 -> 0.201). Where Bind found the codes may be NaN or beyond
// int32 (q_cap), they are capped at 512 first: a NaN (vminps returns its second operand) converts to INT_MIN, packs
// to 0 and ends as q_floor, as the separate steps made it.
// kCodeSilu: SiLU, which is not linear in code units: the code value is taken back to real units, through FastSiluVec
// and back (YOLO's Convs).
enum CodeFlags : int { kCodeResidual = 1, kCodeCap = 2, kCodeFloor = 4, kCodeCeil = 8, kCodeSilu = 16 };

inline int CodeFlagsOf(const TileOut& o) {
  return (o.residual ? kCodeResidual : 0) | (o.q_cap ? kCodeCap : 0) | (o.q_floor ? kCodeFloor : 0) |
         (o.q_ceil != 255 ? kCodeCeil : 0) | (o.clamp == 3 ? kCodeSilu : 0);
}

struct CodeEpilogue {
  __m512 mul0, mul1, add0, add1, res_scale, cap, out_scale, inv_scale, out_zero;
  __m512i floor, ceil, order;
  // TileOut's fields the rows read, copied: through a const TileOut& every uint8 store (which may alias anything)
  // made the compiler load them again; with them, and pairs of rows without a branch each, a 64 -> 256 1x1 Conv +
  // ReLU on 56x56 (AMX tiles, one thread) 0.108 -> 0.101 ms, medians of three alternations.
  const int32_t* pixel;
  uint8_t* y8;
  int64_t ld8;
  const uint8_t* residual;
  int64_t ld_res;
  __mmask16 lo_mask, hi_mask;

  LITE_VNNI_TARGET explicit CodeEpilogue(const TileOut& out)
      : pixel(out.pixel), y8(out.y8), ld8(out.ld8), residual(out.residual), ld_res(out.ld_res), lo_mask(out.lo_mask),
        hi_mask(out.hi_mask) {
    mul0 = _mm512_loadu_ps(out.q_mult), mul1 = _mm512_loadu_ps(out.q_mult + 16);
    add0 = _mm512_loadu_ps(out.q_add), add1 = _mm512_loadu_ps(out.q_add + 16);
    res_scale = _mm512_set1_ps(out.q_res_scale), cap = _mm512_set1_ps(512.f);
    out_scale = _mm512_set1_ps(out.out_scale), inv_scale = _mm512_set1_ps(1.f / out.out_scale);
    out_zero = _mm512_set1_ps(out.out_zero);
    floor = _mm512_set1_epi8(static_cast<char>(out.q_floor)), ceil = _mm512_set1_epi8(static_cast<char>(out.q_ceil));
    // After packus_epi16(packs_epi32(a0, a1), packs_epi32(b0, b1)) each 128-bit lane i holds the 4-code words
    // a0[i], a1[i], b0[i], b1[i] (a0[i]: channels 4i..4i+3 of row a, a1[i]: channels 16+4i..): this gathers row a's
    // eight words, then row b's.
    order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  }

  // One row's two halves of sums as rounded codes (int32), its residual (pixel row p) added.
  template <int kFlags>
  LITE_VNNI_TARGET __attribute__((always_inline)) inline void Row(__m512i lo, __m512i hi, int32_t p, __m512i& c0,
                                                                  __m512i& c1) const {
    __m512 g0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lo), mul0, add0);
    __m512 g1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi), mul1, add1);
    if constexpr ((kFlags & kCodeResidual) != 0) {
      __m512 v0, v1;
      LoadResidualCodes(residual + p * ld_res, lo_mask, hi_mask, v0, v1);
      g0 = _mm512_fmadd_ps(v0, res_scale, g0);
      g1 = _mm512_fmadd_ps(v1, res_scale, g1);
    }
    if constexpr ((kFlags & kCodeSilu) != 0) {   // code -> real -> SiLU -> code
      g0 = _mm512_fmadd_ps(FastSiluVec(_mm512_mul_ps(_mm512_sub_ps(g0, out_zero), out_scale)), inv_scale, out_zero);
      g1 = _mm512_fmadd_ps(FastSiluVec(_mm512_mul_ps(_mm512_sub_ps(g1, out_zero), out_scale)), inv_scale, out_zero);
    }
    if constexpr ((kFlags & kCodeCap) != 0) g0 = _mm512_min_ps(cap, g0), g1 = _mm512_min_ps(cap, g1);
    c0 = _mm512_cvtps_epi32(g0);
    c1 = _mm512_cvtps_epi32(g1);
  }

  // Rows a and b (pixel rows pa, pb; b absent when !pair) of rounded codes narrowed, clamped and stored.
  template <int kFlags>
  LITE_VNNI_TARGET __attribute__((always_inline)) inline void Store(__m512i a0, __m512i a1, __m512i b0, __m512i b1,
                                                                    int32_t pa, int32_t pb, bool pair) const {
    __m512i u = _mm512_packus_epi16(_mm512_packs_epi32(a0, a1), _mm512_packs_epi32(b0, b1));
    if constexpr ((kFlags & kCodeFloor) != 0) u = _mm512_max_epu8(u, floor);
    if constexpr ((kFlags & kCodeCeil) != 0) u = _mm512_min_epu8(u, ceil);
    u = _mm512_permutexvar_epi32(order, u);
    uint8_t* at = y8 + pa * ld8;
    if (hi_mask == 0xFFFF) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(at), _mm512_castsi512_si256(u));
      if (pair) _mm256_storeu_si256(reinterpret_cast<__m256i*>(y8 + pb * ld8), _mm512_extracti64x4_epi64(u, 1));
    } else if (lo_mask == 0xFFFF && hi_mask == 0) {   // a 16-channel last panel: each row's first 16 codes only
      _mm_storeu_si128(reinterpret_cast<__m128i*>(at), _mm512_castsi512_si128(u));
      if (pair) _mm_storeu_si128(reinterpret_cast<__m128i*>(y8 + pb * ld8), _mm512_extracti32x4_epi32(u, 2));
    } else {   // an 8- or 24-channel last panel
      const __mmask32 m = static_cast<__mmask32>(lo_mask) | static_cast<__mmask32>(hi_mask) << 16;
      _mm256_mask_storeu_epi8(at, m, _mm512_castsi512_si256(u));
      if (pair) _mm256_mask_storeu_epi8(y8 + pb * ld8, m, _mm512_extracti64x4_epi64(u, 1));
    }
  }

  // Rows [0, rows) of sums 32 int32 apart (a tile's stored AMX sums), pixel rows pixel[r].
  template <int kFlags>
  LITE_VNNI_TARGET void Rows(const int32_t* sums, int64_t rows) const {
    int64_t r = 0;
    for (; r + 2 <= rows; r += 2) {
      __m512i a0, a1, b0, b1;
      const int32_t pa = pixel[r], pb = pixel[r + 1];
      Row<kFlags>(_mm512_load_si512(sums + r * 32), _mm512_load_si512(sums + r * 32 + 16), pa, a0, a1);
      Row<kFlags>(_mm512_load_si512(sums + r * 32 + 32), _mm512_load_si512(sums + r * 32 + 48), pb, b0, b1);
      Store<kFlags>(a0, a1, b0, b1, pa, pb, true);
    }
    if (r < rows) {   // an odd last row, narrowed beside itself
      __m512i a0, a1;
      Row<kFlags>(_mm512_load_si512(sums + r * 32), _mm512_load_si512(sums + r * 32 + 16), pixel[r], a0, a1);
      Store<kFlags>(a0, a1, a0, a1, pixel[r], 0, false);
    }
  }
};

template <int kFlags>
LITE_VNNI_TARGET void CodeRows(const TileOut& o, const int32_t* sums, int64_t rows) {
  CodeEpilogue(o).Rows<kFlags>(sums, rows);
}
using CodeRowsFn = void (*)(const TileOut&, const int32_t*, int64_t);
const CodeRowsFn kCodeRows[32] = {
    CodeRows<0>,  CodeRows<1>,  CodeRows<2>,  CodeRows<3>,  CodeRows<4>,  CodeRows<5>,  CodeRows<6>,  CodeRows<7>,
    CodeRows<8>,  CodeRows<9>,  CodeRows<10>, CodeRows<11>, CodeRows<12>, CodeRows<13>, CodeRows<14>, CodeRows<15>,
    CodeRows<16>, CodeRows<17>, CodeRows<18>, CodeRows<19>, CodeRows<20>, CodeRows<21>, CodeRows<22>, CodeRows<23>,
    CodeRows<24>, CodeRows<25>, CodeRows<26>, CodeRows<27>, CodeRows<28>, CodeRows<29>, CodeRows<30>, CodeRows<31>};

// The same on R rows held in registers (the VNNI tiles'): every row's residual loaded before any row is stored.
template <int R, int kFlags>
LITE_VNNI_TARGET __attribute__((always_inline)) inline void FinishCodesAs(const __m512i (&lo)[R],
                                                                         const __m512i (&hi)[R], const TileOut& o,
                                                                         int rows) {
  const CodeEpilogue e(o);
  __m512i c0[R], c1[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    if (r >= rows) break;
    e.Row<kFlags>(lo[r], hi[r], o.pixel[r], c0[r], c1[r]);
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; r += 2) {
    if (r >= rows) break;
    const bool pair = r + 1 < rows;
    e.Store<kFlags>(c0[r], c1[r], pair ? c0[r + 1] : c0[r], pair ? c1[r + 1] : c1[r], o.pixel[r],
                    pair ? o.pixel[r + 1] : 0, pair);
  }
}

template <int R>
LITE_VNNI_TARGET __attribute__((always_inline)) inline void FinishU8Codes(const __m512i (&lo)[R],
                                                                         const __m512i (&hi)[R], const TileOut& o,
                                                                         int rows) {
  // The residual, the cap and SiLU as variants (they add operations per row); the clamps cost one per two rows.
  constexpr int kClamps = kCodeFloor | kCodeCeil;
  switch (CodeFlagsOf(o) & (kCodeResidual | kCodeCap | kCodeSilu)) {
    case 0: return FinishCodesAs<R, kClamps>(lo, hi, o, rows);
    case kCodeResidual: return FinishCodesAs<R, kCodeResidual | kClamps>(lo, hi, o, rows);
    case kCodeCap: return FinishCodesAs<R, kCodeCap | kClamps>(lo, hi, o, rows);
    case kCodeResidual | kCodeCap: return FinishCodesAs<R, kCodeResidual | kCodeCap | kClamps>(lo, hi, o, rows);
    case kCodeSilu: return FinishCodesAs<R, kCodeSilu | kClamps>(lo, hi, o, rows);
    case kCodeSilu | kCodeResidual: return FinishCodesAs<R, kCodeSilu | kCodeResidual | kClamps>(lo, hi, o, rows);
    case kCodeSilu | kCodeCap: return FinishCodesAs<R, kCodeSilu | kCodeCap | kClamps>(lo, hi, o, rows);
    default: return FinishCodesAs<R, kCodeSilu | kCodeResidual | kCodeCap | kClamps>(lo, hi, o, rows);
  }
}

// The last depth block's epilogue on the first `rows` (<= R) rows of int32 sums: the zero-point correction and the
// per-channel scale with the bias, the residual (uint8 rows), ReLU / ReLU6, then float32 rows (NCHW8c blocks); uint8
// codes go the FinishU8Codes way.
template <int R>
LITE_VNNI_TARGET __attribute__((always_inline)) inline void FinishU8Rows(const __m512i (&lo)[R], const __m512i (&hi)[R],
                                                                        const TileOut& o, int rows = R) {
  const __mmask16 mh = o.hi_mask;
  // (The per-channel tables are padded to whole panels; rows are not: their last 16 channels of a 16-channel panel
  // are masked. Full panels load and store unmasked: masked accesses cost more on AMD cores.)
  const bool full = mh == 0xFFFF;
  if (!o.yf) return FinishU8Codes<R>(lo, hi, o, rows);
  __m512 f0[R], f1[R];
  ScaleSums<R>(lo, hi, o.mult, o.bias, rows, f0, f1);
  // Every row's residual is loaded before any row is stored (no load waits behind a store it may alias).
  if (o.residual) {
    const __m512 rs = _mm512_set1_ps(o.res_scale), shift = _mm512_set1_ps(o.res_shift);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      if (r >= rows) break;
      __m512 v0, v1;
      LoadResidualCodes(o.residual + o.pixel[r] * o.ld_res, o.lo_mask, o.hi_mask, v0, v1);
      f0[r] = _mm512_add_ps(f0[r], _mm512_fmadd_ps(v0, rs, shift));
      f1[r] = _mm512_add_ps(f1[r], _mm512_fmadd_ps(v1, rs, shift));
    }
  }
  const __m512 six = _mm512_set1_ps(6.f);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    if (r >= rows) break;
    if (o.clamp == 3) {
      f0[r] = FastSiluVec(f0[r]), f1[r] = FastSiluVec(f1[r]);
    } else if (o.clamp) {
      f0[r] = _mm512_max_ps(f0[r], _mm512_setzero_ps()), f1[r] = _mm512_max_ps(f1[r], _mm512_setzero_ps());
      if (o.clamp == 2) f0[r] = _mm512_min_ps(f0[r], six), f1[r] = _mm512_min_ps(f1[r], six);
    }
    if (o.yf_block) {   // a pixel's 8 channels of each block side by side (no masked stores: whole blocks)
      float* at = o.yf + o.pixel[r] * kChannelBlock;
      StoreBlockHalves(at, o.yf_block, f0[r], o.yf_blocks);
      if (o.yf_blocks > 2) StoreBlockHalves(at + 2 * o.yf_block, o.yf_block, f1[r], o.yf_blocks - 2);
      continue;
    }
    float* at = o.yf + o.pixel[r] * o.ldf;
    _mm512_storeu_ps(at, f0[r]);
    if (full) _mm512_storeu_ps(at + 16, f1[r]); else _mm512_mask_storeu_ps(at + 16, mh, f1[r]);
  }
}

// R pixels x 32 channels over `segments` runs of `quads` channel quads: run s reads pixel r's input row at
// xp + off[r * taps + s] + c0; b: the panel's quads for the whole block, 128 bytes each. A run whose R rows are all
// the zero-point row (a tap in the padding for every pixel of the tile) is skipped.
template <int R>
LITE_VNNI_TARGET void U8Tile(const uint8_t* xp, const int32_t* off, int64_t taps, int32_t zero_row, int64_t segments,
                             int64_t quads, int64_t c0, const int8_t* b, const TileOut& o) {
  __m512i lo[R], hi[R];   // from the previous depth blocks' partial sums, or sum_init
  if (o.accumulate) {
    LoadPartialSums(lo, hi, o.partial);
  } else {
    const __m512i init0 = _mm512_loadu_si512(o.sum_init), init1 = _mm512_loadu_si512(o.sum_init + 16);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) lo[r] = init0, hi[r] = init1;
  }
  if (o.hi_mask == 0) {   // a panel of <= 16 channels: the upper half's weights are zeros, its sums stay sum_init
    PixelDepthLoop<R, 1, VnniDot, __m512i, true>(lo, hi, xp, off, taps, zero_row, segments, quads, c0, b, o.prefetch,
                                                 o.prefetch_lines);
  } else {
    PixelDepthLoop<R, 1, VnniDot>(lo, hi, xp, off, taps, zero_row, segments, quads, c0, b, o.prefetch,
                                  o.prefetch_lines);
  }
  if (!o.final) {
    StorePartialSums(lo, hi, o.partial);
    return;
  }
  FinishU8Rows<R>(lo, hi, o);
}

using TileFn = void (*)(const uint8_t*, const int32_t*, int64_t, int32_t, int64_t, int64_t, int64_t, const int8_t*,
                        const TileOut&);
const TileFn kTiles[kTileRows + 1] = {nullptr, U8Tile<1>, U8Tile<2>, U8Tile<3>, U8Tile<4>,
                                      U8Tile<5>, U8Tile<6>, U8Tile<7>, U8Tile<8>};

// What one thread's run of AMX tiles keeps from tile to tile (ForEachPixelTile's lane): where the sums go through
// memory, and the 16 rows every first depth block's sums start from (a tile's sum_init on each row: four tile loads
// put the zero point's share in the sums, where a vector add per 16 sums took it out in the epilogue; loading them
// with stride 0 from one row made each tile far slower), remade where a tile's sum_init differs from the last one's.
struct AmxTileLane {
  alignas(64) int32_t sums[32 * 32];
  alignas(64) int32_t init[16 * 32];
  const int32_t* init_of = nullptr;

  LITE_VNNI_TARGET const int32_t* InitRows(const int32_t* sum_init) {
    if (sum_init != init_of) {
      const __m512i lo = _mm512_loadu_si512(sum_init), hi = _mm512_loadu_si512(sum_init + 16);
      for (int r = 0; r < 16; ++r) _mm512_store_si512(init + r * 32, lo), _mm512_store_si512(init + r * 32 + 16, hi);
      init_of = sum_init;
    }
    return init;
  }
};

// AMX (TDPBUSD): up to 32 pixels x 32 channels per tile, int32 sums in tmm0-3, over the block's runs in steps of 16
// channel quads: a whole step's 16-row half whose input rows lie evenly apart (a 1x1 Conv's pixels, consecutive pixels
// of one output row) loaded straight from them (ResNet-50 int8 at one thread 10.1-10.3 -> 9.4-9.7 ms with the
// precomputed AmxTapRows), other halves' input rows gathered (masked AVX-512 loads into a 2 KiB buffer, two in turn), the panel's
// two 16-channel halves as B tiles in place (128-byte quad rows), a partial step's from a zero-padded copy (the bytes
// past a run's quads then meet zero weights: integer products, exact). Runs that are padding for every row are
// skipped as U8Tile skips them (the tile's zero-point correction counts the same taps). The sums go through memory
// once per tile, then into uint8 codes two rows at a time (CodeEpilogue), into floats 8 rows at a time through
// U8Tile's epilogue.
LITE_VNNI_TARGET void AmxU8Tile(int64_t rows, const uint8_t* xp, const int32_t* off, int64_t taps,
                                const AmxTapRows* tap_rows, int64_t segments, int64_t quads, int64_t c0,
                                const int8_t* b, const TileOut& o, AmxTileLane& lane) {
  alignas(64) uint8_t a_buf[2][32 * 64];
  alignas(64) int8_t b_rest[16 * 128];
  int32_t* sums = lane.sums;
  const bool two = rows > 16;
  if (o.accumulate) {
    AmxZeroSums();
  } else {
    const int32_t* init = lane.InitRows(o.sum_init);
    LITE_TILE_LOAD(0, init, 128);
    LITE_TILE_LOAD(1, init + 16, 128);
    LITE_TILE_LOAD(2, init, 128);
    LITE_TILE_LOAD(3, init + 16, 128);
  }
  const int64_t total_steps = segments * ((quads + 15) / 16);
  const int64_t fetch_per_step = total_steps ? (o.prefetch_lines + total_steps - 1) / total_steps : 0;
  int64_t fetched = 0;
  int buf = 0;
  for (int64_t s = 0; s < segments; ++s, b += quads * kQuadBytes) {
    if (tap_rows[s].padding) continue;
    const int32_t* even = tap_rows[s].even;
    for (int64_t q0 = 0; q0 < quads; q0 += 16) {
      const int64_t left = std::min<int64_t>(16, quads - q0);
      const __mmask64 m = left == 16 ? ~__mmask64{0} : (__mmask64{1} << (4 * left)) - 1;
      // A whole step's 16-row half whose input rows lie evenly apart is loaded as a tile straight from them (as
      // AmxPixelTile does); other halves, and partial steps, are gathered through a_buf.
      const uint8_t* a_at[2];
      int64_t a_stride[2];
      if (AmxStepRows(xp, off, taps, s, c0 + 4 * q0, rows, two, left == 16, even, m, a_buf[buf], a_at, a_stride))
        buf ^= 1;
      const int8_t* bs = b + q0 * kQuadBytes;
      if (left < 16) {
        std::memcpy(b_rest, bs, left * kQuadBytes);
        std::memset(b_rest + left * kQuadBytes, 0, (16 - left) * kQuadBytes);
        bs = b_rest;
      }
      for (int64_t l = 0; l < fetch_per_step && fetched < o.prefetch_lines; ++l, ++fetched)
        _mm_prefetch(o.prefetch + fetched * 64, _MM_HINT_T1);
      AmxStep<AmxDot::kU8S8>(a_at[0], two ? a_at[1] : nullptr, a_stride[0], bs, bs + 64, kQuadBytes, two,
                             two ? a_stride[1] : 0);
    }
  }
  AmxStoreSums(sums, two);
  if (o.final && o.y8) {
    if (o.accumulate)
      for (int64_t i = 0; i < rows * 32; i += 16)
        _mm512_store_si512(sums + i, _mm512_add_epi32(_mm512_load_si512(sums + i), _mm512_loadu_si512(o.partial + i)));
    kCodeRows[CodeFlagsOf(o)](o, sums, rows);
    return;
  }
  for (int64_t r0 = 0; r0 < rows; r0 += 8) {
    const int n = static_cast<int>(std::min<int64_t>(8, rows - r0));
    __m512i lo[8], hi[8];
#pragma GCC unroll 8
    for (int r = 0; r < 8; ++r) {
      if (r >= n) break;
      lo[r] = _mm512_load_si512(sums + (r0 + r) * 32), hi[r] = _mm512_load_si512(sums + (r0 + r) * 32 + 16);
      if (o.accumulate) {
        lo[r] = _mm512_add_epi32(lo[r], _mm512_loadu_si512(o.partial + (r0 + r) * 32));
        hi[r] = _mm512_add_epi32(hi[r], _mm512_loadu_si512(o.partial + (r0 + r) * 32 + 16));
      }
    }
    if (o.final) {
      TileOut chunk = o;
      chunk.pixel = o.pixel + r0;
      FinishU8Rows<8>(lo, hi, chunk, n);
      continue;
    }
#pragma GCC unroll 8
    for (int r = 0; r < 8; ++r) {
      if (r >= n) break;
      _mm512_storeu_si512(o.partial + (r0 + r) * 32, lo[r]);
      _mm512_storeu_si512(o.partial + (r0 + r) * 32 + 16, hi[r]);
    }
  }
}

// Pixels [p0, p1) of C NCHW planes (HW codes each) into pixel-major rows (ld apart): 16 pixels x 4 channels
// interleaved in registers at a time, each pixel's 4 codes stored as one 32-bit word.
LITE_VNNI_TARGET void NchwToRows(const uint8_t* x, int64_t C, int64_t HW, int64_t p0, int64_t p1, int64_t ld,
                                 uint8_t* xp) {
  int64_t p = p0;
  for (; p + 16 <= p1; p += 16)
    for (int64_t c = 0; c < C; c += 4) {
      const uint8_t* src = x + c * HW + p;
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + HW));
      const __m128i cc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * HW));
      const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 3 * HW));
      const __m128i ab_lo = _mm_unpacklo_epi8(a, b), ab_hi = _mm_unpackhi_epi8(a, b);
      const __m128i cd_lo = _mm_unpacklo_epi8(cc, d), cd_hi = _mm_unpackhi_epi8(cc, d);
      const __m128i quads[4] = {_mm_unpacklo_epi16(ab_lo, cd_lo), _mm_unpackhi_epi16(ab_lo, cd_lo),
                                _mm_unpacklo_epi16(ab_hi, cd_hi), _mm_unpackhi_epi16(ab_hi, cd_hi)};
      uint8_t* dst = xp + p * ld + c;
      for (int i = 0; i < 4; ++i) {
        alignas(16) int32_t w[4];
        _mm_store_si128(reinterpret_cast<__m128i*>(w), quads[i]);
        for (int j = 0; j < 4; ++j) std::memcpy(dst + (4 * i + j) * ld, &w[j], 4);
      }
    }
  for (; p < p1; ++p)
    for (int64_t c = 0; c < C; ++c) xp[p * ld + c] = x[c * HW + p];
}
#endif

#ifdef LITE_X86_SIMD
// InterleaveWords' whole 16-word steps; returns the words done.
__attribute__((target("avx512f"))) int64_t InterleaveWordsAvx512(const uint32_t* a, const uint32_t* b, int64_t n,
                                                                 uint32_t* out) {
  const __m512i first = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i second = _mm512_add_epi32(first, _mm512_set1_epi32(8));
  int64_t w = 0;
  for (; w + 16 <= n; w += 16) {
    const __m512i va = _mm512_loadu_si512(a + w), vb = _mm512_loadu_si512(b + w);
    _mm512_storeu_si512(out + 2 * w, _mm512_permutex2var_epi32(va, first, vb));
    _mm512_storeu_si512(out + 2 * w + 16, _mm512_permutex2var_epi32(va, second, vb));
  }
  return w;
}

// Pixels [0, n) of up to 3 float rows (rows[k] null past the channel count) as words of 4 uint8 codes: channel k in
// byte k, the missing channels and byte 3 the zero point. Each value as QuantizeRowsU8 quantises it (x / scale rounded
// half to even, plus the zero point, saturated; NaN 0); values are capped at +-512 codes first so that a huge one
// saturates instead of converting to INT_MIN.
__attribute__((target("avx512f"))) void FloatWordRow(const float* const (&rows)[3], int64_t n, float inv_scale,
                                                     int32_t zero_point, uint32_t* out) {
  const __m512 inv = _mm512_set1_ps(inv_scale), lo = _mm512_set1_ps(-512.f), hi = _mm512_set1_ps(512.f);
  const __m512i zp = _mm512_set1_epi32(zero_point);
  const __m512i top = _mm512_set1_epi32(static_cast<int32_t>(static_cast<uint32_t>(zero_point) << 24));
  const __m512i zero = _mm512_setzero_si512(), max_code = _mm512_set1_epi32(255);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (n - i)) - 1);
    __m512i w = top;
    for (int k = 0; k < 3; ++k) {
      __m512i q = zp;
      if (rows[k]) {   // min(hi, v) keeps a NaN (vminps returns its second operand): cvt gives INT_MIN, then 0
        const __m512 scaled = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, rows[k] + i), inv);
        const __m512 v = _mm512_max_ps(lo, _mm512_min_ps(hi, scaled));
        q = _mm512_min_epi32(_mm512_max_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(v), zp), zero), max_code);
      }
      w = _mm512_or_si512(w, _mm512_slli_epi32(q, 8 * k));
    }
    _mm512_mask_storeu_epi32(out + i, m, w);
  }
}
#endif

// out[2 w] = a[w], out[2 w + 1] = b[w] for w < n: the stem copy's two filter rows per pixel.
void InterleaveWords(const uint32_t* a, const uint32_t* b, int64_t n, uint32_t* out) {
  int64_t w = 0;
#ifdef LITE_X86_SIMD
  if (CpuHasAvx512Vnni()) w = InterleaveWordsAvx512(a, b, n, out);
#endif
  for (; w < n; ++w) out[2 * w] = a[w], out[2 * w + 1] = b[w];
}

// Rows [p0, p1) of P pixel-major rows (ld apart, M values each) as M planes of P.
template <typename T>
void RowsToPlanes(const T* rows, int64_t M, int64_t P, int64_t ld, int64_t p0, int64_t p1, T* y) {
  constexpr int64_t kBlock = 16;
  for (int64_t pb = p0; pb < p1; pb += kBlock) {
    const int64_t pe = std::min(p1, pb + kBlock);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t p = pb; p < pe; ++p) y[m * P + p] = rows[p * ld + m];
  }
}

void ParallelUnits(ThreadPool* pool, int64_t units, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (pool && pool->size() > 1 && units > grain) pool->ParallelFor(units, grain, fn); else fn(0, units);
}

}  // namespace

void U8NchwToRows(const uint8_t* x, int64_t C, int64_t HW, int64_t ld, uint8_t zero_point, uint8_t* rows,
                  ThreadPool* pool) {
#ifdef LITE_X86_SIMD
  if (CpuHasAvx512Vnni() && C % 4 == 0) {
    ParallelUnits(pool, (HW + 15) / 16, 4, [&](int64_t b0, int64_t b1) {
      NchwToRows(x, C, HW, b0 * 16, std::min(HW, b1 * 16), ld, rows);
    });
    std::memset(rows + HW * ld, zero_point, static_cast<size_t>(ld));
    return;
  }
#endif
  ParallelUnits(pool, (HW + 15) / 16, 4, [&](int64_t b0, int64_t b1) {
    for (int64_t p = b0 * 16; p < std::min(HW, b1 * 16); ++p)
      for (int64_t c = 0; c < C; ++c) rows[p * ld + c] = x[c * HW + p];
  });
  std::memset(rows + HW * ld, zero_point, static_cast<size_t>(ld));
}

void U8RowsToNchw(const uint8_t* rows, int64_t C, int64_t HW, int64_t ld, uint8_t* y, ThreadPool* pool) {
  ParallelUnits(pool, (HW + 15) / 16, 2, [&](int64_t b0, int64_t b1) {
    RowsToPlanes(rows, C, HW, ld, b0 * 16, std::min(HW, b1 * 16), y);
  });
}

void FloatRowsToNchw(const float* rows, int64_t C, int64_t HW, int64_t ld, float* y, ThreadPool* pool) {
  ParallelUnits(pool, (HW + 7) / 8, 2, [&](int64_t b0, int64_t b1) {
    for (int64_t p = b0 * 8; p < std::min(HW, b1 * 8); p += 8) {
      if (p + 8 <= HW && C % 8 == 0) {
        for (int64_t m = 0; m < C; m += 8) Transpose8x8(rows + p * ld + m, ld, y + m * HW + p, HW);
      } else {
        RowsToPlanes(rows, C, HW, ld, p, std::min(HW, p + 8), y);
      }
    }
  });
}

void FinishPixelOutput(U8PixelOut out, uint8_t* rows, const float* float_rows, int64_t C, int64_t P, int64_t ld,
                       int64_t ld_float, uint8_t zero_point, void* y, ThreadPool* pool) {
  if (out == U8PixelOut::kFloatBlocked) return;   // the tiles stored it in place
  if (out == U8PixelOut::kRows) {   // the row of zero points the next Conv's padding taps read
    std::memset(rows + P * ld, zero_point, static_cast<size_t>(ld));
  } else if (out == U8PixelOut::kNchw) {
    U8RowsToNchw(rows, C, P, ld, static_cast<uint8_t*>(y), pool);
  } else {
    FloatRowsToNchw(float_rows, C, P, ld_float, static_cast<float*>(y), pool);
  }
}

bool U8PixelConv::Available() {
#ifdef LITE_X86_SIMD
  return CpuHasAvx512Vnni();
#else
  return false;
#endif
}

// While oneDNN's AMX convolutions take uint8 rows (kernels/integer_compute.cc UseOneDnn), rows are C apart always:
// its kernels read dense nhwc only.
int64_t U8PixelConv::RowStride(int64_t C) {
  static const bool dense = CpuHasAmxInt8() && OneDnn() != nullptr;
  return C % 1024 == 0 && !dense ? C + 64 : C;
}

size_t U8PixelConv::RowsBytes(int64_t C, int64_t HW) { return static_cast<size_t>((HW + 1) * RowStride(C)); }

namespace {

// A stem's padded input plane (BuildFewChannels): rows and columns covering every tap of every output pixel.
struct FewPlane {
  int64_t rows, cols;
};
FewPlane FewPlaneOf(const ConvGeometry& g) {
  return {std::max(g.H + g.pad_top, (g.OH - 1) * g.SH + (g.KH - 1) * g.DH + 1),
          std::max(g.W + g.pad_left, (g.OW - 1) * g.SW + g.KW)};
}

}  // namespace

bool U8PixelConv::Supports(const ConvGeometry& g) {
#ifdef LITE_X86_SIMD
  if (!Available() || g.C <= 0 || g.M <= 0 || g.M % 8 != 0) return false;
  if (g.C % 4 == 0) return static_cast<int64_t>(RowsBytes(g.C, g.H * g.W)) < std::numeric_limits<int32_t>::max();
  const FewPlane plane = FewPlaneOf(g);
  return g.C < 4 && CpuHasAmxInt8() && g.DW == 1 && g.KW <= 16 &&
         plane.rows * plane.cols * 8 + 64 < std::numeric_limits<int32_t>::max();
#else
  (void)g;
  return false;
#endif
}

U8PixelConv::U8PixelConv(const ConvGeometry& g, const int8_t* codes, const float* scales)
    : g_(g), P_(g.OH * g.OW), taps_(g.KH * g.KW), Mp_((g.M + kPanel - 1) / kPanel * kPanel), amx_(CpuHasAmxInt8()) {
  if (!Supports(g)) throw std::logic_error("U8PixelConv: unsupported geometry or CPU without AVX-512 VNNI");
  scales_.assign(static_cast<size_t>(Mp_), 0.f);
  std::copy(scales, scales + g.M, scales_.begin());
  if (g.C % 4 != 0) {
    BuildFewChannels(codes);
    return;
  }
  const int64_t C = g.C, M = g.M, quads = taps_ * C / 4;
  off_stride_ = taps_;
  panel_quads_ = quads;
  tiling_ = amx_ ? TileOutputPixels(g, RowStride(C), kAmxTileRows, /*by_padding=*/false)
                 : TileOutputPixels(g, RowStride(C), kTileRows);
  if (amx_) tap_rows_ = AmxTapRowsOf(tiling_.tiles, tiling_.offsets.data(), taps_, tiling_.zero_row, 1);
  blocks_ = SplitPixelDepth(taps_, C / 4, 4, amx_ ? kAmxBlockQuads : kBlockQuads);
  // Weights: panel j's quad q holds, for each of its 32 channels, the 4 codes of depth 4q..4q+3 (depth = tap x C + c).
  w_.assign(static_cast<size_t>(Mp_ / kPanel * quads * kQuadBytes), 0);
  std::vector<int32_t> tap_sums(static_cast<size_t>(taps_ * Mp_), 0);   // [tap][channel]
  for (int64_t m = 0; m < M; ++m) {   // depth order, so that the writes run 4 bytes at a time 128 apart
    int8_t* panel = w_.data() + (m / kPanel * quads * kPanel + m % kPanel) * 4;
    for (int64_t t = 0; t < taps_; ++t) {
      int32_t sum = 0;
      for (int64_t c = 0; c < C; ++c) {
        const int8_t v = codes[(m * C + c) * taps_ + t];
        const int64_t k = t * C + c;
        panel[k / 4 * kQuadBytes + k % 4] = v;
        sum += v;
      }
      tap_sums[t * Mp_ + m] = sum;
    }
  }
  // Each tile reads the taps that are not padding for all its rows; tiles reading the same taps share a key.
  std::map<std::vector<char>, int32_t> keys;
  const int64_t n_tiles = static_cast<int64_t>(tiling_.tiles.size());
  tile_key_.resize(static_cast<size_t>(n_tiles));
  for (int64_t i = 0; i < n_tiles; ++i) {
    const PixelTileSpan& span = tiling_.tiles[i];
    std::vector<char> skipped(static_cast<size_t>(taps_), 1);
    for (int64_t r = 0; r < span.rows; ++r)
      for (int64_t t = 0; t < taps_; ++t)
        if (tiling_.offsets[(span.pos + r) * taps_ + t] != tiling_.zero_row) skipped[t] = 0;
    auto it = keys.find(skipped);
    if (it == keys.end()) {
      it = keys.emplace(skipped, static_cast<int32_t>(key_sums_.size())).first;
      std::vector<int32_t> sums(static_cast<size_t>(Mp_), 0);
      for (int64_t t = 0; t < taps_; ++t)
        if (!skipped[t])
          for (int64_t m = 0; m < Mp_; ++m) sums[m] += tap_sums[t * Mp_ + m];
      key_sums_.push_back(std::move(sums));
    }
    tile_key_[i] = it->second;
  }
}

// A stem (1-3 channels) on AMX tiles. The input copy has its padding in it (the zero point) and, per pixel, 4 bytes of
// its own row and, where the filter is at most 8 wide, 4 of the row DH below (few_rows_ 2): the KW taps of two filter
// rows then read one run of 8 KW bytes, one segment per pair of filter rows (a 7x7 stem: 4 steps of 64 bytes per
// tile, not 49 taps of one quad or 7 runs of 28 bytes). Each segment's weights fill a whole 16-quad step, zero past
// the run (what a step reads past it, the next pixels' codes, meets zero weights: integer products, exact), and for
// the row past the filter's last. No tap is skipped, so one correction (the zero point times the sum of every weight)
// serves every tile. ResNet-50's int8 stem had run on the VNNI direct kernel (three channels are not a quad).
void U8PixelConv::BuildFewChannels(const int8_t* codes) {
  const ConvGeometry& g = g_;
  few_ = true;
  few_rows_ = g.KW <= 8 ? 2 : 1;
  const FewPlane plane = FewPlaneOf(g);
  few_hp_ = plane.rows, few_wp_ = plane.cols;
  const int64_t pixel_bytes = 4 * few_rows_, segments = (g.KH + few_rows_ - 1) / few_rows_;
  off_stride_ = segments;
  panel_quads_ = segments * 16;
  tiling_.pixel_of.resize(static_cast<size_t>(P_));
  for (int64_t p = 0; p < P_; ++p) tiling_.pixel_of[p] = static_cast<int32_t>(p);
  SplitIntoTiles(0, P_, kAmxTileRows, &tiling_.tiles);
  tiling_.offsets.resize(static_cast<size_t>(P_ * segments));
  for (int64_t oh = 0; oh < g.OH; ++oh)
    for (int64_t ow = 0; ow < g.OW; ++ow)
      for (int64_t sg = 0; sg < segments; ++sg)
        tiling_.offsets[(oh * g.OW + ow) * segments + sg] =
            static_cast<int32_t>(((oh * g.SH + sg * few_rows_ * g.DH) * few_wp_ + ow * g.SW) * pixel_bytes);
  tiling_.zero_row = -1;   // no offset reads outside the copy
  tap_rows_ = AmxTapRowsOf(tiling_.tiles, tiling_.offsets.data(), off_stride_, tiling_.zero_row, 1);
  const int64_t per = std::max<int64_t>(1, kAmxBlockQuads / 16);
  for (int64_t sg = 0; sg < segments; sg += per)
    blocks_.push_back({sg, std::min(per, segments - sg), 0, 16, sg * 16});
  // Depth k = sg * 64 + kw * pixel_bytes + j * 4 + c for filter row kh = sg * few_rows_ + j: the run, pixel by pixel.
  w_.assign(static_cast<size_t>(Mp_ / kPanel * panel_quads_ * kQuadBytes), 0);
  std::vector<int32_t> sums(static_cast<size_t>(Mp_), 0);
  for (int64_t m = 0; m < g.M; ++m) {
    int8_t* panel = w_.data() + (m / kPanel * panel_quads_ * kPanel + m % kPanel) * 4;
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t kh = 0; kh < g.KH; ++kh)
        for (int64_t kw = 0; kw < g.KW; ++kw) {
          const int8_t v = codes[((m * g.C + c) * g.KH + kh) * g.KW + kw];
          const int64_t k = (kh / few_rows_) * 64 + kw * pixel_bytes + (kh % few_rows_) * 4 + c;
          panel[k / 4 * kQuadBytes + k % 4] = v;
          sums[m] += v;
        }
  }
  key_sums_.push_back(std::move(sums));
  tile_key_.assign(tiling_.tiles.size(), 0);
}

void U8PixelConv::FewChannelCopy(const uint8_t* x, const float* xf, ActQuant q, uint8_t* copy, ThreadPool* pool) const {
  const ConvGeometry& g = g_;
  const int64_t HW = g.H * g.W, C = g.C;
  const uint8_t zero_point = static_cast<uint8_t>(q.zero_point);
  const uint32_t zp4 = 0x01010101u * zero_point;
  // Padded row r as words of 4 channel codes (the missing channels and the padding the zero point): from codes one
  // loop per channel count, so that each vectorises (zero-extending byte loads, shifts and ors); from floats quantised
  // on the way (FloatWordRow), so that a float input is read once, with no plane of codes between.
  auto word_row = [&](int64_t r, uint32_t* out) {
    std::fill(out, out + few_wp_, zp4);
    const int64_t ih = r - g.pad_top;
    if (ih < 0 || ih >= g.H) return;
    const int64_t n = std::min(g.W, few_wp_ - g.pad_left);
    uint32_t* o = out + g.pad_left;
#ifdef LITE_X86_SIMD
    if (xf) {
      const float* rows[3] = {xf + ih * g.W, C > 1 ? xf + HW + ih * g.W : nullptr,
                              C > 2 ? xf + 2 * HW + ih * g.W : nullptr};
      FloatWordRow(rows, n, 1.f / q.scale, q.zero_point, o);
      return;
    }
#endif
    const uint8_t* p0 = x + ih * g.W;
    const uint8_t* p1 = p0 + (C > 1 ? HW : 0);
    const uint8_t* p2 = p0 + (C > 2 ? 2 * HW : 0);
    const uint32_t hi1 = C > 1 ? 0 : zp4 & 0x0000FF00u, hi2 = C > 2 ? 0 : zp4 & 0x00FF0000u;
    const uint32_t m1 = C > 1 ? 0xFFu : 0, m2 = C > 2 ? 0xFFu : 0;
    for (int64_t i = 0; i < n; ++i)
      o[i] = p0[i] | ((p1[i] & m1) << 8 | hi1) | ((p2[i] & m2) << 16 | hi2) | (zp4 & 0xFF000000u);
  };
  ParallelUnits(pool, few_hp_, 8, [&](int64_t r0, int64_t r1) {
    thread_local std::vector<uint32_t> rows;
    if (rows.size() < static_cast<size_t>(2 * few_wp_)) rows.resize(static_cast<size_t>(2 * few_wp_));
    uint32_t* a = rows.data();
    uint32_t* b = a + few_wp_;
    int64_t b_row = -1;   // the padded row b holds: with DH 1, row r's partner is row r + 1's first
    for (int64_t r = r0; r < r1; ++r) {
      uint32_t* row = reinterpret_cast<uint32_t*>(copy) + r * few_wp_ * few_rows_;
      if (b_row == r) std::swap(a, b); else word_row(r, a);
      if (few_rows_ == 1) {
        std::copy(a, a + few_wp_, row);
        continue;
      }
      word_row(r + g.DH, b);
      b_row = r + g.DH;
      InterleaveWords(a, b, few_wp_, row);
    }
  });
  std::memset(copy + few_hp_ * few_wp_ * 4 * few_rows_, zero_point, 64);
}

U8PixelConv::Bound U8PixelConv::Bind(ActQuant in, const float* bias, const ActQuant* out,
                                     const ActQuant* residual) const {
  Bound b;
  b.in = in;
  b.mult.assign(static_cast<size_t>(Mp_), 0.f);
  b.bias.assign(static_cast<size_t>(Mp_), 0.f);
  for (int64_t m = 0; m < g_.M; ++m) {
    b.mult[m] = in.scale * scales_[m];
    b.bias[m] = bias ? bias[m] : 0.f;
  }
  b.sum_init.assign(key_sums_.size() * static_cast<size_t>(Mp_), 0);
  for (size_t k = 0; k < key_sums_.size(); ++k)
    for (int64_t m = 0; m < Mp_; ++m) b.sum_init[k * Mp_ + m] = -in.zero_point * key_sums_[k][m];
  if (out) {   // code = sum x mult / out scale + (bias - residual zero point x its scale) / out scale + out zero point
    b.codes_out = true, b.out = *out;
    if (residual) b.residual = true, b.res = *residual;
    const float inv_out = 1.f / out->scale;
    const float res_shift = residual ? -static_cast<float>(residual->zero_point) * residual->scale * inv_out : 0.f;
    b.q_mult.resize(static_cast<size_t>(Mp_));
    b.q_add.resize(static_cast<size_t>(Mp_));
    // |sum| <= depth x 255 x 128 (uint8 codes less the zero point, int8 weights); a code past 2^30 in magnitude, or
    // NaN from a non-finite table, needs the cap before the int32 conversion.
    const double max_sum = static_cast<double>(g_.C) * taps_ * 255.0 * 128.0;
    const double res_part = residual ? 255.0 * std::fabs(static_cast<double>(residual->scale) * inv_out) : 0.0;
    b.q_cap = false;
    for (int64_t m = 0; m < Mp_; ++m) {
      b.q_mult[m] = b.mult[m] * inv_out;
      b.q_add[m] = b.bias[m] * inv_out + static_cast<float>(out->zero_point) + res_shift;
      const double bound = max_sum * std::fabs(static_cast<double>(b.q_mult[m])) + std::fabs(b.q_add[m]) + res_part;
      if (!(bound < 1073741824.0)) b.q_cap = true;   // also NaN
    }
  }
  return b;
}

size_t U8PixelConv::InputCopyBytes() const {
  if (few_) return static_cast<size_t>((few_hp_ * few_wp_ * 4 * few_rows_ + 64 + 63) / 64 * 64);
  return (RowsBytes(g_.C, g_.H * g_.W) + 63) / 64 * 64;
}
size_t U8PixelConv::ResidualCopyBytes() const { return (RowsBytes(g_.M, P_) + 63) / 64 * 64; }

size_t U8PixelConv::StagingBytes(U8PixelOut out) const {
  if (out == U8PixelOut::kRows || out == U8PixelOut::kFloatBlocked) return 0;
  const size_t bytes = out == U8PixelOut::kNchw ? RowsBytes(g_.M, P_) : static_cast<size_t>(P_ * Mp_) * sizeof(float);
  return (bytes + 63) / 64 * 64;
}

size_t U8PixelConv::PartialBytes() const {
  return blocks_.size() < 2 ? 0 : static_cast<size_t>(Mp_ * P_) * sizeof(int32_t);
}

size_t U8PixelConv::ScratchBytes(U8Storage in, bool residual_nchw, U8PixelOut out) const {
  return (in == U8Storage::kNchw ? InputCopyBytes() : 0) + (residual_nchw ? ResidualCopyBytes() : 0) +
         StagingBytes(out) + PartialBytes();
}

bool U8PixelConv::TakesFloatInput() const {
#ifdef LITE_X86_SIMD
  return few_;
#else
  return false;
#endif
}

void U8PixelConv::Run(const Bound& bound, const uint8_t* x, U8Storage in, const uint8_t* residual, ActQuant rq,
                      U8Storage res, int clamp, void* y, U8PixelOut out, ActQuant oq, void* scratch,
                      ThreadPool* pool, const float* x_float) const {
#ifdef LITE_X86_SIMD
  char* s = static_cast<char*>(scratch);
  const int64_t C = g_.C, M = g_.M, P = P_, HW = g_.H * g_.W;
  const uint8_t* xp = x;
  if (few_ && in != U8Storage::kNchw) throw std::logic_error("U8PixelConv: a stem's input must be NCHW codes");
  if (x_float && !TakesFloatInput()) throw std::logic_error("U8PixelConv: only a stem takes a float input");
  if (few_) {
    uint8_t* copy = reinterpret_cast<uint8_t*>(s);
    FewChannelCopy(x, x_float, bound.in, copy, pool);
    xp = copy;
    s += InputCopyBytes();
  } else if (in == U8Storage::kNchw) {
    uint8_t* copy = reinterpret_cast<uint8_t*>(s);
    U8NchwToRows(x, C, HW, RowStride(C), static_cast<uint8_t>(bound.in.zero_point), copy, pool);
    xp = copy;
    s += InputCopyBytes();
  }
  const int64_t ldm = RowStride(M);
  const uint8_t* res_rows = residual;
  if (residual && res == U8Storage::kNchw) {
    uint8_t* copy = reinterpret_cast<uint8_t*>(s);
    U8NchwToRows(residual, M, P, ldm, static_cast<uint8_t>(rq.zero_point), copy, pool);
    res_rows = copy;
    s += ResidualCopyBytes();
  }
  uint8_t* y8 = out == U8PixelOut::kRows   ? static_cast<uint8_t*>(y)
                : out == U8PixelOut::kNchw ? reinterpret_cast<uint8_t*>(s)
                                           : nullptr;
  float* yf = out == U8PixelOut::kFloatNchw      ? reinterpret_cast<float*>(s)
              : out == U8PixelOut::kFloatBlocked ? static_cast<float*>(y)
                                                 : nullptr;
  s += StagingBytes(out);
  int32_t* partials = reinterpret_cast<int32_t*>(s);

  const int64_t panel_bytes = panel_quads_ * kQuadBytes;
  // uint8 out: the epilogue's constants in code units (CodeEpilogue), made by Bind for this output and residual.
  if (y8 && (!bound.codes_out || bound.out.scale != oq.scale || bound.out.zero_point != oq.zero_point ||
             bound.residual != (residual != nullptr) ||
             (residual && (bound.res.scale != rq.scale || bound.res.zero_point != rq.zero_point))))
    throw std::logic_error("U8PixelConv: uint8 output or residual not the ones the Bound was made for");
  const float inv_out = 1.f / oq.scale;
  // ReLU6's ceiling rounded as the codes are (the current rounding mode: cvtps2dq's), then at most 255.
  const uint8_t q_ceil =
      clamp == 2 ? static_cast<uint8_t>(std::min(255.f, std::nearbyint(std::max(
                                                            0.f, 6.f * inv_out + static_cast<float>(oq.zero_point)))))
                 : 255;
  const uint8_t q_floor = clamp == 1 || clamp == 2 ? static_cast<uint8_t>(oq.zero_point) : 0;   // (SiLU: none)
  auto setup = [&](int64_t d, int64_t q) {
    const int64_t m0 = q * kPanel;
    TileOut o;
    o.accumulate = d > 0;
    o.final = d + 1 == static_cast<int64_t>(blocks_.size());
    const int64_t lanes = std::min(kPanel, M - m0);   // a multiple of 8 (Supports)
    o.lo_mask = lanes >= 16 ? 0xFFFF : static_cast<uint16_t>((1u << lanes) - 1);
    o.hi_mask = lanes >= 32 ? 0xFFFF : lanes > 16 ? static_cast<uint16_t>((1u << (lanes - 16)) - 1) : 0;
    if (o.final) {
      o.mult = bound.mult.data() + m0;
      o.bias = bound.bias.data() + m0;
      if (res_rows) {
        o.residual = res_rows + m0, o.ld_res = ldm;
        o.res_scale = rq.scale, o.res_shift = -static_cast<float>(rq.zero_point) * rq.scale;
      }
      o.clamp = clamp;
      if (y8) {
        o.y8 = y8 + m0, o.ld8 = ldm;
        o.q_mult = bound.q_mult.data() + m0, o.q_add = bound.q_add.data() + m0;
        o.q_res_scale = residual ? rq.scale * inv_out : 0.f, o.q_ceil = q_ceil, o.q_floor = q_floor;
        o.q_cap = bound.q_cap;
        o.out_scale = oq.scale, o.out_zero = static_cast<float>(oq.zero_point);
      }
      if (yf && out == U8PixelOut::kFloatBlocked) {
        o.yf = yf + m0 * P, o.yf_block = kChannelBlock * P;
        o.yf_blocks = static_cast<int>(std::min<int64_t>(4, (M - m0) / kChannelBlock));
      } else if (yf) {
        o.yf = yf + m0, o.ldf = Mp_;
      }
    }
    return o;
  };
  auto tile = [&](AmxTileLane& lane, TileOut& o, int64_t d, int64_t q, int64_t ti, const char* weights,
                  const char* next, int64_t lines) {
    o.prefetch = next;
    o.prefetch_lines = lines;
    const PixelDepthBlock& db = blocks_[d];
    const PixelTileSpan& span = tiling_.tiles[ti];
    o.pixel = tiling_.pixel_of.data() + span.pos;
    o.partial = partials + (q * P + span.pos) * kPanel;
    o.sum_init = bound.sum_init.data() + tile_key_[ti] * Mp_ + q * kPanel;
    if (amx_) {
      AmxU8Tile(span.rows, xp, tiling_.offsets.data() + span.pos * off_stride_ + db.tap0, off_stride_,
                tap_rows_.data() + ti * off_stride_ + db.tap0, db.segments, db.units, db.c0,
                reinterpret_cast<const int8_t*>(weights), o, lane);
      return;
    }
    kTiles[span.rows](xp, tiling_.offsets.data() + span.pos * taps_ + db.tap0, taps_, tiling_.zero_row, db.segments,
                      db.units, db.c0, reinterpret_cast<const int8_t*>(weights), o);
  };
  ForEachPixelTile<AmxTileLane>(P, static_cast<int64_t>(tiling_.tiles.size()), blocks_, Mp_ / kPanel, w_.data(),
                                panel_bytes, pool, setup, tile, amx_);

  FinishPixelOutput(out, y8, yf, M, P, ldm, Mp_, static_cast<uint8_t>(oq.zero_point), y, pool);
#else
  (void)x, (void)x_float, (void)in, (void)residual, (void)rq, (void)res, (void)clamp, (void)y, (void)out, (void)oq,
      (void)scratch, (void)pool;
  throw std::logic_error("U8PixelConv needs an x86 build with AVX-512 VNNI");
#endif
}

}  // namespace lite
