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

MemoryPlan PlanMemory(const std::vector<BufferRequest>& requests, const std::vector<InPlaceOffer>& in_place,
                      size_t alignment) {
  const size_t n = requests.size();
  std::vector<size_t> owner(n);   // the request whose buffer each one uses
  std::iota(owner.begin(), owner.end(), 0);
  std::vector<BufferRequest> shared = requests;   // per owner: the span of every request in its buffer
  for (const InPlaceOffer& o : in_place) {
    if (o.input < 0 || o.output < 0 || static_cast<size_t>(o.input) >= n || static_cast<size_t>(o.output) >= n)
      continue;
    const size_t root = owner[o.input], out = static_cast<size_t>(o.output);
    if (owner[out] != out || root == out || requests[out].first != o.step) continue;
    if (shared[root].last != o.step || shared[root].bytes < requests[out].bytes) continue;
    owner[out] = root;
    shared[root].last = std::max(shared[root].last, requests[out].last);
  }
  std::vector<BufferRequest> own;
  std::vector<size_t> slot(n, 0);
  for (size_t r = 0; r < n; ++r)
    if (owner[r] == r) slot[r] = own.size(), own.push_back(shared[r]);
  const MemoryPlan packed = PlanMemory(own, alignment);
  MemoryPlan plan;
  plan.total = packed.total;
  plan.offsets.resize(n);
  for (size_t r = 0; r < n; ++r) plan.offsets[r] = packed.offsets[slot[owner[r]]];
  return plan;
}

}  // namespace lite
