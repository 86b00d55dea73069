#include "core/u8_pixel_layout.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "cpu/quantized/u8_pixel_conv.h"

namespace lite {

size_t U8RowsTensorBytes(const Shape& shape) {
  return static_cast<size_t>(shape[0]) * U8PixelConv::RowsBytes(shape[1], shape[2] * shape[3]);
}

void ChooseU8PixelTensors(std::vector<TensorRec>& tensors, const std::vector<int>& graph_outputs,
                          const std::vector<KernelIO>& ios, const std::vector<std::unique_ptr<Kernel>>& kernels,
                          const std::vector<char>& evaluated_at_prepare) {
  for (TensorRec& t : tensors) t.u8_pixels = false;
  static const bool enabled = [] {   // LITE_U8_ROWS=0 turns the storage off, for comparisons
    const char* v = std::getenv("LITE_U8_ROWS");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  if (!enabled || !U8PixelConv::Available()) return;
  MarkRunTimeActivations(tensors, graph_outputs, ios, evaluated_at_prepare, &TensorRec::u8_pixels,
                         [](const TensorRec& t) {
                           return t.dtype == DataType::kUInt8 && t.act_scale > 0.f && t.shape.size() == 4 &&
                                  !t.channel_blocked && !t.bf16_pixels;
                         });
  RetractRefusedMarks(ios, evaluated_at_prepare, &TensorRec::u8_pixels,
                      [&](size_t n) { return kernels[n]->AcceptsU8Pixels(ios[n]); });
  for (TensorRec& t : tensors)
    if (t.u8_pixels) t.nbytes = std::max(t.nbytes, U8RowsTensorBytes(t.shape));
}

}  // namespace lite
