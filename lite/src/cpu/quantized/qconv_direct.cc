// Direct 8-bit integer convolution: see qconv_direct.h.
#include "cpu/quantized/qconv_direct.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <vector>

#include "cpu/isa_dispatch.h"

#ifdef LITE_X86_SIMD
#include <immintrin.h>
#endif

namespace lite {
namespace {

constexpr int kMaxRows = 8;
constexpr int64_t kTileCols = 32;      // pixels per tile: two 16-lane vectors
constexpr int64_t kTilesPerTask = 2;   // 32-pixel tiles a task multiplies by each row tile it loads
constexpr int64_t kRowsPerTask = 48;

using DirectTileFn = void (*)(const uint8_t* a, const uint8_t* x, const int64_t* offsets, int64_t groups, int64_t lda,
                              const int32_t* corr, const float* mul, const float* add, float* tile);

#ifdef LITE_X86_SIMD
// acc += u8 . s8 over 4-byte groups (in assembly: GCC copied the accumulators around the intrinsic).
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"), always_inline)) inline void Dot(__m512i& acc,
                                                                                                __m512i u8,
                                                                                                __m512i s8) {
  __asm__("vpdpbusd %[s], %[u], %[acc]" : [acc] "+v"(acc) : [u] "v"(u8), [s] "v"(s8));
}

#define LITE_DSTEP(r)                                                                  \
  if (MR > r) {                                                                        \
    int32_t v;                                                                         \
    std::memcpy(&v, a + r * lda + g * 4, 4);                                           \
    const __m512i w = _mm512_set1_epi32(v);                                            \
    Dot(c##r##0, b0, w);                                                               \
    Dot(c##r##1, b1, w);                                                               \
  }
#define LITE_DSTORE(r)                                                                                            \
  if (MR > r) {                                                                                                   \
    const __m512i z = _mm512_set1_epi32(corr[r]);                                                                 \
    const __m512 m = _mm512_set1_ps(mul[r]), d = _mm512_set1_ps(add[r]);                                          \
    _mm512_storeu_ps(tile + r * kQgemmNR,                                                                         \
                     _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(c##r##0, z)), m, d));                    \
    _mm512_storeu_ps(tile + (kMaxRows + r) * kQgemmNR,                                                            \
                     _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(c##r##1, z)), m, d));                    \
  }

// MR output channels x 32 consecutive (phase-width) output pixels: depth group g (a tap's channel quad) reads the
// input in place at x + offsets[g] (two 16-pixel vectors), each weight broadcast feeding both: 2 x MR accumulator
// chains, 2 + MR loads per 2 x MR multiplies. Writes the dequantised sums (bias included) as two 16-column halves of
// kMaxRows rows of 16 floats each (rows past MR unused).
template <int MR>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) void DirectTile(
    const uint8_t* a, const uint8_t* x, const int64_t* offsets, int64_t groups, int64_t lda, const int32_t* corr,
    const float* mul, const float* add, float* tile) {
  __m512i c00 = _mm512_setzero_si512(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00;
  __m512i c40 = c00, c41 = c00, c50 = c00, c51 = c00, c60 = c00, c61 = c00, c70 = c00, c71 = c00;
  for (int64_t g = 0; g < groups; ++g) {
    const uint8_t* b = x + offsets[g];
    const __m512i b0 = _mm512_loadu_si512(b), b1 = _mm512_loadu_si512(b + 64);
    LITE_DSTEP(0) LITE_DSTEP(1) LITE_DSTEP(2) LITE_DSTEP(3) LITE_DSTEP(4) LITE_DSTEP(5) LITE_DSTEP(6) LITE_DSTEP(7)
  }
  LITE_DSTORE(0) LITE_DSTORE(1) LITE_DSTORE(2) LITE_DSTORE(3) LITE_DSTORE(4) LITE_DSTORE(5) LITE_DSTORE(6)
  LITE_DSTORE(7)
}
#undef LITE_DSTEP
#undef LITE_DSTORE
#endif

const DirectTileFn* DirectTiles() {
#ifdef LITE_X86_SIMD
  static const DirectTileFn table[kMaxRows + 1] = {nullptr,       DirectTile<1>, DirectTile<2>,
                                                   DirectTile<3>, DirectTile<4>, DirectTile<5>,
                                                   DirectTile<6>, DirectTile<7>, DirectTile<8>};
  return table;
#else
  return nullptr;
#endif
}

// The epilogue of the flat tile [f0, f_end): its columns that are output pixels, one output row's run at a time.
void FinishFlatTile(float* tile, int rows, int64_t f0, int64_t f_end, const QDirectGeometry& g, int64_t row0,
                    const GemmEpilogue& ep, const QuantizedIO& q, float* C) {
  const int64_t Wq = g.Wq(), OW = g.OW(), pixels = g.OH() * OW;
  for (int64_t f = f0; f < f_end;) {
    const int64_t oh = f / Wq, ow = f % Wq;
    if (ow >= OW) {   // the dropped columns past the row
      f = (oh + 1) * Wq;
      continue;
    }
    const int64_t len = std::min(f_end, oh * Wq + OW) - f;
    FinishQuantizedRows(tile + (f - f0), rows, len, row0, oh * OW + ow, ep, q, C, pixels);
    f += len;
  }
}

}  // namespace

bool QconvDirectAvailable() {
#ifdef LITE_X86_SIMD
  return CpuHasAvx512Vnni();
#else
  return false;
#endif
}

QWeights TapMajorQWeights(const QWeights& w, const QDirectGeometry& g) {
  const int64_t taps = g.KH * g.KW, q4 = g.quads() * 4;
  QWeights out;   // scales, sums (the same codes, plus zeros) and the narrow flag carry over
  out.outputs = w.outputs, out.depth = out.depth4 = taps * q4, out.narrow = w.narrow;
  out.scale = w.scale, out.sums = w.sums;
  out.codes.assign(static_cast<size_t>(w.outputs * out.depth), 0);
  for (int64_t o = 0; o < w.outputs; ++o) {
    const int8_t* src = w.codes.data() + o * w.depth4;
    int8_t* dst = out.codes.data() + o * out.depth;
    for (int64_t t = 0; t < taps; ++t)
      for (int64_t c = 0; c < g.C; ++c) dst[t * q4 + c] = src[c * taps + t];
  }
  return out;
}

void PadToChannelQuads(const uint8_t* x, uint8_t zero_point, const QDirectGeometry& g, uint8_t* dst,
                       ThreadPool* pool) {
  const int64_t Wp = g.Wp(), Wq = g.Wq(), phases = g.SH * g.SW, phase_bytes = g.phase_pixels() * 4, hw = g.H * g.W;
  const bool unit = phases == 1;
  const std::vector<uint8_t> zp_row(static_cast<size_t>(g.W + 16), zero_point);
  auto pad = [&](int64_t q0, int64_t q1) {
    std::vector<uint8_t> line(static_cast<size_t>(Wp * 4));   // a padded row, split into its column phases
    for (int64_t q = q0; q < q1; ++q) {
      uint8_t* out = dst + q * phases * phase_bytes;
      std::memset(out, zero_point, phases * phase_bytes);   // borders, the last phase rows/columns, the slack
      const uint8_t* ch[4];
      for (int i = 0; i < 4; ++i) ch[i] = 4 * q + i < g.C ? x + (4 * q + i) * hw : nullptr;
      for (int64_t h = 0; h < g.H; ++h) {
        const int64_t hp = g.pad_top + h;
        uint8_t* row = unit ? out + hp * Wp * 4 : line.data();
        uint8_t* px = row + g.pad_left * 4;
        const uint8_t* src[4];
        for (int i = 0; i < 4; ++i) src[i] = ch[i] ? ch[i] + h * g.W : zp_row.data();
        int64_t w = 0;
        for (; w + 16 <= g.W; w += 16) InterleaveK4(src[0] + w, src[1] + w, src[2] + w, src[3] + w, px + w * 4);
        for (; w < g.W; ++w)
          for (int i = 0; i < 4; ++i) px[w * 4 + i] = src[i][w];
        if (unit) continue;
        // Padded column wp goes to phase (hp % SH, wp % SW), column wp / SW of its row hp / SH: per column phase, a
        // run with unit destination stride.
        uint8_t* phase_row = out + (hp % g.SH) * g.SW * phase_bytes + (hp / g.SH) * Wq * 4;
        for (int64_t pw = 0; pw < g.SW; ++pw) {
          int64_t wp = g.pad_left + (pw - g.pad_left % g.SW + g.SW) % g.SW;   // the first padded column of phase pw
          uint8_t* d = phase_row + pw * phase_bytes + (wp / g.SW) * 4;
          for (; wp < g.pad_left + g.W; wp += g.SW, d += 4) std::memcpy(d, px + (wp - g.pad_left) * 4, 4);
        }
      }
    }
  };
  if (pool && pool->size() > 1 && g.quads() > 1) {
    pool->ParallelFor(g.quads(), 1, pad);
  } else {
    pad(0, g.quads());
  }
}

void QconvDirect(const QWeights& w, const uint8_t* x, const QDirectGeometry& g, ActQuant aq, const float* bias,
                 float* C, const GemmEpilogue& ep, ThreadPool* pool, const QuantizedIO& q) {
  if (!QconvDirectAvailable()) throw std::logic_error("the direct integer Conv needs AVX-512 VNNI");
  const int64_t M = w.outputs, Wq = g.Wq(), quads = g.quads(), phase_bytes = g.phase_pixels() * 4;
  const int64_t flat = (g.OH() - 1) * Wq + g.OW(), col_tiles = (flat + kTileCols - 1) / kTileCols;
  std::vector<int32_t> corr(M);
  std::vector<float> mul(M), add(M);
  for (int64_t o = 0; o < M; ++o) {
    corr[o] = aq.zero_point * w.sums[o];
    mul[o] = aq.scale * w.scale[o];
    add[o] = bias ? bias[o] : 0.f;
  }
  // Depth group (tap, quad) -> where its 16 pixels start, relative to the tile's first: the tap's phase plane in
  // the quad, then the tap's place in the phase.
  std::vector<int64_t> offsets;
  offsets.reserve(g.KH * g.KW * quads);
  for (int64_t kh = 0; kh < g.KH; ++kh)
    for (int64_t kw = 0; kw < g.KW; ++kw)
      for (int64_t j = 0; j < quads; ++j)
        offsets.push_back(((j * g.SH + kh % g.SH) * g.SW + kw % g.SW) * phase_bytes +
                          ((kh / g.SH) * Wq + kw / g.SW) * 4);
  const DirectTileFn* tiles = DirectTiles();
  const int64_t col_tasks = (col_tiles + kTilesPerTask - 1) / kTilesPerTask;
  const int64_t row_tasks = (M + kRowsPerTask - 1) / kRowsPerTask, groups = static_cast<int64_t>(offsets.size());
  const uint8_t* a = reinterpret_cast<const uint8_t*>(w.codes.data());
  auto run = [&](int64_t tb, int64_t te) {
    alignas(64) float tile[2 * kMaxRows * kQgemmNR];
    for (int64_t t = tb; t < te; ++t) {
      const int64_t m0 = (t % row_tasks) * kRowsPerTask, m1 = std::min(M, m0 + kRowsPerTask);
      const int64_t c0 = (t / row_tasks) * kTilesPerTask, c1 = std::min(col_tiles, c0 + kTilesPerTask);
      for (int64_t m = m0, rows = 0; m < m1; m += rows) {
        rows = std::min<int64_t>(kMaxRows, m1 - m);
        for (int64_t c = c0; c < c1; ++c) {
          const int64_t f0 = c * kTileCols;
          tiles[rows](a + m * w.depth4, x + f0 * 4, offsets.data(), groups, w.depth4, corr.data() + m,
                      mul.data() + m, add.data() + m, tile);
          for (int64_t half = 0; half < 2 && f0 + half * kQgemmNR < flat; ++half) {
            const int64_t h0 = f0 + half * kQgemmNR;
            FinishFlatTile(tile + half * kMaxRows * kQgemmNR, static_cast<int>(rows), h0,
                           std::min(flat, h0 + kQgemmNR), g, m, ep, q, C);
          }
        }
      }
    }
  };
  const int64_t tasks = col_tasks * row_tasks;
  if (pool && pool->size() > 1 && tasks > 1) {
    pool->ParallelFor(tasks, 1, run);
  } else {
    run(0, tasks);
  }
}

}  // namespace lite
