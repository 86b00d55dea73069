#include "core/memory_planner.h"

#include <algorithm>
#include <cstdint>
#include <numeric>

namespace lite {

MemoryPlan PlanMemory(const std::vector<BufferRequest>& requests, size_t alignment) {
  auto align = [&](size_t v) { return (v + alignment - 1) / alignment * alignment; };
  MemoryPlan plan;
  plan.offsets.assign(requests.size(), 0);
  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
  // Largest first: big buffers claim low offsets, small ones fill the gaps between them.
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return requests[a].bytes > requests[b].bytes; });
  std::vector<size_t> placed;
  for (size_t idx : order) {
    const BufferRequest& r = requests[idx];
    const size_t need = align(std::max<size_t>(r.bytes, 1));
    // Intervals already placed whose lifetime overlaps this one, sorted by offset.
    std::vector<std::pair<size_t, size_t>> busy;
    for (size_t p : placed) {
      const BufferRequest& q = requests[p];
      if (q.first <= r.last && r.first <= q.last)
        busy.emplace_back(plan.offsets[p], plan.offsets[p] + align(std::max<size_t>(q.bytes, 1)));
    }
    std::sort(busy.begin(), busy.end());
    size_t best = SIZE_MAX, best_gap = SIZE_MAX, cursor = 0;
    for (const auto& [b, e] : busy) {
      if (b >= cursor && b - cursor >= need && b - cursor < best_gap) {
        best = cursor;
        best_gap = b - cursor;
      }
      cursor = std::max(cursor, e);
    }
    if (best == SIZE_MAX) best = cursor;
    plan.offsets[idx] = best;
    plan.total = std::max(plan.total, best + need);
    placed.push_back(idx);
  }
  return plan;
}

}  // namespace lite
