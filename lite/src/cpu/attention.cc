#include "cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "cpu/gemm.h"
#include "cpu/isa_dispatch.h"
#include "cpu/simd.h"

#ifdef LITE_X86_SIMD
#include <immintrin.h>
#endif

namespace lite {
namespace {

constexpr int64_t kKeyBlock = 256;    // keys per tile: one packed K block (D x 256) and V block (256 x Dv) in L2
constexpr int64_t kQueryBlock = 96;   // queries per task at most: a multiple of the GEMM's 6-row register tile
constexpr float kInf = std::numeric_limits<float>::infinity();
// Mask values at or below this are "masked" for tile skipping: added to any sane score, exp() of the result
// relative to a row's real maximum is exactly 0 in float32.
constexpr float kMaskedBelow = -1e30f;

int64_t KeyBlocks(const AttentionArgs& a) { return (a.kv_len + kKeyBlock - 1) / kKeyBlock; }
// Per key block: K (keys x D, scaled) and V^T (Dv x keys), both as GEMM A operands.
int64_t PackedKFloats(const AttentionArgs& a) { return PackedAFloats(kKeyBlock, a.head_dim); }
int64_t PackedVFloats(const AttentionArgs& a) { return PackedAFloats(a.v_dim, kKeyBlock); }
int64_t PaddedQueries(int64_t rows) { return (rows + kGemmNR - 1) / kGemmNR * kGemmNR; }

// True when every mask entry of the tile is "masked" (so the tile can be skipped for rows that already met
// a real score). Stops at the first attended entry, so unmasked tiles cost one read.
bool TileFullyMasked(const AttentionMask& m, const float* add_rows, const uint8_t* keep_rows, int64_t rows,
                     int64_t cols) {
  const int64_t n = m.col_stride ? cols : 1;
  for (int64_t i = 0; i < rows; ++i) {
    if (add_rows) {
      const float* r = add_rows + i * m.row_stride;
      for (int64_t j = 0; j < n; ++j)
        if (!(r[j] <= kMaskedBelow)) return false;
    } else {
      const uint8_t* r = keep_rows + i * m.row_stride;
      for (int64_t j = 0; j < n; ++j)
        if (r[j]) return false;
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
// exp(x) for x <= 0 (x is a score minus its column's maximum) or -inf: no overflow handling, 2^n built
// directly (n >= -126 after the clamp), one rounding instruction. Same polynomial as FastExp (~2 ulp).
__attribute__((target("avx2,fma"))) inline __m256 ExpNonPositive(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.3365f);
  const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_max_ps(x, lo);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

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

using ExpToPanelsFn = void (*)(const float*, int64_t, int64_t, int64_t, const float*, float*, float*);

void ExpToPanels(const float* s, int64_t ld, int64_t n, int64_t w, const float* shift, float* panels, float* sum) {
  static const IsaKernel<ExpToPanelsFn> k = PickIsaKernel<ExpToPanelsFn>(
      ExpToPanelsPortable, LITE_IF_X86_SIMD(ExpToPanelsAvx2), LITE_IF_X86_SIMD(ExpToPanelsAvx2));
  k.fn(s, ld, n, w, shift, panels, sum);
}

LITE_VECTOR_CLONES void ScaleColumns(float* o, int64_t ld, int64_t rows, int64_t w, const float* c) {
  for (int64_t d = 0; d < rows; ++d)
    for (int64_t i = 0; i < w; ++i) o[d * ld + i] *= c[i];
}

// Per-thread working set of one (batch, head, query block) task. Everything is transposed: keys (or features)
// along rows, the block's queries along columns, so the softmax's per-query reductions are vector operations.
struct TaskBuffers {
  std::vector<float> q_panels;    // Q^T (D x queries) as GEMM B panels
  std::vector<float> scores;      // S^T: kKeyBlock x queries
  std::vector<float> p_panels;    // P^T (keys x queries) as GEMM B panels
  std::vector<float> acc;         // O^T: v_dim x queries, unnormalised
  std::vector<float> row_max, row_sum, shift, correction;   // per query
  void Reserve(int64_t head_dim, int64_t v_dim) {
    const int64_t w = PaddedQueries(kQueryBlock);
    auto fit = [](std::vector<float>& v, int64_t n) {
      if (v.size() < static_cast<size_t>(n)) v.resize(n);
    };
    fit(q_panels, PackedBFloats(head_dim, w));
    fit(scores, kKeyBlock * w);
    fit(p_panels, kKeyBlock * w);
    fit(acc, v_dim * w);
    for (auto* v : {&row_max, &row_sum, &shift, &correction}) fit(*v, w);
  }
};

void PackKeysAndValues(const AttentionArgs& a, float* packed, ThreadPool* pool) {
  const int64_t blocks = KeyBlocks(a), kf = PackedKFloats(a), vf = PackedVFloats(a);
  auto pack = [&](int64_t tb, int64_t te) {
    for (int64_t t = tb; t < te; ++t) {
      const int64_t j = t % blocks, h = (t / blocks) % a.kv_heads, b = t / blocks / a.kv_heads;
      const int64_t k0 = j * kKeyBlock, n = std::min(kKeyBlock, a.kv_len - k0);
      float* dst = packed + t * (kf + vf);
      const float* k = a.k.At(b, h);
      if (a.k_transposed) {   // K^T rows are features: op(A) = (K^T)^T
        PackAInto(true, n, a.head_dim, a.scale, k + k0, a.k.row_stride, dst);
      } else {
        PackAInto(false, n, a.head_dim, a.scale, k + k0 * a.k.row_stride, a.k.row_stride, dst);
      }
      PackAInto(true, a.v_dim, n, 1.f, a.v.At(b, h) + k0 * a.v.row_stride, a.v.row_stride, dst + kf);
    }
  };
  const int64_t tasks = a.batch * a.kv_heads * blocks;
  if (pool && tasks > 1) pool->ParallelFor(tasks, 1, pack); else pack(0, tasks);
}

// Adds the mask (and -inf for causal) to S^T, a tile of keys [k0, k0 + n) x queries [r0, r0 + rows).
void MaskTile(const AttentionArgs& a, const float* add_rows, const uint8_t* keep_rows, int64_t r0, int64_t rows,
              int64_t k0, int64_t n, float* st, int64_t ld) {
  const AttentionMask& m = a.mask;
  if (add_rows || keep_rows) {
    for (int64_t i = 0; i < rows; ++i) {   // mask rows are queries: walk them contiguously, write down columns
      const int64_t off = i * m.row_stride + k0 * m.col_stride;
      if (add_rows) {
        const float* mr = add_rows + off;
        for (int64_t k = 0; k < n; ++k) st[k * ld + i] += mr[k * m.col_stride];
      } else {
        const uint8_t* kr = keep_rows + off;
        for (int64_t k = 0; k < n; ++k)
          if (!kr[k * m.col_stride]) st[k * ld + i] = -kInf;
      }
    }
  }
  if (a.causal) {   // key k0 + k is after query r0 + i when i < k0 + k - r0
    for (int64_t k = 0; k < n; ++k) {
      const int64_t masked = std::min(rows, std::max<int64_t>(0, k0 + k - r0));
      std::fill(st + k * ld, st + k * ld + masked, -kInf);
    }
  }
}

// Attention of queries [r0, r0 + rows) of head h in batch b.
void RunQueryBlock(const AttentionArgs& a, const float* packed, int64_t b, int64_t h, int64_t r0, int64_t rows,
                   TaskBuffers& buf) {
  const int64_t group = a.q_heads / a.kv_heads, hk = h / group;
  const int64_t blocks = KeyBlocks(a), kf = PackedKFloats(a), vf = PackedVFloats(a);
  const int64_t w = PaddedQueries(rows);
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
  PackBInto(true, a.head_dim, rows, a.q.At(b, h) + r0 * a.q.row_stride, a.q.row_stride, buf.q_panels.data());
  std::fill(acc, acc + a.v_dim * w, 0.f);
  std::fill(row_max, row_max + w, -kInf);
  std::fill(row_sum, row_sum + w, 0.f);
  bool every_row_has_a_score = false;   // all rows met a finite score: masked tiles add exactly nothing

  for (int64_t j = 0; j < blocks; ++j) {
    const int64_t k0 = j * kKeyBlock, n = std::min(kKeyBlock, a.kv_len - k0);
    if (a.causal && k0 > r0 + rows - 1) break;   // every key of this and later tiles is after every query
    const int64_t col_off = k0 * m.col_stride;
    if (m.present() && every_row_has_a_score &&
        TileFullyMasked(m, add_rows ? add_rows + col_off : nullptr, keep_rows ? keep_rows + col_off : nullptr,
                        rows, n))
      continue;
    const float* pk = packed + ((b * a.kv_heads + hk) * blocks + j) * (kf + vf);
    // S^T (keys x queries) = (scale K) Q^T
    SgemmPackedAB(pk, buf.q_panels.data(), n, rows, a.head_dim, 0.f, st, w, nullptr);
    if (w > rows)   // padding columns: defined values, so the vector loops below never meet stale NaNs
      for (int64_t k = 0; k < n; ++k) std::fill(st + k * w + rows, st + k * w + w, 0.f);
    MaskTile(a, add_rows, keep_rows, r0, rows, k0, n, st, w);
    // Online softmax, per query (column).
    std::copy(row_max, row_max + w, shift);
    ColumnMax(st, w, n, w, shift);
    bool all_real = true;
    for (int64_t i = 0; i < w; ++i) {
      const float new_max = shift[i];
      all_real = all_real && (i >= rows || new_max > kMaskedBelow * 0.1f);
      shift[i] = new_max == -kInf ? 0.f : new_max;   // a column with no score yet: exp(-inf - 0) = 0
      corr[i] = FastExp(row_max[i] - shift[i]);
      row_max[i] = new_max;
      row_sum[i] *= corr[i];
    }
    every_row_has_a_score = all_real;
    ScaleColumns(acc, w, a.v_dim, w, corr);
    ExpToPanels(st, w, n, w, shift, pp, row_sum);
    // O^T (Dv x queries) += V^T P^T
    SgemmPackedAB(pk + kf, pp, a.v_dim, rows, n, 1.f, acc, w, nullptr);
  }

  float* out = a.out + b * a.out_batch_stride + h * a.out_head_stride + r0 * a.out_row_stride;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t i = 0; i < rows; ++i) {
    float* o = out + i * a.out_row_stride;
    if (row_sum[i] > 0.f) {
      const float inv = 1.f / row_sum[i];
      for (int64_t c = 0; c < a.v_dim; ++c) o[c] = acc[c * w + i] * inv;
    } else {
      std::fill(o, o + a.v_dim, a.zero_masked_rows ? 0.f : nan);
    }
  }
}

}  // namespace

size_t AttentionScratchBytes(const AttentionArgs& a) {
  const int64_t per_block = PackedKFloats(a) + PackedVFloats(a);
  return static_cast<size_t>(a.batch * a.kv_heads * KeyBlocks(a) * per_block) * sizeof(float);
}

void RunAttention(const AttentionArgs& a, void* scratch, ThreadPool* pool) {
  if (a.batch <= 0 || a.q_heads <= 0 || a.q_len <= 0 || a.v_dim <= 0) return;
  if (a.kv_len <= 0) {   // nothing to attend: every row is fully masked
    const float fill = a.zero_masked_rows ? 0.f : std::numeric_limits<float>::quiet_NaN();
    for (int64_t b = 0; b < a.batch; ++b)
      for (int64_t h = 0; h < a.q_heads; ++h)
        for (int64_t i = 0; i < a.q_len; ++i) {
          float* o = a.out + b * a.out_batch_stride + h * a.out_head_stride + i * a.out_row_stride;
          std::fill(o, o + a.v_dim, fill);
        }
    return;
  }
  float* packed = static_cast<float*>(scratch);
  PackKeysAndValues(a, packed, pool);

  // Query blocks of at most kQueryBlock rows; more, smaller blocks when (batch x heads) cannot keep every
  // thread busy.
  const int64_t threads = pool ? pool->size() : 1;
  int64_t q_blocks = (a.q_len + kQueryBlock - 1) / kQueryBlock;
  const int64_t max_blocks = (a.q_len + 5) / 6;
  while (a.batch * a.q_heads * q_blocks < 2 * threads && q_blocks < max_blocks) q_blocks = std::min(max_blocks, 2 * q_blocks);
  const int64_t rows_per_block = (a.q_len + q_blocks - 1) / q_blocks;
  q_blocks = (a.q_len + rows_per_block - 1) / rows_per_block;
  const int64_t tasks = a.batch * a.q_heads * q_blocks;
  auto run = [&](int64_t tb, int64_t te) {
    thread_local TaskBuffers buf;
    buf.Reserve(a.head_dim, a.v_dim);
    for (int64_t t = tb; t < te; ++t) {
      const int64_t qb = t % q_blocks, h = (t / q_blocks) % a.q_heads, b = t / q_blocks / a.q_heads;
      const int64_t r0 = qb * rows_per_block;
      RunQueryBlock(a, packed, b, h, r0, std::min(rows_per_block, a.q_len - r0), buf);
    }
  };
  if (pool && tasks > 1) pool->ParallelFor(tasks, 1, run); else run(0, tasks);
}

}  // namespace lite
