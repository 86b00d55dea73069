// Linear attention with a recurrent state per sequence (format 1.14): the two operators of a gated DeltaNet layer
// (Qwen3.5, Qwen3-Next). CausalConv1D is the short depthwise convolution over the q/k/v projection, GatedDeltaRule the
// delta-rule recurrence on a [Dk, Dv] matrix per value head. A step holds tokens of several sequences one after
// another (query_lens); each sequence's state lives in a slot of a state tensor the engine owns, bound without a copy
// and updated here in place, so a decode step reads and writes the state where it is. Slot -1: a sequence that starts
// from zeros and keeps nothing (the padding sequences of a bucketed step).
//
// The recurrence runs token by token: per token and head it reads and writes the state twice ([Dk, Dv] floats, 64 KiB
// at 128 x 128, in L2), O(Dk * Dv) work against the O(hidden^2) of the layer's projections, so even a prompt chunk
// spends a few percent of the layer's time here; the chunked (matrix) form GPUs use would not pay on a CPU.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/common.h"
#include "kernels/register.h"

namespace lite {
namespace {

using ms_schema::OpType;

// The sequences of a step: their token counts and state slots, checked against the tokens and the state's slots.
struct StepSequences {
  const int64_t* query_lens = nullptr;
  const int64_t* slots = nullptr;
  int64_t count = 0;
  std::vector<int64_t> first_row;   // each sequence's first token row
};

class StatefulSequenceKernel : public Kernel {
 public:
  using Kernel::Kernel;

 protected:
  void RequireInputs(KernelIO& io, size_t count, const char* const* names) const {
    Require(io.in.size() == count, std::string("takes ") + std::to_string(count) + " inputs");
    for (size_t i = 0; i < count; ++i) Require(io.has(i), std::string("needs ") + names[i]);
  }
  void RequireSequenceInputs(KernelIO& io, size_t slots_in, size_t lens_in) const {
    const TensorRec& slots = *io.in[slots_in];
    const TensorRec& lens = *io.in[lens_in];
    Require(slots.dtype == DataType::kInt64 && lens.dtype == DataType::kInt64,
            "state_slots and query_lens must be int64");
    Require(slots.shape.size() == 1 && lens.shape == slots.shape,
            "state_slots " + ShapeToString(slots.shape) + " and query_lens " + ShapeToString(lens.shape) +
                " must both be [sequences]");
  }
  // The step's sequences from the values of state_slots / query_lens, checked: lengths add up to `tokens`, every
  // slot is -1 or inside the state, and no slot is named twice (two sequences would race on it).
  StepSequences Sequences(KernelIO& io, size_t slots_in, size_t lens_in, int64_t tokens, int64_t num_slots) const {
    StepSequences s;
    s.slots = io.in[slots_in]->as<int64_t>();
    s.query_lens = io.in[lens_in]->as<int64_t>();
    s.count = io.in[slots_in]->shape[0];
    s.first_row.resize(s.count);
    std::vector<char> used(num_slots, 0);
    int64_t row = 0;
    for (int64_t b = 0; b < s.count; ++b) {
      Require(s.query_lens[b] >= 0, "sequence " + std::to_string(b) + ": negative query_lens");
      const int64_t slot = s.slots[b];
      Require(slot >= -1 && slot < num_slots, "sequence " + std::to_string(b) + ": state slot " + std::to_string(slot) +
                                                  " outside [-1, " + std::to_string(num_slots) + ")");
      if (slot >= 0) {
        Require(!used[slot], "state slot " + std::to_string(slot) + " is named by two sequences of one step");
        used[slot] = 1;
      }
      s.first_row[b] = row;
      row += s.query_lens[b];
    }
    Require(row == tokens, "query_lens add up to " + std::to_string(row) + " tokens, the input holds " +
                               std::to_string(tokens));
    return s;
  }
};

inline float Silu(float x) { return x / (1.f + std::exp(-x)); }

// ---------------------------------------------------------------------------------------------------------------
class CausalConv1DKernel : public StatefulSequenceKernel {
 public:
  using StatefulSequenceKernel::StatefulSequenceKernel;

  void Infer(KernelIO& io) override {
    const auto* attr = node_.fb->attr_as_CausalConvAttr();
    Require(attr != nullptr, "missing CausalConvAttr");
    static const char* const names[] = {"x", "weight", "conv_state", "state_slots", "query_lens"};
    RequireInputs(io, 5, names);
    const TensorRec &x = *io.in[0], &w = *io.in[1], &state = *io.in[2];
    Require(x.dtype == DataType::kFloat32 && w.dtype == DataType::kFloat32 && state.dtype == DataType::kFloat32,
            "x, weight and conv_state must be float32");
    Require(x.shape.size() == 2, "x " + ShapeToString(x.shape) + " must be [tokens, channels]");
    Require(w.kind == TensorRec::Kind::kConstant && w.shape.size() == 2 && w.shape[0] == x.shape[1] && w.shape[1] >= 1,
            "weight " + ShapeToString(w.shape) + " must be a constant [channels, kernel] with channels = " +
                std::to_string(x.shape[1]));
    Require(state.shape.size() == 3 && state.shape[1] == x.shape[1] && state.shape[2] == w.shape[1] - 1,
            "conv_state " + ShapeToString(state.shape) + " must be [slots, " + std::to_string(x.shape[1]) + ", " +
                std::to_string(w.shape[1] - 1) + "]");
    RequireSequenceInputs(io, 3, 4);
    act_ = attr->activation();
    Require(act_ == ms_schema::Activation::NONE || act_ == ms_schema::Activation::SILU,
            "activation must be NONE or SILU");
    io.out[0]->shape = x.shape;
    io.out[0]->dtype = DataType::kFloat32;
  }

  void Run(KernelIO& io, const KernelContext& ctx) override {
    const int64_t T = io.in[0]->shape[0], C = io.in[0]->shape[1], K = io.in[1]->shape[1], W = K - 1;
    float* state = io.in[2]->as<float>();
    const StepSequences seqs = Sequences(io, 3, 4, T, io.in[2]->shape[0]);
    const float* x = io.in[0]->as<float>();
    const float* w = io.in[1]->as<float>();
    float* y = io.out[0]->as<float>();
    const bool silu = act_ == ms_schema::Activation::SILU;
    // Channels are independent: each task takes a band of them through every sequence of the step.
    ctx.pool->ParallelFor(C, 64, [&](int64_t c0, int64_t c1) {
      std::vector<float> window(static_cast<size_t>(W) * (c1 - c0));   // the band's state, [channel, W]
      for (int64_t b = 0; b < seqs.count; ++b) {
        const int64_t L = seqs.query_lens[b], r0 = seqs.first_row[b], slot = seqs.slots[b];
        float* kept = slot >= 0 ? state + (slot * C + c0) * W : nullptr;
        if (kept) std::copy(kept, kept + W * (c1 - c0), window.begin());
        else std::fill(window.begin(), window.end(), 0.f);
        // value(c, tau): the input tau tokens into the sequence's chunk, tau < 0 reaching into the state.
        auto value = [&](int64_t c, int64_t tau) {
          return tau >= 0 ? x[(r0 + tau) * C + c] : window[(c - c0) * W + (W + tau)];
        };
        for (int64_t t = 0; t < L; ++t) {
          for (int64_t c = c0; c < c1; ++c) {
            const float* wc = w + c * K;
            float acc = 0.f;
            for (int64_t j = 0; j < K; ++j) acc += wc[j] * value(c, t + j - W);
            y[(r0 + t) * C + c] = silu ? Silu(acc) : acc;
          }
        }
        if (kept && L > 0) {   // the last W inputs (older state where the chunk is shorter than W)
          std::vector<float> next(W);
          for (int64_t c = c0; c < c1; ++c) {
            for (int64_t i = 0; i < W; ++i) next[i] = value(c, L - W + i);
            std::copy(next.begin(), next.end(), kept + (c - c0) * W);
          }
        }
      }
    });
  }

 private:
  ms_schema::Activation act_ = ms_schema::Activation::NONE;
};

// ---------------------------------------------------------------------------------------------------------------
class GatedDeltaRuleKernel : public StatefulSequenceKernel {
 public:
  using StatefulSequenceKernel::StatefulSequenceKernel;

  void Infer(KernelIO& io) override {
    const auto* attr = node_.fb->attr_as_GatedDeltaAttr();
    Require(attr != nullptr, "missing GatedDeltaAttr");
    static const char* const names[] = {"qkv", "g", "beta", "recurrent_state", "state_slots", "query_lens"};
    RequireInputs(io, 6, names);
    const TensorRec &qkv = *io.in[0], &g = *io.in[1], &beta = *io.in[2], &state = *io.in[3];
    for (size_t i = 0; i < 4; ++i)
      Require(io.in[i]->dtype == DataType::kFloat32, std::string(names[i]) + " must be float32");
    Require(state.shape.size() == 4 && state.shape[1] > 0 && state.shape[2] > 0 && state.shape[3] > 0,
            "recurrent_state " + ShapeToString(state.shape) + " must be [slots, value_heads, key_dim, value_dim]");
    hv_ = state.shape[1];
    dk_ = state.shape[2];
    dv_ = state.shape[3];
    Require(qkv.shape.size() == 2, "qkv " + ShapeToString(qkv.shape) + " must be [tokens, width]");
    const int64_t T = qkv.shape[0], keys = qkv.shape[1] - hv_ * dv_;
    Require(keys > 0 && keys % (2 * dk_) == 0,
            "qkv width " + std::to_string(qkv.shape[1]) + " is not 2 * key_heads * " + std::to_string(dk_) + " + " +
                std::to_string(hv_) + " * " + std::to_string(dv_));
    hk_ = keys / (2 * dk_);
    Require(hv_ % hk_ == 0, std::to_string(hv_) + " value heads do not share " + std::to_string(hk_) + " key heads");
    Require(g.shape == Shape{T, hv_} && beta.shape == Shape{T, hv_},
            "g " + ShapeToString(g.shape) + " and beta " + ShapeToString(beta.shape) + " must be [" +
                std::to_string(T) + ", " + std::to_string(hv_) + "]");
    RequireSequenceInputs(io, 4, 5);
    scale_ = attr->scale() != 0.f ? attr->scale() : 1.f / std::sqrt(static_cast<float>(dk_));
    l2norm_ = attr->qk_l2norm();
    io.out[0]->shape = {T, hv_ * dv_};
    io.out[0]->dtype = DataType::kFloat32;
  }

  void Run(KernelIO& io, const KernelContext& ctx) override {
    const int64_t T = io.in[0]->shape[0], width = io.in[0]->shape[1];
    float* states = io.in[3]->as<float>();
    const StepSequences seqs = Sequences(io, 4, 5, T, io.in[3]->shape[0]);
    const float* qkv = io.in[0]->as<float>();
    const float* g = io.in[1]->as<float>();
    const float* beta = io.in[2]->as<float>();
    float* out = io.out[0]->as<float>();
    const int64_t hv = hv_, hk = hk_, dk = dk_, dv = dv_, group = hv_ / hk_, key_width = hk_ * dk_;
    const float scale = scale_;
    const bool l2 = l2norm_;
    // One task per (sequence, value head): its state is private to it.
    ctx.pool->ParallelFor(seqs.count * hv, 1, [&](int64_t i0, int64_t i1) {
      std::vector<float> local, q(dk), k(dk), kv(dv);
      for (int64_t item = i0; item < i1; ++item) {
        const int64_t b = item / hv, h = item % hv, L = seqs.query_lens[b], slot = seqs.slots[b];
        if (L == 0) continue;
        float* S;
        if (slot >= 0) {
          S = states + ((slot * hv + h) * dk) * dv;
        } else {
          local.assign(static_cast<size_t>(dk * dv), 0.f);
          S = local.data();
        }
        const int64_t kh = h / group;
        for (int64_t t = 0; t < L; ++t) {
          const int64_t row = seqs.first_row[b] + t;
          const float* src = qkv + row * width;
          std::copy(src + kh * dk, src + kh * dk + dk, q.begin());
          std::copy(src + key_width + kh * dk, src + key_width + kh * dk + dk, k.begin());
          const float* v = src + 2 * key_width + h * dv;
          float qs = scale, ks = 1.f;
          if (l2) {   // x / sqrt(sum x^2 + 1e-6), as transformers' l2norm
            float sq = 0.f, sk = 0.f;
            for (int64_t i = 0; i < dk; ++i) sq += q[i] * q[i], sk += k[i] * k[i];
            qs = scale / std::sqrt(sq + 1e-6f);
            ks = 1.f / std::sqrt(sk + 1e-6f);
          }
          for (int64_t i = 0; i < dk; ++i) q[i] *= qs, k[i] *= ks;
          const float decay = std::exp(g[row * hv + h]), bt = beta[row * hv + h];
          // kv = k^T (decay S): what the decayed state recalls for this key.
          std::fill(kv.begin(), kv.end(), 0.f);
          for (int64_t i = 0; i < dk; ++i) {
            const float ki = k[i] * decay;
            const float* Si = S + i * dv;
            for (int64_t j = 0; j < dv; ++j) kv[j] += ki * Si[j];
          }
          for (int64_t j = 0; j < dv; ++j) kv[j] = (v[j] - kv[j]) * bt;   // the delta written
          // S = decay S + k delta^T; o = q^T S, row by row of S.
          float* o = out + row * hv * dv + h * dv;
          std::fill(o, o + dv, 0.f);
          for (int64_t i = 0; i < dk; ++i) {
            float* Si = S + i * dv;
            const float ki = k[i], qi = q[i];
            for (int64_t j = 0; j < dv; ++j) {
              Si[j] = decay * Si[j] + ki * kv[j];
              o[j] += qi * Si[j];
            }
          }
        }
      }
    });
  }

 private:
  int64_t hv_ = 0, hk_ = 0, dk_ = 0, dv_ = 0;
  float scale_ = 1.f;
  bool l2norm_ = true;
};

}  // namespace

void RegisterLinearAttentionKernels(KernelRegistry& r) {
  r.Register(OpType::CausalConv1D, DataType::kFloat32, MakeKernel<CausalConv1DKernel>);
  r.Register(OpType::GatedDeltaRule, DataType::kFloat32, MakeKernel<GatedDeltaRuleKernel>);
}

}  // namespace lite
