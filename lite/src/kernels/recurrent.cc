// LSTM, GRU and RNN (ONNX semantics: gate orders iofc / zrh, peepholes, clip, sequence_lens, both
// layouts, forward / reverse / bidirectional). X*W^T for all steps is one GEMM per direction; each
// step adds H*R^T with another GEMM and applies the gate activations.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "cpu/gemm/gemm.h"
#include "cpu/simd/vmath.h"
#include "kernels/common.h"
#include "kernels/register.h"

namespace lite {
namespace {

using ms_schema::OpType;
using ms_schema::RnnActivation;

struct Act {
  RnnActivation kind = RnnActivation::SIGMOID;
  float alpha = 0.f, beta = 0.f;
  float operator()(float x) const {
    switch (kind) {
      case RnnActivation::SIGMOID: return FastSigmoid(x);
      case RnnActivation::TANH: return FastTanh(x);
      case RnnActivation::RELU: return x > 0.f ? x : 0.f;
      case RnnActivation::HARD_SIGMOID: return std::max(std::min(alpha * x + beta, 1.f), 0.f);   // (NaN stays)
      case RnnActivation::LEAKY_RELU: return x >= 0.f ? x : alpha * x;
      case RnnActivation::THRESHOLDED_RELU: return x > alpha ? x : 0.f;
      case RnnActivation::SCALED_TANH: return alpha * FastTanh(beta * x);
      case RnnActivation::AFFINE: return alpha * x + beta;
      case RnnActivation::ELU: return x >= 0.f ? x : alpha * (FastExp(x) - 1.f);
      case RnnActivation::SOFTSIGN: return x / (1.f + std::fabs(x));
      case RnnActivation::SOFTPLUS: return x > 0.f ? x + std::log1p(FastExp(-x)) : std::log1p(FastExp(x));
    }
    return x;
  }
};

class RecurrentKernel : public Kernel {
 public:
  using Kernel::Kernel;

  void Infer(KernelIO& io) override {
    const auto* a = node_.fb->attr_as_RecurrentAttr();
    TensorRec& x = In(io, 0);
    TensorRec& w = In(io, 1);
    TensorRec& r = In(io, 2);
    for (TensorRec* t : {&x, &w, &r}) Require(t->dtype == DataType::kFloat32, "only float32 is supported");
    Require(x.shape.size() == 3 && w.shape.size() == 3 && r.shape.size() == 3, "X, W and R must be 3-D");
    gates_ = node_.op == OpType::LSTM ? 4 : (node_.op == OpType::GRU ? 3 : 1);
    H_ = a->hidden_size();
    dirs_ = a->direction() == ms_schema::RnnDirection::BIDIRECTIONAL ? 2 : 1;
    layout_ = a->layout();
    Require(layout_ == 0 || layout_ == 1, "layout must be 0 or 1");
    T_ = layout_ ? x.shape[1] : x.shape[0];
    B_ = layout_ ? x.shape[0] : x.shape[1];
    I_ = x.shape[2];
    Require(H_ >= 1 && w.shape == Shape{dirs_, gates_ * H_, I_} && r.shape == Shape{dirs_, gates_ * H_, H_},
            "W/R shapes " + ShapeToString(w.shape) + "/" + ShapeToString(r.shape) + " do not match hidden_size " +
                std::to_string(H_) + ", " + std::to_string(dirs_) + " direction(s) and input size " + std::to_string(I_));
    if (io.has(3)) Require(io.in[3]->shape == Shape{dirs_, 2 * gates_ * H_}, "B must be [dirs, 2*gates*hidden]");
    if (io.has(4)) Require(io.in[4]->numel() == B_ && (io.in[4]->dtype == DataType::kInt32 || io.in[4]->dtype == DataType::kInt64),
                           "sequence_lens must hold one int per batch");
    const Shape state_shape = layout_ ? Shape{B_, dirs_, H_} : Shape{dirs_, B_, H_};
    if (io.has(5)) Require(io.in[5]->shape == state_shape, "initial_h must be " + ShapeToString(state_shape));
    if (gates_ == 4 && io.has(6)) Require(io.in[6]->shape == state_shape, "initial_c must be " + ShapeToString(state_shape));
    if (gates_ == 4 && io.has(7)) Require(io.in[7]->shape == Shape{dirs_, 3 * H_}, "P must be [dirs, 3*hidden]");
    // Activations: defaults per operator, or the list from the file.
    const int per_dir = gates_ == 4 ? 3 : (gates_ == 3 ? 2 : 1);
    acts_.clear();
    const auto* list = a->activations();
    if (list && list->size()) {
      Require(static_cast<int>(list->size()) == per_dir * dirs_, "activations must list " +
                                                                     std::to_string(per_dir * dirs_) + " functions");
      for (size_t i = 0; i < list->size(); ++i) {
        Act act;
        act.kind = list->Get(i);
        Require(act.kind >= RnnActivation::MIN && act.kind <= RnnActivation::MAX, "unknown activation");
        if (a->activation_alpha() && i < a->activation_alpha()->size()) act.alpha = a->activation_alpha()->Get(i);
        if (a->activation_beta() && i < a->activation_beta()->size()) act.beta = a->activation_beta()->Get(i);
        acts_.push_back(act);
      }
    } else {
      for (int d = 0; d < dirs_; ++d) {
        if (gates_ == 1) {
          acts_.push_back({RnnActivation::TANH});
        } else {
          acts_.push_back({RnnActivation::SIGMOID});
          acts_.push_back({RnnActivation::TANH});
          if (gates_ == 4) acts_.push_back({RnnActivation::TANH});
        }
      }
    }
    const Shape y = layout_ ? Shape{B_, T_, dirs_, H_} : Shape{T_, dirs_, B_, H_};
    const Shape state = layout_ ? Shape{B_, dirs_, H_} : Shape{dirs_, B_, H_};
    for (size_t o = 0; o < io.out.size(); ++o) {
      io.out[o]->shape = o == 0 ? y : state;
      io.out[o]->dtype = DataType::kFloat32;
    }
  }

  size_t ScratchBytes(const KernelIO&) const override {
    // X*W^T for all steps, the per-step recurrent product, h and c states, and GRU's r*h.
    return static_cast<size_t>(T_ * B_ * gates_ * H_ + B_ * gates_ * H_ + 3 * B_ * H_ + H_) * sizeof(float);
  }

  void Run(KernelIO& io, const KernelContext& ctx) override {
    const auto* a = node_.fb->attr_as_RecurrentAttr();
    const float clip = a->clip();
    const int64_t G = gates_ * H_;
    float* xw = static_cast<float*>(ctx.scratch);
    float* hr = xw + T_ * B_ * G;
    float* h = hr + B_ * G;
    float* c = h + B_ * H_;
    float* tmp = c + B_ * H_;
    std::vector<int64_t> lens(B_, T_);
    if (io.has(4)) {
      const std::vector<int64_t> l = ReadInts(*io.in[4]);
      for (int64_t b = 0; b < B_; ++b) {
        if (l[b] < 0 || l[b] > T_) Fail("sequence length " + std::to_string(l[b]) + " outside [0, " + std::to_string(T_) + "]");
        lens[b] = l[b];
      }
    }
    // Time-major copy of X when layout = 1, so each step's rows are contiguous.
    std::vector<float> xt;
    const float* x = io.in[0]->as<float>();
    if (layout_) {
      xt.resize(T_ * B_ * I_);
      for (int64_t b = 0; b < B_; ++b)
        for (int64_t t = 0; t < T_; ++t) std::memcpy(&xt[(t * B_ + b) * I_], x + (b * T_ + t) * I_, I_ * sizeof(float));
      x = xt.data();
    }
    float* y = io.out.size() > 0 ? io.out[0]->as<float>() : nullptr;
    if (y) std::fill(y, y + io.out[0]->numel(), 0.f);
    const int per_dir = gates_ == 4 ? 3 : (gates_ == 3 ? 2 : 1);
    for (int64_t d = 0; d < dirs_; ++d) {
      const bool reverse = a->direction() == ms_schema::RnnDirection::REVERSE || d == 1;
      const float* w = io.in[1]->as<float>() + d * G * I_;
      const float* r = io.in[2]->as<float>() + d * G * H_;
      const float* wb = io.has(3) ? io.in[3]->as<float>() + d * 2 * G : nullptr;
      const float* rb = wb ? wb + G : nullptr;
      const float* p = gates_ == 4 && io.has(7) ? io.in[7]->as<float>() + d * 3 * H_ : nullptr;
      const Act* act = &acts_[d * per_dir];
      // xw = X * W^T (+ W bias, + R bias except GRU's hidden gate under linear_before_reset)
      Sgemm(false, true, T_ * B_, G, I_, 1.f, x, I_, w, I_, 0.f, xw, G, {}, ctx.pool);
      if (wb) {
        for (int64_t row = 0; row < T_ * B_; ++row)
          for (int64_t j = 0; j < G; ++j) {
            const bool keep_rb_apart = gates_ == 3 && j >= 2 * H_;
            xw[row * G + j] += wb[j] + (keep_rb_apart ? 0.f : rb[j]);
          }
      }
      auto load_state = [&](size_t input, float* dst) {
        if (!io.has(input)) {
          std::fill(dst, dst + B_ * H_, 0.f);
          return;
        }
        const float* src = io.in[input]->as<float>();
        for (int64_t b = 0; b < B_; ++b)
          std::memcpy(dst + b * H_, layout_ ? src + (b * dirs_ + d) * H_ : src + (d * B_ + b) * H_, H_ * sizeof(float));
      };
      load_state(5, h);
      if (gates_ == 4) load_state(6, c);
      auto clipv = [clip](float v) { return clip > 0.f ? std::max(-clip, std::min(clip, v)) : v; };
      std::vector<float> zs(H_), hh(H_);   // GRU update gate and candidate state of one batch row
      for (int64_t step = 0; step < T_; ++step) {
        if (gates_ == 3) {
          // z and r gates from h*R^T; the hidden gate needs r first.
          Sgemm(false, true, B_, 2 * H_, H_, 1.f, h, H_, r, H_, 0.f, hr, G, {}, nullptr);
          if (a->linear_before_reset()) Sgemm(false, true, B_, H_, H_, 1.f, h, H_, r + 2 * H_ * H_, H_, 0.f, hr + 2 * H_, G, {}, nullptr);
        } else {
          Sgemm(false, true, B_, G, H_, 1.f, h, H_, r, H_, 0.f, hr, G, {}, nullptr);
        }
        for (int64_t b = 0; b < B_; ++b) {
          if (step >= lens[b]) continue;   // finished sequence: state frozen, Y stays zero
          const int64_t t = reverse ? lens[b] - 1 - step : step;
          const float* g = xw + (t * B_ + b) * G;
          const float* q = hr + b * G;
          float* hb = h + b * H_;
          float* cb = c + b * H_;
          if (gates_ == 1) {
            for (int64_t k = 0; k < H_; ++k) hb[k] = act[0](clipv(g[k] + q[k]));
          } else if (gates_ == 4) {
            for (int64_t k = 0; k < H_; ++k) {
              const float pi = p ? p[k] * cb[k] : 0.f, pf = p ? p[2 * H_ + k] * cb[k] : 0.f;
              const float i = act[0](clipv(g[k] + q[k] + pi));
              const float f = a->input_forget() ? 1.f - i : act[0](clipv(g[2 * H_ + k] + q[2 * H_ + k] + pf));
              const float cc = act[1](clipv(g[3 * H_ + k] + q[3 * H_ + k]));
              cb[k] = f * cb[k] + i * cc;
              const float po = p ? p[H_ + k] * cb[k] : 0.f;
              const float o = act[0](clipv(g[H_ + k] + q[H_ + k] + po));
              tmp[k] = o * act[2](cb[k]);
            }
            std::memcpy(hb, tmp, H_ * sizeof(float));
          } else {
            const float* rbh = rb ? rb + 2 * H_ : nullptr;
            float* rh = tmp;
            for (int64_t k = 0; k < H_; ++k) {
              zs[k] = act[0](clipv(g[k] + q[k]));
              const float rr = act[0](clipv(g[H_ + k] + q[H_ + k]));
              rh[k] = a->linear_before_reset() ? rr * (q[2 * H_ + k] + (rbh ? rbh[k] : 0.f)) : rr * hb[k];
            }
            if (a->linear_before_reset()) {
              for (int64_t k = 0; k < H_; ++k) hh[k] = act[1](clipv(g[2 * H_ + k] + rh[k]));
            } else {
              // (r . h) * Rh^T + Rbh
              for (int64_t k = 0; k < H_; ++k) {
                float acc = rbh ? rbh[k] : 0.f;
                const float* rk = r + (2 * H_ + k) * H_;
                for (int64_t m = 0; m < H_; ++m) acc += rh[m] * rk[m];
                hh[k] = act[1](clipv(g[2 * H_ + k] + acc));
              }
            }
            for (int64_t k = 0; k < H_; ++k) hb[k] = (1.f - zs[k]) * hh[k] + zs[k] * hb[k];
          }
          if (y) {
            float* yo = layout_ ? y + ((b * T_ + t) * dirs_ + d) * H_ : y + ((t * dirs_ + d) * B_ + b) * H_;
            std::memcpy(yo, hb, H_ * sizeof(float));
          }
        }
      }
      for (size_t o = 1; o < io.out.size(); ++o) {
        const float* src = o == 1 ? h : c;
        float* dst = io.out[o]->as<float>();
        for (int64_t b = 0; b < B_; ++b)
          std::memcpy(layout_ ? dst + (b * dirs_ + d) * H_ : dst + (d * B_ + b) * H_, src + b * H_, H_ * sizeof(float));
      }
    }
  }

 private:
  int64_t gates_ = 1, H_ = 0, dirs_ = 1, layout_ = 0, T_ = 0, B_ = 0, I_ = 0;
  std::vector<Act> acts_;
};

}  // namespace

void RegisterRecurrentKernels(KernelRegistry& r) {
  for (OpType op : {OpType::LSTM, OpType::GRU, OpType::RNN}) r.Register(op, DataType::kFloat32, MakeKernel<RecurrentKernel>);
}

}  // namespace lite
