// RotaryEmbedding (ONNX opset 23): x of shape (B, N, S, H), or (B, S, N * H) with num_heads, rotated per head by
// cos/sin tables of rotary_embedding_dim / 2 angles per position: (B, S, rot / 2) tables (batch 1 broadcasts, a
// lite extension the converter's rotary fusion uses), or (max_position, rot / 2) tables indexed by position_ids
// (B, S). Rotate-half or interleaved pairs; dims past rotary_embedding_dim are copied.
#include <string>

#include "cpu/attention/rotary_on_pool.h"
#include "kernels/common.h"
#include "kernels/register.h"

namespace lite {
namespace {

using ms_schema::OpType;

class RotaryEmbeddingKernel : public Kernel {
 public:
  using Kernel::Kernel;

  void Infer(KernelIO& io) override {
    const auto* attr = node_.fb->attr_as_RotaryAttr();
    Require(attr != nullptr, "missing RotaryAttr");
    const TensorRec& x = In(io, 0);
    const TensorRec& cos = In(io, 1);
    const TensorRec& sin = In(io, 2);
    Require(x.dtype == DataType::kFloat32 && cos.dtype == DataType::kFloat32 && sin.dtype == DataType::kFloat32,
            "x, cos_cache and sin_cache must be float32");
    const Shape& s = x.shape;
    const std::string xs = "input " + ShapeToString(s);
    int64_t heads = 0, head_dim = 0;
    if (s.size() == 4) {
      heads = s[1];
      head_dim = s[3];
      Require(attr->num_heads() == 0 || attr->num_heads() == heads,
              xs + ": num_heads " + std::to_string(attr->num_heads()) + " differs from dim 1");
    } else {
      Require(s.size() == 3, xs + ": must be (B, N, S, H) or (B, S, N * H)");
      heads = attr->num_heads();
      Require(heads > 0 && s[2] % heads == 0, xs + ": a 3-D input needs num_heads dividing its last dim");
      head_dim = s[2] / heads;
    }
    const int64_t rot = attr->rotary_embedding_dim() ? attr->rotary_embedding_dim() : head_dim;
    Require(rot > 0 && rot <= head_dim && rot % 2 == 0,
            "rotary_embedding_dim " + std::to_string(rot) + " must be even and at most the head size " +
                std::to_string(head_dim));
    const int64_t batch = s[0], seq = s.size() == 4 ? s[2] : s[1];
    Require(cos.shape == sin.shape, "cos_cache " + ShapeToString(cos.shape) + " and sin_cache " +
                                        ShapeToString(sin.shape) + " differ");
    const std::string cs = "cos_cache " + ShapeToString(cos.shape);
    if (io.has(3)) {
      const TensorRec& pos = In(io, 3);
      Require(pos.dtype == DataType::kInt64, "position_ids must be int64");
      Require(pos.shape == Shape{batch, seq}, "position_ids " + ShapeToString(pos.shape) + " must be (" +
                                                  std::to_string(batch) + ", " + std::to_string(seq) + ")");
      Require(cos.shape.size() == 2 && cos.shape[1] == rot / 2,
              cs + ": with position_ids it must be (max_position, " + std::to_string(rot / 2) + ")");
    } else {
      Require(cos.shape.size() == 3 && (cos.shape[0] == batch || cos.shape[0] == 1) && cos.shape[1] == seq &&
                  cos.shape[2] == rot / 2,
              cs + ": without position_ids it must be (" + std::to_string(batch) + " or 1, " + std::to_string(seq) +
                  ", " + std::to_string(rot / 2) + ")");
    }
    io.out[0]->shape = s;
    io.out[0]->dtype = DataType::kFloat32;
  }

  void Run(KernelIO& io, const KernelContext& ctx) override {
    const auto* attr = node_.fb->attr_as_RotaryAttr();
    const Shape& s = io.in[0]->shape;
    RotaryArgs a;
    a.x = io.in[0]->as<float>();
    a.out = io.out[0]->as<float>();
    a.batch = s[0];
    if (s.size() == 4) {   // (B, N, S, H)
      a.heads = s[1];
      a.seq = s[2];
      a.dim = s[3];
      const int64_t strides[3] = {s[1] * s[2] * s[3], s[3], s[2] * s[3]};
      std::copy(strides, strides + 3, a.x_strides);
    } else {               // (B, S, N * H)
      a.heads = attr->num_heads();
      a.seq = s[1];
      a.dim = s[2] / a.heads;
      const int64_t strides[3] = {s[1] * s[2], s[2], a.dim};
      std::copy(strides, strides + 3, a.x_strides);
    }
    std::copy(a.x_strides, a.x_strides + 3, a.out_strides);
    a.rotary_dim = attr->rotary_embedding_dim();
    a.interleaved = attr->interleaved();
    a.cos = io.in[1]->as<float>();
    a.sin = io.in[2]->as<float>();
    const Shape& cs = io.in[1]->shape;
    if (io.has(3)) {
      a.position_ids = io.in[3]->as<int64_t>();
      a.table_rows = cs[0];
    } else {
      a.table_batch_stride = cs[0] == 1 ? 0 : cs[1] * cs[2];
    }
    ComputeRotaryOn(a, ctx.pool);
  }
};

}  // namespace

void RegisterRotaryKernels(KernelRegistry& r) {
  r.Register(OpType::RotaryEmbedding, DataType::kFloat32, MakeKernel<RotaryEmbeddingKernel>);
}

}  // namespace lite
