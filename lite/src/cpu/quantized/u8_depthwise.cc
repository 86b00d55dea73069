#include "cpu/quantized/u8_depthwise.h"

#include <algorithm>
#include <stdexcept>

#include "cpu/isa_dispatch.h"
#include "cpu/quantized/requantize_avx512.h"

#ifdef LITE_X86_SIMD
#include <immintrin.h>
#endif

namespace lite {
namespace {

struct RowArgs {
  const uint8_t* xp = nullptr;   // input rows
  int64_t ld_in = 0;
  const float* w = nullptr;      // [tap][Cp]
  const float* mult = nullptr;
  const float* bias = nullptr;
  float zero_point = 0.f;
  const float* zp_sum = nullptr;  // -zero point x the channel's weight sum (Cp), where the slide form runs
  int clamp = 0;
  uint8_t* y8 = nullptr;         // output rows (ld_out apart), or
  float* yf = nullptr;           // float rows (ld_out apart)
  int64_t ld_out = 0;
  ActQuant out;                   // the codes' quantisation
};

// Output row oh in plain C++ (CPUs without AVX-512 VNNI): the same sums, the same rounding (nearest even).
void DepthwiseRowScalar(const ConvGeometry& g, int64_t Cp, int64_t oh, const RowArgs& a) {
  for (int64_t ow = 0; ow < g.OW; ++ow) {
    const int64_t p = oh * g.OW + ow;
    for (int64_t c = 0; c < g.C; ++c) {
      float acc = 0.f;
      for (int64_t kh = 0; kh < g.KH; ++kh) {
        const int64_t ih = oh * g.SH - g.pad_top + kh * g.DH;
        if (ih < 0 || ih >= g.H) continue;
        for (int64_t kw = 0; kw < g.KW; ++kw) {
          const int64_t iw = ow * g.SW - g.pad_left + kw * g.DW;
          if (iw < 0 || iw >= g.W) continue;
          acc += (static_cast<float>(a.xp[(ih * g.W + iw) * a.ld_in + c]) - a.zero_point) * a.w[(kh * g.KW + kw) * Cp + c];
        }
      }
      float f = acc * a.mult[c] + a.bias[c];
      if (a.clamp) f = std::max(f, 0.f);
      if (a.clamp == 2) f = std::min(f, 6.f);
      if (a.yf) {
        a.yf[p * a.ld_out + c] = f;
        continue;
      }
      a.y8[p * a.ld_out + c] = QuantizeValue(f, a.out);
    }
  }
}

#ifdef LITE_X86_SIMD
#define LITE_DW_TARGET __attribute__((target("avx512f,avx512bw,avx512vl")))

// 16 channels (mask m) of one output pixel from the epilogue's values: a float row or requantised codes.
LITE_DW_TARGET inline void StoreOutput(const RowArgs& a, int64_t p, int64_t c, __mmask16 m, __m512 acc) {
  __m512 f = _mm512_fmadd_ps(acc, _mm512_loadu_ps(a.mult + c), _mm512_loadu_ps(a.bias + c));
  if (a.clamp) f = _mm512_max_ps(f, _mm512_setzero_ps());
  if (a.clamp == 2) f = _mm512_min_ps(f, _mm512_set1_ps(6.f));
  if (a.yf) {
    _mm512_mask_storeu_ps(a.yf + p * a.ld_out + c, m, f);
    return;
  }
  const __m128i q = RequantizeToCodes(f, _mm512_set1_ps(1.f / a.out.scale), _mm512_set1_epi32(a.out.zero_point));
  uint8_t* at = a.y8 + p * a.ld_out + c;
  if (m == 0xFFFF) _mm_storeu_si128(reinterpret_cast<__m128i*>(at), q);
  else _mm_mask_storeu_epi8(at, m, q);
}

// 16 input codes (mask m) minus the zero point, as floats.
LITE_DW_TARGET inline __m512 LoadCodes(const uint8_t* at, __mmask16 m, __m512 zp) {
  const __m128i codes = m == 0xFFFF ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(at)) : _mm_maskz_loadu_epi8(m, at);
  return _mm512_sub_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(codes)), zp);
}

// One output pixel, its taps clipped to the input.
LITE_DW_TARGET void DepthwisePixel(const ConvGeometry& g, int64_t Cp, int64_t oh, int64_t ow, int64_t kh_lo,
                                   int64_t kh_hi, const RowArgs& a) {
  const __m512 zp = _mm512_set1_ps(a.zero_point);
  const int64_t ih0 = oh * g.SH - g.pad_top, iw0 = ow * g.SW - g.pad_left;
  int64_t kw_lo = 0, kw_hi = g.KW;
  while (kw_lo < g.KW && iw0 + kw_lo * g.DW < 0) ++kw_lo;
  while (kw_hi > kw_lo && iw0 + (kw_hi - 1) * g.DW >= g.W) --kw_hi;
  for (int64_t c = 0; c < g.C; c += 16) {
    const __mmask16 m = g.C - c >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (g.C - c)) - 1);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t kh = kh_lo; kh < kh_hi; ++kh) {
      const uint8_t* row = a.xp + ((ih0 + kh * g.DH) * g.W + iw0) * a.ld_in + c;
      for (int64_t kw = kw_lo; kw < kw_hi; ++kw)
        acc = _mm512_fmadd_ps(LoadCodes(row + kw * g.DW * a.ld_in, m, zp),
                              _mm512_loadu_ps(a.w + (kh * g.KW + kw) * Cp + c), acc);
    }
    StoreOutput(a, oh * g.OW + ow, c, m, acc);
  }
}

// The slide form, for 3- and 5-wide filters at stride 1 or 2 (Slides): kSlideGroup output pixels x 16 channels, a
// filter row at a time. Each input pixel a filter row touches is widened to floats once and multiplies the KW taps
// (weights in registers) of every output pixel it feeds; DepthwiseRow widened it once per tap and subtracted the zero
// point each time. Here the sums start at -zero point x the channel's weight sum and the codes go in as they are;
// taps in the padding read the row of zero points after the input rows (core/u8_pixel_layout.h), which cancels their
// share: the same integer sums, exact in float32 (below 2^24 for up to 32 taps), so the same outputs.
constexpr int kSlideGroup = 8;
constexpr int kSlideMaxKH = 32 / 3;   // taps <= 32 (Slides)
constexpr int kSlideMaxCols = 2 * (kSlideGroup - 1) + 5;
using SlideRows = const uint8_t* [kSlideMaxKH][kSlideMaxCols];

template <int KW, int SW>
LITE_DW_TARGET void DepthwiseSlide(const ConvGeometry& g, int64_t Cp, int64_t oh, int64_t ow, int n,
                                   const SlideRows& src, const RowArgs& a) {
  constexpr int kCols = SW * (kSlideGroup - 1) + KW;
  for (int64_t c = 0; c < g.C; c += 16) {
    const __mmask16 m = g.C - c >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (g.C - c)) - 1);
    __m512 acc[kSlideGroup];
    const __m512 init = _mm512_loadu_ps(a.zp_sum + c);
#pragma GCC unroll 8
    for (int j = 0; j < kSlideGroup; ++j) acc[j] = init;
    for (int64_t kh = 0; kh < g.KH; ++kh) {
      __m512 w[KW];
#pragma GCC unroll 8
      for (int kw = 0; kw < KW; ++kw) w[kw] = _mm512_loadu_ps(a.w + (kh * KW + kw) * Cp + c);
#pragma GCC unroll 32
      for (int i = 0; i < kCols; ++i) {
        const __m512 v = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, src[kh][i] + c)));
#pragma GCC unroll 8
        for (int kw = 0; kw < KW; ++kw) {
          if (i < kw || (i - kw) % SW != 0 || (i - kw) / SW >= kSlideGroup) continue;
          const int j = (i - kw) / SW;
          acc[j] = _mm512_fmadd_ps(v, w[kw], acc[j]);
        }
      }
    }
#pragma GCC unroll 8
    for (int j = 0; j < kSlideGroup; ++j) {
      if (j >= n) break;
      StoreOutput(a, oh * g.OW + ow + j, c, m, acc[j]);
    }
  }
}

// Output row oh in the slide form: per group, each filter row's input pixels (outside the input: the zero points).
LITE_DW_TARGET void DepthwiseRowSlide(const ConvGeometry& g, int64_t Cp, int64_t oh, const RowArgs& a) {
  const uint8_t* zero = a.xp + g.H * g.W * a.ld_in;
  const int64_t ih0 = oh * g.SH - g.pad_top;
  const int cols = static_cast<int>(g.SW * (kSlideGroup - 1) + g.KW);
  for (int64_t ow = 0; ow < g.OW; ow += kSlideGroup) {
    const int n = static_cast<int>(std::min<int64_t>(kSlideGroup, g.OW - ow));
    SlideRows src;
    const int64_t iw0 = ow * g.SW - g.pad_left;
    for (int64_t kh = 0; kh < g.KH; ++kh) {
      const int64_t ih = ih0 + kh * g.DH;
      for (int i = 0; i < cols; ++i) {
        const int64_t iw = iw0 + i;
        src[kh][i] = ih >= 0 && ih < g.H && iw >= 0 && iw < g.W ? a.xp + (ih * g.W + iw) * a.ld_in : zero;
      }
    }
    using SlideFn = void (*)(const ConvGeometry&, int64_t, int64_t, int64_t, int, const SlideRows&, const RowArgs&);
    const SlideFn slide = g.SW == 1 ? (g.KW == 3 ? DepthwiseSlide<3, 1> : DepthwiseSlide<5, 1>)
                                    : (g.KW == 3 ? DepthwiseSlide<3, 2> : DepthwiseSlide<5, 2>);
    slide(g, Cp, oh, ow, n, src, a);
  }
}

// Output row oh (all its pixels and channels). Pixels whose filter lies inside the row's width go kGroup at a
// time (kGroup independent sums: one pixel's nine fused multiply-adds are a chain four cycles a link), the others
// one by one with their taps clipped.
LITE_DW_TARGET void DepthwiseRow(const ConvGeometry& g, int64_t Cp, int64_t oh, const RowArgs& a) {
  constexpr int kGroup = 8;
  const int64_t ih0 = oh * g.SH - g.pad_top;
  int64_t kh_lo = 0, kh_hi = g.KH;   // filter rows inside the input
  while (kh_lo < g.KH && ih0 + kh_lo * g.DH < 0) ++kh_lo;
  while (kh_hi > kh_lo && ih0 + (kh_hi - 1) * g.DH >= g.H) --kh_hi;
  const __m512 zp = _mm512_set1_ps(a.zero_point);
  // Output columns whose whole filter row is inside: iw0 >= 0 and iw0 + (KW - 1) DW < W.
  const int64_t in_lo = std::min(g.OW, (g.pad_left + g.SW - 1) / g.SW);
  const int64_t span = (g.KW - 1) * g.DW;
  const int64_t in_hi = std::max(in_lo, std::min(g.OW, g.W - span + g.pad_left > 0
                                                          ? (g.W - span + g.pad_left - 1) / g.SW + 1 : 0));
  int64_t ow = 0;
  for (; ow < in_lo; ++ow) DepthwisePixel(g, Cp, oh, ow, kh_lo, kh_hi, a);
  for (; ow + kGroup <= in_hi; ow += kGroup) {
    const int64_t iw0 = ow * g.SW - g.pad_left;
    for (int64_t c = 0; c < g.C; c += 16) {
      const __mmask16 m = g.C - c >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (g.C - c)) - 1);
      __m512 acc[kGroup];
#pragma GCC unroll 8
      for (int j = 0; j < kGroup; ++j) acc[j] = _mm512_setzero_ps();
      for (int64_t kh = kh_lo; kh < kh_hi; ++kh) {
        const uint8_t* row = a.xp + ((ih0 + kh * g.DH) * g.W + iw0) * a.ld_in + c;
        for (int64_t kw = 0; kw < g.KW; ++kw) {
          const __m512 w = _mm512_loadu_ps(a.w + (kh * g.KW + kw) * Cp + c);
          const uint8_t* at = row + kw * g.DW * a.ld_in;
#pragma GCC unroll 8
          for (int j = 0; j < kGroup; ++j)
            acc[j] = _mm512_fmadd_ps(LoadCodes(at + j * g.SW * a.ld_in, m, zp), w, acc[j]);
        }
      }
#pragma GCC unroll 8
      for (int j = 0; j < kGroup; ++j) StoreOutput(a, oh * g.OW + ow + j, c, m, acc[j]);
    }
  }
  for (; ow < g.OW; ++ow) DepthwisePixel(g, Cp, oh, ow, kh_lo, kh_hi, a);
}
#endif

}  // namespace

bool U8DepthwiseConv::Slides(const ConvGeometry& g) {
  return (g.KW == 3 || g.KW == 5) && (g.SW == 1 || g.SW == 2) && g.DW == 1 && g.KH * g.KW <= 32;
}

bool U8DepthwiseConv::Supports(const ConvGeometry& g) {
  return g.C > 0 && g.C == g.M && g.KH > 0 && g.KW > 0;
}

U8DepthwiseConv::U8DepthwiseConv(const ConvGeometry& g, const int8_t* codes, const float* scales)
    : g_(g), Cp_((g.C + 15) / 16 * 16) {
  if (!Supports(g)) throw std::logic_error("U8DepthwiseConv: not a depthwise geometry");
  const int64_t taps = g.KH * g.KW;
  w_.assign(static_cast<size_t>(taps * Cp_), 0.f);
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t t = 0; t < taps; ++t) w_[t * Cp_ + c] = static_cast<float>(codes[c * taps + t]);
  scales_.assign(static_cast<size_t>(Cp_), 0.f);
  std::copy(scales, scales + g.C, scales_.begin());
  Bind(ActQuant{}, nullptr);
}

void U8DepthwiseConv::Bind(ActQuant in, const float* bias) {
  in_ = in;
  mult_.assign(static_cast<size_t>(Cp_), 0.f);
  bias_.assign(static_cast<size_t>(Cp_), 0.f);
  zp_sum_.assign(static_cast<size_t>(Cp_), 0.f);
  for (int64_t c = 0; c < g_.C; ++c) {
    mult_[c] = in.scale * scales_[c];
    bias_[c] = bias ? bias[c] : 0.f;
    float sum = 0.f;   // an integer below 2^24 (Slides: up to 32 taps of |code| <= 127)
    for (int64_t t = 0; t < g_.KH * g_.KW; ++t) sum += w_[t * Cp_ + c];
    zp_sum_[c] = -static_cast<float>(in.zero_point) * sum;
  }
}

size_t U8DepthwiseConv::ScratchBytes(U8Storage in, U8PixelOut out) const {
  const int64_t P = g_.OH * g_.OW;
  size_t bytes = 0;
  if (in == U8Storage::kNchw) bytes += (U8PixelConv::RowsBytes(g_.C, g_.H * g_.W) + 63) / 64 * 64;
  if (out == U8PixelOut::kNchw) bytes += (U8PixelConv::RowsBytes(g_.C, P) + 63) / 64 * 64;
  if (out == U8PixelOut::kFloatNchw) bytes += static_cast<size_t>(P * Cp_) * sizeof(float);
  return bytes;
}

void U8DepthwiseConv::Run(const uint8_t* x, U8Storage in, int clamp, void* y, U8PixelOut out, ActQuant oq,
                          void* scratch, ThreadPool* pool) const {
  char* s = static_cast<char*>(scratch);
  const int64_t C = g_.C, HW = g_.H * g_.W, P = g_.OH * g_.OW;
  const int64_t ld_in = U8PixelConv::RowStride(C), ld_out = U8PixelConv::RowStride(C);
  RowArgs a;
  a.xp = x;
  if (in == U8Storage::kNchw) {
    uint8_t* copy = reinterpret_cast<uint8_t*>(s);
    U8NchwToRows(x, C, HW, ld_in, static_cast<uint8_t>(in_.zero_point), copy, pool);
    a.xp = copy;
    s += (U8PixelConv::RowsBytes(C, HW) + 63) / 64 * 64;
  }
  a.ld_in = ld_in;
  a.w = w_.data();
  a.mult = mult_.data();
  a.bias = bias_.data();
  a.zero_point = static_cast<float>(in_.zero_point);
  a.zp_sum = zp_sum_.data();
  a.clamp = clamp;
  a.out = oq;
  if (out == U8PixelOut::kFloatNchw) {
    a.yf = reinterpret_cast<float*>(s), a.ld_out = Cp_;
  } else {
    a.y8 = out == U8PixelOut::kRows ? static_cast<uint8_t*>(y) : reinterpret_cast<uint8_t*>(s), a.ld_out = ld_out;
  }
#ifdef LITE_X86_SIMD
  const bool simd = CpuHasAvx512Vnni(), slide = Slides(g_);
#else
  const bool simd = false;
#endif
  auto rows = [&](int64_t r0, int64_t r1) {
    for (int64_t oh = r0; oh < r1; ++oh) {
#ifdef LITE_X86_SIMD
      if (simd) {
        if (slide) DepthwiseRowSlide(g_, Cp_, oh, a); else DepthwiseRow(g_, Cp_, oh, a);
        continue;
      }
#endif
      DepthwiseRowScalar(g_, Cp_, oh, a);
    }
  };
  if (pool && pool->size() > 1 && g_.OH > 1) pool->ParallelFor(g_.OH, 1, rows); else rows(0, g_.OH);
  FinishPixelOutput(out, a.y8, a.yf, C, P, ld_out, Cp_, static_cast<uint8_t>(oq.zero_point), y, pool);
  (void)simd;
}

}  // namespace lite
