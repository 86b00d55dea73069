// Attention (format 1.6): fused scaled dot-product attention over operands in BNSD, BSND (3-D or 4-D) or, for K,
// transposed BNDS layout, so the converter can drop the head transposes around it.
#include <cmath>

#include "cpu/attention.h"
#include "kernels/common.h"
#include "kernels/register.h"

namespace lite {
namespace {

using ms_schema::AttentionLayout;
using ms_schema::OpType;

// Sizes and strides of one operand as [batch, heads, rows, cols].
struct OperandGeometry {
  int64_t batch = 0, heads = 0, rows = 0, cols = 0;
  int64_t batch_stride = 0, head_stride = 0, row_stride = 0;
};

class AttentionKernel : public Kernel {
 public:
  using Kernel::Kernel;

  void Infer(KernelIO& io) override {
    const auto* attr = node_.fb->attr_as_AttentionAttr();
    for (size_t i = 0; i < 3; ++i)
      Require(In(io, i).dtype == DataType::kFloat32, std::string("Q, K and V must be float32; ") + "QKV"[i] +
                                                         " is " + DataTypeName(io.in[i]->dtype));
    const OperandGeometry q = Geometry(*io.in[0], attr->q_layout(), attr->q_num_heads(), "Q");
    const OperandGeometry k = Geometry(*io.in[1], attr->k_layout(), attr->kv_num_heads(), "K");
    const OperandGeometry v = Geometry(*io.in[2], attr->v_layout(), attr->kv_num_heads(), "V");
    const bool k_transposed = attr->k_layout() == AttentionLayout::BNDS;
    const int64_t kv_len = k_transposed ? k.cols : k.rows, k_dim = k_transposed ? k.rows : k.cols;
    const std::string shapes = " (Q " + ShapeToString(io.in[0]->shape) + ", K " + ShapeToString(io.in[1]->shape) +
                               ", V " + ShapeToString(io.in[2]->shape) + ")";
    Require(q.batch == k.batch && q.batch == v.batch, "Q, K and V differ in batch size" + shapes);
    Require(k.heads == v.heads, "K and V differ in head count" + shapes);
    Require(k.heads > 0 && q.heads % k.heads == 0,
            "the query heads (" + std::to_string(q.heads) + ") are not a multiple of the key/value heads (" +
                std::to_string(k.heads) + ")" + shapes);
    Require(k_dim == q.cols, "Q and K differ in head size" + shapes);
    Require(v.rows == kv_len, "K and V differ in sequence length" + shapes);

    AttentionArgs& a = args_;
    a = AttentionArgs{};
    a.batch = q.batch;
    a.q_heads = q.heads;
    a.kv_heads = k.heads;
    a.q_len = q.rows;
    a.kv_len = kv_len;
    a.head_dim = q.cols;
    a.v_dim = v.cols;
    a.q = {nullptr, q.batch_stride, q.head_stride, q.row_stride};
    a.k = {nullptr, k.batch_stride, k.head_stride, k.row_stride};
    a.v = {nullptr, v.batch_stride, v.head_stride, v.row_stride};
    a.k_transposed = k_transposed;
    a.scale = attr->scale() != 0.f ? attr->scale() : 1.f / std::sqrt(static_cast<float>(std::max<int64_t>(1, a.head_dim)));
    a.causal = attr->is_causal();
    a.zero_masked_rows = attr->zero_masked_rows();

    Shape out;
    if (attr->out_layout() == AttentionLayout::BNSD) {
      out = {a.batch, a.q_heads, a.q_len, a.v_dim};
      a.out_batch_stride = a.q_heads * a.q_len * a.v_dim;
      a.out_head_stride = a.q_len * a.v_dim;
      a.out_row_stride = a.v_dim;
    } else {
      Require(attr->out_layout() == AttentionLayout::BSND, "the output layout must be BNSD or BSND");
      out = io.in[0]->shape.size() == 3 ? Shape{a.batch, a.q_len, a.q_heads * a.v_dim}
                                        : Shape{a.batch, a.q_len, a.q_heads, a.v_dim};
      a.out_batch_stride = a.q_len * a.q_heads * a.v_dim;
      a.out_head_stride = a.v_dim;
      a.out_row_stride = a.q_heads * a.v_dim;
    }

    mask_kind_ = DataType::kUnknown;
    if (io.has(3)) {
      const TensorRec& m = *io.in[3];
      Require(m.dtype == DataType::kFloat32 || m.dtype == DataType::kBool,
              std::string("the mask must be bool or float32, got ") + DataTypeName(m.dtype));
      const Shape full{a.batch, a.q_heads, a.q_len, a.kv_len};
      Shape b;
      Require(m.shape.size() <= 4 && BroadcastShapes({&m.shape, &full}, b) && b == full,
              "mask " + ShapeToString(m.shape) + " does not broadcast to [batch, q_heads, q_len, kv_len] = " +
                  ShapeToString(full));
      // Strides over [B, Hq, S, L] with 0 on broadcast dims.
      const std::vector<int64_t> st = Strides(m.shape);
      int64_t ms[4] = {0, 0, 0, 0};
      const size_t shift = 4 - m.shape.size();
      for (size_t d = 0; d < m.shape.size(); ++d) ms[d + shift] = m.shape[d] == 1 ? 0 : st[d];
      a.mask.batch_stride = ms[0];
      a.mask.head_stride = ms[1];
      a.mask.row_stride = ms[2];
      a.mask.col_stride = ms[3];
      mask_kind_ = m.dtype;
    }
    io.out[0]->shape = out;
    io.out[0]->dtype = DataType::kFloat32;
  }

  size_t ScratchBytes(const KernelIO&) const override { return AttentionScratchBytes(args_); }

  void Run(KernelIO& io, const KernelContext& ctx) override {
    AttentionArgs a = args_;
    a.q.data = io.in[0]->as<float>();
    a.k.data = io.in[1]->as<float>();
    a.v.data = io.in[2]->as<float>();
    a.out = io.out[0]->as<float>();
    if (mask_kind_ == DataType::kFloat32) a.mask.add = io.in[3]->as<float>();
    if (mask_kind_ == DataType::kBool) a.mask.keep = io.in[3]->as<uint8_t>();
    RunAttention(a, ctx.scratch, ctx.pool);
  }

 private:
  // Reads an operand's [batch, heads, rows, cols] view from its shape and layout.
  OperandGeometry Geometry(const TensorRec& t, AttentionLayout layout, int64_t num_heads, const char* name) const {
    const Shape& s = t.shape;
    const std::string what = std::string(name) + " " + ShapeToString(s);
    OperandGeometry g;
    if (s.size() == 3) {
      Require(layout == AttentionLayout::BSND, what + ": a 3-D operand must be in BSND layout");
      Require(num_heads > 0 && s[2] % num_heads == 0,
              what + ": the last dim does not split into " + std::to_string(num_heads) + " heads");
      g = {s[0], num_heads, s[1], s[2] / num_heads, s[1] * s[2], s[2] / num_heads, s[2]};
      return g;
    }
    Require(s.size() == 4, what + ": must be 3-D or 4-D");
    switch (layout) {
      case AttentionLayout::BNSD:
        return {s[0], s[1], s[2], s[3], s[1] * s[2] * s[3], s[2] * s[3], s[3]};
      case AttentionLayout::BSND:
        return {s[0], s[2], s[1], s[3], s[1] * s[2] * s[3], s[3], s[2] * s[3]};
      case AttentionLayout::BNDS:   // K^T: rows are the features, cols the keys
        Require(std::string(name) == "K", what + ": only K may be in BNDS layout");
        return {s[0], s[1], s[2], s[3], s[1] * s[2] * s[3], s[2] * s[3], s[3]};
      default:
        Fail(what + ": unknown layout");
    }
  }

  AttentionArgs args_;
  DataType mask_kind_ = DataType::kUnknown;
};

}  // namespace

void RegisterAttentionKernels(KernelRegistry& r) {
  r.Register(OpType::Attention, DataType::kFloat32, MakeKernel<AttentionKernel>);
}

}  // namespace lite
