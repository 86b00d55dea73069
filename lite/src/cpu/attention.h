// Fused scaled dot-product attention on the CPU: softmax(scale * Q K^T + mask) V, tile by tile with an online
// softmax, so no [queries x keys] matrix is ever materialised. Shared by the runtime's Attention operator and
// lite_boost's attention ops.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/thread_pool.h"

namespace lite {

// A [batch, heads, rows, cols] operand with contiguous cols and arbitrary outer strides (in floats), so
// BNSD, BSND and 3-D [B, S, N * D] tensors are read in place.
struct AttentionOperand {
  const float* data = nullptr;
  int64_t batch_stride = 0, head_stride = 0, row_stride = 0;
  const float* At(int64_t b, int64_t h) const { return data + b * batch_stride + h * head_stride; }
};

// An optional mask over [batch, q_heads, queries, keys] given by strides (0 = broadcast along that dim):
// additive floats, or bytes where nonzero means "attend" (zero adds -inf).
struct AttentionMask {
  const float* add = nullptr;
  const uint8_t* keep = nullptr;
  int64_t batch_stride = 0, head_stride = 0, row_stride = 0, col_stride = 0;   // col_stride is 0 or 1
  bool present() const { return add || keep; }
};

struct AttentionArgs {
  int64_t batch = 0, q_heads = 0, kv_heads = 0, q_len = 0, kv_len = 0, head_dim = 0, v_dim = 0;
  AttentionOperand q;                 // rows: queries, cols: head_dim
  AttentionOperand k;                 // rows: keys, cols: head_dim; or, when k_transposed, rows: head_dim
  bool k_transposed = false;
  AttentionOperand v;                 // rows: keys, cols: v_dim
  float* out = nullptr;               // rows: queries, cols: v_dim, contiguous
  int64_t out_batch_stride = 0, out_head_stride = 0, out_row_stride = 0;
  AttentionMask mask;
  float scale = 1.f;
  bool causal = false;                // query i attends keys j <= i
  bool zero_masked_rows = false;      // a query whose every score is -inf outputs 0 (else NaN)
};

// Bytes of scratch RunAttention needs (keys and values packed once per head for the GEMM micro-kernels).
size_t AttentionScratchBytes(const AttentionArgs& args);

// Runs attention; query head h reads key/value head h / (q_heads / kv_heads). scratch holds
// AttentionScratchBytes(args) bytes, 64-byte aligned. pool may be null.
void RunAttention(const AttentionArgs& args, void* scratch, ThreadPool* pool);

}  // namespace lite
