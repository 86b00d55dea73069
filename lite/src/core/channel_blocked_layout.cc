#include "core/channel_blocked_layout.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace lite {

bool ChannelBlockedLayoutEnabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("LITE_CHANNEL_BLOCKED");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return enabled;
}

void ChooseChannelBlockedLayouts(std::vector<TensorRec>& tensors, const std::vector<int>& graph_outputs,
                                 const std::vector<KernelIO>& ios,
                                 const std::vector<std::unique_ptr<Kernel>>& kernels,
                                 const std::vector<char>& evaluated_at_prepare) {
  for (TensorRec& t : tensors) t.channel_blocked = false;
  if (!ChannelBlockedLayoutEnabled()) return;
  for (size_t n = 0; n < ios.size(); ++n) {
    if (evaluated_at_prepare[n]) continue;
    for (TensorRec* t : ios[n].out) {
      const bool is_output = std::find(graph_outputs.begin(), graph_outputs.end(),
                                       static_cast<int>(t - tensors.data())) != graph_outputs.end();
      t->channel_blocked = t->kind == TensorRec::Kind::kActivation && !t->known && !is_output &&
                           t->dtype == DataType::kFloat32 && t->shape.size() == 4 && t->shape[1] > 0 &&
                           t->shape[1] % kChannelBlock == 0;
    }
  }
  // A tensor read by a node evaluated at prepare time was known then, so it is not a candidate; one read by a
  // node that does not accept it is taken out by the loop below.
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t n = 0; n < ios.size(); ++n) {
      const KernelIO& io = ios[n];
      bool any = false;
      for (const TensorRec* t : io.in) any |= t && t->channel_blocked;
      for (const TensorRec* t : io.out) any |= t->channel_blocked;
      if (!any || (!evaluated_at_prepare[n] && kernels[n]->AcceptsLayouts(io))) continue;
      for (TensorRec* t : io.in)
        if (t) t->channel_blocked = false;
      for (TensorRec* t : io.out) t->channel_blocked = false;
      changed = true;
    }
  }
}

}  // namespace lite
