#include "cpu/detection/nms.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace lite {

std::vector<int64_t> ScoreOrder(const float* scores, int64_t n, int64_t stride, bool has_threshold, float threshold) {
  std::vector<int64_t> order;
  order.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    if (!has_threshold || scores[i * stride] > threshold) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    const float sa = scores[a * stride], sb = scores[b * stride];
    if (std::isnan(sa) || std::isnan(sb)) return !std::isnan(sa) && std::isnan(sb);   // NaN last
    return sa > sb;
  });
  return order;
}

namespace {

struct Corners {
  float lo0, lo1, hi0, hi1, area;
};

Corners Normalised(const float* b) {
  Corners c;
  c.lo0 = std::min(b[0], b[2]), c.hi0 = std::max(b[0], b[2]);
  c.lo1 = std::min(b[1], b[3]), c.hi1 = std::max(b[1], b[3]);
  c.area = (c.hi0 - c.lo0) * (c.hi1 - c.lo1);
  return c;
}

bool Suppresses(const Corners& kept, const Corners& c, float iou_threshold) {
  if (!(kept.area > 0.f) || !(c.area > 0.f)) return false;
  const float lo0 = std::max(kept.lo0, c.lo0), hi0 = std::min(kept.hi0, c.hi0);
  const float lo1 = std::max(kept.lo1, c.lo1), hi1 = std::min(kept.hi1, c.hi1);
  if (!(hi0 > lo0) || !(hi1 > lo1)) return false;
  const float inter = (hi0 - lo0) * (hi1 - lo1);
  return inter / (kept.area + c.area - inter) > iou_threshold;
}

}  // namespace

std::vector<int64_t> GreedyNms(const float* boxes, const std::vector<int64_t>& order, float iou_threshold,
                               int64_t max_keep) {
  std::vector<int64_t> keep;
  std::vector<Corners> kept;   // the kept boxes' corners, contiguous: each candidate is checked against all of them
  for (int64_t i : order) {
    if (static_cast<int64_t>(keep.size()) >= max_keep) break;
    const Corners c = Normalised(boxes + 4 * i);
    bool suppressed = false;
    for (const Corners& k : kept)
      if (Suppresses(k, c, iou_threshold)) {
        suppressed = true;
        break;
      }
    if (suppressed) continue;
    keep.push_back(i);
    kept.push_back(c);
  }
  return keep;
}

}  // namespace lite
