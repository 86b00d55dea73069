#include "cpu/depthwise/depthwise_channels.h"

#include "cpu/aligned.h"
#include "cpu/isa_dispatch.h"
#include "cpu/simd/transpose8x8.h"
#include "cpu/simd/vmath.h"

#include <algorithm>
#include <cstring>
#include <vector>

#ifdef LITE_ARM64_SIMD
#include <arm_neon.h>
#endif

namespace lite {
namespace {

#ifdef LITE_ARM64_SIMD
// A block's 8 channels as two NEON registers: aarch64 has no 32-byte vectors, and GCC keeps a 32-byte
// vector-extension value in memory there (every tap's FMA loaded and stored its accumulator: 1.8 stack accesses per
// fmla in the kernel's hot loop).
struct v8sf {
  float32x4_t lo, hi;
};
__attribute__((always_inline)) inline v8sf operator*(v8sf a, v8sf b) { return {a.lo * b.lo, a.hi * b.hi}; }
__attribute__((always_inline)) inline v8sf& operator+=(v8sf& a, v8sf b) {
  a.lo += b.lo, a.hi += b.hi;
  return a;
}
#else
typedef float v8sf __attribute__((vector_size(32)));
#endif
typedef float v16sf __attribute__((vector_size(64)));
constexpr int64_t kB = 8;   // channels per block: one AVX2 vector (two SSE vectors on the portable path)
constexpr int64_t kR = 8;   // output pixels computed together: independent FMA chains
// ARM64, 3x3 at stride 1 or 2: pixels per group of NeonRowTaps, which loads each input pixel once per filter row
// (stride 1: 5, 10 accumulators + 14 input + 6 weight registers of NEON's 32; stride 2: 4, 8 + 18 + 6, which GCC
// keeps without a spill: 1.5 fmla a cycle on N1's model, groups of 3 1.2).
constexpr int NeonRowPixels(int64_t stride) { return stride == 1 ? 5 : 4; }

__attribute__((always_inline)) inline v8sf Load(const float* p) {
#ifdef LITE_ARM64_SIMD
  return {vld1q_f32(p), vld1q_f32(p + 4)};   // (through memcpy GCC staged the struct in a stack slot)
#else
  v8sf v;
  std::memcpy(&v, p, sizeof(v));
  return v;
#endif
}
// Stores v's 8 channels at p.
__attribute__((always_inline)) inline void Store(float* p, v8sf v) {
#ifdef LITE_ARM64_SIMD
  vst1q_f32(p, v.lo), vst1q_f32(p + 4, v.hi);
#else
  std::memcpy(p, &v, sizeof(v));
#endif
}

// Where a block's input rows come from: the zero-padded copy ([Hp][Wp][8], every tap inside it), or a
// channel-blocked input read in place ([H][W][8]): output rows whose taps reach above or below the plane read
// a window of rows copied into `border` (zeros outside the plane), and edge columns (taps past the left or right
// border) are computed one pixel at a time.
struct Source {
  const float* base;    // row 0
  int64_t pitch;        // floats between rows
  int64_t rows, cols;   // the rows and columns that exist
  int64_t row0, col0;   // input row / column of output (0, 0)'s first tap
  int64_t ow_lo, ow_hi; // output columns whose taps all fall inside [0, cols) (ow_hi >= ow_lo)
  float* border;        // room for a window of rows (in place only)
  bool half_ok;         // a half-used last pixel pair may read the pixel after a row (the padded copy's slack)
};

struct BlockJob {
  Source src;
  const float* w;    // [KH*KW][8] taps for the block's 8 channels
  const float* w2;   // [KH*KW][16]: each tap's 8 weights twice (pixel pairs in 16-lane vectors)
  v8sf bias;
  EpilogueAct act;   // kNone, kRelu, kRelu6 or kSilu (in registers)
  float* out;        // [OH][OW][8]
};

// The loop's geometry as values (not read through pointers the output stores might alias), with strides
// pre-multiplied by the 8 lanes. The kernels take `in`, the first tap's input of their first pixel.
struct Geometry {
  int64_t KH, KW, OH, OW, SH, DH;
  int64_t row_step;    // SH * pitch: to the next output row's first input row
  int64_t kh_step;     // DH * pitch
  int64_t px_step;     // SW * 8: to the next output pixel
  int64_t kw_step;     // DW * 8
};

__attribute__((always_inline)) inline v8sf Activate(v8sf v, EpilogueAct act) {
  if (act == EpilogueAct::kSilu) {   // YOLOv10's depthwise layers: in registers, no second pass over the plane
#ifdef LITE_ARM64_SIMD
    v.lo = FastSiluVec(v.lo), v.hi = FastSiluVec(v.hi);
#else
    v = FastSiluVec(v);
#endif
    return v;
  }
  if (act != EpilogueAct::kNone) {
#ifdef LITE_ARM64_SIMD
    // fmax / fmin return a NaN operand: a NaN lane keeps its NaN, as the comparisons below keep it
    v.lo = vmaxq_f32(v.lo, vdupq_n_f32(0.f)), v.hi = vmaxq_f32(v.hi, vdupq_n_f32(0.f));
    if (act == EpilogueAct::kRelu6) v.lo = vminq_f32(v.lo, vdupq_n_f32(6.f)), v.hi = vminq_f32(v.hi, vdupq_n_f32(6.f));
#else
    v = v < v8sf{} ? v8sf{} : v;   // (a NaN lane keeps its NaN)
    if (act == EpilogueAct::kRelu6) v = v > v8sf{} + 6.f ? v8sf{} + 6.f : v;
#endif
  }
  return v;
}

#ifdef LITE_ARM64_SIMD
// R output pixels of an undilated 3x3 filter at stride S (1 or 2; 0: never called), acc holding the bias: each filter
// row's S (R - 1) + 3 input pixels loaded once for its three taps (the loop over run-time tap offsets loaded each
// tap's pixels again, 2.5 other instructions per fmla at stride 1). The same sums, in the same order.
template <int R, int S>
__attribute__((always_inline)) inline void NeonRowTaps(const Geometry g, const float* in, const float* w,
                                                       v8sf (&acc)[R], EpilogueAct act, float* out) {
  if constexpr (S > 0) {
    constexpr int kX = S * (R - 1) + 3;
#pragma GCC unroll 3
    for (int64_t kh = 0; kh < 3; ++kh) {
      const float* px = in + kh * g.kh_step;
      v8sf x[kX];
#pragma GCC unroll 16
      for (int i = 0; i < kX; ++i) x[i] = Load(px + i * kB);
      const v8sf w0 = Load(w + kh * 3 * kB), w1 = Load(w + (kh * 3 + 1) * kB), w2 = Load(w + (kh * 3 + 2) * kB);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        acc[r] += x[S * r] * w0;
        acc[r] += x[S * r + 1] * w1;
        acc[r] += x[S * r + 2] * w2;
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) Store(out + r * kB, Activate(acc[r], act));
  }
}
#endif

// R output pixels of one row: R independent FMA chains over the taps. K > 0 is a square filter size
// known at compile time (taps unrolled); K = 0 reads it from the geometry.
template <int R, int K>
__attribute__((always_inline)) inline void Pixels(const Geometry g, const float* in, const float* w, v8sf bias,
                                                  EpilogueAct act, float* out) {
  const int64_t KH = K ? K : g.KH, KW = K ? K : g.KW;
  v8sf acc[R];   // every loop over r is unrolled, so acc stays in registers
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc[r] = bias;
#ifdef LITE_ARM64_SIMD
  if (K == 3 && g.kw_step == kB) {   // undilated 3x3 at stride 1 or 2: NeonRowTaps
    if (g.px_step == kB && R <= NeonRowPixels(1))
      return NeonRowTaps<R, R <= NeonRowPixels(1) ? 1 : 0>(g, in, w, acc, act, out);
    if (g.px_step == 2 * kB && R <= NeonRowPixels(2))
      return NeonRowTaps<R, R <= NeonRowPixels(2) ? 2 : 0>(g, in, w, acc, act, out);
  }
#endif
#pragma GCC unroll 3
  for (int64_t kh = 0; kh < KH; ++kh) {
#pragma GCC unroll 3
    for (int64_t kw = 0; kw < KW; ++kw) {
      const v8sf wv = Load(w + (kh * KW + kw) * kB);
      const float* px = in + kh * g.kh_step + kw * g.kw_step;
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r] += Load(px + r * g.px_step) * wv;
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) Store(out + r * kB, Activate(acc[r], act));
}

// One output pixel whose taps may fall left or right of the row: `row` is its first tap row at column 0, iw0 its
// first tap's column; taps outside [0, cols) add nothing. The filter size is a template argument where known, so the
// taps unroll (MobileNetV2's 14-wide layers 0.87x the time of the loop over run-time sizes; gathering four edge
// pixels into independent chains measured slower, 1.05-1.1x: the out-of-order core already overlaps a pixel's
// chain with the next row's interior).
template <int K>
__attribute__((always_inline)) inline void EdgePixel(const Geometry g, const float* row, int64_t iw0, int64_t cols,
                                                     const float* w, v8sf bias, EpilogueAct act, float* out) {
  const int64_t KH = K ? K : g.KH, KW = K ? K : g.KW, dw = g.kw_step / kB;
  v8sf acc = bias;
#pragma GCC unroll 3
  for (int64_t kw = 0; kw < KW; ++kw) {
    const int64_t iw = iw0 + kw * dw;
    if (iw < 0 || iw >= cols) continue;
#pragma GCC unroll 3
    for (int64_t kh = 0; kh < KH; ++kh) acc += Load(row + kh * g.kh_step + iw * kB) * Load(w + (kh * KW + kw) * kB);
  }
  Store(out, Activate(acc, act));
}

// 2R output pixels of each of ROWS rows at stride 1 in 16-lane vectors: pixels 2r and 2r + 1 are adjacent in the
// block ([W][8]), so one load covers both for a tap, against the tap's weights twice (w2). half_last: the last
// vector's second pixel is past the row's end (computed from the padding or the next row, not stored).
template <int R, int K, int ROWS>
__attribute__((always_inline)) inline void PixelPairs(const Geometry g, const float* in, const float* w2, v16sf bias,
                                                      EpilogueAct act, float* out, bool half_last) {
  const int64_t KH = K ? K : g.KH, KW = K ? K : g.KW;
  v16sf acc[ROWS][R];
#pragma GCC unroll 2
  for (int h = 0; h < ROWS; ++h)
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[h][r] = bias;
  if (K == 3 && g.kw_step == kB) {
    // Three undilated taps per row: pair r's taps kw = 0 and 2 are the aligned pairs r and r + 1 of the input
    // row, its tap kw = 1 straddles them (a 64-byte load across two cache lines): R + 1 aligned loads and R
    // shuffles per row instead of 3R loads, a third of them split (MobileNetV2's 56- and 28-wide layers 0.64x and
    // 0.69x the time, its 14-wide ones 0.81x).
#pragma GCC unroll 3
    for (int64_t kh = 0; kh < 3; ++kh) {
      v16sf w0, w1, w2v;
      std::memcpy(&w0, w2 + (kh * 3 + 0) * 2 * kB, sizeof(w0));
      std::memcpy(&w1, w2 + (kh * 3 + 1) * 2 * kB, sizeof(w1));
      std::memcpy(&w2v, w2 + (kh * 3 + 2) * 2 * kB, sizeof(w2v));
#pragma GCC unroll 2
      for (int h = 0; h < ROWS; ++h) {
        const float* px = in + kh * g.kh_step + h * g.row_step;
        v16sf x[R + 1];
#pragma GCC unroll 9
        for (int r = 0; r <= R; ++r) std::memcpy(&x[r], px + r * 2 * kB, sizeof(v16sf));
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const v16sf mid = __builtin_shufflevector(x[r], x[r + 1], 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19,
                                                    20, 21, 22, 23);
          acc[h][r] += x[r] * w0;
          acc[h][r] += mid * w1;
          acc[h][r] += x[r + 1] * w2v;
        }
      }
    }
  } else {
#pragma GCC unroll 3
  for (int64_t kh = 0; kh < KH; ++kh) {
#pragma GCC unroll 3
    for (int64_t kw = 0; kw < KW; ++kw) {
      v16sf wv;
      std::memcpy(&wv, w2 + (kh * KW + kw) * 2 * kB, sizeof(wv));
      const float* px = in + kh * g.kh_step + kw * g.kw_step;
#pragma GCC unroll 2
      for (int h = 0; h < ROWS; ++h)
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          v16sf xv;
          std::memcpy(&xv, px + h * g.row_step + r * 2 * kB, sizeof(xv));
          acc[h][r] += xv * wv;
        }
    }
  }
  }
#pragma GCC unroll 2
  for (int h = 0; h < ROWS; ++h)
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      v16sf v = acc[h][r];
      if (act == EpilogueAct::kSilu) {
        v = FastSiluVec(v);
      } else if (act != EpilogueAct::kNone) {
        v = v < v16sf{} ? v16sf{} : v;   // (a NaN lane keeps its NaN)
        if (act == EpilogueAct::kRelu6) v = v > v16sf{} + 6.f ? v16sf{} + 6.f : v;
      }
      float* o = out + h * g.OW * kB + r * 2 * kB;
      if (r == R - 1 && half_last) {   // constant sizes: a variable one became a memcpy call
        std::memcpy(o, &v, sizeof(v8sf));
      } else {
        std::memcpy(o, &v, sizeof(v16sf));
      }
    }
}

// Output columns [ow, ow_end) of ROWS rows at stride 1 in pixel pairs (kWide builds): 16 pixels at a time, then
// the rest as one group of pairs (an odd last pixel as half a pair where the source allows the read past it,
// else on its own). `row` is the first output row's first tap row at column 0; `out` that row's output.
template <int K, int ROWS>
__attribute__((always_inline)) inline void PairRows(const Geometry g, const BlockJob& j, const float* row, int64_t ow,
                                                    int64_t ow_end, float* out) {
#ifdef LITE_ARM64_SIMD   // (the pair kernels run in the AVX-512 build only)
  v16sf bias;
  std::memcpy(&bias, &j.bias, sizeof(v8sf));
  std::memcpy(reinterpret_cast<char*>(&bias) + sizeof(v8sf), &j.bias, sizeof(v8sf));
#else
  const v16sf bias = __builtin_shufflevector(j.bias, j.bias, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7);
#endif
  const float* in = row + (j.src.col0 + ow) * kB;
  out += ow * kB;
  for (; ow + 16 <= ow_end; ow += 16, in += 16 * kB, out += 16 * kB)
    PixelPairs<8, K, ROWS>(g, in, j.w2, bias, j.act, out, false);
  if (ow == ow_end) return;
  bool half = (ow_end - ow) % 2;
  if (half && !j.src.half_ok) {   // the odd last pixel alone: its pair's partner might lie past the buffer
    const int64_t last = ow_end - 1 - ow;
    for (int h = 0; h < ROWS; ++h)
      Pixels<1, K>(g, in + h * g.row_step + last * kB, j.w, j.bias, j.act, out + h * g.OW * kB + last * kB);
    --ow_end;
    half = false;
  }
  switch ((ow_end - ow + 1) / 2) {
    case 8: PixelPairs<8, K, ROWS>(g, in, j.w2, bias, j.act, out, half); break;
    case 7: PixelPairs<7, K, ROWS>(g, in, j.w2, bias, j.act, out, half); break;
    case 6: PixelPairs<6, K, ROWS>(g, in, j.w2, bias, j.act, out, half); break;
    case 5: PixelPairs<5, K, ROWS>(g, in, j.w2, bias, j.act, out, half); break;
    case 4: PixelPairs<4, K, ROWS>(g, in, j.w2, bias, j.act, out, half); break;
    case 3: PixelPairs<3, K, ROWS>(g, in, j.w2, bias, j.act, out, half); break;
    case 2: PixelPairs<2, K, ROWS>(g, in, j.w2, bias, j.act, out, half); break;
    case 1: PixelPairs<1, K, ROWS>(g, in, j.w2, bias, j.act, out, half); break;
    default: break;
  }
}

// Output columns [ow, ow_end) of one row in 8-lane vectors (strided rows, and every row without AVX-512).
template <int K>
__attribute__((always_inline)) inline void PixelRow(const Geometry g, const BlockJob& j, const float* row, int64_t ow,
                                                    int64_t ow_end, float* out) {
  const float* w = j.w;
  const v8sf bias = j.bias;
  const EpilogueAct act = j.act;
  const float* in = row + j.src.col0 * kB + ow * g.px_step;
  out += ow * kB;
#ifdef LITE_ARM64_SIMD
  // NEON's 32 registers: groups of kNeonRowPixels at stride 1 (Pixels' row kernel), of 4 otherwise (8 accumulators;
  // groups of 8 kept a third of them on the stack: 143 stack accesses per 144 fmla).
  if (K == 3 && g.px_step == kB && g.kw_step == kB) {
    constexpr int64_t n = NeonRowPixels(1);
    for (; ow + n <= ow_end; ow += n, in += n * kB, out += n * kB) Pixels<n, K>(g, in, w, bias, act, out);
  } else if (K == 3 && g.px_step == 2 * kB && g.kw_step == kB) {
    constexpr int64_t n = NeonRowPixels(2);
    for (; ow + n <= ow_end; ow += n, in += n * g.px_step, out += n * kB) Pixels<n, K>(g, in, w, bias, act, out);
  } else {
    for (; ow + 4 <= ow_end; ow += 4, in += 4 * g.px_step, out += 4 * kB) Pixels<4, K>(g, in, w, bias, act, out);
  }
  switch (ow_end - ow) {
    case 4: Pixels<4, K>(g, in, w, bias, act, out); return;
    case 3: Pixels<3, K>(g, in, w, bias, act, out); return;
    case 2: Pixels<2, K>(g, in, w, bias, act, out); return;
    case 1: Pixels<1, K>(g, in, w, bias, act, out); return;
    default: return;
  }
#else
  for (; ow + kR <= ow_end; ow += kR, in += kR * g.px_step, out += kR * kB) Pixels<kR, K>(g, in, w, bias, act, out);
  // A short row (7- and 14-wide planes) in one group of independent chains, not 4 + 1 + 1 + 1: single
  // pixels are FMA-latency bound.
  switch (ow_end - ow) {
    case 7: Pixels<7, K>(g, in, w, bias, act, out); return;
    case 6: Pixels<6, K>(g, in, w, bias, act, out); return;
    case 5: Pixels<5, K>(g, in, w, bias, act, out); return;
    default: break;
  }
  for (; ow + 4 <= ow_end; ow += 4, in += 4 * g.px_step, out += 4 * kB) Pixels<4, K>(g, in, w, bias, act, out);
  for (; ow < ow_end; ++ow, in += g.px_step, out += kB) Pixels<1, K>(g, in, w, bias, act, out);
#endif
}

// The edge columns of `rows_n` output rows (`row`: the first one's first tap row at column 0).
template <int K>
__attribute__((always_inline)) inline void EdgeColumns(const Geometry g, const BlockJob& j, const float* row,
                                                       int64_t rows_n, float* out) {
  const Source& src = j.src;
  const int64_t SW = g.px_step / kB;
  for (int64_t h = 0; h < rows_n; ++h, row += g.row_step, out += g.OW * kB) {
    for (int64_t ow = 0; ow < src.ow_lo; ++ow)
      EdgePixel<K>(g, row, src.col0 + ow * SW, src.cols, j.w, j.bias, j.act, out + ow * kB);
    for (int64_t ow = src.ow_hi; ow < g.OW; ++ow)
      EdgePixel<K>(g, row, src.col0 + ow * SW, src.cols, j.w, j.bias, j.act, out + ow * kB);
  }
}

// The window of `count` rows from input row `first` copied into src.border, zero rows outside the plane. Out of
// line: it runs for a plane's first and last rows only, and inlined it cost the hot loop registers.
__attribute__((noinline)) const float* CopyWindow(const Source& src, int64_t first, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    float* dst = src.border + i * src.pitch;
    const int64_t ih = first + i;
    if (ih >= 0 && ih < src.rows) {
      std::memcpy(dst, src.base + ih * src.pitch, src.cols * kB * sizeof(float));
    } else {
      std::fill(dst, dst + src.cols * kB, 0.f);
    }
  }
  return src.border;
}

// The first tap row (column 0) of `rows_n` output rows from oh: in the source where every row they read exists,
// else in src.border (CopyWindow).
__attribute__((always_inline)) inline const float* WindowRows(const Geometry g, const Source& src, int64_t oh,
                                                              int64_t rows_n) {
  const int64_t first = src.row0 + oh * g.SH, count = (rows_n - 1) * g.SH + (g.KH - 1) * g.DH + 1;
  if (first >= 0 && first + count <= src.rows) return src.base + first * src.pitch;
  return CopyWindow(src, first, count);
}

template <int K, bool kWide>
__attribute__((always_inline)) inline void Rows(const Geometry g, const BlockJob& j) {
  const Source& src = j.src;
  float* out = j.out;
  const int64_t ow_lo = src.ow_lo, ow_hi = src.ow_hi;
  const bool edges = ow_lo > 0 || ow_hi < g.OW;
  for (int64_t oh = 0; oh < g.OH; ++oh) {
    if (kWide && g.px_step == kB) {
      if (ow_hi - ow_lo < 16 && oh + 1 < g.OH) {   // narrow rows two at a time: twice the independent chains
        const float* row = WindowRows(g, src, oh, 2);
        PairRows<K, 2>(g, j, row, ow_lo, ow_hi, out);
        if (edges) EdgeColumns<K>(g, j, row, 2, out);
        out += 2 * g.OW * kB;
        ++oh;
        continue;
      }
      const float* row = WindowRows(g, src, oh, 1);
      PairRows<K, 1>(g, j, row, ow_lo, ow_hi, out);
      if (edges) EdgeColumns<K>(g, j, row, 1, out);
      out += g.OW * kB;
      continue;
    }
    const float* row = WindowRows(g, src, oh, 1);
    PixelRow<K>(g, j, row, ow_lo, ow_hi, out);
    if (edges) EdgeColumns<K>(g, j, row, 1, out);
    out += g.OW * kB;
  }
}

template <bool kWide>
__attribute__((always_inline)) inline void Block(const DepthwiseShape& s, const BlockJob& j) {
  const int64_t pitch = j.src.pitch;
  const Geometry g{s.KH, s.KW, s.OH, s.OW, s.SH, s.DH, s.SH * pitch, s.DH * pitch, s.SW * kB, s.DW * kB};
  if (s.KH == 3 && s.KW == 3) return Rows<3, kWide>(g, j);
  Rows<0, kWide>(g, j);
}

// Channel planes c0..c0+cn of one image into the zero-padded [Hp][Wp][8] block (padding already zero).
__attribute__((always_inline)) inline void TransposeIn(const DepthwiseShape& s, const float* x, int64_t plane, int64_t cn, int64_t Wp,
                                    float* xp) {
  const int64_t cols = std::min(s.W, Wp - s.pad_left);
  if (cn == kB && cols < 8 && cols == s.W && plane >= 8) {
    // Rows narrower than a vector: transpose 8 pixels of the plane at a time wherever they fall (the last
    // group overlaps the one before it), not pixel by pixel.
    float* dst[8];
    for (int64_t p0 = 0; p0 < plane; p0 += 8) {
      const int64_t first = std::min(p0, plane - 8);
      for (int64_t i = 0; i < 8; ++i) {
        const int64_t p = first + i;
        dst[i] = xp + ((p / s.W + s.pad_top) * Wp + p % s.W + s.pad_left) * kB;
      }
      Transpose8x8To(x + first, plane, dst);
    }
    return;
  }
  for (int64_t h = 0; h < s.H; ++h) {
    float* dst = xp + ((h + s.pad_top) * Wp + s.pad_left) * kB;
    const float* src = x + h * s.W;
    int64_t i = 0;
    if (cn == kB && cols >= 8) {
      for (; i + 8 <= cols; i += 8) Transpose8x8(src + i, plane, dst + i * kB, kB);
      if (i < cols) Transpose8x8(src + cols - 8, plane, dst + (cols - 8) * kB, kB);   // overlaps: same values
      i = cols;
    }
    for (int64_t l = 0; l < cn; ++l)
      for (int64_t k = i; k < cols; ++k) dst[k * kB + l] = src[l * plane + k];
  }
}

// The [P][8] result back into channel planes c0..c0+cn (P floats each, `plane` apart).
__attribute__((always_inline)) inline void TransposeOut(const float* out, int64_t P, int64_t cn, float* y, int64_t plane) {
  int64_t p = 0;
  if (cn == kB && P >= 8) {
    for (; p + 8 <= P; p += 8) Transpose8x8(out + p * kB, kB, y + p, plane);
    if (p < P) Transpose8x8(out + (P - 8) * kB, kB, y + P - 8, plane);   // overlaps: same values
    p = P;
  }
  for (int64_t l = 0; l < cn; ++l)
    for (int64_t k = p; k < P; ++k) y[l * plane + k] = out[k * kB + l];
}

// One block of 8 channels: transpose in, all taps, transpose out. Compiled for AVX2+FMA (FMA contraction
// needs it: target_clones("avx2") alone leaves separate multiplies and adds) and for the baseline ISA.
struct BlockArgs {
  const DepthwiseShape* s;
  const float* x;       // the block's first input plane
  int64_t in_plane, cn;
  float* xp;            // the zero-padded copy, writable (unused when the job reads x in place)
  BlockJob job;
  float* y;             // the block's first output plane
  int64_t out_plane;
  bool in_blocked, out_blocked;   // x / y already [H][W][8] / [OH][OW][8] (job.out == y when out_blocked)
  bool in_place;                  // job.src reads the blocked x itself: no copy
};

// A channel-blocked input block's rows into the zero-padded [Hp][Wp][8] block: plain row copies.
__attribute__((always_inline)) inline void CopyBlockedIn(const DepthwiseShape& s, const float* x, int64_t Wp, float* xp) {
  for (int64_t h = 0; h < s.H; ++h)
    std::memcpy(xp + ((h + s.pad_top) * Wp + s.pad_left) * kB, x + h * s.W * kB, s.W * kB * sizeof(float));
}

template <bool kWide>
__attribute__((always_inline)) inline void ProcessBlockBody(const BlockArgs& a) {
  if (!a.in_place) {
    const int64_t Wp = a.job.src.pitch / kB;
    if (a.in_blocked) {
      CopyBlockedIn(*a.s, a.x, Wp, a.xp);
    } else {
      TransposeIn(*a.s, a.x, a.in_plane, a.cn, Wp, a.xp);
    }
  }
  Block<kWide>(*a.s, a.job);
  if (!a.out_blocked) TransposeOut(a.job.out, a.out_plane, a.cn, a.y, a.out_plane);
}

using ProcessBlockFn = void (*)(const BlockArgs&);
void ProcessBlockPortable(const BlockArgs& a) { ProcessBlockBody<false>(a); }
#ifdef LITE_X86_SIMD
__attribute__((target("avx2,fma"))) void ProcessBlockAvx2(const BlockArgs& a) { ProcessBlockBody<false>(a); }
// AVX-512: stride-1 rows in pixel pairs (16-lane vectors); strided rows as in the AVX2 build.
__attribute__((target("avx512f,fma"))) void ProcessBlockAvx512(const BlockArgs& a) { ProcessBlockBody<true>(a); }
#endif

}  // namespace

// Zeroes what TransposeIn does not write: the padding ring, and with fewer than 8 channels the whole block
// (the missing lanes). A full fill per block cost as much as the transposes on 112x112 planes.
void ZeroOutsideInterior(const DepthwiseShape& s, int64_t Hp, int64_t Wp, int64_t cn, float* xp) {
  if (cn < kB) {
    std::fill(xp, xp + Hp * Wp * kB, 0.f);
    return;
  }
  const int64_t cols = std::min(s.W, Wp - s.pad_left), rows_end = s.pad_top + s.H;
  std::fill(xp, xp + s.pad_top * Wp * kB, 0.f);
  std::fill(xp + std::min(Hp, rows_end) * Wp * kB, xp + Hp * Wp * kB, 0.f);
  for (int64_t h = s.pad_top; h < std::min(Hp, rows_end); ++h) {
    float* row = xp + h * Wp * kB;
    std::fill(row, row + s.pad_left * kB, 0.f);
    std::fill(row + (s.pad_left + cols) * kB, row + Wp * kB, 0.f);
  }
}

// Measured on MobileNetV2's and ConvNeXt's layers (1 thread): 0.6x the plane kernel's time on 7-, 14- and
// 28-wide output rows (0.35x for 7x7 filters on 7x7 planes), 0.6x on 56-wide rows at stride 2 (112-wide
// input), the same on 56-wide rows at stride 1; 1.2x on 112-wide rows, which keep the plane kernel.
bool PreferDepthwiseChannelBlocks(const DepthwiseShape& s) { return s.OW <= 56; }

DepthwiseBlockFilters PackDepthwiseBlockFilters(int64_t C, int64_t taps, const float* w) {
  const int64_t blocks = (C + kB - 1) / kB;
  DepthwiseBlockFilters f;
  f.taps = taps;
  f.single.assign(blocks * taps * kB, 0.f);
  f.pairs.assign(blocks * taps * 2 * kB, 0.f);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t k = 0; k < taps; ++k) {
      const int64_t b = c / kB, l = c % kB;
      f.single[(b * taps + k) * kB + l] = w[c * taps + k];
      f.pairs[(b * taps + k) * 2 * kB + l] = f.pairs[(b * taps + k) * 2 * kB + kB + l] = w[c * taps + k];
    }
  return f;
}

void DepthwiseChannelBlocks(const DepthwiseShape& s, int64_t N, int64_t C, const float* x,
                            const DepthwiseBlockFilters& filters, const float* bias, float* y, EpilogueAct act,
                            ThreadPool* pool, bool in_blocked, bool out_blocked) {
  const int64_t Hp = std::max(s.H + s.pad_top, (s.OH - 1) * s.SH + (s.KH - 1) * s.DH + 1);
  // An even row width and a 64-byte aligned copy: every pixel pair of a row is then one cache line (MobileNetV2's
  // 7x7 layers 0.91x the time).
  const int64_t Wp = (std::max(s.W + s.pad_left, (s.OW - 1) * s.SW + (s.KW - 1) * s.DW + 1) + 1) / 2 * 2;
  const int64_t K = s.KH * s.KW, in_plane = s.H * s.W, out_plane = s.OH * s.OW;
  const int64_t blocks = (C + kB - 1) / kB;
  const bool in_register = act == EpilogueAct::kNone || act == EpilogueAct::kRelu || act == EpilogueAct::kRelu6 ||
                           act == EpilogueAct::kSilu;
  GemmEpilogue act_only;
  act_only.act = act;
  static const ProcessBlockFn process =
      PickIsaKernel<ProcessBlockFn>(ProcessBlockPortable, LITE_IF_X86_SIMD(ProcessBlockAvx2),
                                    LITE_IF_X86_SIMD(ProcessBlockAvx512)).fn;
  // A blocked input is read in place where its rows are wide enough for the edge columns to be few: a copy
  // into a zero-padded block was 20% of MobileNetV2's depthwise time (40% at stride 2, whose input is 4x the
  // output). On 7x7 planes the copy (in L1) is faster than two edge columns of seven.
  const bool in_place = in_blocked && s.W >= kDepthwiseInPlaceMinWidth;
  Source padded{nullptr, Wp * kB, Hp, Wp, 0, 0, 0, s.OW, nullptr, true};
  Source direct{nullptr, s.W * kB, s.H, s.W, -s.pad_top, -s.pad_left, 0, 0, nullptr, false};
  direct.ow_lo = std::min(s.OW, (s.pad_left + s.SW - 1) / s.SW);
  const int64_t last_inside = s.W - 1 + s.pad_left - (s.KW - 1) * s.DW;   // the last interior output's first tap
  direct.ow_hi = std::max(direct.ow_lo, last_inside < 0 ? 0 : std::min(s.OW, last_inside / s.SW + 1));
  auto run = [&](int64_t b, int64_t e) {
    thread_local std::vector<float> xp, out, border;
    if (in_place) {
      border.resize((2 * s.SH + (s.KH - 1) * s.DH + 1) * s.W * kB);
    } else {
      xp.resize(Hp * Wp * kB + 2 * kB + 16);   // + a pixel pair: the last row's half pair reads one pixel past it
    }
    out.resize(out_plane * kB);
    float* const padded_copy = AlignTo64(xp.data());
    for (int64_t t = b; t < e; ++t) {
      const int64_t n = t / blocks, block = t % blocks, c0 = block * kB, cn = std::min(kB, C - c0);
      const float* x_block = x + (n * C + c0) * in_plane;
      BlockJob j;
      if (in_place) {
        j.src = direct;
        j.src.base = x_block;
        j.src.border = border.data();
      } else {
        ZeroOutsideInterior(s, Hp, Wp, cn, padded_copy);
        j.src = padded;
        j.src.base = padded_copy;
      }
      float lanes[kB] = {};
      for (int64_t l = 0; l < cn && bias; ++l) lanes[l] = bias[c0 + l];
      std::memcpy(&j.bias, lanes, sizeof(v8sf));
      j.w = filters.single.data() + block * K * kB;
      j.w2 = filters.pairs.data() + block * K * 2 * kB;
      j.act = in_register ? act : EpilogueAct::kNone;
      float* y_block = y + (n * C + c0) * out_plane;
      j.out = out_blocked ? y_block : out.data();
      BlockArgs args{&s, x_block, in_plane, cn, padded_copy, j, y_block, out_plane, in_blocked, out_blocked, in_place};
      process(args);
      // An activation alone is elementwise, so the blocked block is one row of 8 * out_plane values.
      if (!in_register && out_blocked) ApplyEpilogue(y_block, 0, 0, 1, 0, cn * out_plane, act_only);
      if (!in_register && !out_blocked) ApplyEpilogue(y_block, out_plane, 0, cn, 0, out_plane, act_only);
    }
  };
  if (pool) {
    pool->ParallelFor(N * blocks, 1, run);
  } else {
    run(0, N * blocks);
  }
}

}  // namespace lite
