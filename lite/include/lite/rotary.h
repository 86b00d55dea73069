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
  const float* cos = nullptr;                     // [seq, dim / 2]
  const float* sin = nullptr;
  bool interleaved = true;                        // pairs (2i, 2i + 1); else halves (i, i + dim / 2)
};

// Validates (InvalidArgument) and runs on `threads` threads.
void ComputeRotary(const RotaryArgs& args, int threads);

}  // namespace lite
