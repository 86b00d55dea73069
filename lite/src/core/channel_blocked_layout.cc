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
  MarkRunTimeActivations(tensors, graph_outputs, ios, evaluated_at_prepare, &TensorRec::channel_blocked,
                         [](const TensorRec& t) {
                           return t.dtype == DataType::kFloat32 && t.shape.size() == 4 && t.shape[1] > 0 &&
                                  t.shape[1] % kChannelBlock == 0;
                         });
  // A tensor read by a node that does not accept it is taken out here (a Shape evaluated at prepare time, which reads
  // only its shape, accepts it).
  RetractRefusedMarks(ios, evaluated_at_prepare, &TensorRec::channel_blocked,
                      [&](size_t n) { return kernels[n]->AcceptsLayouts(ios[n]); });
}

}  // namespace lite
