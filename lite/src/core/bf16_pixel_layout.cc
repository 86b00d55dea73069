#include "core/bf16_pixel_layout.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

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
  for (size_t n = 0; n < ios.size(); ++n) {
    if (evaluated_at_prepare[n]) continue;
    for (TensorRec* t : ios[n].out) {
      const bool is_output = std::find(graph_outputs.begin(), graph_outputs.end(),
                                       static_cast<int>(t - tensors.data())) != graph_outputs.end();
      t->bf16_pixels = t->kind == TensorRec::Kind::kActivation && !t->known && !is_output &&
                       t->dtype == DataType::kFloat32 && t->shape.size() == 4;
    }
  }
  // A tensor read by a node evaluated at prepare time was known then, so it is not a candidate.
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t n = 0; n < ios.size(); ++n) {
      const KernelIO& io = ios[n];
      bool any = false;
      for (const TensorRec* t : io.in) any |= t && t->bf16_pixels;
      for (const TensorRec* t : io.out) any |= t->bf16_pixels;
      if (!any || (!evaluated_at_prepare[n] && kernels[n]->AcceptsBf16Pixels(io))) continue;
      for (TensorRec* t : io.in)
        if (t) t->bf16_pixels = false;
      for (TensorRec* t : io.out) t->bf16_pixels = false;
      changed = true;
    }
  }
  for (TensorRec& t : tensors)
    if (t.bf16_pixels) t.channel_blocked = false;
}

}  // namespace lite
