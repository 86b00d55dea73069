// The uint8 pixel-major activation storage ("uint8 rows") and the pass that chooses which tensors use it.
//
// A 4-D uint8 activation of quantisation codes [N, C, H, W] written and read only by kernels that work pixel-major
// (the integer Conv's pixel-major kernel, cpu/quantized/u8_pixel_conv.h, and MaxPool) may be stored as what those kernels
// read: per image, H x W rows of C codes (row stride U8PixelConv::RowStride(C)) and one row of the tensor's zero
// point after them, which padding taps read. The consumer then reads it in place instead of transposing NCHW on
// every run. The codes are the same; only their order differs. The storage never leaves the runtime.
#pragma once
#include <memory>
#include <vector>

#include "core/graph.h"
#include "core/kernel.h"

namespace lite {

// Bytes of a [N, C, H, W] tensor stored as uint8 rows.
size_t U8RowsTensorBytes(const Shape& shape);

// Marks TensorRec::u8_pixels on the tensors that take the storage: starts from every 4-D quantised uint8 activation
// that is not a graph output and is produced at run time, then, until nothing changes, returns every tensor of a
// node whose kernel does not accept the rows around it (AcceptsU8Pixels) to NCHW. A marked tensor's nbytes grows to
// the rows' size. A no-op on CPUs without AVX-512 VNNI, or with LITE_U8_ROWS=0 in the environment (for comparisons).
void ChooseU8PixelTensors(std::vector<TensorRec>& tensors, const std::vector<int>& graph_outputs,
                          const std::vector<KernelIO>& ios, const std::vector<std::unique_ptr<Kernel>>& kernels,
                          const std::vector<char>& evaluated_at_prepare);

}  // namespace lite
