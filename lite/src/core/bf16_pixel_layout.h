// The bf16 pixel-major activation storage and the pass that chooses which tensors use it.
//
// At compute precision bfloat16 a 4-D float32 activation [N, C, H, W] that is written and read only by kernels that
// round their inputs to bf16 anyway (the pixel-major bf16 Conv, cpu/conv/bf16_pixel_conv.h) may be stored as what those
// kernels read: per image, H x W rows of C bf16 values (pixel-major, the row stride a kernel-chosen ld >= C) and one
// row of zeros after them, which padding taps read. The consumer then reads it in place instead of converting
// float32 to bf16 on every run, and the activation's memory traffic halves. Its values are its float32 values
// rounded to bf16 once, where the consumer would have rounded them: only a residual read from it (added in float32
// otherwise) sees the rounding. The storage never leaves the runtime, like the channel-blocked layout.
#pragma once
#include <memory>
#include <vector>

#include "core/graph.h"
#include "core/kernel.h"

namespace lite {

// Marks TensorRec::bf16_pixels (clearing channel_blocked there) on the tensors that take the storage: starts from
// every 4-D float32 activation that is not a graph output and is produced at run time, then, until nothing
// changes, returns every tensor of a node whose kernel does not accept the bf16 tensors around it (AcceptsBf16Pixels)
// to its float32 layout. Only ever removes, so it ends. A no-op unless `bf16` (the model's compute precision is
// bfloat16), or with LITE_BF16_ROWS=0 in the environment (for comparisons).
void ChooseBf16PixelTensors(std::vector<TensorRec>& tensors, const std::vector<int>& graph_outputs,
                            const std::vector<KernelIO>& ios, const std::vector<std::unique_ptr<Kernel>>& kernels,
                            const std::vector<char>& evaluated_at_prepare, bool bf16);

}  // namespace lite
