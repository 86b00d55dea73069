// Fused scaled dot-product attention on the CPU (dense, grouped-query, causal, masked, variable-length and
// block-sparse), the kernel behind the runtime's Attention operator, for embedding code such as lite_boost.
#pragma once
#include <cstddef>
#include <cstdint>

namespace lite {

// Element type of Q, K, V and the output (the arithmetic is float32 throughout; half types are converted
// while packing and on the final store, so no full-size copy is made).
// kInt8Rows (a paged KV cache only): each row is `cols` int8 codes followed by its float32 scale (4 bytes; value =
// code * scale, symmetric, written per row and head), strides counted in bytes.
enum class AttentionElem : uint8_t { kFloat32, kFloat16, kBFloat16, kInt8Rows };

// A [batch, heads, rows, cols] operand with contiguous cols and arbitrary outer strides (in elements), so
// BNSD, BSND, 3-D [B, S, N * D] and, with per-sample lengths, TND [tokens, N, D] tensors are read in place.
struct AttentionOperand {
  const void* data = nullptr;
  int64_t batch_stride = 0, head_stride = 0, row_stride = 0;
};

// An optional mask over [batch, q_heads, queries, keys] given by strides (0 = broadcast along that dim):
// additive floats, or bytes where nonzero means "attend" (zero adds -inf).
struct AttentionMask {
  const float* add = nullptr;
  const uint8_t* keep = nullptr;
  bool keep_marks_masked = false;   // bytes mark the excluded positions instead (torch_npu's convention)
  int64_t batch_stride = 0, head_stride = 0, row_stride = 0, col_stride = 0;   // col_stride is 0 or 1
  bool present() const { return add || keep; }
};

struct AttentionArgs {
  int64_t batch = 0, q_heads = 0, kv_heads = 0, q_len = 0, kv_len = 0, head_dim = 0, v_dim = 0;
  AttentionElem elem = AttentionElem::kFloat32;
  AttentionOperand q;                 // rows: queries, cols: head_dim
  AttentionOperand k;                 // rows: keys, cols: head_dim; or, when k_transposed, rows: head_dim
  bool k_transposed = false;
  AttentionOperand v;                 // rows: keys, cols: v_dim
  void* out = nullptr;                // rows: queries, cols: v_dim, contiguous
  int64_t out_batch_stride = 0, out_head_stride = 0, out_row_stride = 0;
  AttentionMask mask;
  float scale = 1.f;
  bool causal = false;                // query i attends keys j <= i + causal_offset
  // Sliding window: query i attends key j only if (i + causal_offset) - j <= left_window and
  // j - (i + causal_offset) <= right_window (-1: unbounded).
  int64_t left_window = -1, right_window = -1;
  // Keys that precede the first query (a KV cache's past): query i sits at position i + causal_offset.
  int64_t causal_offset = 0;
  float softcap = 0.f;                // > 0: each scaled score s becomes softcap * tanh(s / softcap), before the mask
  // Queries are the last of their sample's positions: sample b's causal offset is kv_len(b) - q_len(b) (on top of
  // causal_offset), as for a batch of sequences each continuing its own cache (decode steps and prefill chunks).
  bool causal_from_end = false;

  // Paged keys and values (a KV cache in fixed-size blocks, vLLM's layout): when kv_block_table is set, sample b's
  // key/value row r lives in block kv_block_table[b * kv_blocks_per_seq + r / kv_block_size], at row
  // r % kv_block_size; k.batch_stride / v.batch_stride are then the strides between blocks (head and row strides
  // within a block as usual), and kv_lens (or kv_len) give each sample's length. Blocks are numbered below
  // kv_num_blocks.
  const int64_t* kv_block_table = nullptr;
  int64_t kv_block_size = 0, kv_blocks_per_seq = 0, kv_num_blocks = 0;
  AttentionElem kv_elem = AttentionElem::kFloat32;   // the paged cache's element type (q is `elem`)
  bool zero_masked_rows = false;      // a query whose every score is -inf outputs 0 (else NaN)
  // Both products on bf16 dot products with float32 sums (scale x K, Q, the probabilities and V rounded to bf16;
  // the softmax stays float32) where the CPU has AVX512_BF16, float32 elsewhere: float32 operands with
  // untransposed K only (the runtime sets it at precision bfloat16).
  bool bf16_products = false;

  // Variable lengths (TND): when set, sample b has q_lens[b] queries and kv_lens[b] keys, its rows following
  // those of sample b - 1 in each operand (batch strides unused); q_len / kv_len are then the maxima.
  const int64_t* q_lens = nullptr;
  const int64_t* kv_lens = nullptr;

  // Tiling: keys per tile and queries per task (0: chosen by the kernel). Block-sparse attention uses its
  // block shape here.
  int64_t key_block = 0, query_block = 0;

  // Block sparsity (optional): for query block g (numbered across the batch, sample after sample) and
  // query head h, the key blocks select_idx[(g * q_heads + h) * max_selected + i], i < select_num[g * q_heads
  // + h], ascending; only those tiles are computed.
  const int64_t* select_idx = nullptr;
  const int64_t* select_num = nullptr;
  int64_t max_selected = 0;

  // Optional log-sum-exp of each query's scores (natural log; -inf for a query that attends nothing).
  float* lse = nullptr;
  int64_t lse_batch_stride = 0, lse_head_stride = 0, lse_row_stride = 0;
};

// Validates `args` (throws InvalidArgument naming the problem) and runs attention on `threads` threads (a
// pool kept per thread count; calls on the same pool are serialised).
void ComputeAttention(const AttentionArgs& args, int threads);

}  // namespace lite
