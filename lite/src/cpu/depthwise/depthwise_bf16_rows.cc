#include "cpu/depthwise/depthwise_bf16_rows.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "cpu/conv/bf16_pixel_conv.h"
#include "cpu/gemm/bf16_gemm.h"
#include "cpu/isa_dispatch.h"

#ifdef LITE_X86_SIMD
#include <immintrin.h>
#endif

namespace lite {
namespace {

// Channel c (0-31) of a chunk: where the interleaved pair vectors hold it (lo: index < 16, hi: 16 + index).
constexpr int PairLane(int c) { return (c % 8 < 4 ? 0 : 16) + (c / 8) * 4 + c % 4; }

#ifdef LITE_X86_SIMD
#define LITE_DW16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

// The products run on vdpbf16ps over pairs of taps: two taps' input rows (32 channels each) interleaved by
// vpunpcklwd / vpunpckhwd give, per 128-bit lane, four channels' (tap t, tap t + 1) pairs, which multiply the same
// channels' weight pairs (packed once in that order): 32 channels x 2 taps in two instructions and two shuffles,
// where widening each tap's bf16 values to float32 took three vector operations per 16 multiply-adds. Taps outside
// the input read the row of zeros after the pixels.
constexpr int kGroup = 8;   // output pixels a step (independent sums)

// [c] = PairLane(c): the rounded (lo, hi) sums back in channel order.
alignas(64) constexpr int16_t kChannelOrder[32] = {
    PairLane(0),  PairLane(1),  PairLane(2),  PairLane(3),  PairLane(4),  PairLane(5),  PairLane(6),  PairLane(7),
    PairLane(8),  PairLane(9),  PairLane(10), PairLane(11), PairLane(12), PairLane(13), PairLane(14), PairLane(15),
    PairLane(16), PairLane(17), PairLane(18), PairLane(19), PairLane(20), PairLane(21), PairLane(22), PairLane(23),
    PairLane(24), PairLane(25), PairLane(26), PairLane(27), PairLane(28), PairLane(29), PairLane(30), PairLane(31)};

struct RowArgs {
  const uint16_t* x = nullptr;    // input rows, ld apart, then the row of zeros
  uint16_t* y = nullptr;          // output rows, ld apart
  int64_t ld = 0;
  const uint16_t* w = nullptr;    // [pair][chunk][64]: lo lanes' weight pairs, then hi lanes'
  const float* w32 = nullptr;     // [tap][chunk][32]: even channels' weights, then odd channels' (the FMA form)
  const float* bias32 = nullptr;  // [chunk][32] in that order
  bool fma = false;
  const float* bias = nullptr;    // [chunk][32] in PairLane order
  int64_t pairs = 0, chunks = 0;
  int clamp = 0;
};

// The group's sums (two vectors of 16 channels per pixel: first, second) with the activation, rounded to bf16 rows:
// element order[c] of the rounded pair goes to channel c.
LITE_DW16_TARGET inline void StoreGroup(const ConvGeometry& g, int64_t oh, int64_t ow, int n, int64_t c, __mmask32 m,
                                        const __m512 (&first)[kGroup], const __m512 (&second)[kGroup],
                                        const int16_t* order, const RowArgs& a) {
  const __m512i idx = _mm512_load_si512(order);
#pragma GCC unroll 8
  for (int j = 0; j < kGroup; ++j) {
    if (j >= n) break;
    __m512 l = first[j], h = second[j];
    if (a.clamp) l = _mm512_max_ps(l, _mm512_setzero_ps()), h = _mm512_max_ps(h, _mm512_setzero_ps());
    if (a.clamp == 2) l = _mm512_min_ps(l, _mm512_set1_ps(6.f)), h = _mm512_min_ps(h, _mm512_set1_ps(6.f));
    const __m512i v = _mm512_permutexvar_epi16(idx, (__m512i)_mm512_cvtne2ps_pbh(h, l));
    _mm512_mask_storeu_epi16(a.y + (oh * g.OW + ow + j) * a.ld + c, m, v);
  }
}

// Pixels [ow, ow + n) of output row oh, chunk k (channels 32k..), n <= kGroup; tap[j][t]: pixel j's input row of tap
// t. kRegular: n == kGroup and every tap of every pixel inside the input: pixel j's tap t at a.x + toff[t] + j SW ld
// (no per-pixel table: two loads and two adds fewer per pixel and tap pair).
template <bool kRegular>
LITE_DW16_TARGET inline void Group(const ConvGeometry& g, int64_t oh, int64_t ow, int n, int64_t k,
                                   const uint16_t* const (*tap)[32], const int64_t* toff, const RowArgs& a) {
  const int64_t c = 32 * k, left = g.C - c;
  const __mmask32 m = left >= 32 ? 0xFFFFFFFFu : static_cast<__mmask32>((1ull << left) - 1);
  __m512 lo[kGroup], hi[kGroup];
#pragma GCC unroll 8
  for (int j = 0; j < kGroup; ++j) lo[j] = _mm512_loadu_ps(a.bias + 32 * k), hi[j] = _mm512_loadu_ps(a.bias + 32 * k + 16);
  const int64_t taps = g.KH * g.KW;
  for (int64_t p = 0; p < a.pairs; ++p) {
    const __m512bh wlo = (__m512bh)_mm512_loadu_si512(a.w + (p * a.chunks + k) * 64);
    const __m512bh whi = (__m512bh)_mm512_loadu_si512(a.w + (p * a.chunks + k) * 64 + 32);
    const int64_t t0 = 2 * p, t1 = std::min(2 * p + 1, taps - 1);   // an odd last tap pairs with itself (weight 0)
    if constexpr (kRegular) {
      const uint16_t *pa = a.x + toff[t0] + c, *pb = a.x + toff[t1] + c;
      const int64_t step = g.SW * a.ld;
#pragma GCC unroll 8
      for (int j = 0; j < kGroup; ++j) {
        const __m512i va = _mm512_maskz_loadu_epi16(m, pa + j * step), vb = _mm512_maskz_loadu_epi16(m, pb + j * step);
        lo[j] = _mm512_dpbf16_ps(lo[j], (__m512bh)_mm512_unpacklo_epi16(va, vb), wlo);
        hi[j] = _mm512_dpbf16_ps(hi[j], (__m512bh)_mm512_unpackhi_epi16(va, vb), whi);
      }
    } else {
#pragma GCC unroll 8
      for (int j = 0; j < kGroup; ++j) {
        if (j >= n) break;
        const __m512i va = _mm512_maskz_loadu_epi16(m, tap[j][t0] + c), vb = _mm512_maskz_loadu_epi16(m, tap[j][t1] + c);
        lo[j] = _mm512_dpbf16_ps(lo[j], (__m512bh)_mm512_unpacklo_epi16(va, vb), wlo);
        hi[j] = _mm512_dpbf16_ps(hi[j], (__m512bh)_mm512_unpackhi_epi16(va, vb), whi);
      }
    }
  }
  // Back to channel order: element PairLane(c) of the rounded pair (lo, hi) goes to channel c.
  StoreGroup(g, oh, ow, n, c, m, lo, hi, kChannelOrder, a);
}

// The FMA form. [c] = the lane of channel c in (even sums, odd sums) converted by vcvtne2ps2bf16: even channel 2i at
// i, odd 2i + 1 at 16 + i.
alignas(64) constexpr int16_t kSplitOrder[32] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
                                                 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};

// Group on float32 FMAs: a 32-bit lane of an input row holds an even channel (its low half: shifted up, a float32)
// and the next odd one (its high half: masked), each multiplied by its float32 weight (bf16-rounded): one load and
// two integer operations feed 32 channels' FMAs of a tap. On a Sapphire Rapids Xeon MobileNetV2's depthwise layers
// took 0.87x the time of the pair form (whose shuffles and vdpbf16ps ran far below their issue rate there).
// The FMA forms' start of chunk k (channels 32k..): its channels' mask, every pixel's even and odd sums at the bias.
LITE_DW16_TARGET inline __mmask32 StartFmaGroup(const ConvGeometry& g, int64_t k, const RowArgs& a,
                                                __m512 (&ev)[kGroup], __m512 (&od)[kGroup]) {
  const int64_t left = g.C - 32 * k;
#pragma GCC unroll 8
  for (int j = 0; j < kGroup; ++j)
    ev[j] = _mm512_loadu_ps(a.bias32 + 32 * k), od[j] = _mm512_loadu_ps(a.bias32 + 32 * k + 16);
  return left >= 32 ? 0xFFFFFFFFu : static_cast<__mmask32>((1ull << left) - 1);
}

template <bool kRegular>
LITE_DW16_TARGET inline void GroupFma(const ConvGeometry& g, int64_t oh, int64_t ow, int n, int64_t k,
                                        const uint16_t* const (*tap)[32], const int64_t* toff, const RowArgs& a) {
  const int64_t c = 32 * k;
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  __m512 ev[kGroup], od[kGroup];
  const __mmask32 m = StartFmaGroup(g, k, a, ev, od);
  const int64_t taps = g.KH * g.KW;
  for (int64_t t = 0; t < taps; ++t) {
    const float* wt = a.w32 + (t * a.chunks + k) * 32;
    const __m512 we = _mm512_loadu_ps(wt), wo = _mm512_loadu_ps(wt + 16);
    if constexpr (kRegular) {
      const uint16_t* pa = a.x + toff[t] + c;
      const int64_t step = g.SW * a.ld;
#pragma GCC unroll 8
      for (int j = 0; j < kGroup; ++j) {
        const __m512i v = _mm512_maskz_loadu_epi16(m, pa + j * step);
        ev[j] = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(v, 16)), we, ev[j]);
        od[j] = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(v, high)), wo, od[j]);
      }
    } else {
#pragma GCC unroll 8
      for (int j = 0; j < kGroup; ++j) {
        if (j >= n) break;
        const __m512i v = _mm512_maskz_loadu_epi16(m, tap[j][t] + c);
        ev[j] = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(v, 16)), we, ev[j]);
        od[j] = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(v, high)), wo, od[j]);
      }
    }
  }
  StoreGroup(g, oh, ow, n, c, m, ev, od, kSplitOrder, a);
}

// GroupFma for stride-1 groups of 3- or 5-wide filters, a filter row at a time: each of the kGroup + KW - 1 input
// pixels a filter row touches (a pointer each, the row of zeros outside the input) is widened once and multiplies
// the KW taps (weights in registers) of every output pixel it feeds, where GroupFma widened it once per tap: KW - 1
// of every KW loads and widenings fewer, and no per-pixel tap table at the edges. MobileNetV2's stride-1 depthwise
// layers at one thread 0.70-0.77x the time (56x56 x 144: 0.19 -> 0.145 ms, OpenVINO 0.163); at stride 2 the same
// form (17 input pixels for 8) was no faster.
constexpr int kSlideMaxKW = 5;
constexpr int kSlideMaxKH = 32 / 3;   // KH x KW <= 32 taps (Supports)
using SlideRows = const uint16_t* [kSlideMaxKH][kGroup + kSlideMaxKW - 1];

template <int KW>
LITE_DW16_TARGET inline void GroupFmaSlide(const ConvGeometry& g, int64_t oh, int64_t ow, int n, int64_t k,
                                           const SlideRows& src, const RowArgs& a) {
  const int64_t c = 32 * k;
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  __m512 ev[kGroup], od[kGroup];
  const __mmask32 m = StartFmaGroup(g, k, a, ev, od);
  for (int64_t kh = 0; kh < g.KH; ++kh) {
    __m512 we[KW], wo[KW];
#pragma GCC unroll 8
    for (int kw = 0; kw < KW; ++kw) {
      const float* wt = a.w32 + ((kh * KW + kw) * a.chunks + k) * 32;
      we[kw] = _mm512_loadu_ps(wt), wo[kw] = _mm512_loadu_ps(wt + 16);
    }
#pragma GCC unroll 16
    for (int i = 0; i < kGroup + KW - 1; ++i) {
      const __m512i v = _mm512_maskz_loadu_epi16(m, src[kh][i] + c);
      const __m512 e = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
      const __m512 o = _mm512_castsi512_ps(_mm512_and_si512(v, high));
#pragma GCC unroll 8
      for (int kw = 0; kw < KW; ++kw) {
        const int j = i - kw;
        if (j < 0 || j >= kGroup) continue;
        ev[j] = _mm512_fmadd_ps(e, we[kw], ev[j]);
        od[j] = _mm512_fmadd_ps(o, wo[kw], od[j]);
      }
    }
  }
  StoreGroup(g, oh, ow, n, c, m, ev, od, kSplitOrder, a);
}

// Output row oh: each pixel's tap rows (inside the input, else the row of zeros), then groups of kGroup pixels.
LITE_DW16_TARGET void Row(const ConvGeometry& g, int64_t oh, const RowArgs& a) {
  const uint16_t* zero = a.x + g.H * g.W * a.ld;
  const uint16_t* tap[kGroup][32];
  int64_t toff[32];
  const int64_t ih0 = oh * g.SH - g.pad_top;
  const bool rows_in = ih0 >= 0 && ih0 + (g.KH - 1) * g.DH < g.H;
  const int slide = a.fma && g.SW == 1 && g.DW == 1 && (g.KW == 3 || g.KW == 5) ? static_cast<int>(g.KW) : 0;
  for (int64_t ow = 0; ow < g.OW; ow += kGroup) {
    const int n = static_cast<int>(std::min<int64_t>(kGroup, g.OW - ow));
    if (slide) {   // each filter row's input pixels (outside the input: the row of zeros)
      SlideRows src;
      const int64_t iw0 = ow - g.pad_left;
      for (int64_t kh = 0; kh < g.KH; ++kh) {
        const int64_t ih = ih0 + kh * g.DH;
        for (int i = 0; i < kGroup + slide - 1; ++i) {
          const int64_t iw = iw0 + i;
          src[kh][i] = ih >= 0 && ih < g.H && iw >= 0 && iw < g.W ? a.x + (ih * g.W + iw) * a.ld : zero;
        }
      }
      for (int64_t k = 0; k < a.chunks; ++k)
        if (slide == 3) GroupFmaSlide<3>(g, oh, ow, n, k, src, a); else GroupFmaSlide<5>(g, oh, ow, n, k, src, a);
      continue;
    }
    const int64_t iw_first = ow * g.SW - g.pad_left, iw_last = (ow + n - 1) * g.SW - g.pad_left + (g.KW - 1) * g.DW;
    if (n == kGroup && rows_in && iw_first >= 0 && iw_last < g.W) {
      for (int64_t kh = 0, t = 0; kh < g.KH; ++kh)
        for (int64_t kw = 0; kw < g.KW; ++kw, ++t) toff[t] = ((ih0 + kh * g.DH) * g.W + iw_first + kw * g.DW) * a.ld;
      for (int64_t k = 0; k < a.chunks; ++k)
        if (a.fma) GroupFma<true>(g, oh, ow, n, k, tap, toff, a); else Group<true>(g, oh, ow, n, k, tap, toff, a);
      continue;
    }
    for (int j = 0; j < n; ++j) {
      const int64_t iw0 = (ow + j) * g.SW - g.pad_left;
      for (int64_t kh = 0, t = 0; kh < g.KH; ++kh) {
        const int64_t ih = oh * g.SH - g.pad_top + kh * g.DH;
        const bool row_in = ih >= 0 && ih < g.H;
        for (int64_t kw = 0; kw < g.KW; ++kw, ++t) {
          const int64_t iw = iw0 + kw * g.DW;
          tap[j][t] = row_in && iw >= 0 && iw < g.W ? a.x + (ih * g.W + iw) * a.ld : zero;
        }
      }
    }
    for (int64_t k = 0; k < a.chunks; ++k)
      if (a.fma) GroupFma<false>(g, oh, ow, n, k, tap, toff, a); else Group<false>(g, oh, ow, n, k, tap, toff, a);
  }
}
#endif

}  // namespace

bool Bf16RowsDepthwise::Supports(const ConvGeometry& g) {
  return CpuHasAvx512Bf16() && g.C > 0 && g.C == g.M && g.C % 8 == 0 && g.KH > 0 && g.KW > 0 && g.KH * g.KW <= 32;
}

bool Bf16RowsDepthwise::FmaForm() {
  const char* v = std::getenv("LITE_BF16_DEPTHWISE");
  if (v && std::strcmp(v, "fma") == 0) return true;
  if (v && std::strcmp(v, "pairs") == 0) return false;
  return CpuIsIntel();
}

Bf16RowsDepthwise::Bf16RowsDepthwise(const ConvGeometry& g, const float* w)
    : g_(g), chunks_((g.C + 31) / 32), pairs_((g.KH * g.KW + 1) / 2), fma_(FmaForm()) {
  if (!Supports(g)) throw std::logic_error("Bf16RowsDepthwise: not a depthwise geometry of whole 8-channel blocks");
  const int64_t taps = g.KH * g.KW;
  if (fma_) {
    w32_.assign(static_cast<size_t>(taps * chunks_ * 32), 0.f);
    for (int64_t t = 0; t < taps; ++t)
      for (int64_t c = 0; c < g.C; ++c)
        w32_[(t * chunks_ + c / 32) * 32 + (c % 2) * 16 + (c % 32) / 2] = Bf16ToFloat(FloatToBf16(w[c * taps + t]));
    return;
  }
  w_.assign(static_cast<size_t>(pairs_ * chunks_ * 64), 0);
  for (int64_t p = 0; p < pairs_; ++p)
    for (int64_t k = 0; k < chunks_; ++k)
      for (int ch = 0; ch < 32; ++ch) {
        const int64_t c = 32 * k + ch;
        if (c >= g.C) continue;
        const int lane = PairLane(ch);   // 0-15: the lo vector's lane, 16-31: the hi vector's
        uint16_t* at = w_.data() + (p * chunks_ + k) * 64 + (lane / 16) * 32 + 2 * (lane % 16);
        at[0] = FloatToBf16(w[c * taps + 2 * p]);
        at[1] = 2 * p + 1 < taps ? FloatToBf16(w[c * taps + 2 * p + 1]) : 0;
      }
}

void Bf16RowsDepthwise::Run(const uint16_t* x, const float* bias, int clamp, uint16_t* y, ThreadPool* pool) const {
#ifdef LITE_X86_SIMD
  std::vector<float> b(static_cast<size_t>(chunks_ * 32), 0.f);   // in the sums' lane order
  if (bias)
    for (int64_t c = 0; c < g_.C; ++c)
      b[(c / 32) * 32 + (fma_ ? (c % 2) * 16 + (c % 32) / 2 : PairLane(static_cast<int>(c % 32)))] = bias[c];
  RowArgs a;
  a.fma = fma_;
  a.w32 = w32_.data();
  a.bias32 = b.data();
  a.x = x;
  a.y = y;
  a.ld = Bf16PixelConv::Bf16RowStride(g_.C);
  a.w = w_.data();
  a.bias = b.data();
  a.pairs = pairs_;
  a.chunks = chunks_;
  a.clamp = clamp;
  auto rows = [&](int64_t r0, int64_t r1) {
    for (int64_t oh = r0; oh < r1; ++oh) Row(g_, oh, a);
  };
  if (pool && pool->size() > 1) pool->ParallelFor(g_.OH, 1, rows); else rows(0, g_.OH);
  // The row of zeros after the pixels (the next Conv's padding taps read it).
  std::memset(y + g_.OH * g_.OW * a.ld, 0, static_cast<size_t>(a.ld) * sizeof(uint16_t));
#else
  (void)x, (void)bias, (void)clamp, (void)y, (void)pool;
  throw std::logic_error("Bf16RowsDepthwise needs an x86 build with AVX512_BF16");
#endif
}

}  // namespace lite
