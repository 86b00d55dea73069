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

}  // namespace lite
