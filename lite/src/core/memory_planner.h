// Packs tensors with disjoint lifetimes into one arena (greedy by size, best offset first fit).
#pragma once
#include <cstddef>
#include <vector>

namespace lite {

struct BufferRequest {
  size_t bytes = 0;
  int first = 0;   // first step the buffer is live (its producer)
  int last = 0;    // last step it is read, inclusive
};

struct MemoryPlan {
  std::vector<size_t> offsets;   // one per request, multiples of `alignment`
  size_t total = 0;
};

MemoryPlan PlanMemory(const std::vector<BufferRequest>& requests, size_t alignment = 64);

// Request `output`, produced at step `step`, may take over request `input`'s buffer there: its producer overwrites
// that input in place (Kernel::InPlaceInput). Taken where nothing reads the input's buffer after `step` and it is
// large enough; chains follow (a residual block's output taken over in turn by the next block's).
struct InPlaceOffer {
  int step = 0;
  int input = 0, output = 0;   // request indices
};

// As above, with the offers taken (given in step order): requests sharing a buffer get the same offset, and the
// buffer lives from its first producer to its last reader.
MemoryPlan PlanMemory(const std::vector<BufferRequest>& requests, const std::vector<InPlaceOffer>& in_place,
                      size_t alignment = 64);

}  // namespace lite
