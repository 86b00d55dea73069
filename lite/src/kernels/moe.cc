// MoE (format 1.13): a mixture-of-experts feed-forward block. x [T, H] (or [..., H]), the router's logits [T, E], then
// E gate-up weights [H, 2I] and E down weights [I, H]. Each token takes the top_k experts of softmax(logits); the
// tokens routed to an expert are gathered and run through its two products together (a decoding step's few tokens
// take the skinny path: each chosen expert's weights are read once, the others not at all); outputs are summed
// weighted by the probabilities, expert by expert in index order (transformers' order).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/common.h"
#include "kernels/constant_matrix.h"
#include "kernels/register.h"

namespace lite {

EpilogueAct EpilogueFromSchema(ms_schema::Activation a);

namespace {

using ms_schema::OpType;

class MoEKernel : public Kernel {
 public:
  using Kernel::Kernel;

  void Infer(KernelIO& io) override {
    const auto* attr = node_.fb->attr_as_MoEAttr();
    Require(attr != nullptr, "missing MoEAttr");
    const TensorRec& x = In(io, 0);
    const TensorRec& logits = In(io, 1);
    Require(x.dtype == DataType::kFloat32 && logits.dtype == DataType::kFloat32, "x and the logits must be float32");
    Require(!x.shape.empty(), "x must have a hidden dim");
    H_ = x.shape.back();
    T_ = H_ > 0 ? x.numel() / H_ : 0;
    Require(logits.shape.size() == 2 && logits.shape[0] == T_,
            "logits " + ShapeToString(logits.shape) + " must be [tokens, experts] for x " + ShapeToString(x.shape));
    E_ = logits.shape[1];
    Require(E_ > 0 && io.in.size() == static_cast<size_t>(2 + 2 * E_),
            "takes x, the logits and 2 x " + std::to_string(E_) + " expert weights, got " +
                std::to_string(io.in.size()) + " inputs");
    top_k_ = attr->top_k();
    Require(top_k_ >= 1 && top_k_ <= E_, "top_k " + std::to_string(top_k_) + " must be in [1, " + std::to_string(E_) + "]");
    act_ = EpilogueFromSchema(attr->activation());
    Require(act_ == EpilogueAct::kSilu || act_ == EpilogueAct::kGelu || act_ == EpilogueAct::kGeluTanh,
            "activation must be SiLU or GELU");
    for (int64_t e = 0; e < E_; ++e) {
      const TensorRec& gu = In(io, 2 + e);
      const TensorRec& down = In(io, 2 + E_ + e);
      Require(gu.kind == TensorRec::Kind::kConstant && down.kind == TensorRec::Kind::kConstant,
              "expert weights must be constants");
      if (e == 0) I_ = gu.shape.size() == 2 ? gu.shape[1] / 2 : 0;
      Require(gu.shape == Shape{H_, 2 * I_} && I_ > 0, "expert " + std::to_string(e) + "'s gate-up weight " +
                                                           ShapeToString(gu.shape) + " must be [H, 2I] = [" +
                                                           std::to_string(H_) + ", " + std::to_string(2 * I_) + "]");
      Require(down.shape == Shape{I_, H_}, "expert " + std::to_string(e) + "'s down weight " +
                                               ShapeToString(down.shape) + " must be [I, H]");
    }
    io.out[0]->shape = x.shape;
    io.out[0]->dtype = DataType::kFloat32;
  }

  bool NeedsDecodedInput(size_t i, const TensorRec& t) const override { return !(i >= 2 && IsCompressedMatrix(t)); }

  void Prepare(KernelIO& io) override {
    if (gate_up_.size() == static_cast<size_t>(E_)) return;
    gate_up_ = std::vector<ConstantMatrix>(static_cast<size_t>(E_));
    down_ = std::vector<ConstantMatrix>(static_cast<size_t>(E_));
    for (int64_t e = 0; e < E_; ++e) {
      gate_up_[e].Prepare(*io.in[2 + e], H_, 2 * I_, false, io.dynamic_quant);
      down_[e].Prepare(*io.in[2 + E_ + e], I_, H_, false, io.dynamic_quant);
    }
  }

  void Run(KernelIO& io, const KernelContext& ctx) override {
    const float* x = io.in[0]->as<float>();
    const float* logits = io.in[1]->as<float>();
    float* y = io.out[0]->as<float>();
    std::fill(y, y + T_ * H_, 0.f);
    // Routing: per token the top_k experts by probability (ties to the lower index), grouped by expert.
    std::vector<std::vector<std::pair<int64_t, float>>> routed(static_cast<size_t>(E_));
    std::vector<double> probs(static_cast<size_t>(E_));
    std::vector<int64_t> order(static_cast<size_t>(E_));
    const bool normalize = node_.fb->attr_as_MoEAttr()->normalize_top_k();
    for (int64_t t = 0; t < T_; ++t) {
      const float* l = logits + t * E_;
      const float peak = *std::max_element(l, l + E_);
      double sum = 0;
      for (int64_t e = 0; e < E_; ++e) sum += probs[e] = std::exp(static_cast<double>(l[e]) - peak);
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + top_k_, order.end(), [&](int64_t a, int64_t b) {
        return probs[a] != probs[b] ? probs[a] > probs[b] : a < b;
      });
      double chosen = 0;
      for (int64_t k = 0; k < top_k_; ++k) chosen += probs[order[k]];
      const double norm = normalize ? chosen : sum;
      for (int64_t k = 0; k < top_k_; ++k)
        routed[order[k]].emplace_back(t, static_cast<float>(probs[order[k]] / norm));
    }
    std::vector<float> rows, gate_up, out;
    GemmEpilogue gating;
    gating.act = act_;
    for (int64_t e = 0; e < E_; ++e) {
      const auto& tokens = routed[e];
      const int64_t n = static_cast<int64_t>(tokens.size());
      if (n == 0) continue;
      rows.resize(static_cast<size_t>(n * H_));
      for (int64_t r = 0; r < n; ++r) std::copy_n(x + tokens[r].first * H_, H_, rows.data() + r * H_);
      gate_up.resize(static_cast<size_t>(n * 2 * I_));
      gate_up_[e].Multiply(n, rows.data(), H_, gate_up.data(), 2 * I_, GemmEpilogue{}, ctx.pool);
      // act(gate) * up, in place over the gate's columns
      gating.multiplier = gate_up.data() + I_;
      gating.ld_multiplier = 2 * I_;
      ApplyEpilogue(gate_up.data(), 2 * I_, 0, n, 0, I_, gating);
      out.resize(static_cast<size_t>(n * H_));
      down_[e].Multiply(n, gate_up.data(), 2 * I_, out.data(), H_, GemmEpilogue{}, ctx.pool);
      for (int64_t r = 0; r < n; ++r) {
        float* yt = y + tokens[r].first * H_;
        const float p = tokens[r].second;
        const float* o = out.data() + r * H_;
        for (int64_t j = 0; j < H_; ++j) yt[j] += p * o[j];
      }
    }
  }

 private:
  int64_t T_ = 0, H_ = 0, E_ = 0, I_ = 0, top_k_ = 0;
  EpilogueAct act_ = EpilogueAct::kSilu;
  std::vector<ConstantMatrix> gate_up_, down_;
};

}  // namespace

void RegisterMoEKernels(KernelRegistry& r) { r.Register(OpType::MoE, DataType::kFloat32, MakeKernel<MoEKernel>); }

}  // namespace lite
