// NonMaxSuppression (ONNX opset 10/11): per batch and class, the boxes scoring above score_threshold, best first,
// each kept unless its IoU with a box kept before it exceeds iou_threshold, at most max_output_boxes_per_class;
// output selected_indices [K, 3] = (batch, class, box), by batch, then class, then the order kept. The output's length
// depends on the scores, so it is computed in Infer (at prepare when the inputs are constants, else per run, like
// NonZero) and copied out by Run.
#include <cmath>
#include <cstring>

#include "cpu/detection/nms.h"
#include "kernels/common.h"
#include "kernels/register.h"

namespace lite {
namespace {

using ms_schema::OpType;

class NonMaxSuppressionKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void Infer(KernelIO& io) override {
    const TensorRec& boxes = RequireValue(io, 0, "boxes");
    const TensorRec& scores = RequireValue(io, 1, "scores");
    Require(boxes.dtype == DataType::kFloat32 && scores.dtype == DataType::kFloat32, "boxes and scores are float32");
    Require(boxes.shape.size() == 3 && boxes.shape[2] == 4,
            "boxes must be [num_batches, spatial_dimension, 4], got " + ShapeToString(boxes.shape));
    Require(scores.shape.size() == 3 && scores.shape[0] == boxes.shape[0] && scores.shape[2] == boxes.shape[1],
            "scores must be [num_batches, num_classes, spatial_dimension] = [" + std::to_string(boxes.shape[0]) +
                ", C, " + std::to_string(boxes.shape[1]) + "], got " + ShapeToString(scores.shape));
    int64_t max_out = 0;
    if (io.has(2)) {
      const std::vector<int64_t> v = ReadInts(RequireValue(io, 2, "max_output_boxes_per_class"));
      Require(v.size() <= 1, "max_output_boxes_per_class is a scalar");
      if (!v.empty()) max_out = v[0];
    }
    const float iou = ScalarInput(io, 3, "iou_threshold", 0.f);
    Require(iou >= 0.f && iou <= 1.f, "iou_threshold must lie in [0, 1], got " + std::to_string(iou));
    const bool has_score_threshold = io.has(4) && io.in[4]->numel() > 0;
    const float score_threshold = ScalarInput(io, 4, "score_threshold", 0.f);
    const bool centre = node_.fb->attr_as_NmsAttr() && node_.fb->attr_as_NmsAttr()->center_point_box();

    const int64_t batches = boxes.shape[0], n = boxes.shape[1], classes = scores.shape[1];
    selected_.clear();
    std::vector<float> corners(static_cast<size_t>(4 * n));
    for (int64_t b = 0; b < batches && max_out > 0; ++b) {
      const float* bx = boxes.as<float>() + b * n * 4;
      for (int64_t i = 0; i < n; ++i) {   // as two corners: (y1, x1, y2, x2) as given, or from the centre form
        const float* s = bx + 4 * i;
        float* c = &corners[static_cast<size_t>(4 * i)];
        if (centre) {
          c[0] = s[0] - s[2] / 2, c[1] = s[1] - s[3] / 2, c[2] = s[0] + s[2] / 2, c[3] = s[1] + s[3] / 2;
        } else {
          std::memcpy(c, s, 4 * sizeof(float));
        }
      }
      for (int64_t c = 0; c < classes; ++c) {
        const float* sc = scores.as<float>() + (b * classes + c) * n;
        const std::vector<int64_t> order = ScoreOrder(sc, n, 1, has_score_threshold, score_threshold);
        for (int64_t i : GreedyNms(corners.data(), order, iou, max_out)) selected_.insert(selected_.end(), {b, c, i});
      }
    }
    io.out[0]->shape = {static_cast<int64_t>(selected_.size() / 3), 3};
    io.out[0]->dtype = DataType::kInt64;
  }
  void Run(KernelIO& io, const KernelContext&) override {
    if (!selected_.empty()) std::memcpy(io.out[0]->data, selected_.data(), selected_.size() * sizeof(int64_t));
  }

 private:
  float ScalarInput(const KernelIO& io, size_t i, const char* what, float fallback) const {
    if (!io.has(i) || io.in[i]->numel() == 0) return fallback;
    const TensorRec& t = RequireValue(io, i, what);
    Require(t.dtype == DataType::kFloat32 && t.numel() == 1, std::string(what) + " is a float32 scalar");
    return t.as<float>()[0];
  }

  std::vector<int64_t> selected_;   // (batch, class, box) triples
};

}  // namespace

void RegisterDetectionKernels(KernelRegistry& r) {
  r.Register(OpType::NonMaxSuppression, DataType::kUnknown, MakeKernel<NonMaxSuppressionKernel>);
}

}  // namespace lite
