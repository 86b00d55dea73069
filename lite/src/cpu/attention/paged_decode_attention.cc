#include "cpu/attention/paged_decode_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "cpu/simd/float16.h"
#include "cpu/attention/exp_non_positive.h"
#include "cpu/attention/kv_cache_rows.h"
#include "cpu/gemm/spread_prefetch.h"
#include "cpu/isa_dispatch.h"
#include "cpu/simd/simd.h"
#include "cpu/simd/transpose_block.h"
#include "cpu/simd/vmath.h"

#ifdef LITE_X86_SIMD
#include <immintrin.h>
#endif

#ifdef LITE_ARM64_SIMD
#include <arm_neon.h>
#endif

namespace lite {
namespace {

// Cache lines a kernel fetches while it computes: `lines` lines from `first` (none when first is null). A paged
// cache's next run (a few KB) is fetched into L1; a dense operand's (a run of all the heads' rows: 48 KB for
// Whisper-small's cross-attention) into L2: into L1 a cold 1500-key layer took 0.94 ms against 0.62 (one thread).
// Dense rows interleave the heads, so there `rows` runs of `lines` lines, `row_bytes` apart.
struct LinesAhead {
  const char* first = nullptr;
  int64_t lines = 0, rows = 1, row_bytes = 0;
  bool into_l1 = true;
};

// SpreadPrefetch over a LinesAhead, its locality chosen per call.
class RunAhead {
 public:
  RunAhead(const LinesAhead& l, int64_t steps)
      : row_(l.first), per_row_(l.lines), row_bytes_(l.row_bytes), left_(l.first ? l.lines * l.rows : 0),
        per_issue_(left_ > 0 && steps > 0 ? (left_ + steps - 1) / steps : 0), into_l1_(l.into_l1) {}
  void Issue() {
    for (int64_t q = 0; q < per_issue_ && left_ > 0; ++q, --left_) {
      const char* line = row_ + 64 * in_row_;
      if (into_l1_) {
        __builtin_prefetch(line, 0, 3);
      } else {
        __builtin_prefetch(line, 0, 1);
      }
      if (++in_row_ == per_row_) in_row_ = 0, row_ += row_bytes_;
    }
  }

 private:
  const char* row_;
  int64_t per_row_, row_bytes_, in_row_ = 0, left_, per_issue_;
  bool into_l1_;
};

// The per-key work of a task, by instruction set: G query heads (q_stride floats apart) against one key row, and one
// value row added into G accumulators with their weights (w_stride apart); cache rows of half types widened first.
// score / accumulate: null where the block kernels below serve.
struct DecodeKernels {
  void (*score)(const float* q, int64_t q_stride, int64_t G, const float* k, int64_t D, float scale, float* s,
                int64_t s_stride);
  void (*accumulate)(float* acc, int64_t G, int64_t Dv, const float* v, const float* w, int64_t w_stride);
  void (*widen)(const void* p, int64_t n, AttentionElem e, float* out);
  // Scores of nk <= 16 keys at once, their rows transposed into kt (D x 16 floats): s[g * s_stride + j] for j < nk.
  // Null where the per-key score serves.
  // Both block kernels fetch `ahead` (the lines the next run will read) into the cache as they go.
  void (*score_block)(const float* q, int64_t q_stride, int64_t G, const float* kt, int64_t D, float scale,
                      int64_t nk, float* s, int64_t s_stride, const LinesAhead& ahead);
  // acc[g * Dv + :] += sum over nk <= 16 value rows (ldv apart) of w[g * w_stride + j] * row j. Null where the per-key
  // kernels serve.
  void (*accumulate_block)(float* acc, int64_t G, int64_t Dv, const float* v, int64_t ldv, int64_t nk, const float* w,
                           int64_t w_stride, const LinesAhead& ahead);
  // Scores of nk <= 16 keys read as rows (ldk apart), for up to row_score_heads query heads (AVX-512: 2, where the
  // tile's transpose cost more than the products it feeds when no group of heads shares it; AVX2: all). Null where
  // the per-key kernels serve.
  void (*score_rows)(const float* q, int64_t q_stride, int64_t G, const float* k, int64_t ldk, int64_t D, float scale,
                     int64_t nk, float* s, int64_t s_stride, const LinesAhead& ahead);
  // Query heads up to which score_rows serves (else score_block).
  int64_t row_score_heads;
  // y = exp(x - shift) for the softmax (x <= shift, or NaN), returning the sum of y.
  float (*exp_shift_sum)(const float* x, float* y, int64_t n, float shift);
};

// Query heads per key/value head up to which the AVX-512 score_rows serves (MHA: Whisper's decoder, its
// cross-attention).
constexpr int64_t kRowScoreHeads = 2;

namespace portable {
void Score(const float* q, int64_t q_stride, int64_t G, const float* k, int64_t D, float scale, float* s,
           int64_t s_stride) {
  for (int64_t g = 0; g < G; ++g) {
    const float* qg = q + g * q_stride;
    float acc[16] = {};
    int64_t d = 0;
    for (; d + 16 <= D; d += 16)
      for (int l = 0; l < 16; ++l) acc[l] += qg[d + l] * k[d + l];
    float sum = 0.f;
    for (; d < D; ++d) sum += qg[d] * k[d];
    for (int l = 0; l < 16; ++l) sum += acc[l];
    s[g * s_stride] = scale * sum;
  }
}
void Accumulate(float* acc, int64_t G, int64_t Dv, const float* v, const float* w, int64_t w_stride) {
  for (int64_t g = 0; g < G; ++g) {
    const float wg = w[g * w_stride];
    for (int64_t d = 0; d < Dv; ++d) acc[g * Dv + d] += wg * v[d];
  }
}
void Widen(const void* p, int64_t n, AttentionElem e, float* out) { LoadCacheRow(p, n, e, out); }
}  // namespace portable

#ifdef LITE_ARM64_SIMD
// NEON: the portable per-key kernels in 4-lane registers (the portable Score's 16 partial sums lived on the stack
// on aarch64: 3.9 stack accesses per fmla).
namespace neon {
void Score(const float* q, int64_t q_stride, int64_t G, const float* k, int64_t D, float scale, float* s,
           int64_t s_stride) {
  for (int64_t g = 0; g < G; ++g) {
    const float* qg = q + g * q_stride;
    float32x4_t a0 = vdupq_n_f32(0.f), a1 = a0, a2 = a0, a3 = a0;
    int64_t d = 0;
    for (; d + 16 <= D; d += 16) {
      a0 = vfmaq_f32(a0, vld1q_f32(qg + d), vld1q_f32(k + d));
      a1 = vfmaq_f32(a1, vld1q_f32(qg + d + 4), vld1q_f32(k + d + 4));
      a2 = vfmaq_f32(a2, vld1q_f32(qg + d + 8), vld1q_f32(k + d + 8));
      a3 = vfmaq_f32(a3, vld1q_f32(qg + d + 12), vld1q_f32(k + d + 12));
    }
    for (; d + 4 <= D; d += 4) a0 = vfmaq_f32(a0, vld1q_f32(qg + d), vld1q_f32(k + d));
    float sum = vaddvq_f32(vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3)));
    for (; d < D; ++d) sum += qg[d] * k[d];
    s[g * s_stride] = scale * sum;
  }
}
void Accumulate(float* acc, int64_t G, int64_t Dv, const float* v, const float* w, int64_t w_stride) {
  for (int64_t g = 0; g < G; ++g) {
    const float wg = w[g * w_stride];
    float* ag = acc + g * Dv;
    int64_t d = 0;
    for (; d + 4 <= Dv; d += 4) vst1q_f32(ag + d, vfmaq_n_f32(vld1q_f32(ag + d), vld1q_f32(v + d), wg));
    for (; d < Dv; ++d) ag[d] += wg * v[d];
  }
}
}  // namespace neon
#endif

#ifdef LITE_X86_SIMD
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,f16c,fma")
namespace avx512 {
inline __mmask16 Live(int64_t n) { return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1); }

// The dot product of q and k (D values) in 16 lanes, before their horizontal sum.
inline __m512 DotLanes(const float* q, const float* k, int64_t D) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  int64_t d = 0;
  for (; d + 32 <= D; d += 32) {
    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + d), _mm512_loadu_ps(k + d), a0);
    a1 = _mm512_fmadd_ps(_mm512_loadu_ps(q + d + 16), _mm512_loadu_ps(k + d + 16), a1);
  }
  for (; d < D; d += 16) {
    const __mmask16 m = Live(D - d);
    a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + d), _mm512_maskz_loadu_ps(m, k + d), a0);
  }
  return _mm512_add_ps(a0, a1);
}

// Up to 8 query heads at a time, one accumulator of 16 keys each: no horizontal sums.
template <int G>
void ScoreHeads(const float* q, int64_t q_stride, const float* kt, int64_t D, float scale, __mmask16 live, float* s,
                int64_t s_stride, RunAhead& ahead) {
  __m512 acc[G];
  for (int g = 0; g < G; ++g) acc[g] = _mm512_setzero_ps();
  for (int64_t d = 0; d < D; ++d) {
    ahead.Issue();
    const __m512 k = _mm512_loadu_ps(kt + d * 16);
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) acc[g] = _mm512_fmadd_ps(_mm512_set1_ps(q[g * q_stride + d]), k, acc[g]);
  }
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g) _mm512_mask_storeu_ps(s + g * s_stride, live, _mm512_mul_ps(acc[g], _mm512_set1_ps(scale)));
}

void ScoreBlock(const float* q, int64_t q_stride, int64_t G, const float* kt, int64_t D, float scale, int64_t nk,
                float* s, int64_t s_stride, const LinesAhead& lines) {
  const __mmask16 live = Live(nk);
  RunAhead ahead(lines, D * ((G + 7) / 8));
  for (int64_t g0 = 0; g0 < G; g0 += 8) {
    const float* qg = q + g0 * q_stride;
    float* sg = s + g0 * s_stride;
    switch (std::min<int64_t>(8, G - g0)) {
      case 1: ScoreHeads<1>(qg, q_stride, kt, D, scale, live, sg, s_stride, ahead); break;
      case 2: ScoreHeads<2>(qg, q_stride, kt, D, scale, live, sg, s_stride, ahead); break;
      case 3: ScoreHeads<3>(qg, q_stride, kt, D, scale, live, sg, s_stride, ahead); break;
      case 4: ScoreHeads<4>(qg, q_stride, kt, D, scale, live, sg, s_stride, ahead); break;
      case 5: ScoreHeads<5>(qg, q_stride, kt, D, scale, live, sg, s_stride, ahead); break;
      case 6: ScoreHeads<6>(qg, q_stride, kt, D, scale, live, sg, s_stride, ahead); break;
      case 7: ScoreHeads<7>(qg, q_stride, kt, D, scale, live, sg, s_stride, ahead); break;
      default: ScoreHeads<8>(qg, q_stride, kt, D, scale, live, sg, s_stride, ahead); break;
    }
  }
}

// Lane j of the result: the sum of v[j]'s 16 lanes (a tree of shuffles and adds: 15 adds for 16 sums).
inline __m512 SumEach(const __m512 (&v)[16]) {
  __m512 w[8], u[4], z[2];
  for (int i = 0; i < 8; ++i)   // w[i]: v[2i]'s 8 partial sums in lanes 0-7, v[2i+1]'s in 8-15
    w[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  for (int i = 0; i < 4; ++i)   // u[i]'s 128-bit quarter q: v[4i + q]'s 4 partial sums
    u[i] = _mm512_add_ps(_mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  for (int i = 0; i < 2; ++i)   // z[i]'s quarter q: v[8i + q]'s and v[8i + 4 + q]'s 2 partial sums, interleaved
    z[i] = _mm512_add_ps(_mm512_unpacklo_ps(u[2 * i], u[2 * i + 1]), _mm512_unpackhi_ps(u[2 * i], u[2 * i + 1]));
  const __m512 lo = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(z[0]), _mm512_castps_pd(z[1])));
  const __m512 hi = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(z[0]), _mm512_castps_pd(z[1])));
  // lane 4q + e holds v[q + 4e]'s sum
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(order, _mm512_add_ps(lo, hi));
}

void ScoreRows(const float* q, int64_t q_stride, int64_t G, const float* k, int64_t ldk, int64_t D, float scale,
               int64_t nk, float* s, int64_t s_stride, const LinesAhead& lines) {
  RunAhead ahead(lines, G * nk);
  for (int64_t g = 0; g < G; ++g) {
    const float* qg = q + g * q_stride;
    __m512 acc[16];
    for (int j = 0; j < 16; ++j) acc[j] = _mm512_setzero_ps();
    for (int64_t j = 0; j < nk; ++j) {
      ahead.Issue();
      acc[j] = DotLanes(qg, k + j * ldk, D);
    }
    _mm512_mask_storeu_ps(s + g * s_stride, Live(nk), _mm512_mul_ps(SumEach(acc), _mm512_set1_ps(scale)));
  }
}

// G heads x C chunks of 16 values held in registers over a run of value rows.
template <int G, int C>
void AccumulateHeads(float* acc, int64_t Dv, int64_t d0, const float* v, int64_t ldv, int64_t nk, const float* w,
                     int64_t w_stride, RunAhead& ahead) {
  __mmask16 live[C];
  __m512 sum[G][C];
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c) live[c] = d0 + 16 * c < Dv ? Live(Dv - d0 - 16 * c) : static_cast<__mmask16>(0);
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) sum[g][c] = _mm512_maskz_loadu_ps(live[c], acc + g * Dv + d0 + 16 * c);
  for (int64_t j = 0; j < nk; ++j) {
    ahead.Issue();
    __m512 row[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) row[c] = _mm512_maskz_loadu_ps(live[c], v + j * ldv + d0 + 16 * c);
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      const __m512 p = _mm512_set1_ps(w[g * w_stride + j]);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) sum[g][c] = _mm512_fmadd_ps(p, row[c], sum[g][c]);
    }
  }
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) _mm512_mask_storeu_ps(acc + g * Dv + d0 + 16 * c, live[c], sum[g][c]);
}

// Values a call of AccumulateHeads covers for `heads` heads (the register budget: 4 x 4 or 8 x 2 accumulators).
inline int64_t ValueStep(int64_t heads) { return heads <= 4 ? 64 : 32; }

void AccumulateBlock(float* acc, int64_t G, int64_t Dv, const float* v, int64_t ldv, int64_t nk, const float* w,
                     int64_t w_stride, const LinesAhead& lines) {
  int64_t calls = 0;
  for (int64_t g0 = 0; g0 < G; g0 += 8) calls += (Dv + ValueStep(G - g0) - 1) / ValueStep(G - g0);
  RunAhead ahead(lines, calls * nk);
  for (int64_t g0 = 0; g0 < G; g0 += 8) {
    const int64_t heads = std::min<int64_t>(8, G - g0), step = ValueStep(heads);
    float* ag = acc + g0 * Dv;
    const float* wg = w + g0 * w_stride;
    for (int64_t d0 = 0; d0 < Dv; d0 += step) {
      switch (heads) {
        case 1: AccumulateHeads<1, 4>(ag, Dv, d0, v, ldv, nk, wg, w_stride, ahead); break;
        case 2: AccumulateHeads<2, 4>(ag, Dv, d0, v, ldv, nk, wg, w_stride, ahead); break;
        case 3: AccumulateHeads<3, 4>(ag, Dv, d0, v, ldv, nk, wg, w_stride, ahead); break;
        case 4: AccumulateHeads<4, 4>(ag, Dv, d0, v, ldv, nk, wg, w_stride, ahead); break;
        case 5: AccumulateHeads<5, 2>(ag, Dv, d0, v, ldv, nk, wg, w_stride, ahead); break;
        case 6: AccumulateHeads<6, 2>(ag, Dv, d0, v, ldv, nk, wg, w_stride, ahead); break;
        case 7: AccumulateHeads<7, 2>(ag, Dv, d0, v, ldv, nk, wg, w_stride, ahead); break;
        default: AccumulateHeads<8, 2>(ag, Dv, d0, v, ldv, nk, wg, w_stride, ahead); break;
      }
    }
  }
}

void Widen(const void* p, int64_t n, AttentionElem e, float* out) {
  if (e == AttentionElem::kInt8Rows) {
    const auto* codes = static_cast<const int8_t*>(p);
    float scale;
    std::memcpy(&scale, codes + n, sizeof scale);
    const __m512 s = _mm512_set1_ps(scale);
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 m = Live(n - i);
      const __m512i c = _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, codes + i));
      _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(_mm512_cvtepi32_ps(c), s));
    }
    return;
  }
  const auto* h = static_cast<const uint16_t*>(p);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = Live(n - i);
    const __m256i x = _mm256_maskz_loadu_epi16(m, h + i);
    const __m512 f = e == AttentionElem::kFloat16
                         ? _mm512_cvtph_ps(x)
                         : _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(x), 16));
    _mm512_mask_storeu_ps(out + i, m, f);
  }
}
}  // namespace avx512
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace avx2 {

#include "cpu/simd/unroll.h"

// AVX2: scores from the key rows for every group of heads (ScoreRowPairs below; the transposed tile of AVX-512's
// score_block cost more than it saved on 8-lane registers), value rows into register accumulators, masks as lane masks.
// On a Zen 1 core the per-key kernels these replace spent ~210 ns a key and key/value head of a 512-token step
// (14 / 2 heads, D 64): a horizontal sum per key and head, G accumulator rows loaded and stored per value row.
inline __m256i LiveLanes(int64_t n) {   // lanes i < n set (n clamped to [0, 8])
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(std::min<int64_t>(8, std::max<int64_t>(0, n)))),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// The dot product of q and k (D values) in 8 lanes, before their horizontal sum.
inline __m256 DotLanes(const float* q, const float* k, int64_t D) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t d = 0;
  for (; d + 16 <= D; d += 16) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), _mm256_loadu_ps(k + d), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d + 8), _mm256_loadu_ps(k + d + 8), a1);
  }
  for (; d < D; d += 8) {
    const __m256i m = LiveLanes(D - d);
    a0 = _mm256_fmadd_ps(_mm256_maskload_ps(q + d, m), _mm256_maskload_ps(k + d, m), a0);
  }
  return _mm256_add_ps(a0, a1);
}

// Lane j of the result: the sum of v[j]'s 8 lanes.
inline __m256 SumEach(const __m256 (&v)[8]) {
  const __m256 t0 = _mm256_hadd_ps(v[0], v[1]), t1 = _mm256_hadd_ps(v[2], v[3]);
  const __m256 t2 = _mm256_hadd_ps(v[4], v[5]), t3 = _mm256_hadd_ps(v[6], v[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);   // per 128-bit half: v[0..3] / v[4..7]
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

void ScoreRows(const float* q, int64_t q_stride, int64_t G, const float* k, int64_t ldk, int64_t D, float scale,
               int64_t nk, float* s, int64_t s_stride, const LinesAhead& lines) {
  RunAhead ahead(lines, G * nk);
  const __m256 sc = _mm256_set1_ps(scale);
  for (int64_t g = 0; g < G; ++g) {
    const float* qg = q + g * q_stride;
    for (int64_t j0 = 0; j0 < nk; j0 += 8) {
      __m256 acc[8];
      for (int j = 0; j < 8; ++j) {
        if (j0 + j < nk) {
          ahead.Issue();
          acc[j] = DotLanes(qg, k + (j0 + j) * ldk, D);
        } else {
          acc[j] = _mm256_setzero_ps();
        }
      }
      _mm256_maskstore_ps(s + g * s_stride + j0, LiveLanes(nk - j0), _mm256_mul_ps(SumEach(acc), sc));
    }
  }
}

// Scores of four key rows for one query head or two (Two), D a multiple of 8: the heads' eight products per key in
// eight lanes, summed across lanes at the end (two hadds and one 128-bit add per head). Each key row's loads serve
// both heads, and no tile is transposed: on a Zen 1 core the transposes of score_block's tiles and its per-depth
// broadcasts took ~60 us a layer of a 576-token step (Qwen2.5-0.5B: 7 heads a key head, D 64), these ~30.
template <bool Two>
__attribute__((always_inline)) inline void ScoreFourKeys(const float* qa, const float* qb, const float* k, int64_t ldk,
                                                         int64_t D, __m128 scale, int64_t nk, float* sa, float* sb) {
  __m256 a[4], b[4];
  for (int j = 0; j < 4; ++j) a[j] = b[j] = _mm256_setzero_ps();
  const float* rows[4];
  for (int j = 0; j < 4; ++j) rows[j] = k + std::min<int64_t>(j, nk - 1) * ldk;   // past nk: the last row again
  for (int64_t d = 0; d < D; d += 8) {
    const __m256 x = _mm256_loadu_ps(qa + d), y = Two ? _mm256_loadu_ps(qb + d) : x;
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      __m256 kj = _mm256_loadu_ps(rows[j] + d);
      if (Two) asm("" : "+x"(kj));   // one load for both heads (GCC folded it into each FMA: 10 loads per 8 FMAs)
      a[j] = _mm256_fmadd_ps(x, kj, a[j]);
      if (Two) b[j] = _mm256_fmadd_ps(y, kj, b[j]);
    }
  }
  auto reduce = [&](const __m256 (&v)[4], float* out) __attribute__((always_inline)) {
    const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
    const __m128 sums = _mm_mul_ps(_mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)), scale);
    if (nk >= 4) {
      _mm_storeu_ps(out, sums);
    } else {
      alignas(16) float t[4];
      _mm_store_ps(t, sums);
      std::copy_n(t, nk, out);
    }
  };
  reduce(a, sa);
  if (Two) reduce(b, sb);
}

void ScoreRowPairs(const float* q, int64_t q_stride, int64_t G, const float* k, int64_t ldk, int64_t D, float scale,
                   int64_t nk, float* s, int64_t s_stride, const LinesAhead& lines) {
  if (D % 8 != 0) return ScoreRows(q, q_stride, G, k, ldk, D, scale, nk, s, s_stride, lines);
  RunAhead ahead(lines, (nk + 3) / 4 * ((G + 1) / 2));
  const __m128 sc = _mm_set1_ps(scale);
  for (int64_t j0 = 0; j0 < nk; j0 += 4) {
    const float* kj = k + j0 * ldk;
    const int64_t n = std::min<int64_t>(4, nk - j0);
    int64_t g = 0;
    for (; g + 2 <= G; g += 2) {
      ahead.Issue();
      ScoreFourKeys<true>(q + g * q_stride, q + (g + 1) * q_stride, kj, ldk, D, sc, n, s + g * s_stride + j0,
                          s + (g + 1) * s_stride + j0);
    }
    if (g < G) {
      ahead.Issue();
      ScoreFourKeys<false>(q + g * q_stride, nullptr, kj, ldk, D, sc, n, s + g * s_stride + j0, nullptr);
    }
  }
}

// ExpShiftSum for the softmax's x <= shift (or NaN): ExpNonPositive (FastExp's polynomial without its overflow side,
// one 2^n scale), NaN in, NaN out; below -87.3365, 0. The generic loop (16-lane arrays, every special case blended)
// took ~25 us a 576-token layer on a Zen 1 core, a sixth of the attention.
float ExpShiftSum(const float* x, float* y, int64_t n, float shift) {
  const __m256 sv = _mm256_set1_ps(shift);
  auto exp8 = [&](const float* from) __attribute__((always_inline)) {
    const __m256 in = _mm256_sub_ps(_mm256_loadu_ps(from), sv);
    return _mm256_blendv_ps(ExpNonPositive(in), in, _mm256_cmp_ps(in, in, _CMP_UNORD_Q));   // NaN stays NaN
  };
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 a = exp8(x + i);
    _mm256_storeu_ps(y + i, a);
    acc = _mm256_add_ps(acc, a);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  float sum = 0.f;
  for (float l : lanes) sum += l;
  for (; i < n; ++i) {
    y[i] = FastExp(x[i] - shift);
    sum += y[i];
  }
  return sum;
}

// G heads x C chunks of 8 values held in registers over a run of value rows; `Whole`: all C chunks lie inside Dv (a
// tail's lanes are masked: a masked load costs several times a plain one on AMD cores).
template <int G, int C, bool Whole>
void AccumulateHeads(float* acc, int64_t Dv, int64_t d0, const float* v, int64_t ldv, int64_t nk, const float* w,
                     int64_t w_stride, RunAhead& ahead) {
  __m256i live[C];
  __m256 sum[G][C];
  auto load = [&](const float* p, int c) __attribute__((always_inline)) {
    return Whole ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, live[c]);
  };
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c) live[c] = LiveLanes(Dv - d0 - 8 * c);
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) sum[g][c] = load(acc + g * Dv + d0 + 8 * c, c);
  for (int64_t j = 0; j < nk; ++j) {
    ahead.Issue();
    __m256 row[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) row[c] = load(v + j * ldv + d0 + 8 * c, c);
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      const __m256 p = _mm256_broadcast_ss(w + g * w_stride + j);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) sum[g][c] = _mm256_fmadd_ps(p, row[c], sum[g][c]);
    }
  }
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      if (Whole) {
        _mm256_storeu_ps(acc + g * Dv + d0 + 8 * c, sum[g][c]);
      } else {
        _mm256_maskstore_ps(acc + g * Dv + d0 + 8 * c, live[c], sum[g][c]);
      }
    }
}

template <int G, int C>
void AccumulateChunk(float* acc, int64_t Dv, int64_t d0, const float* v, int64_t ldv, int64_t nk, const float* w,
                     int64_t w_stride, RunAhead& ahead) {
  if (d0 + 8 * C <= Dv) {
    AccumulateHeads<G, C, true>(acc, Dv, d0, v, ldv, nk, w, w_stride, ahead);
  } else {
    AccumulateHeads<G, C, false>(acc, Dv, d0, v, ldv, nk, w, w_stride, ahead);
  }
}

// One head at a time over 64 values (eight accumulators): a weight broadcast feeds eight FMAs, whose row operands
// come straight from L1; several heads a call (4 x 16 values) shared each row load but broadcast once every two FMAs,
// and on a Zen 1 core those broadcasts held the value pass to ~60% of its FMA rate.
template <int C>
void AccumulateOneHead(float* acc, const float* v, int64_t ldv, int64_t nk, const float* w, RunAhead& ahead) {
  __m256 sum[C];
  Unroll<C>([&](auto c) __attribute__((always_inline)) { sum[c] = _mm256_loadu_ps(acc + 8 * c); });
  for (int64_t j = 0; j < nk; ++j) {
    ahead.Issue();
    const __m256 p = _mm256_broadcast_ss(w + j);
    Unroll<C>([&](auto c) __attribute__((always_inline)) {
      sum[c] = _mm256_fmadd_ps(p, _mm256_loadu_ps(v + j * ldv + 8 * c), sum[c]);
    });
  }
  Unroll<C>([&](auto c) __attribute__((always_inline)) { _mm256_storeu_ps(acc + 8 * c, sum[c]); });
}

void AccumulateBlock(float* acc, int64_t G, int64_t Dv, const float* v, int64_t ldv, int64_t nk, const float* w,
                     int64_t w_stride, const LinesAhead& lines) {
  RunAhead ahead(lines, G * ((Dv + 63) / 64) * nk);
  for (int64_t g = 0; g < G; ++g) {
    int64_t d0 = 0;
    for (; d0 + 64 <= Dv; d0 += 64) AccumulateOneHead<8>(acc + g * Dv + d0, v + d0, ldv, nk, w + g * w_stride, ahead);
    if (d0 + 32 <= Dv) {
      AccumulateOneHead<4>(acc + g * Dv + d0, v + d0, ldv, nk, w + g * w_stride, ahead);
      d0 += 32;
    }
    if (d0 < Dv) AccumulateChunk<1, 4>(acc + g * Dv, Dv, d0, v, ldv, nk, w + g * w_stride, w_stride, ahead);
  }
}
}  // namespace avx2
#pragma GCC pop_options
#endif

float GenericExpShiftSum(const float* x, float* y, int64_t n, float shift) { return ExpShiftSum(x, y, n, shift); }

const DecodeKernels& Kernels() {
  static const DecodeKernels k = [] {
#ifdef LITE_X86_SIMD
    // (the row loads are masked byte / word loads: AVX512BW and VL)
    if (DetectSimdIsa() == SimdIsa::kAvx512 && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
      return DecodeKernels{nullptr, nullptr, avx512::Widen, avx512::ScoreBlock, avx512::AccumulateBlock,
                           avx512::ScoreRows, kRowScoreHeads, GenericExpShiftSum};
    // AVX2: key rows scored in place for every group of heads (8-lane registers: the transposed tile cost more)
    if (DetectSimdIsa() != SimdIsa::kPortable)
      return DecodeKernels{nullptr, nullptr, portable::Widen, nullptr, avx2::AccumulateBlock, avx2::ScoreRowPairs,
                           std::numeric_limits<int64_t>::max(), avx2::ExpShiftSum};
#endif
#ifdef LITE_ARM64_SIMD
    if (DetectSimdIsa() == SimdIsa::kNeon)
      return DecodeKernels{neon::Score, neon::Accumulate, portable::Widen, nullptr, nullptr, nullptr, 0,
                           GenericExpShiftSum};
#endif
    return DecodeKernels{portable::Score, portable::Accumulate, portable::Widen, nullptr, nullptr, nullptr, 0,
                         GenericExpShiftSum};
  }();
  return k;
}

}  // namespace

// Queries per sample up to which a dense step takes the decode path (as many as the block kernels' 8 heads).
constexpr int64_t kDenseQueries = 8;

bool IsDenseDecodeStep(const AttentionArgs& a) {
  // One query per sample (or a few, below) reading dense keys / values in place ([B, S, H, D]-like strides):
  // cross-attention of an encoder-decoder's step (Whisper: 1500 keys a layer, whose packing into GEMM tiles cost 7x
  // the reads themselves). Non-causal, or causal from the end (the query is its sample's last position); windows only
  // then.
  if (a.kv_block_table || a.q_lens || a.kv_lens || a.q_len < 1 || a.q_len > kDenseQueries || a.kv_len <= 0 ||
      a.select_idx || a.mask.present() || a.k_transposed || a.lse || a.elem != AttentionElem::kFloat32)
    return false;
  // Several queries (a decoder prompt's first step: Whisper's 4 tokens) ride as the group of their head: non-causal
  // with one query head per key head only.
  if (a.q_len > 1) return !a.causal && a.q_heads == a.kv_heads && a.left_window == -1 && a.right_window == -1;
  if (a.causal) return a.causal_from_end && a.causal_offset == 0;
  return a.left_window == -1 && a.right_window == -1;
}

bool IsPagedDecodeStep(const AttentionArgs& a) {
  // (bf16_products only permits rounding: this path keeps float32 throughout.)
  if (!a.kv_block_table || !a.causal || !a.causal_from_end || a.causal_offset != 0 ||
      a.select_idx || a.mask.present() || a.k_transposed || a.lse || a.elem != AttentionElem::kFloat32)
    return false;
  for (int64_t b = 0; b < a.batch; ++b)
    if ((a.q_lens ? a.q_lens[b] : a.q_len) != 1) return false;
  return true;
}

void RunPagedDecode(const AttentionArgs& a, ThreadPool* pool) {
  const DecodeKernels& kern = Kernels();
  // Dense keys / values (IsDenseDecodeStep) read as one block per sample, sample b's block b, as long as its keys.
  const bool paged = a.kv_block_table != nullptr;
  const AttentionElem kv_elem = paged ? a.kv_elem : a.elem;
  // The query rows of a key/value head (`group` of them, q_stride apart): its group of query heads, or, for a dense
  // step of several queries (one query head per key head), the head's queries.
  const bool queries_as_group = !paged && a.q_len > 1;
  const int64_t heads_per_kv = a.q_heads / a.kv_heads, es = CacheElemBytes(kv_elem);
  const int64_t group = queries_as_group ? a.q_len : heads_per_kv;
  const int64_t q_stride = queries_as_group ? a.q.row_stride : a.q.head_stride;
  const int64_t bs = paged ? a.kv_block_size : std::max<int64_t>(1, a.kv_len);
  // Rows pulled in order at a time (below): a paged cache's block; 16 rows of a dense operand, whose one "block" is
  // the whole sequence.
  const int64_t pull_rows = paged ? bs : 16;
  // Sequence b's key/value heads [h0, h1) (consecutive tasks of one call): a cache block holds those heads' rows one
  // after another, so going block by block through all of them reads each block front to back (one head at a time
  // read every other 4 KB of a two-head cache, and the prefetchers lost the stream at each 4 KB).
  auto heads = [&](int64_t b, int64_t h0, int64_t h1) {
    thread_local std::vector<float> scores, krow, vrow, acc, krows, ktile, vrows, inverse;
    const int64_t nh = h1 - h0;
    const int64_t len = a.kv_lens ? a.kv_lens[b] : a.kv_len;
    const int64_t first = a.left_window >= 0 ? std::max<int64_t>(0, len - 1 - a.left_window) : 0;
    const int64_t n = len - first;
    const int64_t* table = paged ? a.kv_block_table + b * a.kv_blocks_per_seq : &b;
    const int64_t per_head = group * std::max<int64_t>(n, 1);   // scores of one key/value head's query heads
    scores.resize(static_cast<size_t>(nh * per_head));
    krow.resize(static_cast<size_t>(a.head_dim));
    vrow.resize(static_cast<size_t>(a.v_dim));
    acc.assign(static_cast<size_t>(nh * group * a.v_dim), 0.f);
    // one query row per sample: with q_lens (TND) sample b's is row b of the operand, else row 0 of sample b (a
    // BSND-like operand, batch_stride apart); head hk's group of query heads
    auto query = [&](int64_t hk) {
      return static_cast<const float*>(a.q.data) + b * (a.q_lens ? a.q.row_stride : a.q.batch_stride) +
             hk * heads_per_kv * a.q.head_stride;
    };
    // Reads one word of every cache line of block blk's rows of these heads, front to back, and prefetches the same
    // lines of the sequence's next block as it goes. The cache was last read a whole decode step ago (every layer's
    // weights have streamed through the caches since), and the kernels below walk a block's lines in transpose order,
    // 256 bytes apart, which the hardware prefetchers follow poorly: reading the block in order first lets them stream
    // it, and the kernels then find it in L1/L2. Measured on a Zen 5 core, 24 layers of 576 cached tokens: 1.2-1.5 ms
    // against 2.1-2.3 ms a step with the next block prefetched in a burst instead (prefetches issued in a burst mostly
    // come to nothing once the miss buffers are full); interleaved one for one with the pull's loads, the next block's
    // prefetches took a cold layer from ~81 to ~62 us (2 or 3 blocks ahead: no better). The pull still waits for its
    // block before any arithmetic: where the block kernels run on a float32 cache only the first block is pulled and
    // the kernels fetch the next run's rows a line per step of their loops (fetch_in_kernels below): a cold layer
    // ~51 -> ~38 us, 2048 tokens ~250 -> ~125 us (into L1; into L2 ~41 us; two runs ahead no better).
    uint32_t pulled = 0;
    // The pull of rows [at, at + pull_rows) of heads h0 .. h1 (`at` a multiple of pull_rows).
    auto pull_block = [&](const AttentionOperand& o, int64_t at, int64_t cols) {
      auto start = [&](int64_t pos) {
        return static_cast<const char*>(o.data) +
               (table[pos / bs] * o.batch_stride + h0 * o.head_stride + (pos % bs) * o.row_stride) * es;
      };
      const char* p = start(at);
      const int64_t bytes = ((nh - 1) * o.head_stride + (std::min(pull_rows, len - at) - 1) * o.row_stride + cols) * es;
      // (every block of the table is a whole block of the cache arrays, however many of its rows are used)
      const char* next = at + pull_rows < len ? start(at + pull_rows) : p;
      uint32_t t[4] = {};
      int64_t off = 0;
      for (; off + 256 <= bytes; off += 256)
        for (int i = 0; i < 4; ++i) {
          __builtin_prefetch(next + off + 64 * i, 0, 3);
          uint32_t x;
          std::memcpy(&x, p + off + 64 * i, sizeof x);
          t[i] += x;
        }
      for (; off < bytes; off += 64) {
        uint32_t x;
        std::memcpy(&x, p + off, sizeof x);
        t[0] += x;
      }
      pulled += t[0] + t[1] + t[2] + t[3];
    };
    auto row = [&](const AttentionOperand& o, int64_t hk, int64_t j, int64_t cols, std::vector<float>& tmp) -> const float* {
      const int64_t block = table[j / bs];
      const char* p = static_cast<const char*>(o.data) +
                      (block * o.batch_stride + hk * o.head_stride + (j % bs) * o.row_stride) * es;
      if (kv_elem == AttentionElem::kFloat32) return reinterpret_cast<const float*>(p);
      kern.widen(p, cols, kv_elem, tmp.data());
      return tmp.data();
    };
    // nk rows of head hk from position pos on, one after another: in the cache (float32 rows; ld its row stride), or
    // widened into buf (ld = cols).
    auto run_rows = [&](const AttentionOperand& o, int64_t hk, int64_t pos, int64_t nk, int64_t cols,
                        std::vector<float>& one, std::vector<float>& buf, int64_t& ld) -> const float* {
      if (kv_elem == AttentionElem::kFloat32) {
        ld = o.row_stride;
        return row(o, hk, pos, cols, one);
      }
      for (int64_t r = 0; r < nk; ++r) std::copy_n(row(o, hk, pos + r, cols, one), cols, buf.data() + r * cols);
      ld = cols;
      return buf.data();
    };
    // fn(j, pos, nk) for runs of up to 16 keys within one cache block. Each pass pulls in its own operand's block as it
    // comes to it: the value rows pulled during the key pass (for the value pass to find in L2) were mostly gone by
    // then, 70% of the value pass's time stalled on their loads (a cold 576-token layer ~67 -> ~60 us, interleaved).
    // With the block kernels on a float32 cache (`fetch_in_kernels`) only the first block is pulled: each kernel
    // fetches the next run's rows of its head while it computes, so the memory streams under the arithmetic rather
    // than before it.
    const bool fetch_in_kernels = kern.accumulate_block && kv_elem == AttentionElem::kFloat32;
    auto run_length = [&](int64_t j) {
      const int64_t pos = first + j;
      return std::min<int64_t>({16, n - j, bs - pos % bs});
    };
    auto for_each_run = [&](const AttentionOperand& o, int64_t cols, auto&& fn) {
      for (int64_t j = 0; j < n;) {
        const int64_t pos = first + j, nk = run_length(j);
        if (j == 0 || (!fetch_in_kernels && pos % pull_rows == 0)) pull_block(o, pos / pull_rows * pull_rows, cols);
        fn(j, pos, nk);
        j += nk;
      }
    };
    // The rows of head hk the run after the one at j reads (none past the last, or where the kernels do not fetch).
    auto next_run = [&](const AttentionOperand& o, int64_t hk, int64_t j, int64_t cols) {
      LinesAhead ahead;
      const int64_t next = j + run_length(j);
      if (!fetch_in_kernels || next >= n) return ahead;
      const int64_t rows = run_length(next);
      if (!paged) {   // dense rows interleave the heads: head hk fetches its share of the next run's rows (h0 .. h1)
        const int64_t i = hk - h0, r0 = rows * i / nh, r1 = rows * (i + 1) / nh;
        if (r1 == r0) return ahead;
        const char* p = reinterpret_cast<const char*>(row(o, h0, first + next + r0, cols, krow));
        const uintptr_t begin = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{63};
        const uintptr_t end = reinterpret_cast<uintptr_t>(p) + ((nh - 1) * o.head_stride + cols) * es;
        ahead.first = reinterpret_cast<const char*>(begin);
        ahead.lines = static_cast<int64_t>((end - begin + 63) / 64);
        ahead.rows = r1 - r0;
        ahead.row_bytes = o.row_stride * es;
        ahead.into_l1 = false;
        return ahead;
      }
      const char* p = reinterpret_cast<const char*>(row(o, hk, first + next, cols, krow));   // float32: in place
      const uintptr_t begin = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{63};
      const uintptr_t end = reinterpret_cast<uintptr_t>(p) + ((rows - 1) * o.row_stride + cols) * es;
      ahead.first = reinterpret_cast<const char*>(begin);
      ahead.lines = static_cast<int64_t>((end - begin + 63) / 64);
      return ahead;
    };
    if (kern.score_rows && group <= kern.row_score_heads) {   // each run's key rows in place (or widened)
      krows.resize(static_cast<size_t>(16 * a.head_dim));
      for_each_run(a.k, a.head_dim, [&](int64_t j, int64_t pos, int64_t nk) {
        for (int64_t hk = h0; hk < h1; ++hk) {
          int64_t ld;
          const float* k = run_rows(a.k, hk, pos, nk, a.head_dim, krow, krows, ld);
          kern.score_rows(query(hk), q_stride, group, k, ld, a.head_dim, a.scale, nk,
                          scores.data() + (hk - h0) * per_head + j, n, next_run(a.k, hk, j, a.head_dim));
        }
      });
    } else if (kern.score_block) {   // each run's key rows as a D x 16 tile
      ktile.resize(static_cast<size_t>(a.head_dim * 16));
      krows.resize(static_cast<size_t>(16 * a.head_dim));
      for_each_run(a.k, a.head_dim, [&](int64_t j, int64_t pos, int64_t nk) {
        for (int64_t hk = h0; hk < h1; ++hk) {
          int64_t ld;
          const float* k = run_rows(a.k, hk, pos, nk, a.head_dim, krow, krows, ld);
          TransposeBlock(k, ld, nk, a.head_dim, ktile.data(), 16);
          kern.score_block(query(hk), q_stride, group, ktile.data(), a.head_dim, a.scale, nk,
                           scores.data() + (hk - h0) * per_head + j, n, next_run(a.k, hk, j, a.head_dim));
        }
      });
    } else {
      for_each_run(a.k, a.head_dim, [&](int64_t j, int64_t pos, int64_t nk) {
        for (int64_t r = 0; r < nk; ++r)
          for (int64_t hk = h0; hk < h1; ++hk)
            kern.score(query(hk), q_stride, group, row(a.k, hk, pos + r, a.head_dim, krow), a.head_dim, a.scale,
                       scores.data() + (hk - h0) * per_head + j + r, n);
      });
    }
    // The unnormalised weights exp(s - max) go into the value pass; each output row is scaled by 1 / sum once.
    inverse.resize(static_cast<size_t>(nh * group));
    for (int64_t g = 0; g < nh * group; ++g) {   // (head, query head) rows of n scores, per_head = group * n apart
      float* s = scores.data() + g * n;
      if (a.softcap > 0.f)
        for (int64_t j = 0; j < n; ++j) s[j] = a.softcap * FastTanh(s[j] / a.softcap);
      const float peak = n ? MaxLanes(s, n) : 0.f;
      const float total = n ? kern.exp_shift_sum(s, s, n, peak) : 0.f;
      inverse[g] = n && total > 0.f ? 1.f / total : 0.f;
    }
    if (kern.accumulate_block) {
      vrows.resize(static_cast<size_t>(16 * a.v_dim));
      for_each_run(a.v, a.v_dim, [&](int64_t j, int64_t pos, int64_t nk) {
        for (int64_t hk = h0; hk < h1; ++hk) {
          int64_t ldv;
          const float* v = run_rows(a.v, hk, pos, nk, a.v_dim, vrow, vrows, ldv);
          kern.accumulate_block(acc.data() + (hk - h0) * group * a.v_dim, group, a.v_dim, v, ldv, nk,
                                scores.data() + (hk - h0) * per_head + j, n, next_run(a.v, hk, j, a.v_dim));
        }
      });
    } else {
      for_each_run(a.v, a.v_dim, [&](int64_t j, int64_t pos, int64_t nk) {
        for (int64_t r = 0; r < nk; ++r)
          for (int64_t hk = h0; hk < h1; ++hk)
            kern.accumulate(acc.data() + (hk - h0) * group * a.v_dim, group, a.v_dim, row(a.v, hk, pos + r, a.v_dim, vrow),
                            scores.data() + (hk - h0) * per_head + j + r, n);
      });
    }
    asm volatile("" : : "r"(pulled));   // the pulls' loads are kept
    for (int64_t hk = h0; hk < h1; ++hk)
      for (int64_t g = 0; g < group; ++g) {
        const int64_t row = (hk - h0) * group + g;
        const float* from = acc.data() + row * a.v_dim;
        float* to = static_cast<float*>(a.out) + b * (a.q_lens ? a.out_row_stride : a.out_batch_stride) +
                    (queries_as_group ? hk * a.out_head_stride + g * a.out_row_stride : (hk * group + g) * a.out_head_stride);
        const float inv = inverse[row];
        for (int64_t d = 0; d < a.v_dim; ++d) to[d] = from[d] * inv;
      }
  };
  // Tasks: (sequence, key/value head); a call's consecutive tasks of one sequence run together.
  auto run = [&](int64_t tb, int64_t te) {
    for (int64_t t = tb; t < te;) {
      const int64_t b = t / a.kv_heads, h0 = t % a.kv_heads, h1 = std::min(a.kv_heads, h0 + (te - t));
      heads(b, h0, h1);
      t += h1 - h0;
    }
  };
  const int64_t tasks = a.batch * a.kv_heads;
  // Dense rows hold every head's keys side by side: a thread's heads in one range read each row's part once, front to
  // back (one head a chunk read 256 bytes of every 3 KB row: two threads slower than one, cold).
  const int64_t grain = paged || !pool ? 1 : (tasks + pool->size() - 1) / pool->size();
  if (pool && tasks > 1) pool->ParallelFor(tasks, grain, run); else run(0, tasks);
}

}  // namespace lite
