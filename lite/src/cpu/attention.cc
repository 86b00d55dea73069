#include "cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "cpu/gemm.h"
#include "cpu/simd.h"

namespace lite {
namespace {

constexpr int64_t kKeyBlock = 256;    // keys per tile: one packed K block (D x 256) and V block (256 x Dv) in L2
constexpr int64_t kQueryBlock = 96;   // queries per task at most: a multiple of the GEMM's 6-row register tile
constexpr float kInf = std::numeric_limits<float>::infinity();
// Mask values at or below this are "masked" for tile skipping: added to any sane score, exp() of the result
// relative to a row's real maximum is exactly 0 in float32.
constexpr float kMaskedBelow = -1e30f;

int64_t KeyBlocks(const AttentionArgs& a) { return (a.kv_len + kKeyBlock - 1) / kKeyBlock; }
int64_t PackedKFloats(const AttentionArgs& a) { return PackedBFloats(a.head_dim, kKeyBlock); }
int64_t PackedVFloats(const AttentionArgs& a) { return PackedBFloats(kKeyBlock, a.v_dim); }

LITE_VECTOR_CLONES void AddRow(float* s, const float* m, int64_t n) {
  for (int64_t j = 0; j < n; ++j) s[j] += m[j];
}

LITE_VECTOR_CLONES void KeepRow(float* s, const uint8_t* keep, int64_t n) {
  for (int64_t j = 0; j < n; ++j) s[j] = keep[j] ? s[j] : -kInf;
}

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

// Per-thread working set of one (batch, head, query block) task.
struct TaskBuffers {
  std::vector<float> scores;   // kQueryBlock x kKeyBlock: scores, then probabilities
  std::vector<float> acc;      // kQueryBlock x v_dim: unnormalised output
  std::vector<float> row_max, row_sum;
  void Reserve(int64_t v_dim) {
    if (scores.size() < static_cast<size_t>(kQueryBlock * kKeyBlock)) scores.resize(kQueryBlock * kKeyBlock);
    if (acc.size() < static_cast<size_t>(kQueryBlock * v_dim)) acc.resize(kQueryBlock * v_dim);
    if (row_max.size() < static_cast<size_t>(kQueryBlock)) {
      row_max.resize(kQueryBlock);
      row_sum.resize(kQueryBlock);
    }
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
      if (a.k_transposed) {
        PackBInto(false, a.head_dim, n, k + k0, a.k.row_stride, dst);   // K^T rows are features
      } else {
        PackBInto(true, a.head_dim, n, k + k0 * a.k.row_stride, a.k.row_stride, dst);
      }
      PackBInto(false, n, a.v_dim, a.v.At(b, h) + k0 * a.v.row_stride, a.v.row_stride, dst + kf);
    }
  };
  const int64_t tasks = a.batch * a.kv_heads * blocks;
  if (pool && tasks > 1) pool->ParallelFor(tasks, 1, pack); else pack(0, tasks);
}

// Attention of queries [r0, r0 + rows) of head h in batch b.
void RunQueryBlock(const AttentionArgs& a, const float* packed, int64_t b, int64_t h, int64_t r0, int64_t rows,
                   TaskBuffers& buf) {
  const int64_t group = a.q_heads / a.kv_heads, hk = h / group;
  const int64_t blocks = KeyBlocks(a), kf = PackedKFloats(a), vf = PackedVFloats(a);
  const float* q = a.q.At(b, h) + r0 * a.q.row_stride;
  const AttentionMask& m = a.mask;
  const float* add_rows = m.add ? m.add + b * m.batch_stride + h * m.head_stride + r0 * m.row_stride : nullptr;
  const uint8_t* keep_rows = m.keep ? m.keep + b * m.batch_stride + h * m.head_stride + r0 * m.row_stride : nullptr;
  float* s = buf.scores.data();
  float* acc = buf.acc.data();
  float* row_max = buf.row_max.data();
  float* row_sum = buf.row_sum.data();
  std::fill(acc, acc + rows * a.v_dim, 0.f);
  std::fill(row_max, row_max + rows, -kInf);
  std::fill(row_sum, row_sum + rows, 0.f);
  bool every_row_has_a_score = false;   // all rows met a finite score: masked tiles add exactly nothing
  const GemmEpilogue none;

  for (int64_t j = 0; j < blocks; ++j) {
    const int64_t k0 = j * kKeyBlock, n = std::min(kKeyBlock, a.kv_len - k0);
    if (a.causal && k0 > r0 + rows - 1) break;   // every key of this and later tiles is after every query
    const int64_t col_off = k0 * m.col_stride;
    if (m.present() && every_row_has_a_score &&
        TileFullyMasked(m, add_rows ? add_rows + col_off : nullptr, keep_rows ? keep_rows + col_off : nullptr,
                        rows, n))
      continue;
    const float* pk = packed + ((b * a.kv_heads + hk) * blocks + j) * (kf + vf);
    SgemmPackedB(false, rows, n, a.head_dim, a.scale, q, a.q.row_stride, pk, 0.f, s, kKeyBlock, none, nullptr);

    bool all_finite = true;
    for (int64_t i = 0; i < rows; ++i) {
      float* sr = s + i * kKeyBlock;
      // Causal: keys after query r0 + i do not count; they are zeroed below and skipped by max/exp.
      const int64_t valid = a.causal ? std::min(n, r0 + i - k0 + 1) : n;
      if (valid <= 0) {
        std::fill(sr, sr + n, 0.f);
        all_finite = all_finite && row_max[i] > -kInf;
        continue;
      }
      if (add_rows) {
        const float* mr = add_rows + i * m.row_stride + col_off;
        if (m.col_stride) {
          AddRow(sr, mr, valid);
        } else {
          const float v = mr[0];
          for (int64_t c = 0; c < valid; ++c) sr[c] += v;
        }
      } else if (keep_rows) {
        const uint8_t* kr = keep_rows + i * m.row_stride + col_off;
        if (m.col_stride) {
          KeepRow(sr, kr, valid);
        } else if (!kr[0]) {
          std::fill(sr, sr + valid, -kInf);
        }
      }
      const float tile_max = MaxLanes(sr, valid);
      const float new_max = std::max(row_max[i], tile_max);
      if (new_max == -kInf) {   // nothing attended yet in this row
        std::fill(sr, sr + n, 0.f);
        all_finite = false;
        continue;
      }
      const float correction = FastExp(row_max[i] - new_max);   // 0 when the row had no score yet
      const float tile_sum = ExpShiftSum(sr, sr, valid, new_max);
      std::fill(sr + valid, sr + n, 0.f);
      if (correction != 1.f) ScaleRow(acc + i * a.v_dim, a.v_dim, correction);
      row_sum[i] = row_sum[i] * correction + tile_sum;
      row_max[i] = new_max;
      all_finite = all_finite && new_max > kMaskedBelow * 0.1f;
    }
    every_row_has_a_score = all_finite;
    SgemmPackedB(false, rows, a.v_dim, n, 1.f, s, kKeyBlock, pk + kf, 1.f, acc, a.v_dim, none, nullptr);
  }

  float* out = a.out + b * a.out_batch_stride + h * a.out_head_stride + r0 * a.out_row_stride;
  for (int64_t i = 0; i < rows; ++i) {
    float* o = out + i * a.out_row_stride;
    if (row_sum[i] > 0.f) {
      const float inv = 1.f / row_sum[i];
      const float* src = acc + i * a.v_dim;
      for (int64_t c = 0; c < a.v_dim; ++c) o[c] = src[c] * inv;
    } else {
      std::fill(o, o + a.v_dim, a.zero_masked_rows ? 0.f : std::numeric_limits<float>::quiet_NaN());
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
    buf.Reserve(a.v_dim);
    for (int64_t t = tb; t < te; ++t) {
      const int64_t qb = t % q_blocks, h = (t / q_blocks) % a.q_heads, b = t / q_blocks / a.q_heads;
      const int64_t r0 = qb * rows_per_block;
      RunQueryBlock(a, packed, b, h, r0, std::min(rows_per_block, a.q_len - r0), buf);
    }
  };
  if (pool && tasks > 1) pool->ParallelFor(tasks, 1, run); else run(0, tasks);
}

}  // namespace lite
