// Rotary position embedding on the CPU: out = x rotated pairwise by per-position angles given as cos/sin tables,
// float32 arithmetic, float32/float16/bfloat16 tensors read and written in place of any outer strides.
#pragma once
#include <cstdint>

#include "lite/attention.h"

namespace lite {

struct RotaryArgs {
  AttentionElem elem = AttentionElem::kFloat32;   // of x and out
  const void* x = nullptr;
  void* out = nullptr;                            // may equal x
  int64_t batch = 0, seq = 0, heads = 0, dim = 0;
  int64_t x_strides[3] = {0, 0, 0};               // batch, position, head (elements); the last dim is contiguous
  int64_t out_strides[3] = {0, 0, 0};
  const float* cos = nullptr;                     // rows of rotary_dim / 2 angles: [seq, rotary_dim / 2] per batch
  const float* sin = nullptr;
  bool interleaved = true;                        // pairs (2i, 2i + 1); else halves (i, i + rotary_dim / 2)
  int64_t rotary_dim = 0;                         // leading dims rotated (0: all of dim); the rest are copied
  int64_t table_batch_stride = 0;                 // elements between batches' tables (0: one table for all)
  const int64_t* position_ids = nullptr;          // [batch, seq]: the table row of each position (else the position)
  int64_t table_rows = 0;                         // rows in the table, when position_ids index it
};

// Validates (InvalidArgument) and runs on `threads` threads.
void ComputeRotary(const RotaryArgs& args, int threads);

}  // namespace lite
