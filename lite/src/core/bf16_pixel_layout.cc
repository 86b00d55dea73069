#include "core/bf16_pixel_layout.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "cpu/conv/bf16_pixel_conv.h"

namespace lite {

void ChooseBf16PixelTensors(std::vector<TensorRec>& tensors, const std::vector<int>& graph_outputs,
                            const std::vector<KernelIO>& ios, const std::vector<std::unique_ptr<Kernel>>& kernels,
                            const std::vector<char>& evaluated_at_prepare, bool bf16) {
  for (TensorRec& t : tensors) t.bf16_pixels = false;
  static const bool enabled = [] {   // LITE_BF16_ROWS=0 turns the storage off, for comparisons
    const char* v = std::getenv("LITE_BF16_ROWS");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  if (!bf16 || !enabled) return;
  MarkRunTimeActivations(tensors, graph_outputs, ios, evaluated_at_prepare, &TensorRec::bf16_pixels,
                         [](const TensorRec& t) { return t.dtype == DataType::kFloat32 && t.shape.size() == 4; });
  // A tensor read by a node that does not accept it is taken out (a Shape reading only its shape accepts it).
  RetractRefusedMarks(ios, evaluated_at_prepare, &TensorRec::bf16_pixels,
                      [&](size_t n) { return kernels[n]->AcceptsBf16Pixels(ios[n]); });
  // Every kernel checked that the rows fit in the float32 tensor's bytes; the arena gives them only what they take
  // (about half).
  for (TensorRec& t : tensors)
    if (t.bf16_pixels) {
      t.channel_blocked = false;
      t.nbytes = static_cast<size_t>(t.shape[0]) * Bf16PixelConv::Bf16RowsBytes(t.shape[1], t.shape[2] * t.shape[3]);
    }
}

}  // namespace lite
