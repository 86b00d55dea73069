// BatchNormalization (inference), LayerNormalization, RMSNormalization, Softmax and ReduceMean.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "cpu/simd/layer_norm_row.h"
#include "cpu/simd/vmath.h"
#include "cpu/simd/simd.h"
#include "kernels/common.h"
#include "kernels/register.h"

namespace lite {
namespace {

using ms_schema::OpType;


class BatchNormKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void Infer(KernelIO& io) override {
    TensorRec& x = In(io, 0);
    Require(x.dtype == DataType::kFloat32, "only float32 is supported");
    Require(x.shape.size() >= 2, "input must have rank >= 2");
    Require(io.out.size() == 1, "training-mode outputs are not supported");
    for (size_t i = 1; i < 5; ++i) {
      Require(In(io, i).numel() == x.shape[1] && In(io, i).dtype == DataType::kFloat32,
              "scale, B, mean and var must each hold C = " + std::to_string(x.shape[1]) + " floats");
    }
    io.out[0]->shape = x.shape;
    io.out[0]->dtype = DataType::kFloat32;
  }
  void Run(KernelIO& io, const KernelContext& ctx) override {
    const Shape& s = io.in[0]->shape;
    const int64_t C = s[1], planes = s[0] * C;
    const int64_t area = planes ? io.in[0]->numel() / planes : 0;
    const float eps = node_.fb->attr_as_NormAttr()->epsilon();
    const float *x = io.in[0]->as<float>(), *scale = io.in[1]->as<float>(), *bias = io.in[2]->as<float>(),
                *mean = io.in[3]->as<float>(), *var = io.in[4]->as<float>();
    float* y = io.out[0]->as<float>();
    ctx.pool->ParallelFor(planes, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, area)), [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) {
        const int64_t c = p % C;
        const float a = scale[c] / std::sqrt(var[c] + eps);
        const float sh = bias[c] - mean[c] * a;
        for (int64_t i = 0; i < area; ++i) y[p * area + i] = x[p * area + i] * a + sh;
      }
    });
  }
};

// LayerNormalization, and RMSNormalization (no mean subtracted, no bias: x / sqrt(mean(x^2) + eps) * scale).
class LayerNormKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void Infer(KernelIO& io) override {
    TensorRec& x = In(io, 0);
    Require(x.dtype == DataType::kFloat32, "only float32 is supported");
    Require(io.out.size() == 1, "the Mean and InvStdDev outputs are not supported");
    int64_t axis = node_.fb->attr_as_NormAttr()->axis();
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    Require(NormalizeAxis(axis, rank), "axis out of range for rank " + std::to_string(rank));
    Shape norm_shape(x.shape.begin() + axis, x.shape.end());
    inner_ = ShapeNumel(norm_shape);
    outer_ = inner_ ? x.numel() / inner_ : 0;
    if (node_.fb->op() == OpType::RMSNormalization) Require(!io.has(2), "RMSNormalization takes no bias");
    for (size_t i = 1; i < 3; ++i) {
      if (!io.has(i)) continue;
      Shape b;
      Require(io.in[i]->dtype == DataType::kFloat32, "scale and bias must be float32");
      Require(BroadcastShapes({&io.in[i]->shape, &norm_shape}, b) && b == norm_shape,
              "scale/bias shape " + ShapeToString(io.in[i]->shape) + " does not broadcast to " + ShapeToString(norm_shape));
      bshape_[i] = io.in[i]->shape;
    }
    norm_shape_ = norm_shape;
    Require(io.has(1), "scale is required");
    io.out[0]->shape = x.shape;
    io.out[0]->dtype = DataType::kFloat32;
  }
  void Run(KernelIO& io, const KernelContext& ctx) override {
    const float eps = node_.fb->attr_as_NormAttr()->epsilon();
    const float* x = io.in[0]->as<float>();
    const float* scale = Expanded(io, 1, scale_buf_);
    const float* bias = io.has(2) ? Expanded(io, 2, bias_buf_) : nullptr;
    float* y = io.out[0]->as<float>();
    const int64_t n = inner_;
    const bool rms = node_.fb->op() == OpType::RMSNormalization;
    ctx.pool->ParallelFor(outer_, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, n)), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) LayerNormRow(x + r * n, y + r * n, n, eps, rms, scale, bias);
    });
  }

 private:
  // Scale/bias broadcast to the full normalised shape (a copy only when they are smaller).
  const float* Expanded(KernelIO& io, size_t i, std::vector<float>& buf) const {
    const TensorRec& t = *io.in[i];
    if (t.numel() == inner_) return t.as<float>();
    buf.resize(inner_);
    BroadcastPlan plan = MakeBroadcastPlan(norm_shape_, {&bshape_[i]});
    ForEachRow(plan, 0, plan.rows, [&](int64_t o, const int64_t* off, const int64_t* st, int64_t n) {
      for (int64_t k = 0; k < n; ++k) buf[o + k] = t.as<float>()[off[0] + k * st[0]];
    });
    return buf.data();
  }

  int64_t inner_ = 0, outer_ = 0;
  Shape norm_shape_, bshape_[3];
  std::vector<float> scale_buf_, bias_buf_;
};

// Softmax down the columns of a [len, stride] slab, over its first `cols` (<= kSoftmaxColumns) contiguous columns:
// a softmax over a middle axis (YOLO's DFL bins, attention maps laid out [.., heads, keys, queries]) read row by
// row, so each pass is a vector loop over contiguous memory instead of one strided column at a time.
constexpr int64_t kSoftmaxColumns = 64;

LITE_VECTOR_CLONES void SoftmaxColumns(const float* x, float* y, int64_t len, int64_t stride, int64_t cols) {
  float mx[kSoftmaxColumns], sum[kSoftmaxColumns];
  for (int64_t c = 0; c < cols; ++c) mx[c] = x[c];
  for (int64_t i = 1; i < len; ++i) {
    const float* xr = x + i * stride;
    for (int64_t c = 0; c < cols; ++c) mx[c] = xr[c] > mx[c] ? xr[c] : mx[c];
  }
  for (int64_t c = 0; c < cols; ++c) sum[c] = 0.f;
  for (int64_t i = 0; i < len; ++i) {
    const float* xr = x + i * stride;
    float* yr = y + i * stride;
    for (int64_t c = 0; c < cols; ++c) {
      const float v = FastExp(xr[c] - mx[c]);
      yr[c] = v;
      sum[c] += v;
    }
  }
  for (int64_t c = 0; c < cols; ++c) sum[c] = 1.f / sum[c];
  for (int64_t i = 0; i < len; ++i) {
    float* yr = y + i * stride;
    for (int64_t c = 0; c < cols; ++c) yr[c] *= sum[c];
  }
}

class SoftmaxKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void Infer(KernelIO& io) override {
    TensorRec& x = In(io, 0);
    Require(x.dtype == DataType::kFloat32, "only float32 is supported");
    const auto* attr = node_.fb->attr_as_SoftmaxAttr();
    int64_t axis = attr->axis();
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    Require(rank >= 1 && NormalizeAxis(axis, rank), "axis out of range for rank " + std::to_string(rank));
    // Work as [outer, axis_len, inner]; legacy (opset < 13) softmax flattens everything from `axis` on.
    outer_ = 1;
    for (int64_t i = 0; i < axis; ++i) outer_ *= x.shape[i];
    if (attr->coerce_2d()) {
      len_ = 1;
      for (int64_t i = axis; i < rank; ++i) len_ *= x.shape[i];
      inner_ = 1;
    } else {
      len_ = x.shape[axis];
      inner_ = 1;
      for (int64_t i = axis + 1; i < rank; ++i) inner_ *= x.shape[i];
    }
    io.out[0]->shape = x.shape;
    io.out[0]->dtype = DataType::kFloat32;
  }
  void Run(KernelIO& io, const KernelContext& ctx) override {
    const float* x = io.in[0]->as<float>();
    float* y = io.out[0]->as<float>();
    const int64_t len = len_, inner = inner_;
    const OpType op = node_.op;
    if (op == OpType::Softmax && inner > 1 && len > 0) {   // blocks of contiguous columns
      const int64_t blocks = (inner + kSoftmaxColumns - 1) / kSoftmaxColumns;
      ctx.pool->ParallelFor(outer_ * blocks, std::max<int64_t>(1, 256 / std::max<int64_t>(1, len)),
                            [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
          const int64_t o = r / blocks, c0 = (r % blocks) * kSoftmaxColumns;
          const int64_t at = o * len * inner + c0;
          SoftmaxColumns(x + at, y + at, len, inner, std::min(kSoftmaxColumns, inner - c0));
        }
      });
      return;
    }
    ctx.pool->ParallelFor(outer_ * inner, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, len)),
                          [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const int64_t o = r / inner, in = r % inner;
        const float* xr = x + o * len * inner + in;
        float* yr = y + o * len * inner + in;
        if (inner == 1 && op == OpType::Softmax && len > 0) {   // the common case: contiguous rows, vectorised
          const float mx = MaxLanes(xr, len);
          if (std::isfinite(mx)) {
            ScaleRow(yr, len, 1.f / ExpShiftSum(xr, yr, len, mx));
            continue;
          }
        }
        float mx = -std::numeric_limits<float>::infinity();
        int64_t arg = 0;
        for (int64_t i = 0; i < len; ++i) {
          if (xr[i * inner] > mx) {
            mx = xr[i * inner];
            arg = i;
          }
        }
        if (op == OpType::Hardmax) {
          for (int64_t i = 0; i < len; ++i) yr[i * inner] = i == arg ? 1.f : 0.f;
          continue;
        }
        float sum = 0.f;
        for (int64_t i = 0; i < len; ++i) {
          const float v = FastExp(xr[i * inner] - mx);
          if (op == OpType::Softmax) yr[i * inner] = v;
          sum += v;
        }
        if (op == OpType::LogSoftmax) {
          const float lse = mx + std::log(sum);
          for (int64_t i = 0; i < len; ++i) yr[i * inner] = xr[i * inner] - lse;
          continue;
        }
        const float inv = 1.f / sum;
        for (int64_t i = 0; i < len; ++i) yr[i * inner] *= inv;
      }
    });
  }

 private:
  int64_t outer_ = 0, len_ = 0, inner_ = 0;
};

// All ReduceX operators: axes from the optional int64 input, keepdims, noop_with_empty_axes.
// The input is walked once; each element is folded into the output slot it maps to. LogSumExp takes
// two passes (max, then sum of exp(x - max)) so it cannot overflow.
class ReduceKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void Infer(KernelIO& io) override {
    TensorRec& x = In(io, 0);
    const bool int_ok = node_.op == OpType::ReduceSum || node_.op == OpType::ReduceMax ||
                        node_.op == OpType::ReduceMin || node_.op == OpType::ReduceProd;
    Require(x.dtype == DataType::kFloat32 || (int_ok && (x.dtype == DataType::kInt64 || x.dtype == DataType::kInt32)),
            std::string("unsupported dtype ") + DataTypeName(x.dtype));
    const auto* attr = node_.fb->attr_as_ReduceAttr();
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    reduce_.assign(rank, false);
    std::vector<int64_t> axes;
    if (io.has(1)) axes = ReadInts(RequireValue(io, 1, "axes"));
    noop_ = axes.empty() && attr->noop_with_empty_axes();
    if (axes.empty() && !noop_) reduce_.assign(rank, true);
    for (int64_t a : axes) {
      Require(NormalizeAxis(a, rank), "axis " + std::to_string(a) + " out of range for rank " + std::to_string(rank));
      Require(!reduce_[a], "axis " + std::to_string(a) + " repeated");
      reduce_[a] = true;
    }
    Shape out, kept;
    count_ = 1;
    for (int64_t i = 0; i < rank; ++i) {
      if (reduce_[i]) {
        count_ *= x.shape[i];
        if (attr->keepdims()) out.push_back(1);
        kept.push_back(1);
      } else {
        out.push_back(x.shape[i]);
        kept.push_back(x.shape[i]);
      }
    }
    io.out[0]->shape = noop_ ? x.shape : out;
    io.out[0]->dtype = x.dtype;
    plan_ = MakeBroadcastPlan(x.shape, {&kept});
    inner_ = 1;
    int64_t i = rank - 1;
    for (; i >= 0 && reduce_[i]; --i) inner_ *= x.shape[i];
    suffix_only_ = true;
    for (; i >= 0; --i) suffix_only_ &= !reduce_[i];
  }

  void Run(KernelIO& io, const KernelContext& ctx) override {
    if (noop_) {
      std::memcpy(io.out[0]->data, io.in[0]->data, io.in[0]->nbytes);
      return;
    }
    switch (io.in[0]->dtype) {
      case DataType::kFloat32: return RunFloat(io, ctx);
      case DataType::kInt64: return RunInt<int64_t>(io, ctx);
      case DataType::kInt32: return RunInt<int32_t>(io, ctx);
      default: Fail("unsupported dtype");
    }
  }

 private:
  template <typename T>
  void RunInt(KernelIO& io, const KernelContext& ctx) {
    switch (node_.op) {
      case OpType::ReduceSum: return Fold<T>(io, ctx, T(0), [](T a, T v) { return T(a + v); });
      case OpType::ReduceProd: return Fold<T>(io, ctx, T(1), [](T a, T v) { return T(a * v); });
      case OpType::ReduceMax:
        return Fold<T>(io, ctx, std::numeric_limits<T>::lowest(), [](T a, T v) { return v > a ? v : a; });
      case OpType::ReduceMin:
        return Fold<T>(io, ctx, std::numeric_limits<T>::max(), [](T a, T v) { return v < a ? v : a; });
      default: Fail("unsupported dtype");
    }
  }

  void RunFloat(KernelIO& io, const KernelContext& ctx) {
    float* y = io.out[0]->as<float>();
    const int64_t n = io.out[0]->numel();
    const float inf = std::numeric_limits<float>::infinity();
    auto sum = [](float a, float v) { return a + v; };
    switch (node_.op) {
      case OpType::ReduceSum: return Fold<float>(io, ctx, 0.f, sum);
      case OpType::ReduceMean: {
        Fold<float>(io, ctx, 0.f, sum);
        const float scale = count_ ? 1.f / static_cast<float>(count_) : std::numeric_limits<float>::quiet_NaN();
        for (int64_t i = 0; i < n; ++i) y[i] *= scale;
        return;
      }
      case OpType::ReduceProd: return Fold<float>(io, ctx, 1.f, [](float a, float v) { return a * v; });
      case OpType::ReduceMax: return Fold<float>(io, ctx, -inf, [](float a, float v) { return (v > a || v != v) ? v : a; });
      case OpType::ReduceMin: return Fold<float>(io, ctx, inf, [](float a, float v) { return (v < a || v != v) ? v : a; });
      case OpType::ReduceL1: return Fold<float>(io, ctx, 0.f, [](float a, float v) { return a + std::fabs(v); });
      case OpType::ReduceSumSquare: return Fold<float>(io, ctx, 0.f, [](float a, float v) { return a + v * v; });
      case OpType::ReduceL2:
        Fold<float>(io, ctx, 0.f, [](float a, float v) { return a + v * v; });
        for (int64_t i = 0; i < n; ++i) y[i] = std::sqrt(y[i]);
        return;
      case OpType::ReduceLogSumExp: {
        std::vector<float> mx(n);
        Fold<float>(io, ctx, -inf, [](float a, float v) { return (v > a || v != v) ? v : a; }, mx.data());
        for (float& m : mx) m = std::isfinite(m) ? m : 0.f;   // all -inf rows: keep exp() finite
        const float* x = io.in[0]->as<float>();
        std::fill(y, y + n, 0.f);
        ForEachRow(plan_, 0, plan_.rows, [&](int64_t xo, const int64_t* off, const int64_t* st, int64_t len) {
          for (int64_t i = 0; i < len; ++i) {
            const int64_t o = off[0] + i * st[0];
            y[o] += std::exp(x[xo + i] - mx[o]);
          }
        });
        for (int64_t i = 0; i < n; ++i) y[i] = std::log(y[i]) + mx[i];
        return;
      }
      default: Fail("not a reduction");
    }
  }

  // Folds every input element into its output slot: out = combine(out, x), starting from init.
  template <typename T, typename Combine>
  void Fold(KernelIO& io, const KernelContext& ctx, T init, Combine combine, T* dst = nullptr) {
    const T* x = io.in[0]->as<T>();
    T* y = dst ? dst : io.out[0]->as<T>();
    const int64_t out_n = io.out[0]->numel();
    if (suffix_only_) {
      const int64_t inner = inner_;
      ctx.pool->ParallelFor(out_n, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, inner)), [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
          T acc = init;
          for (int64_t i = 0; i < inner; ++i) acc = combine(acc, x[r * inner + i]);
          y[r] = acc;
        }
      });
      return;
    }
    std::fill(y, y + out_n, init);
    ForEachRow(plan_, 0, plan_.rows, [&](int64_t xo, const int64_t* off, const int64_t* st, int64_t n) {
      T* yr = y + off[0];
      if (st[0]) {
        for (int64_t i = 0; i < n; ++i) yr[i] = combine(yr[i], x[xo + i]);
      } else {
        T acc = yr[0];
        for (int64_t i = 0; i < n; ++i) acc = combine(acc, x[xo + i]);
        yr[0] = acc;
      }
    });
  }

  std::vector<bool> reduce_;
  BroadcastPlan plan_;
  int64_t count_ = 1, inner_ = 1;
  bool suffix_only_ = false, noop_ = false;
};

// ArgMax / ArgMin along one axis -> int64 indices (first or last occurrence).
class ArgKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void Infer(KernelIO& io) override {
    TensorRec& x = In(io, 0);
    Require(x.dtype == DataType::kFloat32 || x.dtype == DataType::kInt64 || x.dtype == DataType::kInt32,
            std::string("unsupported dtype ") + DataTypeName(x.dtype));
    const auto* a = node_.fb->attr_as_ArgAttr();
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    axis_ = a->axis();
    Require(rank >= 1 && NormalizeAxis(axis_, rank), "axis out of range for rank " + std::to_string(rank));
    Require(x.shape[axis_] > 0, "cannot take ArgMax/ArgMin over an empty axis");
    Shape out;
    outer_ = inner_ = 1;
    for (int64_t i = 0; i < rank; ++i) {
      if (i < axis_) outer_ *= x.shape[i];
      if (i > axis_) inner_ *= x.shape[i];
      if (i != axis_ || a->keepdims()) out.push_back(i == axis_ ? 1 : x.shape[i]);
    }
    len_ = x.shape[axis_];
    io.out[0]->shape = out;
    io.out[0]->dtype = DataType::kInt64;
  }
  void Run(KernelIO& io, const KernelContext& ctx) override {
    switch (io.in[0]->dtype) {
      case DataType::kFloat32: return Apply<float>(io);
      case DataType::kInt64: return Apply<int64_t>(io);
      case DataType::kInt32: return Apply<int32_t>(io);
      default: Fail("unsupported dtype");
    }
  }

 private:
  template <typename T>
  void Apply(KernelIO& io) {
    const bool is_max = node_.op == OpType::ArgMax;
    const bool last = node_.fb->attr_as_ArgAttr()->select_last_index();
    const T* x = io.in[0]->as<T>();
    int64_t* y = io.out[0]->as<int64_t>();
    for (int64_t o = 0; o < outer_; ++o)
      for (int64_t in = 0; in < inner_; ++in) {
        const T* p = x + o * len_ * inner_ + in;
        int64_t best = 0;
        for (int64_t i = 1; i < len_; ++i) {
          const T v = p[i * inner_], b = p[best * inner_];
          const bool better = is_max ? (last ? v >= b : v > b) : (last ? v <= b : v < b);
          if (better) best = i;
        }
        y[o * inner_ + in] = best;
      }
  }
  int64_t axis_ = 0, outer_ = 1, inner_ = 1, len_ = 0;
};

// Mean/variance normalisation over groups of channels: InstanceNormalization (a group per channel) and
// GroupNormalization; then a per-channel affine.
class GroupedNormKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void Infer(KernelIO& io) override {
    TensorRec& x = In(io, 0);
    Require(x.dtype == DataType::kFloat32, "only float32 is supported");
    Require(x.shape.size() >= 2, "input must have rank >= 2");
    C_ = x.shape[1];
    if (node_.op == OpType::GroupNormalization) {
      const auto* a = node_.fb->attr_as_GroupNormAttr();
      groups_ = a->num_groups();
      eps_ = a->epsilon();
      Require(groups_ >= 1 && C_ % groups_ == 0, "channels must divide by num_groups");
    } else {
      groups_ = C_;
      eps_ = node_.fb->attr_as_NormAttr()->epsilon();
    }
    Require(In(io, 1).numel() == C_ && In(io, 2).numel() == C_, "scale and bias must hold one value per channel");
    io.out[0]->shape = x.shape;
    io.out[0]->dtype = DataType::kFloat32;
  }
  void Run(KernelIO& io, const KernelContext& ctx) override {
    const Shape& s = io.in[0]->shape;
    const int64_t N = s[0], spatial = C_ ? io.in[0]->numel() / (N * C_) : 0;
    const int64_t cpg = C_ / groups_, block = cpg * spatial;
    const float* x = io.in[0]->as<float>();
    const float* scale = io.in[1]->as<float>();
    const float* bias = io.in[2]->as<float>();
    float* y = io.out[0]->as<float>();
    ctx.pool->ParallelFor(N * groups_, 1, [&](int64_t b, int64_t e) {
      for (int64_t ng = b; ng < e; ++ng) {
        const float* xg = x + ng * block;
        float* yg = y + ng * block;
        double mean = 0, var = 0;
        for (int64_t i = 0; i < block; ++i) mean += xg[i];
        mean /= static_cast<double>(std::max<int64_t>(block, 1));
        for (int64_t i = 0; i < block; ++i) var += (xg[i] - mean) * (xg[i] - mean);
        var /= static_cast<double>(std::max<int64_t>(block, 1));
        const float inv = static_cast<float>(1.0 / std::sqrt(var + eps_)), m = static_cast<float>(mean);
        for (int64_t c = 0; c < cpg; ++c) {
          const int64_t ch = (ng % groups_) * cpg + c;
          const float a = scale[ch] * inv, sh = bias[ch] - m * a;
          for (int64_t i = 0; i < spatial; ++i) yg[c * spatial + i] = xg[c * spatial + i] * a + sh;
        }
      }
    });
  }

 private:
  int64_t C_ = 0, groups_ = 1;
  float eps_ = 1e-5f;
};

class LpNormKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void Infer(KernelIO& io) override {
    TensorRec& x = In(io, 0);
    Require(x.dtype == DataType::kFloat32, "only float32 is supported");
    const auto* a = node_.fb->attr_as_LpNormAttr();
    p_ = a->p();
    Require(p_ == 1 || p_ == 2, "p must be 1 or 2");
    axis_ = a->axis();
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    Require(rank >= 1 && NormalizeAxis(axis_, rank), "axis out of range");
    io.out[0]->shape = x.shape;
    io.out[0]->dtype = DataType::kFloat32;
  }
  void Run(KernelIO& io, const KernelContext&) override {
    const Shape& s = io.in[0]->shape;
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < axis_; ++i) outer *= s[i];
    for (size_t i = axis_ + 1; i < s.size(); ++i) inner *= s[i];
    const int64_t len = s[axis_];
    const float* x = io.in[0]->as<float>();
    float* y = io.out[0]->as<float>();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t in = 0; in < inner; ++in) {
        const float* xr = x + o * len * inner + in;
        float* yr = y + o * len * inner + in;
        float norm = 0.f;
        for (int64_t i = 0; i < len; ++i) norm += p_ == 1 ? std::fabs(xr[i * inner]) : xr[i * inner] * xr[i * inner];
        if (p_ == 2) norm = std::sqrt(norm);
        for (int64_t i = 0; i < len; ++i) yr[i * inner] = norm == 0.f ? 0.f : xr[i * inner] / norm;
      }
  }

 private:
  int64_t axis_ = -1, p_ = 2;
};

}  // namespace

void RegisterNormKernels(KernelRegistry& r) {
  r.Register(OpType::BatchNormalization, DataType::kFloat32, MakeKernel<BatchNormKernel>);
  r.Register(OpType::LayerNormalization, DataType::kFloat32, MakeKernel<LayerNormKernel>);
  r.Register(OpType::RMSNormalization, DataType::kFloat32, MakeKernel<LayerNormKernel>);
  for (OpType op : {OpType::Softmax, OpType::LogSoftmax, OpType::Hardmax})
    r.Register(op, DataType::kFloat32, MakeKernel<SoftmaxKernel>);
  r.Register(OpType::InstanceNormalization, DataType::kFloat32, MakeKernel<GroupedNormKernel>);
  r.Register(OpType::GroupNormalization, DataType::kFloat32, MakeKernel<GroupedNormKernel>);
  r.Register(OpType::LpNormalization, DataType::kFloat32, MakeKernel<LpNormKernel>);
  for (OpType op : {OpType::ReduceMean, OpType::ReduceSum, OpType::ReduceMax, OpType::ReduceMin, OpType::ReduceProd,
                    OpType::ReduceL1, OpType::ReduceL2, OpType::ReduceLogSumExp, OpType::ReduceSumSquare})
    r.Register(op, DataType::kFloat32, MakeKernel<ReduceKernel>);
  for (OpType op : {OpType::ReduceSum, OpType::ReduceMax, OpType::ReduceMin, OpType::ReduceProd})
    for (DataType t : {DataType::kInt64, DataType::kInt32}) r.Register(op, t, MakeKernel<ReduceKernel>);
  for (OpType op : {OpType::ArgMax, OpType::ArgMin})
    for (DataType t : {DataType::kFloat32, DataType::kInt64, DataType::kInt32}) r.Register(op, t, MakeKernel<ArgKernel>);
}

}  // namespace lite
