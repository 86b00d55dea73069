// The channel-blocked activation layout (NCHW8c) and the pass that chooses which tensors use it.
//
// A 4-D float32 activation [N, C, H, W] with C a multiple of 8 may be stored as [N][C/8][H][W][8]: 8 channels
// of one pixel side by side. Same size, other order. Kernels that work on channel vectors (depthwise, the
// pointwise kernel that reads 6 pixels x 8 channels per step) then read and write whole vectors with no
// transposes, which is what MobileNet-style blocks spend much of their time on in NCHW.
//
// The layout never leaves the runtime: graph inputs and outputs, tensors a kernel evaluates at prepare time
// and anything read by a kernel that does not know the layout stay NCHW. Kernels declare what they accept
// through Kernel::AcceptsLayouts; each converts at its own edge (a pointwise Conv reading blocks can write
// NCHW, a depthwise one reads and writes either), so no reorder nodes are needed.
#pragma once
#include <memory>
#include <vector>

#include "core/graph.h"
#include "core/kernel.h"

namespace lite {

constexpr int64_t kChannelBlock = 8;

// Whether the layout is in use (LITE_CHANNEL_BLOCKED=0 turns it off, for comparisons).
bool ChannelBlockedLayoutEnabled();

// Marks TensorRec::channel_blocked on the tensors that take the layout. Starts from every eligible tensor
// (4-D float32 activation, channels a multiple of 8, not a graph output, produced and read only by nodes that
// run per inference) and then, until nothing changes, returns to NCHW every tensor of a node whose kernel
// does not accept the combination of layouts around it. Only ever removes, so it ends.
void ChooseChannelBlockedLayouts(std::vector<TensorRec>& tensors, const std::vector<int>& graph_outputs,
                                 const std::vector<KernelIO>& ios,
                                 const std::vector<std::unique_ptr<Kernel>>& kernels,
                                 const std::vector<char>& evaluated_at_prepare);

}  // namespace lite
