// Generation and indexing operators: Range, ConstantOfShape, Tile, Trilu, CumSum, Pad, DepthToSpace,
// SpaceToDepth, GatherElements, GatherND, ScatterElements, ScatterND, OneHot, NonZero, Size, TopK.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <type_traits>

#include "kernels/common.h"
#include "kernels/register.h"

namespace lite {
namespace {

using ms_schema::OpType;

constexpr int64_t kMaxGenerated = int64_t(1) << 40;   // elements; beyond this a model is malformed

double ScalarAsDouble(const TensorRec& t) {
  switch (t.dtype) {
    case DataType::kFloat32: return t.as<float>()[0];
    case DataType::kFloat64: return t.as<double>()[0];
    case DataType::kInt64: return static_cast<double>(t.as<int64_t>()[0]);
    case DataType::kInt32: return t.as<int32_t>()[0];
    default: throw InvalidArgument(std::string("scalar of unsupported dtype ") + DataTypeName(t.dtype));
  }
}

class RangeKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void Infer(KernelIO& io) override {
    const TensorRec& start = RequireValue(io, 0, "start");
    const TensorRec& limit = RequireValue(io, 1, "limit");
    const TensorRec& delta = RequireValue(io, 2, "delta");
    for (const TensorRec* t : {&start, &limit, &delta})
      Require(t->numel() == 1 && t->dtype == start.dtype, "start, limit and delta must be scalars of one dtype");
    const double s = ScalarAsDouble(start), l = ScalarAsDouble(limit), d = ScalarAsDouble(delta);
    Require(d != 0 && std::isfinite(s) && std::isfinite(l) && std::isfinite(d), "delta must be non-zero and finite");
    const double n = std::max(0.0, std::ceil((l - s) / d));
    Require(n < static_cast<double>(kMaxGenerated), "range too long");
    io.out[0]->shape = {static_cast<int64_t>(n)};
    io.out[0]->dtype = start.dtype;
  }
  void Run(KernelIO& io, const KernelContext&) override {
    ByNumeric(io.in[0]->dtype, [&](auto tag) {
      using T = decltype(tag);
      const T s = io.in[0]->as<T>()[0], d = io.in[2]->as<T>()[0];
      T* y = io.out[0]->as<T>();
      for (int64_t i = 0, n = io.out[0]->numel(); i < n; ++i) y[i] = static_cast<T>(s + static_cast<T>(i) * d);
    });
  }
};

// ConstantOfShape(shape, value): the converter passes the value attribute as a one-element constant input.
class ConstantOfShapeKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void Infer(KernelIO& io) override {
    std::vector<int64_t> shape = ReadInts(RequireValue(io, 0, "shape"));
    for (int64_t d : shape) Require(d >= 0, "negative dim in shape");
    io.out[0]->shape = shape;
    io.out[0]->dtype = io.has(1) ? io.in[1]->dtype : DataType::kFloat32;
    if (io.has(1)) Require(io.in[1]->numel() == 1, "value must hold one element");
  }
  void Run(KernelIO& io, const KernelContext&) override {
    if (!io.has(1)) {
      std::memset(io.out[0]->data, 0, io.out[0]->nbytes);
      return;
    }
    BySize(io.out[0]->dtype, [&](auto tag) {
      using T = decltype(tag);
      const T v = io.in[1]->as<T>()[0];
      std::fill(io.out[0]->as<T>(), io.out[0]->as<T>() + io.out[0]->numel(), v);
    });
  }
};

class TileKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void Infer(KernelIO& io) override {
    TensorRec& x = In(io, 0);
    std::vector<int64_t> reps = ReadInts(RequireValue(io, 1, "repeats"));
    Require(reps.size() == x.shape.size(), "repeats must have one value per input dim");
    Shape out;
    for (size_t i = 0; i < reps.size(); ++i) {
      Require(reps[i] >= 0, "negative repeat");
      out.push_back(x.shape[i] * reps[i]);
    }
    io.out[0]->shape = out;
    io.out[0]->dtype = x.dtype;
  }
  void Run(KernelIO& io, const KernelContext& ctx) override {
    const Shape& in = io.in[0]->shape;
    const Shape& out = io.out[0]->shape;
    const int64_t n = io.out[0]->numel();
    if (n == 0) return;
    const size_t es = DataTypeSize(io.in[0]->dtype);
    const auto* x = static_cast<const uint8_t*>(io.in[0]->data);
    auto* y = static_cast<uint8_t*>(io.out[0]->data);
    const size_t nd = out.size();
    if (nd == 0) {
      std::memcpy(y, x, es);
      return;
    }
    const auto in_strides = Strides(in);
    const int64_t inner_in = in[nd - 1], inner_out = out[nd - 1];
    const int64_t rows = n / inner_out;
    ctx.pool->ParallelFor(rows, 64, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        int64_t rem = r, src = 0;
        for (size_t d = nd - 1; d-- > 0;) {
          src += ((rem % out[d]) % in[d]) * in_strides[d];
          rem /= out[d];
        }
        for (int64_t k = 0; k < inner_out; k += inner_in)
          std::memcpy(y + (r * inner_out + k) * es, x + src * es, inner_in * es);
      }
    });
  }
};

class TriluKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void Infer(KernelIO& io) override {
    TensorRec& x = In(io, 0);
    Require(x.shape.size() >= 2, "input must have rank >= 2");
    if (io.has(1)) Require(io.in[1]->numel() == 1, "k must be a scalar");
    io.out[0]->shape = x.shape;
    io.out[0]->dtype = x.dtype;
  }
  void Run(KernelIO& io, const KernelContext&) override {
    const int64_t k = io.has(1) ? ReadInts(*io.in[1])[0] : 0;
    const bool upper = node_.fb->attr_as_TriluAttr()->upper();
    const Shape& s = io.in[0]->shape;
    const int64_t N = s[s.size() - 2], M = s.back();
    const int64_t mats = (N * M) != 0 ? io.in[0]->numel() / (N * M) : 0;
    BySize(io.in[0]->dtype, [&](auto tag) {
      using T = decltype(tag);
      const T* x = io.in[0]->as<T>();
      T* y = io.out[0]->as<T>();
      for (int64_t b = 0; b < mats; ++b)
        for (int64_t i = 0; i < N; ++i)
          for (int64_t j = 0; j < M; ++j) {
            const int64_t o = (b * N + i) * M + j;
            const bool keep = upper ? (j - i >= k) : (j - i <= k);
            y[o] = keep ? x[o] : T(0);
          }
    });
  }
};

class CumSumKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void Infer(KernelIO& io) override {
    TensorRec& x = In(io, 0);
    Require(In(io, 1).numel() == 1, "axis must be a scalar");
    io.out[0]->shape = x.shape;
    io.out[0]->dtype = x.dtype;
  }
  void Run(KernelIO& io, const KernelContext&) override {
    const Shape& s = io.in[0]->shape;
    int64_t axis = ReadInts(*io.in[1])[0];
    const int64_t rank = static_cast<int64_t>(s.size());
    Require(rank >= 1 && NormalizeAxis(axis, rank), "axis out of range");
    const auto* attr = node_.fb->attr_as_CumSumAttr();
    const bool exclusive = attr->exclusive(), reverse = attr->reverse();
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < axis; ++i) outer *= s[i];
    for (int64_t i = axis + 1; i < rank; ++i) inner *= s[i];
    const int64_t len = s[axis];
    ByNumeric(io.in[0]->dtype, [&](auto tag) {
      using T = decltype(tag);
      const T* x = io.in[0]->as<T>();
      T* y = io.out[0]->as<T>();
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t in = 0; in < inner; ++in) {
          T acc = 0;
          for (int64_t step = 0; step < len; ++step) {
            const int64_t i = reverse ? len - 1 - step : step;
            const int64_t idx = (o * len + i) * inner + in;
            if (exclusive) {
              y[idx] = acc;
              acc += x[idx];
            } else {
              acc += x[idx];
              y[idx] = acc;
            }
          }
        }
    });
  }
};

class PadKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void Infer(KernelIO& io) override {
    TensorRec& x = In(io, 0);
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    std::vector<int64_t> pads = ReadInts(RequireValue(io, 1, "pads"));
    std::vector<int64_t> axes;
    if (io.has(3)) {
      axes = ReadInts(RequireValue(io, 3, "axes"));
    } else {
      for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
    }
    Require(pads.size() == 2 * axes.size(), "pads must hold 2 values per padded axis");
    begin_.assign(rank, 0);
    Shape out = x.shape;
    for (size_t i = 0; i < axes.size(); ++i) {
      int64_t a = axes[i];
      Require(NormalizeAxis(a, rank), "axis out of range");
      begin_[a] = pads[i];
      out[a] = x.shape[a] + pads[i] + pads[i + axes.size()];
      Require(out[a] >= 0, "negative pads remove more than the dim holds");
    }
    mode_ = node_.fb->attr_as_PadAttr()->mode();
    if (mode_ != ms_schema::PadMode::CONSTANT) {
      for (int64_t a = 0; a < rank; ++a)
        Require(x.shape[a] > 0 || out[a] == 0, "reflect/edge/wrap padding of an empty dim");
    }
    if (mode_ == ms_schema::PadMode::REFLECT) {
      for (int64_t a = 0; a < rank; ++a)
        Require(out[a] == x.shape[a] || x.shape[a] > 1 || out[a] <= 1, "reflect padding needs dims of size > 1");
    }
    if (io.has(2)) Require(io.in[2]->numel() <= 1 && io.in[2]->dtype == x.dtype, "constant_value must be a scalar of x's dtype");
    io.out[0]->shape = out;
    io.out[0]->dtype = x.dtype;
  }
  void Run(KernelIO& io, const KernelContext& ctx) override {
    BySize(io.in[0]->dtype, [&](auto tag) { Apply<decltype(tag)>(io, ctx); });
  }

 private:
  // Maps an output coordinate to an input coordinate, or -1 for the constant value.
  int64_t Source(int64_t o, int64_t begin, int64_t dim) const {
    int64_t i = o - begin;
    if (i >= 0 && i < dim) return i;
    switch (mode_) {
      case ms_schema::PadMode::EDGE: return i < 0 ? 0 : dim - 1;
      case ms_schema::PadMode::WRAP: return ((i % dim) + dim) % dim;
      case ms_schema::PadMode::REFLECT: {
        if (dim == 1) return 0;
        const int64_t period = 2 * (dim - 1);
        i = ((i % period) + period) % period;
        return i < dim ? i : period - i;
      }
      default: return -1;
    }
  }

  template <typename T>
  void Apply(KernelIO& io, const KernelContext& ctx) {
    const Shape& in = io.in[0]->shape;
    const Shape& out = io.out[0]->shape;
    const int64_t n = io.out[0]->numel();
    if (n == 0) return;
    const T* x = io.in[0]->as<T>();
    T* y = io.out[0]->as<T>();
    T value{};
    if (io.has(2) && io.in[2]->numel() == 1) value = io.in[2]->as<T>()[0];
    const size_t nd = out.size();
    if (nd == 0) {
      y[0] = x[0];
      return;
    }
    const auto in_strides = Strides(in);
    const int64_t inner = out[nd - 1];
    std::vector<int64_t> col_src(inner);
    for (int64_t j = 0; j < inner; ++j) col_src[j] = Source(j, begin_[nd - 1], in[nd - 1]);
    ctx.pool->ParallelFor(n / inner, 64, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        int64_t rem = r, src = 0;
        bool inside = true;
        for (size_t d = nd - 1; d-- > 0;) {
          const int64_t i = Source(rem % out[d], begin_[d], in[d]);
          rem /= out[d];
          inside &= i >= 0;
          src += i * in_strides[d];
        }
        T* yr = y + r * inner;
        if (!inside) {
          std::fill(yr, yr + inner, value);
          continue;
        }
        for (int64_t j = 0; j < inner; ++j) yr[j] = col_src[j] < 0 ? value : x[src + col_src[j]];
      }
    });
  }

  std::vector<int64_t> begin_;
  ms_schema::PadMode mode_ = ms_schema::PadMode::CONSTANT;
};

class DepthSpaceKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void Infer(KernelIO& io) override {
    TensorRec& x = In(io, 0);
    Require(x.shape.size() == 4, "input must be 4-D NCHW");
    b_ = node_.fb->attr_as_DepthSpaceAttr()->blocksize();
    Require(b_ >= 1 && b_ <= 4096, "blocksize must be in [1, 4096]");
    const int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
    if (node_.op == OpType::DepthToSpace) {
      Require(C % (b_ * b_) == 0, "channels must divide by blocksize^2");
      io.out[0]->shape = {N, C / (b_ * b_), H * b_, W * b_};
    } else {
      Require(H % b_ == 0 && W % b_ == 0, "height and width must divide by blocksize");
      io.out[0]->shape = {N, C * b_ * b_, H / b_, W / b_};
    }
    io.out[0]->dtype = x.dtype;
  }
  void Run(KernelIO& io, const KernelContext&) override {
    const bool d2s = node_.op == OpType::DepthToSpace;
    const bool crd = node_.fb->attr_as_DepthSpaceAttr()->crd();
    // Work in the "space" layout [N, C', H*b, W*b] and its "depth" layout [N, C'*b*b, H, W].
    const Shape& sp = d2s ? io.out[0]->shape : io.in[0]->shape;
    const int64_t N = sp[0], Cs = sp[1], Hs = sp[2], Ws = sp[3], H = Hs / b_, W = Ws / b_;
    BySize(io.in[0]->dtype, [&](auto tag) {
      using T = decltype(tag);
      const T* x = io.in[0]->as<T>();
      T* y = io.out[0]->as<T>();
      for (int64_t n = 0; n < N; ++n)
        for (int64_t c = 0; c < Cs; ++c)
          for (int64_t hs = 0; hs < Hs; ++hs)
            for (int64_t ws = 0; ws < Ws; ++ws) {
              const int64_t i = hs % b_, j = ws % b_, h = hs / b_, w = ws / b_;
              const int64_t cd = crd ? (c * b_ + i) * b_ + j : (i * b_ + j) * Cs + c;
              const int64_t space = ((n * Cs + c) * Hs + hs) * Ws + ws;
              const int64_t depth = ((n * Cs * b_ * b_ + cd) * H + h) * W + w;
              if (d2s) {
                y[space] = x[depth];
              } else {
                y[depth] = x[space];
              }
            }
    });
  }

 private:
  int64_t b_ = 1;
};

// Reads an index tensor, wrapping negatives and checking the range [-dim, dim).
std::vector<int64_t> ReadIndices(const TensorRec& t, int64_t dim, const std::function<void(const std::string&)>& fail) {
  std::vector<int64_t> v(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) {
    int64_t idx = t.dtype == DataType::kInt64 ? t.as<int64_t>()[i] : t.as<int32_t>()[i];
    if (idx < -dim || idx >= dim) fail("index " + std::to_string(idx) + " out of range for a dim of " + std::to_string(dim));
    v[i] = idx < 0 ? idx + dim : idx;
  }
  return v;
}

class GatherElementsKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void Infer(KernelIO& io) override {
    TensorRec& x = In(io, 0);
    TensorRec& idx = In(io, 1);
    Require(idx.dtype == DataType::kInt64 || idx.dtype == DataType::kInt32, "indices must be int64 or int32");
    Require(idx.shape.size() == x.shape.size() && !x.shape.empty(), "indices must have the rank of data");
    axis_ = node_.fb->attr_as_AxisAttr()->axis();
    Require(NormalizeAxis(axis_, static_cast<int64_t>(x.shape.size())), "axis out of range");
    io.out[0]->shape = idx.shape;
    io.out[0]->dtype = x.dtype;
  }
  void Run(KernelIO& io, const KernelContext&) override {
    const Shape& ds = io.in[0]->shape;
    const Shape& is = io.in[1]->shape;
    const auto ids = ReadIndices(*io.in[1], ds[axis_], [&](const std::string& m) { Fail(m); });
    const auto dstr = Strides(ds);
    const size_t nd = is.size();
    BySize(io.in[0]->dtype, [&](auto tag) {
      using T = decltype(tag);
      const T* x = io.in[0]->as<T>();
      T* y = io.out[0]->as<T>();
      for (int64_t p = 0, n = io.out[0]->numel(); p < n; ++p) {
        int64_t rem = p, src = 0;
        for (size_t d = nd; d-- > 0;) {
          const int64_t c = rem % is[d];
          rem /= is[d];
          if (c >= ds[d] && static_cast<int64_t>(d) != axis_) Fail("indices shape exceeds data shape");
          src += (static_cast<int64_t>(d) == axis_ ? ids[p] : c) * dstr[d];
        }
        y[p] = x[src];
      }
    });
  }

 private:
  int64_t axis_ = 0;
};

class GatherNDKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void Infer(KernelIO& io) override {
    TensorRec& x = In(io, 0);
    TensorRec& idx = In(io, 1);
    Require(idx.dtype == DataType::kInt64 || idx.dtype == DataType::kInt32, "indices must be int64 or int32");
    bd_ = node_.fb->attr_as_BatchDimsAttr()->batch_dims();
    const int64_t r = static_cast<int64_t>(x.shape.size()), q = static_cast<int64_t>(idx.shape.size());
    Require(q >= 1 && r >= 1 && bd_ >= 0 && bd_ < std::min(q, r), "batch_dims out of range");
    k_ = idx.shape.back();
    Require(k_ >= 1 && k_ <= r - bd_, "indices' last dim is larger than the data rank allows");
    for (int64_t i = 0; i < bd_; ++i) Require(x.shape[i] == idx.shape[i], "batch dims of data and indices differ");
    Shape out(idx.shape.begin(), idx.shape.end() - 1);
    out.insert(out.end(), x.shape.begin() + bd_ + k_, x.shape.end());
    io.out[0]->shape = out;
    io.out[0]->dtype = x.dtype;
  }
  void Run(KernelIO& io, const KernelContext&) override {
    const Shape& ds = io.in[0]->shape;
    const std::vector<int64_t> raw = ReadInts(*io.in[1]);
    int64_t batch = 1, slice = 1;
    for (int64_t i = 0; i < bd_; ++i) batch *= ds[i];
    for (size_t i = bd_ + k_; i < ds.size(); ++i) slice *= ds[i];
    const auto dstr = Strides(ds);
    const int64_t tuples = k_ ? static_cast<int64_t>(raw.size()) / k_ : 0;
    const int64_t per_batch = batch ? tuples / batch : 0;
    const int64_t batch_stride = bd_ ? dstr[bd_ - 1] : 0;
    const size_t es = DataTypeSize(io.in[0]->dtype);
    const auto* x = static_cast<const uint8_t*>(io.in[0]->data);
    auto* y = static_cast<uint8_t*>(io.out[0]->data);
    for (int64_t t = 0; t < tuples; ++t) {
      int64_t src = per_batch ? (t / per_batch) * batch_stride : 0;
      for (int64_t j = 0; j < k_; ++j) {
        const int64_t dim = ds[bd_ + j];
        int64_t v = raw[t * k_ + j];
        if (v < -dim || v >= dim) Fail("index " + std::to_string(v) + " out of range for a dim of " + std::to_string(dim));
        src += (v < 0 ? v + dim : v) * dstr[bd_ + j];
      }
      std::memcpy(y + t * slice * es, x + src * es, slice * es);
    }
  }

 private:
  int64_t bd_ = 0, k_ = 1;
};

template <typename T>
T Reduce(ms_schema::ScatterReduction r, T a, T b) {
  switch (r) {
    case ms_schema::ScatterReduction::ADD: return T(a + b);
    case ms_schema::ScatterReduction::MUL: return T(a * b);
    case ms_schema::ScatterReduction::MAXIMUM: return std::max(a, b);
    case ms_schema::ScatterReduction::MINIMUM: return std::min(a, b);
    default: return b;
  }
}

class ScatterKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void Infer(KernelIO& io) override {
    TensorRec& x = In(io, 0);
    TensorRec& idx = In(io, 1);
    TensorRec& upd = In(io, 2);
    Require(idx.dtype == DataType::kInt64 || idx.dtype == DataType::kInt32, "indices must be int64 or int32");
    Require(upd.dtype == x.dtype, "updates dtype differs from data");
    const auto* a = node_.fb->attr_as_ScatterAttr();
    reduction_ = a->reduction();
    if (node_.op == OpType::ScatterElements) {
      axis_ = a->axis();
      Require(!x.shape.empty() && NormalizeAxis(axis_, static_cast<int64_t>(x.shape.size())), "axis out of range");
      Require(idx.shape == upd.shape && idx.shape.size() == x.shape.size(), "indices and updates must match, with data's rank");
    } else {
      Require(!idx.shape.empty(), "indices must have rank >= 1");
      const int64_t k = idx.shape.back();
      Require(k >= 1 && k <= static_cast<int64_t>(x.shape.size()), "indices' last dim exceeds the data rank");
      Shape want(idx.shape.begin(), idx.shape.end() - 1);
      want.insert(want.end(), x.shape.begin() + k, x.shape.end());
      Require(upd.shape == want, "updates shape must be " + ShapeToString(want));
    }
    io.out[0]->shape = x.shape;
    io.out[0]->dtype = x.dtype;
  }
  void Run(KernelIO& io, const KernelContext&) override {
    std::memcpy(io.out[0]->data, io.in[0]->data, io.in[0]->nbytes);
    if (reduction_ == ms_schema::ScatterReduction::NONE) {
      BySize(io.in[0]->dtype, [&](auto tag) { Apply<decltype(tag)>(io); });
    } else {
      ByNumeric(io.in[0]->dtype, [&](auto tag) { Apply<decltype(tag)>(io); });
    }
  }

 private:
  template <typename T>
  void Apply(KernelIO& io) {
    const Shape& ds = io.in[0]->shape;
    const auto dstr = Strides(ds);
    const T* u = io.in[2]->as<T>();
    T* y = io.out[0]->as<T>();
    const auto fail = [&](const std::string& m) { Fail(m); };
    if (node_.op == OpType::ScatterElements) {
      const Shape& is = io.in[1]->shape;
      const auto ids = ReadIndices(*io.in[1], ds[axis_], fail);
      for (int64_t p = 0, n = io.in[1]->numel(); p < n; ++p) {
        int64_t rem = p, dst = 0;
        for (size_t d = is.size(); d-- > 0;) {
          const int64_t c = rem % is[d];
          rem /= is[d];
          if (c >= ds[d] && static_cast<int64_t>(d) != axis_) Fail("indices shape exceeds data shape");
          dst += (static_cast<int64_t>(d) == axis_ ? ids[p] : c) * dstr[d];
        }
        y[dst] = Reduce<T>(reduction_, y[dst], u[p]);
      }
      return;
    }
    const int64_t k = io.in[1]->shape.back();
    const std::vector<int64_t> raw = ReadInts(*io.in[1]);
    int64_t slice = 1;
    for (size_t i = k; i < ds.size(); ++i) slice *= ds[i];
    for (int64_t t = 0, tuples = static_cast<int64_t>(raw.size()) / k; t < tuples; ++t) {
      int64_t dst = 0;
      for (int64_t j = 0; j < k; ++j) {
        int64_t v = raw[t * k + j];
        if (v < -ds[j] || v >= ds[j]) Fail("index " + std::to_string(v) + " out of range for a dim of " + std::to_string(ds[j]));
        dst += (v < 0 ? v + ds[j] : v) * dstr[j];
      }
      for (int64_t s = 0; s < slice; ++s) y[dst + s] = Reduce<T>(reduction_, y[dst + s], u[t * slice + s]);
    }
  }

  int64_t axis_ = 0;
  ms_schema::ScatterReduction reduction_ = ms_schema::ScatterReduction::NONE;
};

class OneHotKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void Infer(KernelIO& io) override {
    TensorRec& idx = In(io, 0);
    const double depth = ScalarAsDouble(RequireValue(io, 1, "depth"));
    TensorRec& values = In(io, 2);
    Require(values.numel() == 2, "values must hold [off, on]");
    Require(depth >= 1 && depth < static_cast<double>(kMaxGenerated), "depth must be positive");
    depth_ = static_cast<int64_t>(depth);
    const int64_t out_rank = static_cast<int64_t>(idx.shape.size()) + 1;
    axis_ = node_.fb->attr_as_AxisAttr()->axis();
    Require(NormalizeAxis(axis_, out_rank), "axis out of range");
    Shape out = idx.shape;
    out.insert(out.begin() + axis_, depth_);
    io.out[0]->shape = out;
    io.out[0]->dtype = values.dtype;
  }
  void Run(KernelIO& io, const KernelContext&) override {
    const Shape& is = io.in[0]->shape;
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < axis_; ++i) outer *= is[i];
    for (size_t i = axis_; i < is.size(); ++i) inner *= is[i];
    std::vector<double> ids(io.in[0]->numel());
    for (int64_t i = 0; i < io.in[0]->numel(); ++i) {
      TensorRec one = *io.in[0];
      one.data = static_cast<uint8_t*>(io.in[0]->data) + i * DataTypeSize(io.in[0]->dtype);
      one.shape = {};
      ids[i] = ScalarAsDouble(one);
    }
    BySize(io.out[0]->dtype, [&](auto tag) {
      using T = decltype(tag);
      const T off = io.in[2]->as<T>()[0], on = io.in[2]->as<T>()[1];
      T* y = io.out[0]->as<T>();
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t d = 0; d < depth_; ++d)
          for (int64_t in = 0; in < inner; ++in) {
            double v = ids[o * inner + in];
            if (v < 0) v += static_cast<double>(depth_);
            y[(o * depth_ + d) * inner + in] = static_cast<int64_t>(v) == d && v >= 0 ? on : off;
          }
    });
  }

 private:
  int64_t depth_ = 1, axis_ = -1;
};

// NonZero's output size depends on the data: prepare evaluates it when its input is known, otherwise the
// model runs in per-run mode.
class NonZeroKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void Infer(KernelIO& io) override {
    const TensorRec& x = RequireValue(io, 0, "X");
    int64_t count = 0;
    BySize(x.dtype, [&](auto tag) {
      using T = decltype(tag);
      const T* p = x.as<T>();
      for (int64_t i = 0, n = x.numel(); i < n; ++i) count += p[i] != T(0) && !IsNegZero(x, i);
    });
    io.out[0]->shape = {static_cast<int64_t>(x.shape.size()), count};
    io.out[0]->dtype = DataType::kInt64;
  }
  void Run(KernelIO& io, const KernelContext&) override {
    const TensorRec& x = *io.in[0];
    const Shape& s = x.shape;
    const int64_t count = io.out[0]->shape[1];
    int64_t* y = io.out[0]->as<int64_t>();
    int64_t k = 0;
    BySize(x.dtype, [&](auto tag) {
      using T = decltype(tag);
      const T* p = x.as<T>();
      for (int64_t i = 0, n = x.numel(); i < n; ++i) {
        if (p[i] == T(0) || IsNegZero(x, i)) continue;
        int64_t rem = i;
        for (size_t d = s.size(); d-- > 0;) {
          y[d * count + k] = rem % s[d];
          rem /= s[d];
        }
        ++k;
      }
    });
  }

 private:
  static bool IsNegZero(const TensorRec& x, int64_t i) {   // -0.0 is zero but its bits are not
    if (x.dtype == DataType::kFloat32) return x.as<float>()[i] == 0.f;
    if (x.dtype == DataType::kFloat64) return x.as<double>()[i] == 0.0;
    return false;
  }
};

class SizeKernel : public Kernel {
 public:
  using Kernel::Kernel;
  bool ReadsInputData() const override { return false; }
  // Only the input's shape is read: any storage (channel blocks, bf16 or uint8 rows) of a run-time input will do.
  bool AcceptsLayouts(const KernelIO&) const override { return true; }
  bool AcceptsBf16Pixels(const KernelIO&) const override { return true; }
  bool AcceptsU8Pixels(const KernelIO&) const override { return true; }
  void Infer(KernelIO& io) override {
    In(io, 0);
    io.out[0]->shape = {};
    io.out[0]->dtype = DataType::kInt64;
  }
  void Run(KernelIO& io, const KernelContext&) override { io.out[0]->as<int64_t>()[0] = io.in[0]->numel(); }
};

class TopKKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void Infer(KernelIO& io) override {
    TensorRec& x = In(io, 0);
    const std::vector<int64_t> k = ReadInts(RequireValue(io, 1, "K"));
    Require(k.size() == 1 && k[0] >= 0, "K must be one non-negative value");
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    axis_ = node_.fb->attr_as_TopKAttr()->axis();
    Require(rank >= 1 && NormalizeAxis(axis_, rank), "axis out of range");
    Require(k[0] <= x.shape[axis_], "K = " + std::to_string(k[0]) + " exceeds the axis size " + std::to_string(x.shape[axis_]));
    k_ = k[0];
    Require(io.out.size() == 2, "TopK has two outputs");
    Shape out = x.shape;
    out[axis_] = k_;
    io.out[0]->shape = io.out[1]->shape = out;
    io.out[0]->dtype = x.dtype;
    io.out[1]->dtype = DataType::kInt64;
  }
  void Run(KernelIO& io, const KernelContext&) override {
    ByNumeric(io.in[0]->dtype, [&](auto tag) { Apply<decltype(tag)>(io); });
  }

 private:
  template <typename T>
  void Apply(KernelIO& io) {
    const Shape& s = io.in[0]->shape;
    const bool largest = node_.fb->attr_as_TopKAttr()->largest();
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < axis_; ++i) outer *= s[i];
    for (size_t i = axis_ + 1; i < s.size(); ++i) inner *= s[i];
    const int64_t len = s[axis_];
    const T* x = io.in[0]->as<T>();
    T* vals = io.out[0]->as<T>();
    int64_t* idxs = io.out[1]->as<int64_t>();
    std::vector<int64_t> order(len);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t in = 0; in < inner; ++in) {
        const T* p = x + o * len * inner + in;
        std::iota(order.begin(), order.end(), 0);
        // Ties keep the lower index first, as ONNX Runtime does; NaN orders above every number.
        auto greater = [](T a, T b) {
          if (a != a) return b == b;
          return b == b && a > b;
        };
        auto before = [&](int64_t a, int64_t b) {
          const T va = p[a * inner], vb = p[b * inner];
          if (largest) return greater(va, vb) || (!greater(vb, va) && a < b);
          return greater(vb, va) || (!greater(va, vb) && a < b);
        };
        std::partial_sort(order.begin(), order.begin() + k_, order.end(), before);
        for (int64_t j = 0; j < k_; ++j) {
          vals[(o * k_ + j) * inner + in] = p[order[j] * inner];
          idxs[(o * k_ + j) * inner + in] = order[j];
        }
      }
  }
  int64_t axis_ = -1, k_ = 0;
};

}  // namespace

void RegisterIndexKernels(KernelRegistry& r) {
  for (DataType t : {DataType::kFloat32, DataType::kInt64, DataType::kInt32}) {
    r.Register(OpType::Range, t, MakeKernel<RangeKernel>);
    r.Register(OpType::CumSum, t, MakeKernel<CumSumKernel>);
    r.Register(OpType::TopK, t, MakeKernel<TopKKernel>);
  }
  r.Register(OpType::ConstantOfShape, DataType::kInt64, MakeKernel<ConstantOfShapeKernel>);
  r.Register(OpType::Tile, DataType::kUnknown, MakeKernel<TileKernel>);
  r.Register(OpType::Trilu, DataType::kUnknown, MakeKernel<TriluKernel>);
  r.Register(OpType::Pad, DataType::kUnknown, MakeKernel<PadKernel>);
  r.Register(OpType::DepthToSpace, DataType::kUnknown, MakeKernel<DepthSpaceKernel>);
  r.Register(OpType::SpaceToDepth, DataType::kUnknown, MakeKernel<DepthSpaceKernel>);
  r.Register(OpType::GatherElements, DataType::kUnknown, MakeKernel<GatherElementsKernel>);
  r.Register(OpType::GatherND, DataType::kUnknown, MakeKernel<GatherNDKernel>);
  r.Register(OpType::ScatterElements, DataType::kUnknown, MakeKernel<ScatterKernel>);
  r.Register(OpType::ScatterND, DataType::kUnknown, MakeKernel<ScatterKernel>);
  r.Register(OpType::NonZero, DataType::kUnknown, MakeKernel<NonZeroKernel>);
  r.Register(OpType::Size, DataType::kUnknown, MakeKernel<SizeKernel>);
  for (DataType t : {DataType::kInt64, DataType::kInt32, DataType::kFloat32})
    r.Register(OpType::OneHot, t, MakeKernel<OneHotKernel>);
}

}  // namespace lite
