#include "cpu/depthwise/depthwise_small_planes.h"

#include <algorithm>
#include <vector>

#include "cpu/aligned.h"
#include "cpu/isa_dispatch.h"

#ifdef LITE_X86_SIMD
#include <immintrin.h>
#endif

namespace lite {
namespace {

constexpr int64_t kB = 8;          // channels of a block
constexpr int64_t kL = 2 * kB;     // channels of a vector: two blocks
constexpr int64_t kMaxRow = 16;    // input pixels of a row (28 and up: the copy costs more than it saves)
constexpr int kStrip = 8;          // output pixels per strip (eight accumulators)

struct PlaneArgs {
  const DepthwiseShape* s;
  int64_t Wp;                // the padded copy's row, in pixels
  const float* x[2];         // the two blocks' input planes (x[1] null: one block, its lanes zero)
  const float* w[2];         // their filters, [9][8] each
  const float* bias[2];      // their 8 biases each, or null
  float* y[2];               // their output planes (y[1] null: not stored)
  EpilogueAct act;           // kNone, kRelu or kRelu6
  float* buf;                // [Hp][Wp][16], its padding ring zero
};

#ifdef LITE_X86_SIMD
__attribute__((target("avx512f"), always_inline)) inline __m512 Join(const float* lo, const float* hi) {
  const __m256 a = _mm256_loadu_ps(lo);
  const __m256 b = hi ? _mm256_loadu_ps(hi) : _mm256_setzero_ps();
  return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(a)), _mm256_castps_pd(b), 1));
}

// Output pixels [ox0, ox0 + kN) of row oy: eight (or fewer) accumulators over the nine taps.
template <int kN, int kStride>
__attribute__((target("avx512f,fma"), always_inline)) inline void Strip(const PlaneArgs& a, const __m512 (&w)[9],
                                                                         __m512 bias, int64_t oy, int64_t ox0) {
  __m512 acc[kN];
#pragma GCC unroll 8
  for (int i = 0; i < kN; ++i) acc[i] = bias;
#pragma GCC unroll 3
  for (int ky = 0; ky < 3; ++ky) {
    const float* row = a.buf + ((oy * kStride + ky) * a.Wp + ox0 * kStride) * kL;
#pragma GCC unroll 3
    for (int kx = 0; kx < 3; ++kx)
#pragma GCC unroll 8
      for (int i = 0; i < kN; ++i)
        acc[i] = _mm512_fmadd_ps(w[ky * 3 + kx], _mm512_loadu_ps(row + (i * kStride + kx) * kL), acc[i]);
  }
  const int64_t OW = a.s->OW;
#pragma GCC unroll 8
  for (int i = 0; i < kN; ++i) {
    __m512 v = acc[i];
    if (a.act != EpilogueAct::kNone) v = _mm512_max_ps(_mm512_setzero_ps(), v);
    if (a.act == EpilogueAct::kRelu6) v = _mm512_min_ps(_mm512_set1_ps(6.f), v);
    const int64_t at = (oy * OW + ox0 + i) * kB;
    _mm256_storeu_ps(a.y[0] + at, _mm512_castps512_ps256(v));
    if (a.y[1]) _mm256_storeu_ps(a.y[1] + at, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  }
}

template <int kStride>
__attribute__((target("avx512f,fma"))) void PlanePair(const PlaneArgs& a) {
  const DepthwiseShape& s = *a.s;
  // The two blocks' pixels side by side into the padded copy's interior.
  for (int64_t h = 0; h < s.H; ++h) {
    float* dst = a.buf + ((h + s.pad_top) * a.Wp + s.pad_left) * kL;
    const int64_t at = h * s.W * kB;
    for (int64_t c = 0; c < s.W; ++c)
      _mm512_storeu_ps(dst + c * kL, Join(a.x[0] + at + c * kB, a.x[1] ? a.x[1] + at + c * kB : nullptr));
  }
  __m512 w[9];
#pragma GCC unroll 9
  for (int k = 0; k < 9; ++k) w[k] = Join(a.w[0] + k * kB, a.w[1] ? a.w[1] + k * kB : nullptr);
  const float zero8[kB] = {};
  const __m512 bias = Join(a.bias[0] ? a.bias[0] : zero8, a.bias[1]);
  for (int64_t oy = 0; oy < s.OH; ++oy) {
    int64_t ox = 0;
    for (; ox + kStrip <= s.OW; ox += kStrip) Strip<kStrip, kStride>(a, w, bias, oy, ox);
    switch (s.OW - ox) {   // the row's last 1-7 pixels
      case 7: Strip<7, kStride>(a, w, bias, oy, ox); break;
      case 6: Strip<6, kStride>(a, w, bias, oy, ox); break;
      case 5: Strip<5, kStride>(a, w, bias, oy, ox); break;
      case 4: Strip<4, kStride>(a, w, bias, oy, ox); break;
      case 3: Strip<3, kStride>(a, w, bias, oy, ox); break;
      case 2: Strip<2, kStride>(a, w, bias, oy, ox); break;
      case 1: Strip<1, kStride>(a, w, bias, oy, ox); break;
      default: break;
    }
  }
}
#endif

}  // namespace

bool DepthwiseSmallPlanesSupported(const DepthwiseShape& s, int64_t C) {
#ifdef LITE_X86_SIMD
  return DetectSimdIsa() == SimdIsa::kAvx512 && s.KH == 3 && s.KW == 3 && s.DH == 1 && s.DW == 1 && s.SH == s.SW &&
         (s.SH == 1 || s.SH == 2) && s.W <= kMaxRow && s.OW >= 1 && s.OH >= 1 && C % kB == 0;
#else
  (void)s, (void)C;
  return false;
#endif
}

void DepthwiseSmallPlanes(const DepthwiseShape& s, int64_t N, int64_t C, const float* x, const float* filters,
                          const float* bias, float* y, EpilogueAct act, ThreadPool* pool) {
#ifdef LITE_X86_SIMD
  const int64_t Hp = std::max(s.H + s.pad_top, (s.OH - 1) * s.SH + 3);
  const int64_t Wp = std::max(s.W + s.pad_left, (s.OW - 1) * s.SW + 3);
  const int64_t blocks = C / kB, pairs = (blocks + 1) / 2, in_plane = s.H * s.W * kB, out_plane = s.OH * s.OW * kB;
  const bool in_register = act == EpilogueAct::kNone || act == EpilogueAct::kRelu || act == EpilogueAct::kRelu6;
  auto run = [&](int64_t b, int64_t e) {
    // Each pair writes only the copy's interior, so its ring of zeros is written when the geometry changes, not per
    // task (zeroing the whole copy per task made the 14x14 layers 1.1x slower at two threads).
    thread_local std::vector<float> storage;
    thread_local int64_t zeroed_for[6] = {};
    const int64_t geometry[6] = {Hp, Wp, s.H, s.W, s.pad_top, s.pad_left};
    if (!std::equal(geometry, geometry + 6, zeroed_for)) {
      storage.assign(static_cast<size_t>(Hp * Wp * kL + 16), 0.f);
      std::copy(geometry, geometry + 6, zeroed_for);
    }
    PlaneArgs a;
    a.s = &s;
    a.Wp = Wp;
    a.buf = AlignTo64(storage.data());
    a.act = in_register ? act : EpilogueAct::kNone;
    for (int64_t t = b; t < e; ++t) {
      const int64_t n = t / pairs, b0 = t % pairs * 2;
      for (int h = 0; h < 2; ++h) {
        const int64_t blk = b0 + h;
        const bool there = blk < blocks;
        a.x[h] = there ? x + (n * blocks + blk) * in_plane : nullptr;
        a.w[h] = there ? filters + blk * 9 * kB : nullptr;
        a.bias[h] = there && bias ? bias + blk * kB : nullptr;
        a.y[h] = there ? y + (n * blocks + blk) * out_plane : nullptr;
      }
      if (s.SH == 1) PlanePair<1>(a); else PlanePair<2>(a);
      if (!in_register) {   // an activation alone is elementwise over the blocks' planes
        GemmEpilogue only;
        only.act = act;
        ApplyEpilogue(a.y[0], 0, 0, 1, 0, (a.y[1] ? 2 : 1) * out_plane, only);
      }
    }
  };
  if (pool) {
    pool->ParallelFor(N * pairs, 1, run);
  } else {
    run(0, N * pairs);
  }
#else
  (void)s, (void)N, (void)C, (void)x, (void)filters, (void)bias, (void)y, (void)act, (void)pool;
#endif
}

}  // namespace lite
