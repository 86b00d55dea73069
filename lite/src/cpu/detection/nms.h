// Greedy non-maximum suppression: the core of the NonMaxSuppression operator and of lite.detection's post-processing
// (lite._lite.greedy_nms).
#pragma once
#include <cstdint>
#include <vector>

namespace lite {

// Candidate indices ordered by score, best first: those with a score above `threshold` (all, with has_threshold
// false; a NaN score only then, after every number), equal scores in index order.
std::vector<int64_t> ScoreOrder(const float* scores, int64_t n, int64_t stride, bool has_threshold, float threshold);

// Boxes as two corners each, (a0, b0, a1, b1): any diagonal pair, in either axis order (x, y or y, x: IoU does not
// care). Walks `order` and keeps a candidate unless its IoU with a box kept before it exceeds iou_threshold (ONNX
// Runtime's and torchvision's rule); a box of no area neither suppresses nor is suppressed. Stops after max_keep.
// Returns the kept indices, in the order kept.
std::vector<int64_t> GreedyNms(const float* boxes, const std::vector<int64_t>& order, float iou_threshold,
                               int64_t max_keep);

}  // namespace lite
