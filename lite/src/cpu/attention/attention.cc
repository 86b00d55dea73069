#include "cpu/attention/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "lite/errors.h"
#include "cpu/aligned.h"
#include "cpu/gemm/bf16_gemm.h"
#include "cpu/gemm/bf16_pairs.h"
#include "cpu/simd/float16.h"
#include "cpu/gemm/gemm.h"
#include "cpu/isa_dispatch.h"
#include "cpu/attention/exp_non_positive.h"
#include "cpu/attention/kv_cache_rows.h"
#include "cpu/attention/paged_decode_attention.h"
#include "cpu/shared_pools.h"
#include "cpu/simd/simd.h"
#include "cpu/simd/transpose8x8.h"
#include "cpu/simd/transpose_block.h"

#ifdef LITE_X86_SIMD
#include <immintrin.h>
#endif

namespace lite {
namespace {

constexpr int64_t kDefaultKeyBlock = 256;   // keys per tile: packed K (256 x D) and V^T (Dv x 256) stay in L2
constexpr int64_t kMaxQueryBlock = 96;      // queries per task at most (dense): a multiple of the 6-row tile
// Causal prompts of at least kCausalKeyBlock queries: tiles of kCausalKeyBlock keys, blocks of kCausalQueryBlock
// queries. A query block then ends on a key tile's middle or end, so the tiles it computes past the diagonal are at
// most half a tile (the default 256 / 86 computed 1.7x the scores a 512-token prompt needs): 512 queries, 14 heads of
// 64, 0.55x-0.6x the time at one thread (64 / 128 queries per block alike; 64 keeps more tasks).
constexpr int64_t kCausalKeyBlock = 128;
constexpr int64_t kCausalQueryBlock = 64;
constexpr float kInf = std::numeric_limits<float>::infinity();
// Mask values at or below this are "masked" for tile skipping: added to any sane score, exp() of the result
// relative to a row's real maximum is exactly 0 in float32.
constexpr float kMaskedBelow = -1e30f;
// Lazy rescaling: a key tile whose scores stay within this of each query's running maximum is exponentiated against
// that maximum as it stands (weights up to e^8, sums up to keys x e^8: far from float32's range), so the tile needs no
// column-maximum pass of its own and the accumulated output no rescaling; a tile that rises further is redone
// against its new maximum.
constexpr float kLazyRescaleMargin = 8.f;

int64_t PaddedQueries(int64_t rows) { return (rows + kGemmNR - 1) / kGemmNR * kGemmNR; }
int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

size_t ElemSize(AttentionElem e) { return e == AttentionElem::kFloat32 ? 4 : 2; }

float LoadElem(const void* p, int64_t i, AttentionElem e) {
  switch (e) {
    case AttentionElem::kFloat16: return HalfToFloat(static_cast<const uint16_t*>(p)[i]);
    case AttentionElem::kBFloat16: return BFloat16ToFloat(static_cast<const uint16_t*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

// Everything about one run that does not change per task: tile sizes and where each sample's rows start.
struct Plan {
  int64_t key_block = 0, query_block = 0, max_key_blocks = 0;
  int64_t kf = 0, vf = 0;                    // floats of one packed K block and one packed V^T block
  bool bf16 = false;                         // products on bf16: K and V^T blocks as bf16 rows (in those floats)
  bool amx = false;                          // ... in AMX tile order instead of rows (CpuHasAmxBf16)
  int64_t k_ld = 0, vt_ld = 0;               // bf16 values per K row (head_dim) and V^T row (keys), even
  std::vector<int64_t> q_len, kv_len;        // per sample
  std::vector<int64_t> q_start, kv_start;    // first row of each sample (variable lengths), else 0
  std::vector<int64_t> q_block_start;        // first query block of each sample (numbering across the batch)
  int64_t q_blocks_total = 0;
};

Plan MakePlan(const AttentionArgs& a, int64_t threads) {
  Plan p;
  for (int64_t b = 0; b < a.batch; ++b) {
    p.q_len.push_back(a.q_lens ? a.q_lens[b] : a.q_len);
    p.kv_len.push_back(a.kv_lens ? a.kv_lens[b] : a.kv_len);
  }
  const int64_t longest = p.q_len.empty() ? 0 : *std::max_element(p.q_len.begin(), p.q_len.end());
  const bool causal_prompt = a.causal && !a.select_idx && a.key_block <= 0 && a.query_block <= 0 &&
                             longest >= kCausalKeyBlock;
  p.key_block = a.key_block > 0 ? a.key_block : causal_prompt ? kCausalKeyBlock : kDefaultKeyBlock;
  int64_t qs = 0, ks = 0;
  for (int64_t b = 0; b < a.batch; ++b) {
    p.q_start.push_back(a.q_lens ? qs : 0);
    p.kv_start.push_back(a.kv_lens ? ks : 0);
    qs += p.q_len[b];
    ks += p.kv_len[b];
    p.max_key_blocks = std::max(p.max_key_blocks, CeilDiv(p.kv_len[b], p.key_block));
  }
  if (a.query_block > 0) {
    p.query_block = a.query_block;
  } else if (causal_prompt) {
    p.query_block = kCausalQueryBlock;
  } else {   // blocks of at most 96 queries; more, smaller ones when (batch x heads) cannot keep the threads busy
    // Up to kMaxQueryBlock queries per task; when all keys fit one tile, up to kDefaultKeyBlock, so that the two
    // products per task are wider (fewer, fuller 32-column panels) and each head's queries are packed once: ViT-B/16's
    // 197 tokens one block per head, its bf16 attention 0.91x / 0.74x the time of two blocks at one / two threads.
    const int64_t most_per_block = p.max_key_blocks <= 1 ? kDefaultKeyBlock : kMaxQueryBlock;
    int64_t blocks = CeilDiv(std::max<int64_t>(1, longest), most_per_block);
    const int64_t most = CeilDiv(std::max<int64_t>(1, longest), 6);
    while (a.batch * a.q_heads * blocks < 2 * threads && blocks < most) blocks = std::min(most, 2 * blocks);
    p.query_block = CeilDiv(std::max<int64_t>(1, longest), blocks);
    // Whole 16-query panels where that keeps the block count: 1500 queries in 15 blocks of 96 and one of 60, not 16
    // of 94 (each padded to 96: 2% more products, in partial panels).
    const int64_t whole = CeilDiv(p.query_block, kGemmNR) * kGemmNR;
    if (CeilDiv(std::max<int64_t>(1, longest), whole) == blocks) p.query_block = whole;
  }
  for (int64_t b = 0; b < a.batch; ++b) {
    p.q_block_start.push_back(p.q_blocks_total);
    p.q_blocks_total += CeilDiv(p.q_len[b], p.query_block);
  }
  p.bf16 = a.bf16_products && a.elem == AttentionElem::kFloat32 && !a.k_transposed && Bf16GemmAvailable();
  if (p.bf16) {
    p.k_ld = (a.head_dim + 1) / 2 * 2, p.vt_ld = (p.key_block + 1) / 2 * 2;
    p.kf = (p.key_block * p.k_ld + 31) / 32 * 16;   // uint16 values, in floats, 64-byte multiples
    p.vf = (a.v_dim * p.vt_ld + 31) / 32 * 16;
    p.amx = CpuHasAmxBf16();
    if (p.amx) {   // whole 32-row blocks of 32-value steps (1 KiB tiles): a multiple of 64 bytes already
      p.kf = AmxTileValues(p.key_block, a.head_dim) / 2;
      p.vf = AmxTileValues(a.v_dim, p.key_block) / 2;
    }
    return p;
  }
  p.kf = PackedAFloats(p.key_block, a.head_dim);
  p.vf = PackedAFloats(a.v_dim, p.key_block);
  return p;
}

const char* RowBase(const AttentionOperand& o, AttentionElem e, int64_t b, int64_t h, int64_t row_start) {
  const int64_t off = (row_start ? row_start * o.row_stride : b * o.batch_stride) + h * o.head_stride;
  return static_cast<const char*>(o.data) + off * static_cast<int64_t>(ElemSize(e));
}

// rows x cols of a strided half-type operand as contiguous floats (the staging copy for packing).
void RowsToFloat(const char* src, AttentionElem e, int64_t rows, int64_t cols, int64_t stride, float* dst) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] = LoadElem(src, r * stride + c, e);
}

// True when every mask entry of the tile is "masked" (so the tile can be skipped for rows that already met
// a real score). Stops at the first attended entry, so unmasked tiles cost one read.
bool TileFullyMasked(const AttentionMask& m, const float* add_rows, const uint8_t* keep_rows, int64_t rows,
                     int64_t cols) {
  const int64_t n = m.col_stride ? cols : 1;
  if (m.row_stride == 0) rows = 1;   // every query row reads the same mask row
  for (int64_t i = 0; i < rows; ++i) {
    if (add_rows) {
      const float* r = add_rows + i * m.row_stride;
      for (int64_t j = 0; j < n; ++j)
        if (!(r[j] <= kMaskedBelow)) return false;
    } else {
      const uint8_t* r = keep_rows + i * m.row_stride;
      for (int64_t j = 0; j < n; ++j)
        if ((r[j] != 0) != m.keep_marks_masked) return false;
    }
  }
  return true;
}

// Column maxima of an n x w row-major tile folded into mx (w a multiple of 16).
LITE_VECTOR_CLONES void ColumnMax(const float* s, int64_t ld, int64_t n, int64_t w, float* mx) {
  for (int64_t k = 0; k < n; ++k) {
    const float* r = s + k * ld;
    for (int64_t i = 0; i < w; ++i) mx[i] = r[i] > mx[i] ? r[i] : mx[i];
  }
}

// p = exp(s - shift) per column, written as GEMM B panels of 16 columns (k-major: the layout PackB writes),
// and the column sums added to sum. Portable build.
void ExpToPanelsPortable(const float* s, int64_t ld, int64_t n, int64_t w, const float* shift, float* panels,
                         float* sum) {
  for (int64_t p = 0; p < w; p += kGemmNR) {
    float* dst = panels + p * n;
    for (int64_t k = 0; k < n; ++k) {
      const float* r = s + k * ld + p;
      for (int64_t j = 0; j < kGemmNR; ++j) {
        const float e = FastExp(r[j] - shift[p + j]);
        dst[k * kGemmNR + j] = e;
        sum[p + j] += e;
      }
    }
  }
}

#ifdef LITE_X86_SIMD

// One 16-column panel at a time: its shifts and sums stay in registers, its output is written sequentially.
__attribute__((target("avx2,fma"))) void ExpToPanelsAvx2(const float* s, int64_t ld, int64_t n, int64_t w,
                                                        const float* shift, float* panels, float* sum) {
  for (int64_t p = 0; p < w; p += kGemmNR) {
    const __m256 sh0 = _mm256_loadu_ps(shift + p), sh1 = _mm256_loadu_ps(shift + p + 8);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    float* dst = panels + p * n;
    const float* r = s + p;
    for (int64_t k = 0; k < n; ++k, r += ld, dst += kGemmNR) {
      const __m256 e0 = ExpNonPositive(_mm256_sub_ps(_mm256_loadu_ps(r), sh0));
      const __m256 e1 = ExpNonPositive(_mm256_sub_ps(_mm256_loadu_ps(r + 8), sh1));
      _mm256_storeu_ps(dst, e0);
      _mm256_storeu_ps(dst + 8, e1);
      acc0 = _mm256_add_ps(acc0, e0);
      acc1 = _mm256_add_ps(acc1, e1);
    }
    _mm256_storeu_ps(sum + p, _mm256_add_ps(_mm256_loadu_ps(sum + p), acc0));
    _mm256_storeu_ps(sum + p + 8, _mm256_add_ps(_mm256_loadu_ps(sum + p + 8), acc1));
  }
}
#endif

#ifdef LITE_X86_SIMD
// ExpToPanelsAvx2 on 16 lanes: one vector per key row of a panel (15% of a causal 512-token prompt's attention
// on AVX2's two half vectors, 0.9x the attention's time with these).
__attribute__((target("avx512f"))) void ExpToPanelsAvx512(const float* s, int64_t ld, int64_t n, int64_t w,
                                                          const float* shift, float* panels, float* sum) {
  for (int64_t p = 0; p < w; p += kGemmNR) {
    const __m512 sh = _mm512_loadu_ps(shift + p);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    float* dst = panels + p * n;
    const float* r = s + p;
    int64_t k = 0;
    for (; k + 2 <= n; k += 2, r += 2 * ld, dst += 2 * kGemmNR) {   // two rows: two independent exp chains
      const __m512 e0 = ExpNonPositive512(_mm512_sub_ps(_mm512_loadu_ps(r), sh));
      const __m512 e1 = ExpNonPositive512(_mm512_sub_ps(_mm512_loadu_ps(r + ld), sh));
      _mm512_storeu_ps(dst, e0);
      _mm512_storeu_ps(dst + kGemmNR, e1);
      acc0 = _mm512_add_ps(acc0, e0);
      acc1 = _mm512_add_ps(acc1, e1);
    }
    if (k < n) {
      const __m512 e0 = ExpNonPositive512(_mm512_sub_ps(_mm512_loadu_ps(r), sh));
      _mm512_storeu_ps(dst, e0);
      acc0 = _mm512_add_ps(acc0, e0);
    }
    _mm512_storeu_ps(sum + p, _mm512_add_ps(_mm512_loadu_ps(sum + p), _mm512_add_ps(acc0, acc1)));
  }
}

// P^T = exp(S^T - shift) (n keys x w queries, w a multiple of 16) straight into bf16 B panels of 32 queries by
// key pairs (Bf16PanelsB's layout, the padding zero); the float32 column sums added to sum.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void ExpToBf16Panels(const float* s, int64_t ld,
                                                                                       int64_t n, int64_t w,
                                                                                       const float* shift,
                                                                                       uint16_t* out, float* sum) {
  const int64_t pairs = (n + 1) / 2, chunks = w / 16;
  for (int64_t kp = 0; kp < pairs; ++kp) {
    const float* r0 = s + 2 * kp * ld;
    const bool second = 2 * kp + 1 < n;
    for (int64_t c = 0; c < chunks; ++c) {
      const __m512 sh = _mm512_loadu_ps(shift + 16 * c);
      const __m512 e0 = ExpNonPositive512(_mm512_sub_ps(_mm512_loadu_ps(r0 + 16 * c), sh));
      const __m512 e1 = second ? ExpNonPositive512(_mm512_sub_ps(_mm512_loadu_ps(r0 + ld + 16 * c), sh))
                               : _mm512_setzero_ps();
      _mm512_storeu_ps(sum + 16 * c, _mm512_add_ps(_mm512_loadu_ps(sum + 16 * c), _mm512_add_ps(e0, e1)));
      _mm512_storeu_si512(out + (c / 2) * pairs * 64 + kp * 64 + (c % 2) * 32, Bf16Pairs(e0, e1));
    }
    if (chunks % 2) _mm512_storeu_si512(out + (chunks / 2) * pairs * 64 + kp * 64 + 32, _mm512_setzero_si512());
  }
}
#endif

#ifdef LITE_ARM64_SIMD
// One 16-column panel at a time in NEON registers (FastExpNeon): 5.1 cycles a score on Neoverse N1's model, where
// GCC's vectorisation of the portable build took 7.8 (a 64-deep attention's two products take ~16 a score).
void ExpToPanelsNeon(const float* s, int64_t ld, int64_t n, int64_t w, const float* shift, float* panels, float* sum) {
  for (int64_t p = 0; p < w; p += kGemmNR) {
    float32x4_t sh[4], acc[4];
    for (int q = 0; q < 4; ++q) sh[q] = vld1q_f32(shift + p + 4 * q), acc[q] = vdupq_n_f32(0.f);
    float* dst = panels + p * n;
    const float* r = s + p;
    for (int64_t k = 0; k < n; ++k, r += ld, dst += kGemmNR)
      for (int q = 0; q < 4; ++q) {
        const float32x4_t e = FastExpNeon(vsubq_f32(vld1q_f32(r + 4 * q), sh[q]));
        vst1q_f32(dst + 4 * q, e);
        acc[q] = vaddq_f32(acc[q], e);
      }
    for (int q = 0; q < 4; ++q) vst1q_f32(sum + p + 4 * q, vaddq_f32(vld1q_f32(sum + p + 4 * q), acc[q]));
  }
}

// ARM BF16: two rows of 16 floats (depth k and k + 1 of 16 columns) as one 32-value run of bf16 pairs (Bf16PanelsB's
// layout: column j's two depths side by side), rounded to nearest even by bfcvtn.
__attribute__((target("arch=armv8.2-a+bf16"), always_inline)) inline void Bf16PairsNeon(const float32x4_t (&e0)[4],
                                                                                       const float32x4_t (&e1)[4],
                                                                                       uint16_t* out) {
  for (int h = 0; h < 2; ++h) {
    const uint16x8_t a = vreinterpretq_u16_bf16(vcvtq_high_bf16_f32(vcvtq_low_bf16_f32(e0[2 * h]), e0[2 * h + 1]));
    const uint16x8_t b = vreinterpretq_u16_bf16(vcvtq_high_bf16_f32(vcvtq_low_bf16_f32(e1[2 * h]), e1[2 * h + 1]));
    vst1q_u16(out + 16 * h, vzip1q_u16(a, b));
    vst1q_u16(out + 16 * h + 8, vzip2q_u16(a, b));
  }
}

// The AVX-512 builds' ExpToBf16Panels and TransposedQToBf16Panels for ARM BF16: P^T and Q^T straight into bf16 pair
// panels, so both products of the attention run on bfdot.
__attribute__((target("arch=armv8.2-a+bf16"))) void ExpToBf16Panels(const float* s, int64_t ld, int64_t n, int64_t w,
                                                                     const float* shift, uint16_t* out, float* sum) {
  const int64_t pairs = (n + 1) / 2, chunks = w / 16;
  for (int64_t kp = 0; kp < pairs; ++kp) {
    const float* r0 = s + 2 * kp * ld;
    const bool second = 2 * kp + 1 < n;
    for (int64_t c = 0; c < chunks; ++c) {
      float32x4_t e0[4], e1[4];
      for (int q = 0; q < 4; ++q) {
        const float32x4_t sh = vld1q_f32(shift + 16 * c + 4 * q);
        e0[q] = FastExpNeon(vsubq_f32(vld1q_f32(r0 + 16 * c + 4 * q), sh));
        e1[q] = second ? FastExpNeon(vsubq_f32(vld1q_f32(r0 + ld + 16 * c + 4 * q), sh)) : vdupq_n_f32(0.f);
        vst1q_f32(sum + 16 * c + 4 * q, vaddq_f32(vld1q_f32(sum + 16 * c + 4 * q), vaddq_f32(e0[q], e1[q])));
      }
      Bf16PairsNeon(e0, e1, out + (c / 2) * pairs * 64 + kp * 64 + (c % 2) * 32);
    }
    if (chunks % 2) std::memset(out + (chunks / 2) * pairs * 64 + kp * 64 + 32, 0, 32 * sizeof(uint16_t));
  }
}

__attribute__((target("arch=armv8.2-a+bf16"))) void TransposedQToBf16Panels(const float* t, int64_t ld, int64_t depth,
                                                                             int64_t w, uint16_t* out) {
  const int64_t pairs = depth / 2, chunks = w / 16;
  for (int64_t kp = 0; kp < pairs; ++kp) {
    const float* r0 = t + 2 * kp * ld;
    for (int64_t c = 0; c < chunks; ++c) {
      float32x4_t e0[4], e1[4];
      for (int q = 0; q < 4; ++q) e0[q] = vld1q_f32(r0 + 16 * c + 4 * q), e1[q] = vld1q_f32(r0 + ld + 16 * c + 4 * q);
      Bf16PairsNeon(e0, e1, out + (c / 2) * pairs * 64 + kp * 64 + (c % 2) * 32);
    }
    if (chunks % 2) std::memset(out + (chunks / 2) * pairs * 64 + kp * 64 + 32, 0, 32 * sizeof(uint16_t));
  }
}
#endif

using ExpToPanelsFn = void (*)(const float*, int64_t, int64_t, int64_t, const float*, float*, float*);

void ExpToPanels(const float* s, int64_t ld, int64_t n, int64_t w, const float* shift, float* panels, float* sum) {
  static const IsaKernel<ExpToPanelsFn> k = PickArmKernel<ExpToPanelsFn>(
      LITE_IF_ARM64_SIMD(ExpToPanelsNeon), ExpToPanelsPortable, LITE_IF_X86_SIMD(ExpToPanelsAvx2),
      LITE_IF_X86_SIMD(ExpToPanelsAvx512));
  k.fn(s, ld, n, w, shift, panels, sum);
}

// ExpToPanels with the scores' column maxima folded into col_max (NaNs ignored, as ColumnMax does) and the column
// sums written to tile_sum (not added to the running sums: the caller adds them once it knows the shift held).
// Portable and AVX2 builds: the two passes (ExpToPanels picks its own build).
void ExpToPanelsWithMaxTwoPasses(const float* s, int64_t ld, int64_t n, int64_t w, const float* shift, float* panels,
                                 float* tile_sum, float* col_max) {
  std::fill(tile_sum, tile_sum + w, 0.f);
  ColumnMax(s, ld, n, w, col_max);
  ExpToPanels(s, ld, n, w, shift, panels, tile_sum);
}

#ifdef LITE_X86_SIMD
// One pass: each score vector is read once for both its exponential and its column maximum.
__attribute__((target("avx512f"))) void ExpToPanelsWithMaxAvx512(const float* s, int64_t ld, int64_t n, int64_t w,
                                                                  const float* shift, float* panels, float* tile_sum,
                                                                  float* col_max) {
  for (int64_t p = 0; p < w; p += kGemmNR) {
    const __m512 sh = _mm512_loadu_ps(shift + p);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    __m512 mx0 = _mm512_loadu_ps(col_max + p), mx1 = mx0;
    float* dst = panels + p * n;
    const float* r = s + p;
    int64_t k = 0;
    for (; k + 2 <= n; k += 2, r += 2 * ld, dst += 2 * kGemmNR) {
      const __m512 s0 = _mm512_loadu_ps(r), s1 = _mm512_loadu_ps(r + ld);
      mx0 = _mm512_max_ps(s0, mx0);   // a NaN score leaves the maximum as it was (vmaxps returns the second operand)
      mx1 = _mm512_max_ps(s1, mx1);
      const __m512 e0 = ExpNonPositive512(_mm512_sub_ps(s0, sh));
      const __m512 e1 = ExpNonPositive512(_mm512_sub_ps(s1, sh));
      _mm512_storeu_ps(dst, e0);
      _mm512_storeu_ps(dst + kGemmNR, e1);
      acc0 = _mm512_add_ps(acc0, e0);
      acc1 = _mm512_add_ps(acc1, e1);
    }
    if (k < n) {
      const __m512 s0 = _mm512_loadu_ps(r);
      mx0 = _mm512_max_ps(s0, mx0);
      const __m512 e0 = ExpNonPositive512(_mm512_sub_ps(s0, sh));
      _mm512_storeu_ps(dst, e0);
      acc0 = _mm512_add_ps(acc0, e0);
    }
    _mm512_storeu_ps(col_max + p, _mm512_max_ps(mx0, mx1));
    _mm512_storeu_ps(tile_sum + p, _mm512_add_ps(acc0, acc1));
  }
}
#endif

using ExpToPanelsWithMaxFn = void (*)(const float*, int64_t, int64_t, int64_t, const float*, float*, float*, float*);

void ExpToPanelsWithMax(const float* s, int64_t ld, int64_t n, int64_t w, const float* shift, float* panels,
                        float* tile_sum, float* col_max) {
  static const IsaKernel<ExpToPanelsWithMaxFn> k = PickIsaKernel<ExpToPanelsWithMaxFn>(
      ExpToPanelsWithMaxTwoPasses, nullptr, LITE_IF_X86_SIMD(ExpToPanelsWithMaxAvx512));
  k.fn(s, ld, n, w, shift, panels, tile_sum, col_max);
}

LITE_VECTOR_CLONES void ScaleColumns(float* o, int64_t ld, int64_t rows, int64_t w, const float* c) {
  for (int64_t d = 0; d < rows; ++d)
    for (int64_t i = 0; i < w; ++i) o[d * ld + i] *= c[i];
}

// Per-thread working set of one (batch, head, query block) task. Everything is transposed: keys (or features)
// along rows, the block's queries along columns, so the softmax's per-query reductions are vector operations.
struct TaskBuffers {
  CacheLineVector<float> q_panels;    // Q^T (D x queries) as GEMM B panels
  CacheLineVector<float> scores;      // S^T: key_block x queries
  CacheLineVector<float> p_panels;    // P^T (keys x queries) as GEMM B panels
  CacheLineVector<float> acc;         // O^T: v_dim x queries, unnormalised
  CacheLineVector<float> staging;     // half-type queries as floats
  CacheLineVector<float> q_transposed;   // bf16 products: Q^T as floats (k_ld x queries) before its panels
  CacheLineVector<float> row_max, row_sum, shift, correction;   // per query
  CacheLineVector<float> tile_sum, tile_max;                     // per query: one key tile's (lazy rescaling)
  void Reserve(const AttentionArgs& a, const Plan& p) {
    const int64_t w = PaddedQueries(p.query_block);
    auto fit = [](CacheLineVector<float>& v, int64_t n) {
      if (v.size() < static_cast<size_t>(n)) v.resize(n);
    };
    fit(q_panels, PackedBFloats(a.head_dim, w));
    fit(scores, p.key_block * w);
    fit(p_panels, p.key_block * w);
    fit(acc, a.v_dim * w);
    if (a.elem != AttentionElem::kFloat32) fit(staging, p.query_block * a.head_dim);
    if (p.bf16) fit(q_transposed, p.k_ld * w);
    for (auto* v : {&row_max, &row_sum, &shift, &correction, &tile_sum, &tile_max}) fit(*v, w);
  }
};

#ifdef LITE_X86_SIMD
// Q^T (depth x w floats, ld apart, depth even, w a multiple of 16) as bf16 B panels of 32 queries by depth pairs
// (Bf16PanelsB's layout; a last half panel's columns zero).
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void TransposedQToBf16Panels(const float* t, int64_t ld,
                                                                                               int64_t depth, int64_t w,
                                                                                               uint16_t* out) {
  const int64_t pairs = depth / 2, chunks = w / 16;
  for (int64_t kp = 0; kp < pairs; ++kp) {
    const float* r0 = t + 2 * kp * ld;
    for (int64_t c = 0; c < chunks; ++c)
      _mm512_storeu_si512(out + (c / 2) * pairs * 64 + kp * 64 + (c % 2) * 32,
                          Bf16Pairs(_mm512_loadu_ps(r0 + 16 * c), _mm512_loadu_ps(r0 + ld + 16 * c)));
    if (chunks % 2) _mm512_storeu_si512(out + (chunks / 2) * pairs * 64 + kp * 64 + 32, _mm512_setzero_si512());
  }
}
#endif

void PackKeysAndValues(const AttentionArgs& a, const Plan& p, float* packed, ThreadPool* pool) {
  const int64_t blocks = p.max_key_blocks;
  auto pack = [&](int64_t tb, int64_t te) {
    thread_local CacheLineVector<float> staging, paged;
    for (int64_t t = tb; t < te; ++t) {
      const int64_t j = t % blocks, h = (t / blocks) % a.kv_heads, b = t / blocks / a.kv_heads;
      const int64_t k0 = j * p.key_block, n = std::min(p.key_block, p.kv_len[b] - k0);
      if (n <= 0) continue;
      float* dst = packed + t * (p.kf + p.vf);
      const int64_t es = static_cast<int64_t>(ElemSize(a.elem));
      const char* k = nullptr;
      const char* v = nullptr;
      AttentionOperand ko = a.k, vo = a.v;
      int64_t key0 = k0;
      if (a.kv_block_table) {   // paged: this tile's rows gathered from their blocks as contiguous float rows
        if (paged.size() < static_cast<size_t>(n * (a.head_dim + a.v_dim))) paged.resize(n * (a.head_dim + a.v_dim));
        float* kr = paged.data();
        float* vr = kr + n * a.head_dim;
        const int64_t* table = a.kv_block_table + b * a.kv_blocks_per_seq;
        for (int64_t r = 0; r < n; ++r) {
          const int64_t row = k0 + r, block = table[row / a.kv_block_size], in_block = row % a.kv_block_size;
          const int64_t kvs = CacheElemBytes(a.kv_elem);
          const char* kb = static_cast<const char*>(a.k.data) +
                           (block * a.k.batch_stride + h * a.k.head_stride + in_block * a.k.row_stride) * kvs;
          const char* vb = static_cast<const char*>(a.v.data) +
                           (block * a.v.batch_stride + h * a.v.head_stride + in_block * a.v.row_stride) * kvs;
          LoadCacheRow(kb, a.head_dim, a.kv_elem, kr + r * a.head_dim);   // half types and int8 rows widened here
          LoadCacheRow(vb, a.v_dim, a.kv_elem, vr + r * a.v_dim);
        }
        k = reinterpret_cast<const char*>(kr);
        v = reinterpret_cast<const char*>(vr);
        ko.row_stride = a.head_dim;
        vo.row_stride = a.v_dim;
        key0 = 0;   // the gathered rows start at this tile's first key
      } else {
        k = RowBase(a.k, a.elem, b, h, p.kv_start[b]);
        v = RowBase(a.v, a.elem, b, h, p.kv_start[b]);
      }
      if (a.kv_block_table && !p.bf16) {   // gathered float rows: the float32 packing below, from them
        PackAInto(false, n, a.head_dim, a.scale, reinterpret_cast<const float*>(k), ko.row_stride, dst);
        PackAInto(true, a.v_dim, n, 1.f, reinterpret_cast<const float*>(v), vo.row_stride, dst + p.kf);
        continue;
      }
      if (p.bf16) {   // K rows (scaled) and V^T rows as bf16, each padded with zeros to an even length
        const float* kf = reinterpret_cast<const float*>(k) + key0 * ko.row_stride;
        const float* vf = reinterpret_cast<const float*>(v) + key0 * vo.row_stride;
        uint16_t* kb = reinterpret_cast<uint16_t*>(dst);
        uint16_t* vb = reinterpret_cast<uint16_t*>(dst + p.kf);
        if (p.amx)
          AmxTileOrder(kf, n, a.head_dim, ko.row_stride, a.scale, kb);
        else
          for (int64_t r = 0; r < n; ++r) FloatsToBf16(kf + r * ko.row_stride, a.head_dim, p.k_ld, kb + r * p.k_ld, a.scale);
        // V^T: 8 value rows at a time transposed in registers, 8 features each (one value at a time, reading each row
        // contiguously, was 1.3% of a bf16 ViT-B/16 run), then to bf16 a row at a time.
        if (staging.size() < static_cast<size_t>(a.v_dim * n)) staging.resize(a.v_dim * n);
        float* vt = staging.data();
        TransposeBlock(vf, vo.row_stride, n, a.v_dim, vt, n);
        if (p.amx)
          AmxTileOrder(vt, a.v_dim, n, n, 1.f, vb);
        else
          for (int64_t d = 0; d < a.v_dim; ++d) FloatsToBf16(vt + d * n, n, p.vt_ld, vb + d * p.vt_ld);
        continue;
      }
      if (a.elem == AttentionElem::kFloat32) {
        const float* kf = reinterpret_cast<const float*>(k);
        if (a.k_transposed) {   // K^T rows are features: op(A) = (K^T)^T
          PackAInto(true, n, a.head_dim, a.scale, kf + k0, a.k.row_stride, dst);
        } else {
          PackAInto(false, n, a.head_dim, a.scale, kf + k0 * a.k.row_stride, a.k.row_stride, dst);
        }
        PackAInto(true, a.v_dim, n, 1.f, reinterpret_cast<const float*>(v) + k0 * a.v.row_stride, a.v.row_stride,
                  dst + p.kf);
        continue;
      }
      const int64_t width = std::max(a.head_dim, a.v_dim);
      if (staging.size() < static_cast<size_t>(n * width)) staging.resize(n * width);
      if (a.k_transposed) {
        RowsToFloat(k + k0 * es, a.elem, a.head_dim, n, a.k.row_stride, staging.data());
        PackAInto(true, n, a.head_dim, a.scale, staging.data(), n, dst);
      } else {
        RowsToFloat(k + k0 * a.k.row_stride * es, a.elem, n, a.head_dim, a.k.row_stride, staging.data());
        PackAInto(false, n, a.head_dim, a.scale, staging.data(), a.head_dim, dst);
      }
      RowsToFloat(v + k0 * a.v.row_stride * es, a.elem, n, a.v_dim, a.v.row_stride, staging.data());
      PackAInto(true, a.v_dim, n, 1.f, staging.data(), a.v_dim, dst + p.kf);
    }
  };
  const int64_t tasks = a.batch * a.kv_heads * blocks;
  if (pool && tasks > 1) pool->ParallelFor(tasks, 1, pack); else pack(0, tasks);
}

// Adds the mask (and -inf for causal) to S^T, a tile of keys [k0, k0 + n) x queries [r0, r0 + rows).
LITE_VECTOR_CLONES void MaskTile(const AttentionArgs& a, const float* add_rows, const uint8_t* keep_rows, int64_t r0,
                                 int64_t rows, int64_t k0, int64_t n, float* st, int64_t ld, int64_t off) {
  const AttentionMask& m = a.mask;
  if ((add_rows || keep_rows) && m.row_stride == 0) {   // one mask row for all queries (key padding): per key row
    for (int64_t k = 0; k < n; ++k) {
      const int64_t off = (k0 + k) * m.col_stride;
      float* row = st + k * ld;
      if (add_rows) {
        const float add = add_rows[off];
        if (add != 0.f)
          for (int64_t i = 0; i < rows; ++i) row[i] += add;
      } else if ((keep_rows[off] != 0) == m.keep_marks_masked) {
        std::fill(row, row + rows, -kInf);
      }
    }
  } else if (add_rows && m.col_stride == 1) {
    // Mask rows are queries, S^T rows keys: 8x8 blocks transposed in registers, then added a key row at a time
    // (the per-element version, stores down the columns, was 6% of a bf16 BERT-base run).
    const int64_t rows8 = rows / 8 * 8, n8 = n / 8 * 8;
    alignas(32) float block[8][8];
    float* const dst[8] = {block[0], block[1], block[2], block[3], block[4], block[5], block[6], block[7]};
    for (int64_t i = 0; i < rows8; i += 8)
      for (int64_t k = 0; k < n8; k += 8) {
        Transpose8x8To(add_rows + i * m.row_stride + k0 + k, m.row_stride, dst);
        for (int64_t c = 0; c < 8; ++c) {
          float* row = st + (k + c) * ld + i;
          for (int64_t j = 0; j < 8; ++j) row[j] += block[c][j];
        }
      }
    for (int64_t i = 0; i < rows; ++i) {   // the edges: the last rows % 8 queries, the last n % 8 keys
      const float* mr = add_rows + i * m.row_stride + k0;
      for (int64_t k = i < rows8 ? n8 : 0; k < n; ++k) st[k * ld + i] += mr[k];
    }
  } else if (add_rows || keep_rows) {
    for (int64_t i = 0; i < rows; ++i) {   // mask rows are queries: walk them contiguously, write down columns
      const int64_t off = i * m.row_stride + k0 * m.col_stride;
      if (add_rows) {
        const float* mr = add_rows + off;
        for (int64_t k = 0; k < n; ++k) st[k * ld + i] += mr[k * m.col_stride];
      } else {
        const uint8_t* kr = keep_rows + off;
        for (int64_t k = 0; k < n; ++k)
          if ((kr[k * m.col_stride] != 0) == m.keep_marks_masked) st[k * ld + i] = -kInf;
      }
    }
  }
  // Query r0 + i sits at position p = r0 + i + off; key j = k0 + k.
  if (a.causal) {   // key j is after the query when i < j - r0 - off
    for (int64_t k = 0; k < n; ++k) {
      const int64_t masked = std::min(rows, std::max<int64_t>(0, k0 + k - r0 - off));
      std::fill(st + k * ld, st + k * ld + masked, -kInf);
    }
  }
  if (a.right_window >= 0) {   // key j is too far ahead when i < j - r0 - off - right
    for (int64_t k = 0; k < n; ++k) {
      const int64_t masked = std::min(rows, std::max<int64_t>(0, k0 + k - r0 - off - a.right_window));
      std::fill(st + k * ld, st + k * ld + masked, -kInf);
    }
  }
  if (a.left_window >= 0) {   // key j is too far behind when i > j - r0 - off + left
    for (int64_t k = 0; k < n; ++k) {
      const int64_t first = std::min(rows, std::max<int64_t>(0, k0 + k - r0 - off + a.left_window + 1));
      std::fill(st + k * ld + first, st + k * ld + rows, -kInf);
    }
  }
}

void StoreRow(void* out, AttentionElem e, int64_t offset, const float* acc, int64_t stride, int64_t n, float mul,
              float fill, bool use_fill) {
  if (e == AttentionElem::kFloat32) {   // the common case without a per-element switch
    float* o = static_cast<float*>(out) + offset;
    if (use_fill) {
      std::fill(o, o + n, fill);
    } else {
      for (int64_t c = 0; c < n; ++c) o[c] = acc[c * stride] * mul;
    }
    return;
  }
  for (int64_t c = 0; c < n; ++c) {
    const float v = use_fill ? fill : acc[c * stride] * mul;
    switch (e) {
      case AttentionElem::kFloat16: static_cast<uint16_t*>(out)[offset + c] = FloatToHalf(v); break;
      case AttentionElem::kBFloat16: static_cast<uint16_t*>(out)[offset + c] = FloatToBFloat16(v); break;
      default: static_cast<float*>(out)[offset + c] = v;
    }
  }
}

// Attention of queries [r0, r0 + rows) of head h in sample b.
void RunQueryBlock(const AttentionArgs& a, const Plan& p, const float* packed, int64_t b, int64_t h, int64_t qb,
                   TaskBuffers& buf) {
  const int64_t r0 = qb * p.query_block, rows = std::min(p.query_block, p.q_len[b] - r0);
  const int64_t group = a.q_heads / a.kv_heads, hk = h / group;
  const int64_t w = PaddedQueries(rows), kv_len = p.kv_len[b];
  const int64_t offset = a.causal_offset + (a.causal_from_end ? p.kv_len[b] - p.q_len[b] : 0);   // query 0's position
  const AttentionMask& m = a.mask;
  const float* add_rows = m.add ? m.add + b * m.batch_stride + h * m.head_stride + r0 * m.row_stride : nullptr;
  const uint8_t* keep_rows = m.keep ? m.keep + b * m.batch_stride + h * m.head_stride + r0 * m.row_stride : nullptr;
  float* st = buf.scores.data();
  float* pp = buf.p_panels.data();
  float* acc = buf.acc.data();
  float* row_max = buf.row_max.data();
  float* row_sum = buf.row_sum.data();
  float* shift = buf.shift.data();
  float* corr = buf.correction.data();
  float* tile_sum = buf.tile_sum.data();
  float* tile_max = buf.tile_max.data();
  const char* q = RowBase(a.q, a.elem, b, h, p.q_start[b]) + r0 * a.q.row_stride * static_cast<int64_t>(ElemSize(a.elem));
  if (p.bf16) {   // Q^T as bf16 B panels: Q transposed by 8x8 blocks (padding zero), then pairs of its rows
#if defined(LITE_X86_SIMD) || defined(LITE_ARM64_SIMD)
    float* qtf = buf.q_transposed.data();
    TransposeBlock(reinterpret_cast<const float*>(q), a.q.row_stride, rows, a.head_dim, qtf, w);
    for (int64_t d = 0; d < p.k_ld; ++d)
      std::fill(qtf + d * w + (d < a.head_dim ? rows : 0), qtf + (d + 1) * w, 0.f);
    TransposedQToBf16Panels(qtf, w, p.k_ld, w, reinterpret_cast<uint16_t*>(buf.q_panels.data()));
#endif
  } else if (a.elem == AttentionElem::kFloat32) {
    PackBInto(true, a.head_dim, rows, reinterpret_cast<const float*>(q), a.q.row_stride, buf.q_panels.data());
  } else {
    RowsToFloat(q, a.elem, rows, a.head_dim, a.q.row_stride, buf.staging.data());
    PackBInto(true, a.head_dim, rows, buf.staging.data(), a.head_dim, buf.q_panels.data());
  }
  std::fill(acc, acc + a.v_dim * w, 0.f);
  std::fill(row_max, row_max + w, -kInf);
  std::fill(row_sum, row_sum + w, 0.f);
  bool every_row_has_a_score = false;   // all rows met a finite score: masked tiles add exactly nothing
  bool every_column_has_a_max = false;  // every column (padding included) has a finite running maximum: lazy rescaling

  // The key blocks to visit: all of them, or this block's selection.
  const int64_t dense_blocks = CeilDiv(kv_len, p.key_block);
  const int64_t* selected = nullptr;
  int64_t visits = dense_blocks;
  if (a.select_idx) {
    const int64_t g = (p.q_block_start[b] + qb) * a.q_heads + h;
    selected = a.select_idx + g * a.max_selected;
    visits = a.select_num[g];
  }
  for (int64_t v = 0; v < visits; ++v) {
    const int64_t j = selected ? selected[v] : v;
    const int64_t k0 = j * p.key_block, n = std::min(p.key_block, kv_len - k0);
    const int64_t last_pos = r0 + rows - 1 + offset;   // the position of this block's last query
    if (a.causal && k0 > last_pos) break;   // every key of this and later tiles is after every query
    if (a.right_window >= 0 && k0 > last_pos + a.right_window) break;   // past every query's window
    if (a.left_window >= 0 && k0 + n - 1 < r0 + offset - a.left_window) continue;   // before every window
    const int64_t col_off = k0 * m.col_stride;
    if (m.present() && every_row_has_a_score &&
        TileFullyMasked(m, add_rows ? add_rows + col_off : nullptr, keep_rows ? keep_rows + col_off : nullptr,
                        rows, n))
      continue;
    const float* pk = packed + ((b * a.kv_heads + hk) * p.max_key_blocks + j) * (p.kf + p.vf);
    // S^T (keys x queries) = (scale K) Q^T
    if (p.bf16) {   // the padding columns of Q^T are zero: so are those of S^T
      Bf16GemmPanelsInline(reinterpret_cast<const uint16_t*>(pk), p.k_ld, n, a.head_dim,
                           reinterpret_cast<const uint16_t*>(buf.q_panels.data()), w, false, st, w, p.amx);
    } else {
      // All w columns: Q^T's padding columns are zero, so are S^T's (defined values for the vector loops below), and
      // every register tile is a full one (a partial tile's sums go through memory: 94 queries a block, the last
      // tiles of both products partial, were a tenth of a 1500-token attention's time).
      SgemmPackedTiles(pk, buf.q_panels.data(), n, w, a.head_dim, false, st, w);
    }
    if (a.softcap > 0.f) {   // before the mask, so masked scores stay -inf (Gemma 2's soft-capping)
      const float cap = a.softcap, inv = 1.f / a.softcap;
      for (int64_t k = 0; k < n; ++k)
        for (int64_t i = 0; i < rows; ++i) st[k * w + i] = cap * FastTanh(st[k * w + i] * inv);
    }
    MaskTile(a, add_rows, keep_rows, r0, rows, k0, n, st, w, offset);
    // Online softmax, per query (column). float32 products: once every column has a finite maximum, the tile is
    // exponentiated against the running maxima as they stand, its own maxima found in the same pass; only a tile whose
    // maxima rise past the margin goes the two-pass way below (a 1500-token attention's column-maximum and rescaling
    // passes were 4% of its time).
    if (!p.bf16 && every_column_has_a_max) {
      std::copy(row_max, row_max + w, tile_max);
      ExpToPanelsWithMax(st, w, n, w, row_max, pp, tile_sum, tile_max);
      bool held = true;
      for (int64_t i = 0; i < w; ++i) held = held && tile_max[i] <= row_max[i] + kLazyRescaleMargin;
      if (held) {
        for (int64_t i = 0; i < w; ++i) row_sum[i] += tile_sum[i];
        SgemmPackedTiles(pk + p.kf, pp, a.v_dim, w, n, true, acc, w);
        continue;
      }
      std::copy(tile_max, tile_max + w, shift);   // the maxima are known: on with the tile's new ones
    } else {
      std::copy(row_max, row_max + w, shift);
      ColumnMax(st, w, n, w, shift);
    }
    bool all_real = true, all_columns = true;
    for (int64_t i = 0; i < w; ++i) {
      const float new_max = shift[i];
      all_real = all_real && (i >= rows || new_max > kMaskedBelow * 0.1f);
      all_columns = all_columns && new_max > kMaskedBelow * 0.1f && new_max < kInf;
      shift[i] = new_max == -kInf ? 0.f : new_max;   // a column with no score yet: exp(-inf - 0) = 0
      corr[i] = FastExp(row_max[i] - shift[i]);
      row_max[i] = new_max;
      row_sum[i] *= corr[i];
    }
    every_row_has_a_score = all_real;
    every_column_has_a_max = all_columns;
    ScaleColumns(acc, w, a.v_dim, w, corr);
    // O^T (Dv x queries) += V^T P^T
    if (p.bf16) {   // P^T straight into bf16 B panels
#if defined(LITE_X86_SIMD) || defined(LITE_ARM64_SIMD)
      uint16_t* pb = reinterpret_cast<uint16_t*>(pp);
      ExpToBf16Panels(st, w, n, w, shift, pb, row_sum);
      Bf16GemmPanelsInline(reinterpret_cast<const uint16_t*>(pk + p.kf), p.vt_ld, a.v_dim, n, pb, w, true, acc, w,
                           p.amx);
#endif
    } else {
      ExpToPanels(st, w, n, w, shift, pp, row_sum);
      SgemmPackedTiles(pk + p.kf, pp, a.v_dim, w, n, true, acc, w);   // the padding columns' sums are never read
    }
  }

  const int64_t out_base = (a.q_lens ? (p.q_start[b] + r0) * a.out_row_stride : b * a.out_batch_stride + r0 * a.out_row_stride) +
                           h * a.out_head_stride;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // bf16 products, float32 out: O = (O^T)^T by 8x8 blocks straight into the output rows, each then scaled in place
  // (read down O^T's columns one value at a time, the store was 0.6% of a bf16 ViT-B/16 run).
  const bool transposed_store = p.bf16 && a.elem == AttentionElem::kFloat32;
  if (transposed_store) TransposeBlock(acc, w, a.v_dim, rows, static_cast<float*>(a.out) + out_base, a.out_row_stride);
  for (int64_t i = 0; i < rows; ++i) {
    const bool empty = !(row_sum[i] > 0.f);
    if (transposed_store) {
      float* o = static_cast<float*>(a.out) + out_base + i * a.out_row_stride;
      if (empty) {
        std::fill(o, o + a.v_dim, a.zero_masked_rows ? 0.f : nan);
      } else {
        const float mul = 1.f / row_sum[i];
        for (int64_t c = 0; c < a.v_dim; ++c) o[c] *= mul;
      }
    } else {
      StoreRow(a.out, a.elem, out_base + i * a.out_row_stride, acc + i, w, a.v_dim, empty ? 0.f : 1.f / row_sum[i],
               a.zero_masked_rows ? 0.f : nan, empty);
    }
    if (a.lse) {
      const int64_t row = a.q_lens ? p.q_start[b] + r0 + i : r0 + i;
      a.lse[(a.q_lens ? 0 : b * a.lse_batch_stride) + h * a.lse_head_stride + row * a.lse_row_stride] =
          empty ? -kInf : row_max[i] + std::log(row_sum[i]);
    }
  }
}

}  // namespace

size_t AttentionScratchBytes(const AttentionArgs& a) {
  // Float32 panels or bf16 blocks, whichever is larger: the kernel sizes its scratch when it plans, before it knows
  // the run's precision (AMX tile order pads a head of 8 features to a step of 32: four times the float32 bytes).
  auto bytes = [&](const AttentionArgs& args) {
    size_t most = 0;
    for (const bool bf16 : {false, true}) {
      AttentionArgs with = args;
      with.bf16_products = bf16;
      const Plan p = MakePlan(with, 1);
      most = std::max(most, static_cast<size_t>(args.batch * args.kv_heads * p.max_key_blocks * (p.kf + p.vf)) *
                                sizeof(float));
    }
    return most;
  };
  if (a.key_block > 0) return bytes(a);
  // The tiles are chosen per run from the query lengths (a causal prompt's or the default), which a caller sizing
  // the scratch ahead (the runtime, when it plans) does not know yet: enough for either.
  AttentionArgs fixed = a;
  fixed.key_block = kDefaultKeyBlock;
  const size_t default_tiles = bytes(fixed);
  fixed.key_block = kCausalKeyBlock;
  return std::max(default_tiles, bytes(fixed));
}

void ValidateAttention(const AttentionArgs& a) {
  auto require = [](bool ok, const std::string& msg) {
    if (!ok) throw InvalidArgument("attention: " + msg);
  };
  require(a.batch >= 0 && a.q_heads > 0 && a.kv_heads > 0 && a.head_dim > 0 && a.v_dim > 0,
          "batch, heads and head sizes must be positive");
  require(a.q_heads % a.kv_heads == 0, "the query heads (" + std::to_string(a.q_heads) +
                                           ") are not a multiple of the key/value heads (" + std::to_string(a.kv_heads) + ")");
  require(a.key_block >= 0 && a.query_block >= 0, "block sizes must be positive");
  require(a.left_window >= -1 && a.right_window >= -1, "window sizes must be -1 (unbounded) or nonnegative");
  require(a.elem != AttentionElem::kInt8Rows, "int8 rows are a paged cache's element type, not the queries'");
  require(a.kv_elem != AttentionElem::kInt8Rows || a.kv_block_table, "an int8 cache must be paged");
  if (a.kv_block_table) {
    require(!a.k_transposed && a.kv_block_size > 0 && a.kv_blocks_per_seq > 0 && a.kv_num_blocks > 0,
            "paged keys/values need kv_block_size, kv_blocks_per_seq and kv_num_blocks > 0 and untransposed K");
    for (int64_t b = 0; b < a.batch; ++b) {
      const int64_t len = a.kv_lens ? a.kv_lens[b] : a.kv_len;
      const int64_t used = (len + a.kv_block_size - 1) / a.kv_block_size;
      require(used <= a.kv_blocks_per_seq, "sample " + std::to_string(b) + " has " + std::to_string(len) +
                                                " keys: more than its " + std::to_string(a.kv_blocks_per_seq) + " blocks hold");
      for (int64_t i = 0; i < used; ++i) {
        const int64_t block = a.kv_block_table[b * a.kv_blocks_per_seq + i];
        if (block < 0 || block >= a.kv_num_blocks)   // (the message is built only when it is needed: every step)
          require(false, "kv_block_table[" + std::to_string(b) + ", " +
                                                           std::to_string(i) + "] = " + std::to_string(block) +
                                                           " is outside the " + std::to_string(a.kv_num_blocks) + " blocks");
      }
    }
  }
  if (a.causal_from_end)
    for (int64_t b = 0; b < a.batch; ++b)
      require((a.kv_lens ? a.kv_lens[b] : a.kv_len) >= (a.q_lens ? a.q_lens[b] : a.q_len),
              "causal_from_end: sample " + std::to_string(b) + " has more queries than keys");
  for (int64_t b = 0; b < a.batch; ++b) {
    if (a.q_lens) require(a.q_lens[b] >= 0 && a.q_lens[b] <= a.q_len, "q_lens[" + std::to_string(b) + "] out of range");
    if (a.kv_lens) require(a.kv_lens[b] >= 0 && a.kv_lens[b] <= a.kv_len, "kv_lens[" + std::to_string(b) + "] out of range");
  }
  if (!a.select_idx) return;
  require(a.select_num && a.max_selected >= 0, "select_idx needs select_num");
  const Plan p = MakePlan(a, 1);
  for (int64_t b = 0; b < a.batch; ++b) {
    const int64_t kb = CeilDiv(p.kv_len[b], p.key_block), qbs = CeilDiv(p.q_len[b], p.query_block);
    for (int64_t qb = 0; qb < qbs; ++qb)
      for (int64_t h = 0; h < a.q_heads; ++h) {
        const int64_t g = (p.q_block_start[b] + qb) * a.q_heads + h, count = a.select_num[g];
        const std::string where = "query block " + std::to_string(p.q_block_start[b] + qb) + ", head " + std::to_string(h);
        require(count >= 0 && count <= a.max_selected && count <= kb,
                "select_num_idx at " + where + " is " + std::to_string(count) + "; it must be in [0, " +
                    std::to_string(std::min(a.max_selected, kb)) + "]");
        const int64_t* sel = a.select_idx + g * a.max_selected;
        for (int64_t i = 0; i < count; ++i) {
          require(sel[i] >= 0 && sel[i] < kb, "select_idx at " + where + " names key block " + std::to_string(sel[i]) +
                                                  " of " + std::to_string(kb));
          require(i == 0 || sel[i] > sel[i - 1], "select_idx at " + where + " is not strictly ascending");
        }
      }
  }
}

void RunAttention(const AttentionArgs& a, void* scratch, ThreadPool* pool) {
  if (a.batch <= 0 || a.q_heads <= 0 || a.v_dim <= 0) return;
  if (IsPagedDecodeStep(a) || IsDenseDecodeStep(a)) return RunPagedDecode(a, pool);
  const int64_t threads = pool ? pool->size() : 1;
  const Plan p = MakePlan(a, threads);
  float* packed = static_cast<float*>(scratch);
  PackKeysAndValues(a, p, packed, pool);
  // Tasks: (sample, head, query block), numbered so that one sample's blocks are contiguous.
  const int64_t tasks = p.q_blocks_total * a.q_heads;
  auto run = [&](int64_t tb, int64_t te) {
    thread_local TaskBuffers buf;
    buf.Reserve(a, p);
    for (int64_t t = tb; t < te; ++t) {
      const int64_t h = t % a.q_heads, g = t / a.q_heads;
      const int64_t b = static_cast<int64_t>(std::upper_bound(p.q_block_start.begin(), p.q_block_start.end(), g) -
                                             p.q_block_start.begin()) - 1;
      RunQueryBlock(a, p, packed, b, h, g - p.q_block_start[b], buf);
    }
  };
  if (pool && tasks > 1) pool->ParallelFor(tasks, 1, run); else run(0, tasks);
}

std::string AttentionImplementation(const AttentionArgs& a) {
  if (IsPagedDecodeStep(a) || IsDenseDecodeStep(a)) return "attention_decode";
  const Plan p = MakePlan(a, 1);
  return p.bf16 ? (p.amx ? "attention_bf16_amx" : "attention_bf16") : "attention";
}

void ComputeAttention(const AttentionArgs& args, int threads) {
  ValidateAttention(args);
  std::vector<float> scratch(AttentionScratchBytes(args) / sizeof(float) + 16);
  RunOnSharedPool(threads, [&](ThreadPool* pool) { RunAttention(args, scratch.data(), pool); });
}

}  // namespace lite
