// bf16 GEMM: see bf16_gemm.h. Register tile: 8 rows x 32 columns of float32 sums (16 zmm accumulators, enough
// independent chains to cover vdpbf16ps's latency on both FMA pipes); A rows are read in place (bf16, a depth pair
// broadcast per row), B comes in 32-column panels of depth pairs. Blocking: a task owns a column block and a row
// range; per depth block its B panels (<= 32 KiB each) stay in L1 while the A rows stream from L2.
#include "cpu/gemm/bf16_gemm.h"
#include "cpu/gemm/bf16_pairs.h"
#include "cpu/amx.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <type_traits>

#include "cpu/isa_dispatch.h"
#include "cpu/simd/vmath.h"
#include "cpu/weight_pages.h"

#ifdef LITE_X86_SIMD
#include <immintrin.h>
#endif
#ifdef LITE_ARM64_SIMD
#include <arm_neon.h>

#include "cpu/simd/neon_asm.h"
#include "cpu/simd/neon_mmla.h"
#endif

namespace lite {
namespace {

constexpr int kMR = 8;
constexpr int64_t kKC = 512;          // depth per block (256 pairs): a 32-column B panel is 32 KiB
constexpr int64_t kNC = 128;          // columns per task block (4 panels)
constexpr int64_t kMCSub = 256;       // rows of A streamed per B block inside a task (L2)
constexpr int64_t kAmxMaxKC = 8192;   // AMX: deepest product done in one depth block
constexpr int64_t kAmxRowBlockBytes = 1 << 20;

// In-register epilogue of the last depth block: bias (per row or per column), residual, ReLU (1) / ReLU6 (2) /
// GELU (3, erf form) / SiLU (4), then the multiplier (a SwiGLU up projection's gate).
struct TileEpilogue {
  const float* row_bias = nullptr;   // at the tile's first row
  const float* col_bias = nullptr;   // at the tile's first column
  const float* residual = nullptr;   // at the tile's origin
  int64_t ld_residual = 0;
  int clamp = 0;
  const float* multiplier = nullptr;   // at the tile's origin
  int64_t ld_multiplier = 0;
};

// Where A's value (row i, depth k) sits in AMX tile order: 32-row blocks, each a run of `steps` steps, each step the
// two 16-row tiles (16 rows x 32 values, 1 KiB) of its depth range side by side: one sequential stream per row tile.
inline int64_t AmxTileIndex(int64_t i, int64_t k, int64_t steps) {
  return (i / 32) * steps * 1024 + (k / 32) * 1024 + ((i % 32) / 16) * 512 + (i % 16) * 32 + k % 32;
}

using TileFn = void (*)(int64_t, const uint16_t*, int64_t, const uint16_t*, float*, int64_t, int, bool,
                        const TileEpilogue*);

#ifdef LITE_X86_SIMD
// The first n lanes of a 16-lane mask (n clamped to [0, 16]).
inline __mmask16 FirstLanes(int64_t n) {
  return n >= 16 ? 0xFFFF : n <= 0 ? 0 : static_cast<__mmask16>((1u << n) - 1);
}

// One row of a tile's 32 column sums to C: plus C (accumulate), then the epilogue (the last depth block), stored
// under the column masks.
__attribute__((target("avx512f,avx512bw,avx512vl"), always_inline)) inline void FinishRow(
    __m512 lo, __m512 hi, int64_t r, float* c, int64_t ldc, __mmask16 m0, __mmask16 m1, __m512 cb0, __m512 cb1,
    bool accumulate, const TileEpilogue* ep) {
  float* cr = c + r * ldc;
  if (accumulate) {
    lo = _mm512_add_ps(lo, _mm512_maskz_loadu_ps(m0, cr));
    hi = _mm512_add_ps(hi, _mm512_maskz_loadu_ps(m1, cr + 16));
  }
  if (ep) {
    if (ep->row_bias) {
      const __m512 rb = _mm512_set1_ps(ep->row_bias[r]);
      lo = _mm512_add_ps(lo, rb), hi = _mm512_add_ps(hi, rb);
    }
    if (ep->col_bias) lo = _mm512_add_ps(lo, cb0), hi = _mm512_add_ps(hi, cb1);
    if (ep->residual) {
      const float* res = ep->residual + r * ep->ld_residual;
      lo = _mm512_add_ps(lo, _mm512_maskz_loadu_ps(m0, res));
      hi = _mm512_add_ps(hi, _mm512_maskz_loadu_ps(m1, res + 16));
    }
    if (ep->clamp == 3) {
      lo = FastGeluVec(lo), hi = FastGeluVec(hi);
    } else if (ep->clamp == 4) {
      lo = FastSiluVec(lo), hi = FastSiluVec(hi);
    } else if (ep->clamp) {
      lo = _mm512_max_ps(_mm512_setzero_ps(), lo), hi = _mm512_max_ps(_mm512_setzero_ps(), hi);
      if (ep->clamp == 2) lo = _mm512_min_ps(_mm512_set1_ps(6.f), lo), hi = _mm512_min_ps(_mm512_set1_ps(6.f), hi);
    }
    if (ep->multiplier) {
      const float* g = ep->multiplier + r * ep->ld_multiplier;
      lo = _mm512_mul_ps(lo, _mm512_maskz_loadu_ps(m0, g));
      hi = _mm512_mul_ps(hi, _mm512_maskz_loadu_ps(m1, g + 16));
    }
  }
  _mm512_mask_storeu_ps(cr, m0, lo);
  _mm512_mask_storeu_ps(cr + 16, m1, hi);
}

// R rows x 32 columns (cols <= 32 stored, masked) over `pairs` depth pairs. a: row r at a + r * lda (bf16 values,
// the pair p at 2p); b: the panel's pairs, 64 values each.
template <int R>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void Tile(int64_t pairs, const uint16_t* a,
                                                                            int64_t lda, const uint16_t* b, float* c,
                                                                            int64_t ldc, int cols, bool accumulate,
                                                                            const TileEpilogue* ep) {
  // Every loop over r is unrolled: with an index known at compile time lo/hi stay in registers (a rolled epilogue
  // loop put them on the stack, zeroed there on every call: 0.6x the time of shallow 1x1 Convs).
  __m512 lo[R], hi[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) lo[r] = hi[r] = _mm512_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + p * 64);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + p * 64 + 32);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      int32_t v;
      std::memcpy(&v, a + r * lda + 2 * p, 4);
      const __m512bh av = (__m512bh)_mm512_set1_epi32(v);
      lo[r] = _mm512_dpbf16_ps(lo[r], av, b0);
      hi[r] = _mm512_dpbf16_ps(hi[r], av, b1);
    }
  }
  const __mmask16 m0 = FirstLanes(cols), m1 = FirstLanes(cols - 16);
  __m512 cb0 = _mm512_setzero_ps(), cb1 = cb0;
  if (ep && ep->col_bias) cb0 = _mm512_maskz_loadu_ps(m0, ep->col_bias), cb1 = _mm512_maskz_loadu_ps(m1, ep->col_bias + 16);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) FinishRow(lo[r], hi[r], r, c, ldc, m0, m1, cb0, cb1, accumulate, ep);
}

// AVX512-FP16 (HalfFormat::kFp16 on x86): R rows x 32 columns over `pairs` depth pairs, the panels in the bf16
// layout (column j's depths k and k + 1 side by side). Each row's pair is broadcast as one 32-bit value and
// vfmadd231ph multiplies it into 32 float16 lanes: lane 2j sums column j's even depths, lane 2j + 1 its odd ones.
// Float16 sums hold at most kFp16Run products each (the lanes' rounding, 2^-11 a step, stays within ~64 steps);
// each run is then converted and added into float32 sums (in L1: 2R accumulators and the B vectors fill the
// registers), whose even and odd lanes are added when the tile ends. 2R independent FMA chains cover vfmadd231ph's
// latency on both pipes.
constexpr int64_t kFp16Run = 64;

template <int R>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512fp16"))) void Fp16Tile(int64_t pairs, const uint16_t* a,
                                                                               int64_t lda, const uint16_t* b,
                                                                               float* c, int64_t ldc, int cols,
                                                                               bool accumulate,
                                                                               const TileEpilogue* ep) {
  alignas(64) float total[R][64];   // per row: 32 lanes of columns 0-15, then 32 of 16-31 (even / odd depths)
  for (int64_t p0 = 0; p0 < pairs; p0 += kFp16Run) {
    const int64_t p1 = std::min(pairs, p0 + kFp16Run);
    __m512h acc[R][2];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ph();
    for (int64_t p = p0; p < p1; ++p) {
      const __m512h b0 = _mm512_castsi512_ph(_mm512_loadu_si512(b + p * 64));
      const __m512h b1 = _mm512_castsi512_ph(_mm512_loadu_si512(b + p * 64 + 32));
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m512h av = BroadcastHalfPair(a + r * lda + 2 * p);
        acc[r][0] = _mm512_fmadd_ph(av, b0, acc[r][0]);
        acc[r][1] = _mm512_fmadd_ph(av, b1, acc[r][1]);
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
      for (int h = 0; h < 2; ++h) {
        const __m512i bits = _mm512_castph_si512(acc[r][h]);
        const __m512 x0 = _mm512_cvtxph_ps(_mm256_castsi256_ph(_mm512_castsi512_si256(bits)));
        const __m512 x1 = _mm512_cvtxph_ps(_mm256_castsi256_ph(_mm512_extracti64x4_epi64(bits, 1)));
        float* t = total[r] + 32 * h;
        if (p0 == 0) {
          _mm512_store_ps(t, x0), _mm512_store_ps(t + 16, x1);
        } else {
          _mm512_store_ps(t, _mm512_add_ps(x0, _mm512_load_ps(t)));
          _mm512_store_ps(t + 16, _mm512_add_ps(x1, _mm512_load_ps(t + 16)));
        }
      }
  }
  const __mmask16 m0 = FirstLanes(cols), m1 = FirstLanes(cols - 16);
  __m512 cb0 = _mm512_setzero_ps(), cb1 = cb0;
  if (ep && ep->col_bias) cb0 = _mm512_maskz_loadu_ps(m0, ep->col_bias), cb1 = _mm512_maskz_loadu_ps(m1, ep->col_bias + 16);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const float* t = total[r];
    FinishRow(AddDepthLanes(_mm512_load_ps(t), _mm512_load_ps(t + 16)),
              AddDepthLanes(_mm512_load_ps(t + 32), _mm512_load_ps(t + 48)), r, c, ldc, m0, m1, cb0, cb1, accumulate,
              ep);
  }
}

// Two rows of 16 floats (depths k and k + 1) as 16 interleaved float16 pairs (the layout of Bf16Pairs), each value
// rounded to nearest even (vcvtps2ph: AVX512F).
__attribute__((target("avx512f,avx512bw,avx512vl"), always_inline)) inline __m512i Fp16Pairs(__m512 r0, __m512 r1) {
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21, 5,
                                       20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i both =
      _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtps_ph(r0, kRound)), _mm512_cvtps_ph(r1, kRound), 1);
  return _mm512_permutexvar_epi16(idx, both);
}

// Converts n floats (times alpha) to float16 (nearest even), zero-filling up to n_padded.
__attribute__((target("avx512f,avx512bw,avx512vl"))) void ConvertRowFp16(const float* x, int64_t n, int64_t n_padded,
                                                                         float alpha, uint16_t* out) {
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const __m512 s = _mm512_set1_ps(alpha);
  for (int64_t i = 0; i < n_padded; i += 16) {
    const __mmask16 m = FirstLanes(n - i), mw = FirstLanes(n_padded - i);
    __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    if (alpha != 1.f) v = _mm512_mul_ps(v, s);
    _mm256_mask_storeu_epi16(out + i, mw, _mm512_cvtps_ph(v, kRound));
  }
}

// AMX (TDPBF16PS): 32 rows x 32 columns as four 16 x 16 float32 tiles (tmm0-3), two A tiles of 16 rows x 16 depth
// pairs (tmm4-5) and two B tiles of 16 pairs x 16 columns (tmm6-7). B's tiles are the two 16-column halves of a
// Bf16PanelsB panel read in place (a pair row is 128 bytes: columns 0-15's pairs, then 16-31's: the tile layout AMX
// wants), so the weights need no second packing. A comes in tile order (AmxTileIndex), made when the activations are
// converted: a row tile's A is one sequential stream (with the rows read in place and 512-deep blocks BERT-base's
// products took 50.7 ms, in tile order over the whole depth 37.5). Every thread loads the configuration at the start
// of its run of tasks and releases the tiles at its end.

// The products of `steps` steps of 16 depth pairs: a at 1024 values per step (the row tile's two A tiles), b at 16
// pair rows (128 bytes each) per step. kTwo: rows 16-31 too (tmm5, tmm2-3).
template <bool kTwo>
__attribute__((always_inline)) inline void AmxSteps(int64_t steps, const uint16_t* a, const uint16_t* b,
                                                    const char* fetch = nullptr, int64_t fetch_lines = 0) {
  const int64_t per_step = steps ? (fetch_lines + steps - 1) / steps : 0;
  for (int64_t s = 0; s < steps; ++s) {
    for (int64_t l = s * per_step; l < std::min(fetch_lines, (s + 1) * per_step); ++l)
      __builtin_prefetch(fetch + l * 64, 0, 2);
    AmxStep<AmxDot::kBf16>(a + s * 1024, a + s * 1024 + 512, 64, b + s * 16 * 64, b + s * 16 * 64 + 32, 128, kTwo);
  }
}

// `rows` (1-32) rows x 32 columns over `pairs` depth pairs from A in tile order (a: this row tile at this depth
// block), B panel b, with Tile<R>'s epilogue. A's tiles past the depth are zero (ToTileOrder pads); a depth not a
// multiple of 16 pairs takes its last step's B from a zero-padded copy (no reads past B's block).
template <bool kTwo>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void AmxTileRows(
    int64_t rows, int64_t pairs, const uint16_t* a, const uint16_t* b, float* c, int64_t ldc,
    int cols, bool accumulate, const TileEpilogue* ep, const char* fetch, int64_t fetch_lines) {
  AmxZeroSums();
  const int64_t steps = pairs / 16, left = pairs % 16;
  // The share of the next panel this tile fetches into L2 (its first tile would wait on memory), a few lines per step:
  // in one burst the prefetches held the tile loads up.
  AmxSteps<kTwo>(steps, a, b, fetch, fetch ? fetch_lines : 0);
  if (left) {
    alignas(64) uint16_t b_rest[16 * 64];
    std::memcpy(b_rest, b + steps * 16 * 64, left * 128);
    std::memset(b_rest + left * 64, 0, (16 - left) * 128);
    AmxSteps<kTwo>(1, a + steps * 1024, b_rest);
  }
  alignas(64) float sums[32 * 32];
  AmxStoreSums(sums, kTwo);
  const __mmask16 m0 = FirstLanes(cols), m1 = FirstLanes(cols - 16);
  __m512 cb0 = _mm512_setzero_ps(), cb1 = cb0;
  if (ep && ep->col_bias) cb0 = _mm512_maskz_loadu_ps(m0, ep->col_bias), cb1 = _mm512_maskz_loadu_ps(m1, ep->col_bias + 16);
  for (int64_t r = 0; r < rows; ++r)
    FinishRow(_mm512_load_ps(sums + r * 32), _mm512_load_ps(sums + r * 32 + 16), r, c, ldc, m0, m1, cb0, cb1,
              accumulate, ep);
}

void AmxTile(int64_t rows, int64_t pairs, const uint16_t* a, const uint16_t* b, float* c, int64_t ldc, int cols,
             bool accumulate, const TileEpilogue* ep, const char* fetch, int64_t fetch_lines) {
  if (rows > 16) return AmxTileRows<true>(rows, pairs, a, b, c, ldc, cols, accumulate, ep, fetch, fetch_lines);
  AmxTileRows<false>(rows, pairs, a, b, c, ldc, cols, accumulate, ep, fetch, fetch_lines);
}

// Converts n floats (times alpha) to bf16, zero-filling up to n_padded.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void ConvertRow(const float* x, int64_t n,
                                                                                  int64_t n_padded, float alpha,
                                                                                  uint16_t* out) {
  const __m512 s = _mm512_set1_ps(alpha);
  for (int64_t i = 0; i < n_padded; i += 32) {
    const int64_t left = n - i;
    const __mmask16 m0 = FirstLanes(left), m1 = FirstLanes(left - 16);
    __m512 v0 = _mm512_maskz_loadu_ps(m0, x + i), v1 = _mm512_maskz_loadu_ps(m1, x + i + 16);
    if (alpha != 1.f) v0 = _mm512_mul_ps(v0, s), v1 = _mm512_mul_ps(v1, s);
    const __m512i h = (__m512i)_mm512_cvtne2ps_pbh(v1, v0);
    const int64_t w = std::min<int64_t>(32, n_padded - i);
    const __mmask32 mw = w >= 32 ? 0xFFFFFFFFu : static_cast<__mmask32>((1u << w) - 1);
    _mm512_mask_storeu_epi16(out + i, mw, h);
  }
}

// Row i of A (K values, times alpha) into tile order: group i / 16, row i % 16 of each 32-value step, zeros past K.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void ToTileOrder(const float* x, int64_t K,
                                                                                   float alpha, int64_t i,
                                                                                   uint16_t* tiles) {
  const int64_t steps = (K + 31) / 32;
  uint16_t* dst = tiles + AmxTileIndex(i, 0, steps);
  for (int64_t s = 0; s < steps; ++s) ConvertRow(x + s * 32, std::min<int64_t>(32, K - s * 32), 32, alpha, dst + s * 1024);
}

// Two rows of 16 floats as 16 interleaved pairs of format F (the panels' layout on x86 for both formats).
template <HalfFormat F>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"), always_inline)) inline __m512i HalfPairs(__m512 r0,
                                                                                                     __m512 r1) {
  if constexpr (F == HalfFormat::kFp16) {
    return Fp16Pairs(r0, r1);
  } else {
    return Bf16Pairs(r0, r1);
  }
}

// One B block from a float32 BPacker's panels (kc x 16 each, zero-padded): 16-column panels 2q and 2q + 1 become
// the 32-column bf16 (float16) panel q. (The float16 build runs no bf16 instruction: AVX512-FP16 CPUs need not
// have them.)
template <HalfFormat F>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void PanelsFromF32(const float* f32, int64_t kc,
                                                                                     int64_t panels16,
                                                                                     uint16_t* dst) {
  const int64_t pairs = (kc + 1) / 2;
  for (int64_t q = 0; q < (panels16 + 1) / 2; ++q) {
    for (int half = 0; half < 2; ++half) {
      const int64_t p16 = 2 * q + half;
      uint16_t* out = dst + q * pairs * 64 + half * 32;
      if (p16 >= panels16) {
        for (int64_t kp = 0; kp < pairs; ++kp) std::memset(out + kp * 64, 0, 32 * sizeof(uint16_t));
        continue;
      }
      const float* src = f32 + p16 * kc * 16;
      for (int64_t kp = 0; kp < pairs; ++kp) {
        const __m512 r0 = _mm512_loadu_ps(src + 2 * kp * 16);
        const __m512 r1 = 2 * kp + 1 < kc ? _mm512_loadu_ps(src + (2 * kp + 1) * 16) : _mm512_setzero_ps();
        _mm512_storeu_si512(out + kp * 64, HalfPairs<F>(r0, r1));
      }
    }
  }
}

// One B block read straight from a K x N matrix: rows [k0, k0 + kc), columns [n0, n0 + nc). Depth pairs outer:
// each pair of source rows is read as two contiguous runs of nc floats (not 16 floats from each of kc rows, a new
// page per load), which the hardware prefetcher follows.
template <HalfFormat F>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void PanelsFromMatrix(const float* B, int64_t ldb,
                                                                                        int64_t K, int64_t k0,
                                                                                        int64_t kc, int64_t n0,
                                                                                        int64_t nc, uint16_t* dst) {
  const int64_t pairs = (kc + 1) / 2, halves = (nc + 15) / 16, panels = (nc + kBf16NR - 1) / kBf16NR;
  for (int64_t kp = 0; kp < pairs; ++kp) {
    const int64_t k = k0 + 2 * kp;
    const bool second = 2 * kp + 1 < kc && k + 1 < K;
    const float* row = B + k * ldb + n0;
    uint16_t* out = dst + kp * 64;
    for (int64_t h = 0; h < halves; ++h) {
      const __mmask16 m = FirstLanes(nc - h * 16);
      const __m512 r0 = _mm512_maskz_loadu_ps(m, row + h * 16);
      const __m512 r1 = second ? _mm512_maskz_loadu_ps(m, row + ldb + h * 16) : _mm512_setzero_ps();
      _mm512_storeu_si512(out + (h / 2) * pairs * 64 + (h % 2) * 32, HalfPairs<F>(r0, r1));
    }
    if (halves % 2) _mm512_storeu_si512(out + (panels - 1) * pairs * 64 + 32, _mm512_setzero_si512());
  }
}
#endif

#ifdef LITE_ARM64_SIMD
typedef float v4sf __attribute__((vector_size(16)));

// The tile's epilogue on float32 sums of RR rows x 16 columns (sums[r][j], then the stored C columns from col):
// C's old values (accumulate), bias, residual, ReLU (1) / ReLU6 (2) / GELU (3) / SiLU (4), multiplier.
void FinishNeonTile(float (*sums)[16], int rows, int64_t col, int cols, float* c, int64_t ldc, bool accumulate,
                    const TileEpilogue* ep) {
  for (int r = 0; r < rows; ++r) {
    float* cr = c + r * ldc + col;
    for (int j = 0; j < cols; ++j) {
      float y = sums[r][j] + (accumulate ? cr[j] : 0.f);
      if (ep) {
        if (ep->row_bias) y += ep->row_bias[r];
        if (ep->col_bias) y += ep->col_bias[col + j];
        if (ep->residual) y += ep->residual[r * ep->ld_residual + col + j];
        sums[r][j] = y;
      } else {
        cr[j] = y;
      }
    }
    if (!ep) continue;
    for (int j = 0; j < 16; j += 4) {   // the activation on vectors (the padding lanes are never stored)
      v4sf v;
      std::memcpy(&v, &sums[r][j], sizeof v);
      if (ep->clamp == 3) {
        v = FastGeluVec(v);
      } else if (ep->clamp == 4) {
        v = FastSiluVec(v);
      } else if (ep->clamp) {
        v = v < 0.f ? v4sf{} : v;
        if (ep->clamp == 2) v = v > 6.f ? v4sf{} + 6.f : v;
      }
      std::memcpy(&sums[r][j], &v, sizeof v);
    }
    for (int j = 0; j < cols; ++j)
      cr[j] = ep->multiplier ? sums[r][j] * ep->multiplier[r * ep->ld_multiplier + col + j] : sums[r][j];
  }
}

// The 4-row block's sums over `quads` (> 0) steps of four depth pairs (4 x 8 bytes of each A row; four 64-byte
// half-panel rows of B, 128 bytes apart), stored to sums (4 x 16 floats): 64 bfdot by element a step, accumulators
// in v16-v31. In assembly because GCC 12 hoisted a step's sixteen B loads and spilled accumulators (52 stack accesses
// per 128 bfdot).
#define LITE_BFDOT_PAIR(lane) \
  "ld1 {v4.8h, v5.8h, v6.8h, v7.8h}, [%[b]], %[stride]\n\t" LITE_ASM_DOT_4X4("bfdot", "8h", "2h", lane)
__attribute__((target("arch=armv8.2-a+bf16"))) void Bf16Quads4(int64_t quads, const uint16_t* a, int64_t lda,
                                                                const uint16_t* b, float* sums) {
  const uint16_t *a0 = a, *a1 = a + lda, *a2 = a + 2 * lda, *a3 = a + 3 * lda;
  const int64_t stride = 128;
  asm volatile(
      LITE_ASM_ZERO_V16_V31
      "1:\n\t"
      "ld1 {v0.8h}, [%[a0]], #16\n\t ld1 {v1.8h}, [%[a1]], #16\n\t"
      "ld1 {v2.8h}, [%[a2]], #16\n\t ld1 {v3.8h}, [%[a3]], #16\n\t"
      LITE_BFDOT_PAIR(0) LITE_BFDOT_PAIR(1) LITE_BFDOT_PAIR(2) LITE_BFDOT_PAIR(3)
      "subs %[n], %[n], #1\n\t"
      "bne 1b\n\t"
      LITE_ASM_STORE_V16_V31("4s")
      : [a0] "+r"(a0), [a1] "+r"(a1), [a2] "+r"(a2), [a3] "+r"(a3), [b] "+r"(b), [n] "+r"(quads), [out] "+r"(sums)
      : [stride] "r"(stride)
      : "v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v16", "v17", "v18", "v19", "v20", "v21", "v22", "v23",
        "v24", "v25", "v26", "v27", "v28", "v29", "v30", "v31", "cc", "memory");
}
#undef LITE_BFDOT_PAIR

// ARMv8.6 BF16: RR (<= 4) rows x 16 columns (half `half` of a 32-column panel) over `pairs` depth pairs, bfdot by
// element: a B vector holds 4 columns x one pair, a row's register 4 pairs, each lane one. 16 accumulators, 4 B and
// 4 A registers. bfdot's products are exact and its sums float32 (round to odd inside an instruction's pair sum,
// where vdpbf16ps rounds to nearest: a last-bit difference per pair at most).
template <int RR>
__attribute__((target("arch=armv8.2-a+bf16"))) void NeonBf16Rows(int64_t pairs, const uint16_t* a, int64_t lda,
                                                                  const uint16_t* b, int half, float (*sums)[16]) {
  float32x4_t acc[RR][4];
  for (int r = 0; r < RR; ++r)
    for (int q = 0; q < 4; ++q) acc[r][q] = vdupq_n_f32(0.f);
  const uint16_t* bp = b + half * 32;
  int64_t p = 0;
  if constexpr (RR == 4) {
    if (pairs >= 4) {
      Bf16Quads4(pairs / 4, a, lda, bp, &sums[0][0]);
      for (int r = 0; r < 4; ++r)
        for (int q = 0; q < 4; ++q) acc[r][q] = vld1q_f32(&sums[r][4 * q]);
      p = pairs / 4 * 4;
    }
  }
  for (; RR < 4 && p + 4 <= pairs; p += 4) {
    bfloat16x8_t av[RR];
    for (int r = 0; r < RR; ++r) av[r] = vreinterpretq_bf16_u16(vld1q_u16(a + r * lda + 2 * p));
#define LITE_BF16_PAIR(pp)                                                                                     \
  {                                                                                                            \
    bfloat16x8_t bv[4];                                                                                        \
    for (int q = 0; q < 4; ++q) bv[q] = vreinterpretq_bf16_u16(vld1q_u16(bp + (p + pp) * 64 + 8 * q));         \
    for (int q = 0; q < 4; ++q)                                                                                \
      for (int r = 0; r < RR; ++r) acc[r][q] = vbfdotq_laneq_f32(acc[r][q], bv[q], av[r], pp);                 \
  }
    LITE_BF16_PAIR(0) LITE_BF16_PAIR(1) LITE_BF16_PAIR(2) LITE_BF16_PAIR(3)
#undef LITE_BF16_PAIR
  }
  for (; p < pairs; ++p) {
    bfloat16x8_t bv[4];
    for (int q = 0; q < 4; ++q) bv[q] = vreinterpretq_bf16_u16(vld1q_u16(bp + p * 64 + 8 * q));
    for (int r = 0; r < RR; ++r) {
      uint32_t pair;
      std::memcpy(&pair, a + r * lda + 2 * p, 4);
      const bfloat16x8_t ar = vreinterpretq_bf16_u32(vdupq_n_u32(pair));
      for (int q = 0; q < 4; ++q) acc[r][q] = vbfdotq_laneq_f32(acc[r][q], bv[q], ar, 0);
    }
  }
  for (int r = 0; r < RR; ++r)
    for (int q = 0; q < 4; ++q) vst1q_f32(&sums[r][4 * q], acc[r][q]);
}

// ARMv8.2 FP16 (HalfFormat::kFp16): RR (<= 4) rows x 16 columns over `pairs` depth pairs. A pair's panel row holds
// the even depth's 32 columns, then the odd's (PairSlot): this half's 16 columns of one depth are two vectors of 8
// halves, multiplied by one A value each (fmla .8h by element, the A row's next four pairs in one register, lanes 0-7).
// The float16 sums (8 columns a register) are added into float32 every 32 pairs: float16 sums of at most 64
// products, float32 beyond. 8 accumulators, 4 B and 4 A registers.
// One pair's two depths (its panel row at `row`: this half's 16 columns of the even depth, then, 32 halves on, of the
// odd one) against lanes 2 PP and 2 PP + 1 of the rows' registers.
template <int RR, int PP>
__attribute__((target("arch=armv8.2-a+fp16"), always_inline)) inline void Fp16Pair(const uint16_t* row,
                                                                                  const float16x8_t (&ar)[RR],
                                                                                  float16x8_t (&acc)[RR][2]) {
  const float16x8_t e0 = vreinterpretq_f16_u16(vld1q_u16(row)), e1 = vreinterpretq_f16_u16(vld1q_u16(row + 8));
  const float16x8_t o0 = vreinterpretq_f16_u16(vld1q_u16(row + 32)), o1 = vreinterpretq_f16_u16(vld1q_u16(row + 40));
  for (int r = 0; r < RR; ++r) {
    acc[r][0] = vfmaq_laneq_f16(acc[r][0], e0, ar[r], 2 * PP);
    acc[r][1] = vfmaq_laneq_f16(acc[r][1], e1, ar[r], 2 * PP);
    acc[r][0] = vfmaq_laneq_f16(acc[r][0], o0, ar[r], 2 * PP + 1);
    acc[r][1] = vfmaq_laneq_f16(acc[r][1], o1, ar[r], 2 * PP + 1);
  }
}

// The 4-row block's float16 sums over `quads` (> 0) steps of four depth pairs, stored to acc (rows x two vectors of 8
// halves): per step each row's next 8 halves in one register (v0-v3), per pair the even and odd depth's 16 columns
// (v4-v7), 16 fmla .8h by element, the even depths' into v16-v23 and the odd ones' into v24-v31 (added at the end):
// 16 accumulator chains, which a core of four FMA pipes needs (Neoverse V1's model: 32 cycles a step with 8, 16 with
// 16). In assembly: GCC's build of Fp16Pair spent 53 other instructions per 64 fmla.
#define LITE_FP16_PAIR(even, odd)                                                                              \
  "ld1 {v4.8h, v5.8h}, [%[b]]\n\t ldr q6, [%[b], #64]\n\t ldr q7, [%[b], #80]\n\t add %[b], %[b], #128\n\t"   \
  "fmla v16.8h, v4.8h, v0.h[" #even "]\n\t fmla v17.8h, v5.8h, v0.h[" #even "]\n\t"                         \
  "fmla v18.8h, v4.8h, v1.h[" #even "]\n\t fmla v19.8h, v5.8h, v1.h[" #even "]\n\t"                         \
  "fmla v20.8h, v4.8h, v2.h[" #even "]\n\t fmla v21.8h, v5.8h, v2.h[" #even "]\n\t"                         \
  "fmla v22.8h, v4.8h, v3.h[" #even "]\n\t fmla v23.8h, v5.8h, v3.h[" #even "]\n\t"                         \
  "fmla v24.8h, v6.8h, v0.h[" #odd "]\n\t fmla v25.8h, v7.8h, v0.h[" #odd "]\n\t"                           \
  "fmla v26.8h, v6.8h, v1.h[" #odd "]\n\t fmla v27.8h, v7.8h, v1.h[" #odd "]\n\t"                           \
  "fmla v28.8h, v6.8h, v2.h[" #odd "]\n\t fmla v29.8h, v7.8h, v2.h[" #odd "]\n\t"                           \
  "fmla v30.8h, v6.8h, v3.h[" #odd "]\n\t fmla v31.8h, v7.8h, v3.h[" #odd "]\n\t"
__attribute__((target("arch=armv8.2-a+fp16"))) void Fp16Quads4(int64_t quads, const uint16_t* a, int64_t lda,
                                                                const uint16_t* b, uint16_t* acc) {
  const uint16_t *a0 = a, *a1 = a + lda, *a2 = a + 2 * lda, *a3 = a + 3 * lda;
  uint16_t* out = acc;
  asm volatile(
      LITE_ASM_ZERO_V16_V31
      "1:\n\t"
      "ldr q0, [%[a0]], #16\n\t ldr q1, [%[a1]], #16\n\t ldr q2, [%[a2]], #16\n\t ldr q3, [%[a3]], #16\n\t"
      LITE_FP16_PAIR(0, 1) LITE_FP16_PAIR(2, 3) LITE_FP16_PAIR(4, 5) LITE_FP16_PAIR(6, 7)
      "subs %[n], %[n], #1\n\t"
      "bne 1b\n\t"
      LITE_ASM_FOLD_V24_V31_8H
      LITE_ASM_STORE4("v16", "v17", "v18", "v19", "8h") LITE_ASM_STORE4("v20", "v21", "v22", "v23", "8h")
      : [a0] "+r"(a0), [a1] "+r"(a1), [a2] "+r"(a2), [a3] "+r"(a3), [b] "+r"(b), [n] "+r"(quads), [out] "+r"(out)
      :
      : "v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v16", "v17", "v18", "v19", "v20", "v21", "v22", "v23", "v24",
        "v25", "v26", "v27", "v28", "v29", "v30", "v31", "cc", "memory");
}
#undef LITE_FP16_PAIR

template <int RR>
__attribute__((target("arch=armv8.2-a+fp16"))) void NeonFp16Rows(int64_t pairs, const uint16_t* a, int64_t lda,
                                                                  const uint16_t* b, int half, float (*sums)[16]) {
  constexpr int64_t kRun = 32;   // pairs summed in float16 before float32 takes over
  float32x4_t total[RR][4];
  for (int r = 0; r < RR; ++r)
    for (int q = 0; q < 4; ++q) total[r][q] = vdupq_n_f32(0.f);
  const uint16_t* bp = b + half * 16;
  for (int64_t p0 = 0; p0 < pairs; p0 += kRun) {
    const int64_t p1 = std::min(pairs, p0 + kRun);
    float16x8_t acc[RR][2];
    for (int r = 0; r < RR; ++r) acc[r][0] = acc[r][1] = vreinterpretq_f16_u16(vdupq_n_u16(0));
    int64_t p = p0;
    if constexpr (RR == 4) {
      if (p1 - p0 >= 4) {
        alignas(16) uint16_t halves[4 * 2 * 8];
        Fp16Quads4((p1 - p0) / 4, a + 2 * p0, lda, bp + p0 * 64, halves);
        for (int r = 0; r < 4; ++r)
          for (int h = 0; h < 2; ++h) acc[r][h] = vreinterpretq_f16_u16(vld1q_u16(halves + (r * 2 + h) * 8));
        p = p0 + (p1 - p0) / 4 * 4;
      }
    }
    for (; RR < 4 && p + 4 <= p1; p += 4) {
      float16x8_t ar[RR];
      for (int r = 0; r < RR; ++r) ar[r] = vreinterpretq_f16_u16(vld1q_u16(a + r * lda + 2 * p));
      Fp16Pair<RR, 0>(bp + p * 64, ar, acc);
      Fp16Pair<RR, 1>(bp + (p + 1) * 64, ar, acc);
      Fp16Pair<RR, 2>(bp + (p + 2) * 64, ar, acc);
      Fp16Pair<RR, 3>(bp + (p + 3) * 64, ar, acc);
    }
    for (; p < p1; ++p) {
      float16x8_t ar[RR];
      for (int r = 0; r < RR; ++r) {
        uint32_t two;
        std::memcpy(&two, a + r * lda + 2 * p, 4);
        ar[r] = vreinterpretq_f16_u32(vdupq_n_u32(two));
      }
      Fp16Pair<RR, 0>(bp + p * 64, ar, acc);
    }
    for (int r = 0; r < RR; ++r)
      for (int h = 0; h < 2; ++h) {
        total[r][2 * h] = vaddq_f32(total[r][2 * h], vcvt_f32_f16(vget_low_f16(acc[r][h])));
        total[r][2 * h + 1] = vaddq_f32(total[r][2 * h + 1], vcvt_high_f32_f16(acc[r][h]));
      }
  }
  for (int r = 0; r < RR; ++r)
    for (int q = 0; q < 4; ++q) vst1q_f32(&sums[r][4 * q], total[r][q]);
}

// ARMv8.6 BF16 on B in the bfmmla layout (Bf16PanelsB::mmla): RR (<= 4) rows x 16 columns (half `half` of a
// 32-column panel) over `pairs` depth pairs. Per two pairs: 8 B vectors (column pairs, 4 depths each), each pair of
// rows' 4 depths one A vector (an odd last row pairs with itself, its copy's sums dropped), bfmmla's 2 x 2 sums
// [r0c0, r0c1, r1c0, r1c1] unzipped into rows at the end. bfmmla does 16 multiply-adds where bfdot by element does 8,
// and sums each output's two pairs one after the other as bfdot would: the same sums bit for bit. An odd last pair
// (the pair layout) runs on bfdot after the unzip.
template <int RR>
__attribute__((target("arch=armv8.2-a+bf16"))) void NeonBf16MmlaRows(int64_t pairs, const uint16_t* a, int64_t lda,
                                                                      const uint16_t* b, int half, float (*sums)[16]) {
  constexpr int P = (RR + 1) / 2;   // pairs of rows
  const uint16_t* row[2 * P];
  for (int r = 0; r < 2 * P; ++r) row[r] = a + std::min(r, RR - 1) * lda;
  float32x4_t acc[P][8];
  for (int p = 0; p < P; ++p)
    for (int j = 0; j < 8; ++j) acc[p][j] = vdupq_n_f32(0.f);
  const int64_t quads = pairs / 2;
  const uint16_t* bq = b + half * 64;
  for (int64_t i = 0; i < quads; ++i, bq += 128) {
    bfloat16x8_t bv[8];
    for (int j = 0; j < 8; ++j) bv[j] = vreinterpretq_bf16_u16(vld1q_u16(bq + 8 * j));
    for (int p = 0; p < P; ++p) {
      const bfloat16x8_t av =
          vreinterpretq_bf16_u16(vcombine_u16(vld1_u16(row[2 * p] + 4 * i), vld1_u16(row[2 * p + 1] + 4 * i)));
      for (int j = 0; j < 8; ++j) acc[p][j] = vbfmmlaq_f32(acc[p][j], av, bv[j]);
    }
  }
  float32x4_t rows[RR][4];
  UnzipMmlaRows<RR, P>(acc, rows);
  if (pairs % 2) {   // the lone last pair, in the pair layout
    const int64_t p = pairs - 1;
    bfloat16x8_t bv[4];
    for (int q = 0; q < 4; ++q) bv[q] = vreinterpretq_bf16_u16(vld1q_u16(b + p * 64 + half * 32 + 8 * q));
    for (int r = 0; r < RR; ++r) {
      uint32_t two;
      std::memcpy(&two, a + r * lda + 2 * p, 4);
      const bfloat16x8_t ar = vreinterpretq_bf16_u32(vdupq_n_u32(two));
      for (int q = 0; q < 4; ++q) rows[r][q] = vbfdotq_laneq_f32(rows[r][q], bv[q], ar, 0);
    }
  }
  for (int r = 0; r < RR; ++r)
    for (int q = 0; q < 4; ++q) vst1q_f32(&sums[r][4 * q], rows[r][q]);
}

// B's layout for the ARM tiles: bf16 depth pairs (bfdot), the bfmmla layout, float16's depths apart (fmla .8h).
enum class NeonB { kPairs, kMmla, kFp16 };

// The TileFn of the ARM build: R rows x 32 columns as blocks of up to 4 rows x 16 columns (a block's 16
// accumulators and its operands fit NEON's 32 registers; the panel's half and A's rows come again from L1).
template <int R, NeonB kB = NeonB::kPairs>
void NeonTile(int64_t pairs, const uint16_t* a, int64_t lda, const uint16_t* b, float* c, int64_t ldc, int cols,
              bool accumulate, const TileEpilogue* ep) {
  for (int half = 0; half < 2 && half * 16 < cols; ++half) {
    const int hc = std::min(16, cols - half * 16);
    alignas(16) float sums[4][16];
    auto block = [&](auto rows_c, int r0) {
      constexpr int RR = decltype(rows_c)::value;
      if constexpr (kB == NeonB::kFp16) {
        NeonFp16Rows<RR>(pairs, a + r0 * lda, lda, b, half, sums);
      } else if constexpr (kB == NeonB::kMmla) {
        NeonBf16MmlaRows<RR>(pairs, a + r0 * lda, lda, b, half, sums);
      } else {
        NeonBf16Rows<RR>(pairs, a + r0 * lda, lda, b, half, sums);
      }
      TileEpilogue e;
      if (ep) {
        e = *ep;
        if (e.row_bias) e.row_bias += r0;
        if (e.residual) e.residual += r0 * e.ld_residual;
        if (e.multiplier) e.multiplier += r0 * e.ld_multiplier;
      }
      FinishNeonTile(sums, RR, half * 16, hc, c + r0 * ldc, ldc, accumulate, ep ? &e : nullptr);
    };
    if constexpr (R > 4) {
      block(std::integral_constant<int, 4>{}, 0);
      block(std::integral_constant<int, R - 4>{}, 4);
    } else {
      block(std::integral_constant<int, R>{}, 0);
    }
  }
}
#endif

// The tile functions by rows for B's format and layout (mmla: the bfmmla layout, ARM64 only).
const TileFn* Tiles(HalfFormat format, bool mmla) {
#ifdef LITE_ARM64_SIMD
  constexpr NeonB kF = NeonB::kFp16, kM = NeonB::kMmla;
  if (format == HalfFormat::kFp16) {
    static const TileFn fp16[kMR + 1] = {nullptr,
                                         NeonTile<1, kF>, NeonTile<2, kF>, NeonTile<3, kF>, NeonTile<4, kF>,
                                         NeonTile<5, kF>, NeonTile<6, kF>, NeonTile<7, kF>, NeonTile<8, kF>};
    return fp16;
  }
  if (mmla) {
    static const TileFn bfmmla[kMR + 1] = {nullptr,
                                           NeonTile<1, kM>, NeonTile<2, kM>, NeonTile<3, kM>, NeonTile<4, kM>,
                                           NeonTile<5, kM>, NeonTile<6, kM>, NeonTile<7, kM>, NeonTile<8, kM>};
    return bfmmla;
  }
#endif
  if (mmla) throw std::logic_error("bf16 panels in the bfmmla layout on a CPU without ARM BF16");
#if defined(LITE_X86_SIMD)
  if (format == HalfFormat::kFp16) {
    static const TileFn fp16[kMR + 1] = {nullptr,     Fp16Tile<1>, Fp16Tile<2>, Fp16Tile<3>, Fp16Tile<4>,
                                         Fp16Tile<5>, Fp16Tile<6>, Fp16Tile<7>, Fp16Tile<8>};
    return fp16;
  }
#endif
  if (format == HalfFormat::kFp16) return nullptr;
#if defined(LITE_X86_SIMD)
  static const TileFn table[kMR + 1] = {nullptr, Tile<1>, Tile<2>, Tile<3>, Tile<4>, Tile<5>, Tile<6>, Tile<7>, Tile<8>};
  return table;
#elif defined(LITE_ARM64_SIMD)
  static const TileFn table[kMR + 1] = {nullptr,     NeonTile<1>, NeonTile<2>, NeonTile<3>, NeonTile<4>,
                                        NeonTile<5>, NeonTile<6>, NeonTile<7>, NeonTile<8>};
  return table;
#else
  return nullptr;
#endif
}

void RequireKernels(HalfFormat format) {
  if (format == HalfFormat::kFp16) {
    if (!Fp16GemmAvailable())
      throw std::logic_error("float16 GEMM called on a CPU without float16 arithmetic (ARM64 FP16, AVX512-FP16)");
    return;
  }
  if (!Bf16GemmAvailable())
    throw std::logic_error("bf16 GEMM called on a CPU without AVX512_BF16 or ARM BF16 (or with LITE_CPU_ISA capping them)");
}

// Rows of the next tile with `left` rows to go: 8, but the last 9-13 as two tiles of 5-7 (ViT's 197 tokens end in
// 7 + 6 rather than 8 + 5): a tile of under 6 rows has under 12 accumulator chains, bound by vdpbf16ps's latency,
// so 8 + 5 rows cost 8 + 6 steps where 7 + 6 cost 13.
int64_t TileRows(int64_t left) { return left > kMR && left < kMR + 6 ? (left + 1) / 2 : std::min<int64_t>(kMR, left); }

// n values in `buffer` from its first 64-byte boundary: B tile rows that straddle two cache lines load at about a
// third of the rate (the same holds for A: see Bf16GemmPackedB).
uint16_t* Aligned64(std::vector<uint16_t>& buffer, int64_t n) {
  if (buffer.size() < static_cast<size_t>(n + 32)) buffer.resize(static_cast<size_t>(n + 32));
  return buffer.data() + (64 - reinterpret_cast<uintptr_t>(buffer.data()) % 64) % 64 / 2;
}

// Where a task's B block comes from.
struct BSource {
  const uint16_t* packed = nullptr;      // whole, in the Bf16PanelsB layout (packed_pairs depth pairs per panel)
  int64_t packed_pairs = 0;
  bool prefetch = true;                  // packed panels come from memory (weights), not from L1 (attention's)
  const BPacker* packer = nullptr;       // float32 panels, converted per block
  const Bf16PanelPacker* halves = nullptr;   // bf16 panels, made per block by their owner
  const float* matrix = nullptr;         // a K x N matrix, converted per block
  int64_t ldb = 0;
  bool mmla = false;                     // the panels (packed, or converted per block) in the bfmmla layout
};

inline uint16_t FloatToHalf(float x, HalfFormat format) {
  return format == HalfFormat::kFp16 ? FloatToFp16(x) : FloatToBf16(x);
}

// Where column j (0-31) of a 32-column panel puts depth pair kp's value of depth k % 2: bf16 pairs interleave (column
// j's two depths side by side: vdpbf16ps / bfdot sum a pair per lane), and so do float16 ones on x86 (vfmadd231ph
// on a broadcast pair: a lane per depth); ARM's float16 keeps each depth's 32 columns together (the even depth's,
// then the odd's: fmla .8h by element multiplies 8 columns of one depth by one A value).
#ifdef LITE_ARM64_SIMD
constexpr bool kFp16DepthsApart = true;
#else
constexpr bool kFp16DepthsApart = false;
#endif
inline int64_t PairSlot(HalfFormat format, int64_t kp, int64_t j, int64_t k) {
  return kp * 64 + (format == HalfFormat::kFp16 && kFp16DepthsApart ? (k % 2) * 32 + j
                                                                    : (j / 16) * 32 + 2 * (j % 16) + k % 2);
}
// The same in the bfmmla layout (Bf16PanelsB::mmla; bf16 only) of a panel of `pairs` pairs: pairs 2i and 2i + 1 as
// one 128-value run, its 16-column halves one after the other, in each column pair c [column 2c's depths 4i..4i + 3]
// [column 2c + 1's]; an odd last pair where PairSlot puts it.
inline int64_t MmlaSlot(int64_t pairs, int64_t kp, int64_t j, int64_t k) {
  if (kp >= pairs / 2 * 2) return PairSlot(HalfFormat::kBf16, kp, j, k);
  return (kp / 2) * 128 + (j / 16) * 64 + ((j % 16) / 2) * 8 + (j % 2) * 4 + (kp % 2) * 2 + k % 2;
}

#ifdef LITE_ARM64_SIMD
// 16 columns of float32 (row: 4 vectors) as float16 values (two vectors of 8).
__attribute__((target("arch=armv8.2-a+fp16"), always_inline)) inline void Fp16Row16(const float* row, uint16_t* out) {
  for (int h = 0; h < 2; ++h) {
    const float16x8_t v = vcombine_f16(vcvt_f16_f32(vld1q_f32(row + 8 * h)), vcvt_f16_f32(vld1q_f32(row + 8 * h + 4)));
    vst1q_u16(out + 8 * h, vreinterpretq_u16_f16(v));
  }
}

// The ARM panels of one full 16-column half (its column rows `row(k)`, 16 floats each) for the depths the NEON
// conversions take: float16 (depths apart: each depth's 16 columns one run) for every depth of the block, bf16 in the
// bfmmla layout for its whole quads of depth (4 rows converted by bfcvtn, then zipped into two columns' 4 depths per
// vector: 8 zips per 8 columns); returns the depths done (the rest are PanelsPortable's).
template <typename Row>
__attribute__((target("arch=armv8.2-a+fp16+bf16"))) int64_t PanelHalfNeon(const Row& row, int64_t kc, int64_t pairs,
                                                                           int h, bool mmla, HalfFormat format,
                                                                           uint16_t* panel) {
  if (format == HalfFormat::kFp16) {
    for (int64_t k = 0; k < kc; ++k) Fp16Row16(row(k), panel + PairSlot(format, k / 2, 16 * h, k));
    return kc;
  }
  if (!mmla) return 0;
  const int64_t quads = std::min(pairs / 2, kc / 4);
  for (int64_t i = 0; i < quads; ++i) {
    uint16x8_t r[4][2];   // depth 4i + d, columns 8c .. 8c + 7
    for (int d = 0; d < 4; ++d) {
      const float* src = row(4 * i + d);
      for (int c = 0; c < 2; ++c)
        r[d][c] = vreinterpretq_u16_bf16(vcvtq_high_bf16_f32(vcvtq_low_bf16_f32(vld1q_f32(src + 8 * c)),
                                                             vld1q_f32(src + 8 * c + 4)));
    }
    uint16_t* out = panel + i * 128 + h * 64;   // MmlaSlot: the quad's half, 8 column pairs of 8 values
    for (int c = 0; c < 2; ++c) {
      const uint16x8_t lo01 = vzip1q_u16(r[0][c], r[1][c]), hi01 = vzip2q_u16(r[0][c], r[1][c]);
      const uint16x8_t lo23 = vzip1q_u16(r[2][c], r[3][c]), hi23 = vzip2q_u16(r[2][c], r[3][c]);
      const uint32x4_t a = vreinterpretq_u32_u16(lo01), b = vreinterpretq_u32_u16(lo23);
      const uint32x4_t e = vreinterpretq_u32_u16(hi01), f = vreinterpretq_u32_u16(hi23);
      vst1q_u16(out + (4 * c + 0) * 8, vreinterpretq_u16_u32(vzip1q_u32(a, b)));   // columns 8c, 8c + 1
      vst1q_u16(out + (4 * c + 1) * 8, vreinterpretq_u16_u32(vzip2q_u32(a, b)));
      vst1q_u16(out + (4 * c + 2) * 8, vreinterpretq_u16_u32(vzip1q_u32(e, f)));
      vst1q_u16(out + (4 * c + 3) * 8, vreinterpretq_u16_u32(vzip2q_u32(e, f)));
    }
  }
  return 4 * quads;
}
#endif

// One B block (rows [k0, k0 + kc), columns [n0, n0 + nc)) from a BPacker or a K x N matrix as bf16 / float16 panels
// (for bf16 the x86 build's PanelsFromF32 / PanelsFromMatrix): 32-column panels of depth pairs, the padding zero. On
// ARM64 the NEON conversions take whole 16-column halves (PanelHalfNeon: 0.4-0.5 cycles a value on N1's model; value
// by value, 45-90 instructions with the out-of-line FloatToFp16 / FloatToBf16, the conversion had cost several times
// the multiply-adds of a 64-row product, 4 cycles a value); the rest is converted here value by value.
void PanelsPortable(const BSource& b, int64_t K, int64_t k0, int64_t kc, int64_t n0, int64_t nc, uint16_t* dst,
                    HalfFormat format) {
  // (A block's depth starts on a multiple of kKC: its pairs pair up for bfmmla as the whole panel's do.)
  const int64_t pairs = (kc + 1) / 2, panels = (nc + kBf16NR - 1) / kBf16NR;
  thread_local std::vector<float> staging;
  const int64_t panels16 = (nc + 15) / 16;
  if (b.packer) {
    if (staging.size() < static_cast<size_t>(panels16 * kc * 16)) staging.resize(panels16 * kc * 16);
    b.packer->Pack(k0, kc, n0, nc, staging.data());
  }
  std::memset(dst, 0, static_cast<size_t>(panels * pairs * 64) * sizeof(uint16_t));
  const int64_t depth = std::min(kc, K - k0);
  // Columns below neon_cols at depths below neon_depth are converted by the NEON halves (none off ARM64).
  int64_t neon_cols = 0, neon_depth = 0;
#ifdef LITE_ARM64_SIMD
  // The packer's panels are zero past nc, so its last half converts whole; a matrix's only where it has 16 columns.
  const int64_t halves = b.packer ? panels16 : nc / 16;
  for (int64_t hj = 0; hj < halves; ++hj) {
    uint16_t* panel = dst + (hj / 2) * pairs * 64;
    const int h = static_cast<int>(hj % 2);
    if (b.packer) {
      const float* base = staging.data() + hj * kc * 16;
      neon_depth = PanelHalfNeon([&](int64_t k) { return base + k * 16; }, depth, pairs, h, b.mmla, format, panel);
    } else {
      const float* base = b.matrix + k0 * b.ldb + n0 + 16 * hj;
      neon_depth = PanelHalfNeon([&](int64_t k) { return base + k * b.ldb; }, depth, pairs, h, b.mmla, format, panel);
    }
    neon_cols = std::min(nc, 16 * (hj + 1));
  }
#endif
  for (int64_t j = 0; j < nc; ++j)
    for (int64_t k = j < neon_cols ? neon_depth : 0; k < depth; ++k) {
      const float v = b.packer ? staging[(j / 16) * kc * 16 + k * 16 + j % 16] : b.matrix[(k0 + k) * b.ldb + n0 + j];
      const int64_t slot = b.mmla ? MmlaSlot(pairs, k / 2, j % kBf16NR, k) : PairSlot(format, k / 2, j % kBf16NR, k);
      dst[(j / kBf16NR) * pairs * 64 + slot] = FloatToHalf(v, format);
    }
}

// C[M, N] (+)= A B with the epilogue; A: bf16 rows (lda values apart, depth padded to even).
// amx_steps > 0: A is in AMX tile order (AmxTileIndex) with amx_steps steps of 32 depth values, and the
// AMX tiles take the product (lda unused).
void Driver(const uint16_t* a, int64_t lda, const BSource& b, int64_t M, int64_t N, int64_t K, bool accumulate_c,
            float* C, int64_t ldc, const GemmEpilogue& ep, ThreadPool* pool, HalfFormat format, int64_t amx_steps) {
  const int threads = pool ? pool->size() : 1;
  const bool amx = amx_steps > 0;
  // Rows per tile: AMX's 32 (two 16-row tiles; row tiles start on multiples of 16, as AMX's A reads require), else
  // the vector kernels' 8.
  const int64_t mr = amx ? 32 : kMR;
  // AMX takes the whole depth per tile call up to kAmxMaxKC (storing the tiles drains the tile unit: at 24 steps per
  // store a third of the time went to it); a row block's A then stays within ~1 MiB of L2 beside the B panel.
  const int64_t kKC = amx ? (K <= kAmxMaxKC ? (K + 31) / 32 * 32 : kAmxMaxKC / 2) : lite::kKC;
  const int64_t kMCSub = amx ? std::clamp<int64_t>((kAmxRowBlockBytes / (2 * kKC)) / 32 * 32, 32, lite::kMCSub)
                             : lite::kMCSub;
  auto tile_rows = [&](int64_t left) { return amx ? std::min<int64_t>(32, left) : TileRows(left); };
  // Bias, residual, ReLU/ReLU6/GELU/SiLU and the multiplier are applied in registers (a decoder's SwiGLU gate and up
  // products: per tile after the store, they were 1.1x the down product's time); another activation runs on the stored
  // tile, the multiplier after it.
  const bool in_register = ActivationInRegisters(ep.act);
  const int clamp = !in_register ? 0 : ep.act == EpilogueAct::kRelu ? 1 : ep.act == EpilogueAct::kRelu6 ? 2
                    : ep.act == EpilogueAct::kGelu ? 3 : ep.act == EpilogueAct::kSilu ? 4 : 0;
  GemmEpilogue after;
  if (!in_register) {
    after.act = ep.act;
    after.multiplier = ep.multiplier;
    after.ld_multiplier = ep.ld_multiplier;
  }

  // Columns per task: 4 panels; a B its owner decodes per block (b.halves) splits by columns alone, in blocks of 2 or
  // 1 panels where 4 would not split evenly between the threads: rows split between threads would make every task
  // decode its block again, or (the shared conversion below) the whole decoded B pass through L3 (an int4 down
  // projection of 64 rows at two threads ran at 0.74x the integer kernels' time that way). `even`: whole tasks per
  // thread, within 1/16.
  auto even = [&](int64_t tasks) { return 16 * tasks >= 15 * ((tasks + threads - 1) / threads) * threads; };
  int64_t cols_per_task = kNC;
  if (b.halves && threads > 1)
    for (const int64_t nc : {kNC, kNC / 2, kNC / 4}) {
      cols_per_task = nc;
      if (even((N + nc - 1) / nc)) break;
    }
  const int64_t n_blocks = (N + cols_per_task - 1) / cols_per_task, m_tiles = (M + mr - 1) / mr;
  int64_t m_groups = 1;
  if (b.halves) {
    if (n_blocks < threads) m_groups = std::min<int64_t>(m_tiles, threads);   // a narrow B: small to share
  } else {
    // Rows are split when there are too few column blocks to keep every thread busy, and (7 column blocks on 2
    // threads ran 4 + 3: 7/8 of both threads' time used) until the tasks split evenly.
    if (n_blocks < 2 * threads) m_groups = std::min<int64_t>(m_tiles, (2 * threads + n_blocks - 1) / n_blocks);
    if (threads > 1)
      for (int64_t g = m_groups; g <= std::min<int64_t>(m_tiles, 8 * m_groups); ++g)
        if (even(n_blocks * g)) { m_groups = g; break; }
  }
  const int64_t tiles_per_group = (m_tiles + m_groups - 1) / m_groups;
  m_groups = (m_tiles + tiles_per_group - 1) / tiles_per_group;
  const TileFn* tiles = Tiles(format, b.mmla);

  // B rows [k0, k0 + kc) x columns [n0, n0 + nc) converted into 32-column panels of depth pairs at dst.
  auto convert_block = [&](int64_t k0, int64_t kc, int64_t n0, int64_t nc, uint16_t* dst) {
    if (b.halves) return b.halves->Pack(k0, kc, n0, nc, dst);
#ifdef LITE_X86_SIMD
    const bool fp16 = format == HalfFormat::kFp16;
    if (b.packer) {
      thread_local std::vector<float> staging;
      const int64_t panels16 = (nc + 15) / 16;
      if (staging.size() < static_cast<size_t>(panels16 * kc * 16)) staging.resize(panels16 * kc * 16);
      b.packer->Pack(k0, kc, n0, nc, staging.data());
      if (fp16) {
        PanelsFromF32<HalfFormat::kFp16>(staging.data(), kc, panels16, dst);
      } else {
        PanelsFromF32<HalfFormat::kBf16>(staging.data(), kc, panels16, dst);
      }
    } else if (fp16) {
      PanelsFromMatrix<HalfFormat::kFp16>(b.matrix, b.ldb, K, k0, kc, n0, nc, dst);
    } else {
      PanelsFromMatrix<HalfFormat::kBf16>(b.matrix, b.ldb, K, k0, kc, n0, nc, dst);
    }
#else
    PanelsPortable(b, K, k0, kc, n0, nc, dst, format);
#endif
  };

  // One depth block of C[r_begin:r_end, n0:n0+nc] from its B panels (bblock, panel_stride values apart).
  auto compute = [&](int64_t k0, int64_t kc, int64_t r_begin, int64_t r_end, int64_t n0, int64_t nc,
                     const uint16_t* bblock, int64_t panel_stride) {
    const int64_t pairs = (kc + 1) / 2, panels = (nc + kBf16NR - 1) / kBf16NR;
    const bool last = k0 + kc >= K, accumulate = k0 > 0 || accumulate_c;
    for (int64_t m0 = r_begin; m0 < r_end; m0 += kMCSub) {
      const int64_t m1 = std::min(r_end, m0 + kMCSub);
      int64_t row_tiles = 0;
      for (int64_t r0 = m0; r0 < m1; r0 += tile_rows(m1 - r0)) ++row_tiles;
      for (int64_t q = 0; q < panels; ++q) {
        const int64_t col0 = n0 + q * kBf16NR;
        const int cols = static_cast<int>(std::min(kBf16NR, N - col0));
        // A packed weight's next panel (this block's, or the next depth block's first) comes from L3 or memory:
        // the row tiles of this panel fetch a share of it each into L2, so its first tile does not stall.
        const char* next = nullptr;
        if (amx) {   // the next panel in memory (this task's, or the next column block's first)
          if (b.packed && b.prefetch && col0 + kBf16NR < N)
            next = reinterpret_cast<const char*>(bblock + (q + 1) * panel_stride);
        } else if (b.packed && b.prefetch && q + 1 < panels) {
          next = reinterpret_cast<const char*>(bblock + (q + 1) * panel_stride);
        } else if (b.packed && b.prefetch && k0 + kKC < K) {
          next = reinterpret_cast<const char*>(bblock + (kKC / 2) * 64);
        }
        const int64_t next_lines = pairs * 64 * 2 / 64;
        int64_t tile = 0;
        for (int64_t r0 = m0, rows = 0; r0 < m1; r0 += rows, ++tile) {
          rows = tile_rows(m1 - r0);
          const int64_t l0 = tile * next_lines / row_tiles, l1 = (tile + 1) * next_lines / row_tiles;
          if (next && !amx)
            for (int64_t l = l0; l < l1; ++l) __builtin_prefetch(next + l * 64, 0, 2);
          TileEpilogue te;
          if (last) {
            te.row_bias = ep.row_bias ? ep.row_bias + r0 : nullptr;
            te.col_bias = ep.col_bias ? ep.col_bias + col0 : nullptr;
            te.residual = ep.residual ? ep.residual + r0 * ep.ld_residual + col0 : nullptr;
            te.ld_residual = ep.ld_residual;
            te.clamp = clamp;
            if (in_register && ep.multiplier) {
              te.multiplier = ep.multiplier + r0 * ep.ld_multiplier + col0;
              te.ld_multiplier = ep.ld_multiplier;
            }
          }
          float* c = C + r0 * ldc + col0;
#ifdef LITE_X86_SIMD
          if (amx)
            AmxTile(rows, pairs, a + AmxTileIndex(r0, k0, amx_steps), bblock + q * panel_stride, c, ldc, cols,
                    accumulate, last ? &te : nullptr, next ? next + l0 * 64 : nullptr, next ? l1 - l0 : 0);
          else
#endif
            tiles[rows](pairs, a + r0 * lda + k0, lda, bblock + q * panel_stride, c, ldc, cols, accumulate,
                        last ? &te : nullptr);
          if (last && (after.act != EpilogueAct::kNone || after.multiplier))
            ApplyEpilogue(C, ldc, r0, rows, col0, cols, after);
        }
      }
    }
  };
  auto rows_of = [&](int64_t mg, int64_t& r_begin, int64_t& r_end) {
    r_begin = mg * tiles_per_group * mr;
    r_end = std::min(M, r_begin + tiles_per_group * mr);
  };
  const int64_t tasks = n_blocks * m_groups;
  // Each thread's run of tasks holds the tile registers (AMX) for its duration only.
  auto run_tasks = [&](const std::function<void(int64_t)>& fn, int64_t t0, int64_t t1) {
#ifdef LITE_X86_SIMD
    const AmxTileScope tiles(amx);
#endif
    for (int64_t t = t0; t < t1; ++t) fn(t);
  };
  auto for_tasks = [&](const std::function<void(int64_t)>& fn) {
    if (pool && threads > 1 && tasks > 1) {
      pool->ParallelFor(tasks, 1, [&](int64_t t0, int64_t t1) { run_tasks(fn, t0, t1); });
    } else {
      run_tasks(fn, 0, tasks);
    }
  };

  if (!b.packed && m_groups > 1 && pool && threads > 1) {
    // Rows split across threads and B converted per run: every depth block of B is converted once, its panels
    // split between the threads, then all row groups multiply with it (converted per row group, ResNet-50's
    // 7x7- and 14x14-plane layers did the im2col twice at two threads).
    const int64_t panels_total = (N + kBf16NR - 1) / kBf16NR;
    thread_local std::vector<uint16_t> shared;
    for (int64_t k0 = 0; k0 < K; k0 += kKC) {
      const int64_t kc = std::min(kKC, K - k0), pairs = (kc + 1) / 2;
      uint16_t* sb = Aligned64(shared, panels_total * pairs * 64);
      pool->ParallelFor(panels_total, 1, [&](int64_t q0, int64_t q1) {
        convert_block(k0, kc, q0 * kBf16NR, std::min(N, q1 * kBf16NR) - q0 * kBf16NR, sb + q0 * pairs * 64);
      });
      for_tasks([&](int64_t t) {
        const int64_t nb = t % n_blocks, n0 = nb * cols_per_task;
        int64_t r_begin, r_end;
        rows_of(t / n_blocks, r_begin, r_end);
        if (r_begin < r_end)
          compute(k0, kc, r_begin, r_end, n0, std::min(cols_per_task, N - n0), sb + (n0 / kBf16NR) * pairs * 64,
                  pairs * 64);
      });
    }
    return;
  }

  for_tasks([&](int64_t t) {
    const int64_t nb = t % n_blocks, n0 = nb * cols_per_task, nc = std::min(cols_per_task, N - n0);
    int64_t r_begin, r_end;
    rows_of(t / n_blocks, r_begin, r_end);
    if (r_begin >= r_end) return;
    thread_local std::vector<uint16_t> block;
    for (int64_t k0 = 0; k0 < K; k0 += kKC) {
      const int64_t kc = std::min(kKC, K - k0), pairs = (kc + 1) / 2;
      if (b.packed) {
        compute(k0, kc, r_begin, r_end, n0, nc,
                b.packed + (n0 / kBf16NR) * b.packed_pairs * 64 + (k0 / 2) * 64, b.packed_pairs * 64);
        continue;
      }
      const int64_t panels = (nc + kBf16NR - 1) / kBf16NR;
      uint16_t* bb = Aligned64(block, panels * pairs * 64);
      convert_block(k0, kc, n0, nc, bb);
      compute(k0, kc, r_begin, r_end, n0, nc, bb, pairs * 64);
    }
  });
}

// Steps of 32 depth values in AMX tile order (AmxTileIndex) where AMX takes products of this format; 0 where it does
// not.
int64_t AmxDepthSteps(int64_t K, HalfFormat format) {
  return format == HalfFormat::kBf16 && CpuHasAmxBf16() ? (K + 31) / 32 : 0;
}

// A product with no depth: C = epilogue(0) (beta 0) or epilogue(C).
void NoDepth(int64_t M, int64_t N, bool keep_c, float* C, int64_t ldc, const GemmEpilogue& ep) {
  if (!keep_c)
    for (int64_t i = 0; i < M; ++i) std::fill(C + i * ldc, C + i * ldc + N, 0.f);
  ApplyEpilogue(C, ldc, 0, M, 0, N, ep);
}

}  // namespace

bool Bf16GemmAvailable() { return CpuHasAvx512Bf16() || CpuArmFeatures().bf16; }
bool BfmmlaAvailable() { return CpuArmFeatures().bf16; }   // (all false off ARM64)

void SetBfmmlaOrder(Bf16PanelsB& b, bool mmla) {
  if (b.mmla == mmla) return;
  if (mmla && (!BfmmlaAvailable() || b.format != HalfFormat::kBf16))
    throw std::logic_error("bfmmla layout: bf16 panels on a CPU with ARM BF16 only");
  const int64_t panels = (b.N + kBf16NR - 1) / kBf16NR, quads = b.pairs / 2;
  uint16_t was[128];
  for (int64_t q = 0; q < panels; ++q)
    for (int64_t i = 0; i < quads; ++i) {   // pairs 2i and 2i + 1: 128 values either way
      uint16_t* at = b.data.data() + q * b.pairs * 64 + i * 128;
      std::memcpy(was, at, sizeof was);
      for (int64_t j = 0; j < kBf16NR; ++j)
        for (int64_t k = 0; k < 4; ++k) {
          const int64_t kp = 2 * i + k / 2, pair = PairSlot(HalfFormat::kBf16, kp, j, k) - 2 * i * 64;
          const int64_t quad = MmlaSlot(b.pairs, kp, j, k) - i * 128;
          if (mmla) at[quad] = was[pair]; else at[pair] = was[quad];
        }
    }
  b.mmla = mmla;
}
bool Fp16GemmAvailable() { return CpuArmFeatures().fp16 || CpuHasAvx512Fp16(); }

// IEEE binary32 -> binary16 by bits (C++17 has no half type here): round to nearest even, overflow to infinity,
// results below the normal range as subnormals (or zero), NaN kept quiet with its sign.
uint16_t FloatToFp16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const uint32_t sign = (u >> 16) & 0x8000u, abs = u & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) return static_cast<uint16_t>(sign | (abs > 0x7F800000u ? 0x7E00u : 0x7C00u));
  if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);   // rounds to 65536 or more: infinity
  if (abs < 0x38800000u) {   // below 2^-14: a subnormal half (or zero), the value in units of 2^-24
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);   // under half of 2^-24 (ties at exactly half: to 0)
    const uint32_t mant = (abs & 0x7FFFFFu) | 0x800000u;
    const int shift = 126 - static_cast<int>(abs >> 23);           // 14..24
    const uint32_t q = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    return static_cast<uint16_t>(sign | (q + (rem > half || (rem == half && (q & 1)))));
  }
  // normal: rebias the exponent (127 -> 15) and round the 23-bit mantissa to 10 (a carry may raise the exponent)
  const uint32_t v = abs - 0x38000000u, q = v >> 13, rem = v & 0x1FFFu;
  return static_cast<uint16_t>(sign | (q + (rem > 0x1000u || (rem == 0x1000u && (q & 1)))));
}

float Fp16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
  uint32_t u;
  if (exp == 0x1F) {
    u = sign | 0x7F800000u | (mant << 13);
  } else if (exp != 0) {
    u = sign | ((exp + 112) << 23) | (mant << 13);
  } else {   // zero or subnormal: mant x 2^-24, exact in float32
    const float f = static_cast<float>(mant) * 5.9604644775390625e-8f;
    std::memcpy(&u, &f, 4);
    u |= sign;
  }
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

void FloatsToHalves(const float* x, int64_t n, int64_t n_padded, uint16_t* out, HalfFormat format, float alpha) {
  if (format == HalfFormat::kBf16) return FloatsToBf16(x, n, n_padded, out, alpha);
#ifdef LITE_X86_SIMD
  if (CpuHasAvx512Fp16()) return ConvertRowFp16(x, n, n_padded, alpha, out);
#endif
  int64_t i = 0;
#ifdef LITE_ARM64_SIMD
  // 8 values a step by fcvtn (rounding to nearest even, as FloatToFp16; every ARMv8 core converts): a GEMM's A rows
  // at float16, converted value by value (~60 instructions with the call), had cost about 0.4x the multiply-adds of a
  // 768-column product.
  const float32x4_t a = vdupq_n_f32(alpha);
  for (; i + 8 <= n; i += 8)
    vst1q_u16(out + i, vreinterpretq_u16_f16(vcombine_f16(vcvt_f16_f32(vmulq_f32(vld1q_f32(x + i), a)),
                                                          vcvt_f16_f32(vmulq_f32(vld1q_f32(x + i + 4), a)))));
#endif
  for (; i < n_padded; ++i) out[i] = i < n ? FloatToFp16(alpha * x[i]) : 0;
}

uint16_t FloatToBf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40);   // NaN: keep it quiet
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float Bf16ToFloat(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

#ifdef LITE_ARM64_SIMD
// ARM BF16: 8 values a step by bfcvtn (rounding to nearest even, as FloatToBf16), the rest one by one.
__attribute__((target("arch=armv8.2-a+bf16"))) void FloatsToBf16Neon(const float* x, int64_t n, int64_t n_padded,
                                                                      uint16_t* out, float alpha) {
  int64_t i = 0;
  const float32x4_t a = vdupq_n_f32(alpha);
  for (; i + 8 <= n; i += 8)
    vst1q_u16(out + i, vreinterpretq_u16_bf16(vcvtq_high_bf16_f32(vcvtq_low_bf16_f32(vmulq_f32(vld1q_f32(x + i), a)),
                                                                  vmulq_f32(vld1q_f32(x + i + 4), a))));
  for (; i < n_padded; ++i) out[i] = i < n ? FloatToBf16(alpha * x[i]) : 0;
}
#endif

void FloatsToBf16(const float* x, int64_t n, int64_t n_padded, uint16_t* out, float alpha) {
#ifdef LITE_X86_SIMD
  if (CpuHasAvx512Bf16()) return ConvertRow(x, n, n_padded, alpha, out);
#endif
#ifdef LITE_ARM64_SIMD
  if (CpuArmFeatures().bf16) return FloatsToBf16Neon(x, n, n_padded, out, alpha);
#endif
  for (int64_t i = 0; i < n_padded; ++i) out[i] = i < n ? FloatToBf16(alpha * x[i]) : 0;
}

bool Bf16ProductsOnAmx(HalfFormat format) { return AmxDepthSteps(1, format) > 0; }

Bf16PanelsB PackBf16B(bool trans_b, int64_t K, int64_t N, const float* B, int64_t ldb, HalfFormat format) {
  Bf16PanelsB p;
  p.K = K, p.N = N, p.pairs = (K + 1) / 2;
  p.format = format;
  const int64_t panels = (N + kBf16NR - 1) / kBf16NR;
  p.data.assign(static_cast<size_t>(panels * p.pairs * 64), 0);
#ifdef LITE_X86_SIMD
  if (!trans_b && CpuHasAvx512Bf16() && format == HalfFormat::kBf16) {   // the per-block conversion: the same layout
    PanelsFromMatrix<HalfFormat::kBf16>(B, ldb, K, 0, K, 0, N, p.data.data());
    return p;
  }
  if (!trans_b && CpuHasAvx512Fp16() && format == HalfFormat::kFp16) {
    PanelsFromMatrix<HalfFormat::kFp16>(B, ldb, K, 0, K, 0, N, p.data.data());
    return p;
  }
#endif
  for (int64_t q = 0; q < panels; ++q)
    for (int64_t kp = 0; kp < p.pairs; ++kp)
      for (int64_t j = 0; j < kBf16NR; ++j) {
        const int64_t n = q * kBf16NR + j;
        if (n >= N) break;
        for (int t = 0; t < 2; ++t) {
          const int64_t k = 2 * kp + t;
          if (k < K)
            p.data[q * p.pairs * 64 + PairSlot(format, kp, j, k)] =
                FloatToHalf(trans_b ? B[n * ldb + k] : B[k * ldb + n], format);
        }
      }
  if (format == HalfFormat::kBf16 && BfmmlaAvailable()) SetBfmmlaOrder(p, true);
  return p;
}

Bf16PanelsB PackBf16BFromHalves(int64_t K, int64_t N, const uint16_t* B, HalfFormat format) {
  Bf16PanelsB p;
  p.K = K, p.N = N, p.pairs = (K + 1) / 2;
  p.format = format;
  const int64_t panels = (N + kBf16NR - 1) / kBf16NR;
  p.data.assign(static_cast<size_t>(panels * p.pairs * 64), 0);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) {
      const int64_t q = n / kBf16NR, j = n % kBf16NR;
      p.data[static_cast<size_t>(q * p.pairs * 64 + PairSlot(format, k / 2, j, k))] = B[k * N + n];
    }
  if (format == HalfFormat::kBf16 && BfmmlaAvailable()) SetBfmmlaOrder(p, true);
  return p;
}

Bf16RowsA ToBf16Rows(int64_t M, int64_t K, const float* A, int64_t lda, HalfFormat format) {
  Bf16RowsA r;
  r.M = M, r.K = K, r.ld = (K + 1) / 2 * 2;
  r.format = format;
  r.amx_steps = AmxDepthSteps(K, format);
#ifdef LITE_X86_SIMD
  if (r.amx_steps) {   // whole 32-row blocks, zero past M and K
    r.data.assign(static_cast<size_t>((M + 31) / 32 * r.amx_steps * 1024), 0);
    for (int64_t i = 0; i < M; ++i) ToTileOrder(A + i * lda, K, 1.f, i, r.data.data());
    return r;
  }
#endif
  r.data.assign(static_cast<size_t>(M * r.ld), 0);
#ifdef LITE_X86_SIMD
  if (CpuHasAvx512Bf16() && format == HalfFormat::kBf16) {
    for (int64_t i = 0; i < M; ++i) ConvertRow(A + i * lda, K, r.ld, 1.f, r.data.data() + i * r.ld);
    return r;
  }
#endif
  for (int64_t i = 0; i < M; ++i) FloatsToHalves(A + i * lda, K, r.ld, r.data.data() + i * r.ld, format);
  return r;
}

namespace {
// A (M x K, op(A) with trans_a, times alpha) as bf16 (float16) rows in a per-thread buffer, once per product (every
// column block then reads them in place), or in AMX tile order where the tiles take the product (amx_steps > 0).
const uint16_t* ActivationsAsHalves(bool trans_a, int64_t M, int64_t K, float alpha, const float* A, int64_t lda,
                                    HalfFormat format, ThreadPool* pool, int64_t* ld_out, int64_t* amx_steps_out) {
  const int64_t ld = (K + 1) / 2 * 2, amx_steps = AmxDepthSteps(K, format);
  const int64_t size = amx_steps ? (M + 31) / 32 * amx_steps * 1024 : M * ld;
  thread_local std::vector<uint16_t> rows;
  uint16_t* dst = Aligned64(rows, size);
  auto convert = [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
#ifdef LITE_X86_SIMD
      if (amx_steps && !trans_a) {
        ToTileOrder(A + i * lda, K, alpha, i, dst);
        continue;
      }
#endif
      if (!trans_a) {
        FloatsToHalves(A + i * lda, K, ld, dst + i * ld, format, alpha);
        continue;
      }
      const int64_t padded = amx_steps ? amx_steps * 32 : ld;
      for (int64_t k = 0; k < padded; ++k) {
        const uint16_t v = FloatToHalf(k < K ? alpha * A[k * lda + i] : 0.f, format);
        dst[amx_steps ? AmxTileIndex(i, k, amx_steps) : i * ld + k] = v;
      }
    }
  };
  if (pool && pool->size() > 1 && M * K > 16384) pool->ParallelFor(M, 8, convert); else convert(0, M);
  *ld_out = ld;
  *amx_steps_out = amx_steps;
  return dst;
}
}  // namespace

void Bf16GemmPackedB(bool trans_a, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                     const Bf16PanelsB& b, float beta, float* C, int64_t ldc, const GemmEpilogue& ep,
                     ThreadPool* pool) {
  if (M <= 0 || N <= 0) return;
  if (beta != 0.f && beta != 1.f) throw std::invalid_argument("bf16 GEMM takes beta 0 or 1");
  if (K <= 0 || alpha == 0.f) return NoDepth(M, N, beta == 1.f, C, ldc, ep);
  RequireKernels(b.format);
  int64_t ld = 0, amx_steps = 0;
  const uint16_t* a = ActivationsAsHalves(trans_a, M, K, alpha, A, lda, b.format, pool, &ld, &amx_steps);
  BSource src;
  src.packed = b.data.data();
  src.packed_pairs = b.pairs;
  src.mmla = b.mmla;
  Driver(a, ld, src, M, N, K, beta == 1.f, C, ldc, ep, pool, b.format, amx_steps);
}

void Bf16GemmPackerB(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const Bf16PanelPacker& b,
                     float* C, int64_t ldc, const GemmEpilogue& ep, ThreadPool* pool) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) return NoDepth(M, N, false, C, ldc, ep);
  RequireKernels(HalfFormat::kBf16);
  int64_t ld = 0, amx_steps = 0;
  const uint16_t* a = ActivationsAsHalves(false, M, K, 1.f, A, lda, HalfFormat::kBf16, pool, &ld, &amx_steps);
  BSource src;
  src.halves = &b;
  Driver(a, ld, src, M, N, K, false, C, ldc, ep, pool, HalfFormat::kBf16, amx_steps);
}

void Bf16GemmRowsA(const Bf16RowsA& a, int64_t N, const BPacker& b, float* C, int64_t ldc, const GemmEpilogue& ep,
                   ThreadPool* pool) {
  if (a.M <= 0 || N <= 0) return;
  if (a.K <= 0) return NoDepth(a.M, N, false, C, ldc, ep);
  RequireKernels(a.format);
  BSource src;
  src.packer = &b;
  src.mmla = a.format == HalfFormat::kBf16 && BfmmlaAvailable();   // the blocks converted into its layout
  Driver(a.data.data(), a.ld, src, a.M, N, a.K, false, C, ldc, ep, pool, a.format, a.amx_steps);
}

void Bf16GemmRowsA(const Bf16RowsA& a, int64_t N, const float* B, int64_t ldb, float* C, int64_t ldc,
                   const GemmEpilogue& ep, ThreadPool* pool) {
  if (a.M <= 0 || N <= 0) return;
  if (a.K <= 0) return NoDepth(a.M, N, false, C, ldc, ep);
  RequireKernels(a.format);
  BSource src;
  src.matrix = B;
  src.ldb = ldb;
  src.mmla = a.format == HalfFormat::kBf16 && BfmmlaAvailable();
  Driver(a.data.data(), a.ld, src, a.M, N, a.K, false, C, ldc, ep, pool, a.format, a.amx_steps);
}

void Bf16GemmPanelsInline(const uint16_t* a, int64_t lda, int64_t M, int64_t K, const uint16_t* b_panels,
                          int64_t N, bool accumulate, float* C, int64_t ldc, bool a_tiles) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) return NoDepth(M, N, accumulate, C, ldc, GemmEpilogue{});
  RequireKernels(HalfFormat::kBf16);
  BSource src;
  src.packed = b_panels;
  src.packed_pairs = (K + 1) / 2;
  src.prefetch = false;
  if (a_tiles && !CpuHasAmxBf16()) throw std::logic_error("AMX tile-order A on a CPU without AMX-BF16");
  Driver(a, lda, src, M, N, K, accumulate, C, ldc, GemmEpilogue{}, nullptr, HalfFormat::kBf16,
         a_tiles ? (K + 31) / 32 : 0);
}

int64_t AmxTileValues(int64_t rows, int64_t K) { return (rows + 31) / 32 * ((K + 31) / 32) * 1024; }

void AmxTileOrder(const float* x, int64_t rows, int64_t K, int64_t ldx, float alpha, uint16_t* tiles) {
#ifdef LITE_X86_SIMD
  if (!CpuHasAmxBf16()) throw std::logic_error("AMX tile order on a CPU without AMX-BF16");
  for (int64_t i = 0; i < rows; ++i) ToTileOrder(x + i * ldx, K, alpha, i, tiles);
#else
  (void)x, (void)rows, (void)K, (void)ldx, (void)alpha, (void)tiles;
  throw std::logic_error("AMX tile order on a CPU without AMX-BF16");
#endif
}

}  // namespace lite
