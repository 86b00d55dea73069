// Resize: nearest / linear / cubic over any set of axes, every coordinate transformation mode.
// Interpolation is separable, so axes are resized one at a time: y[o, j, i] = sum_t w[j][t] x[o, idx[j][t], i].
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/channel_blocked_layout.h"
#include "cpu/conv/bf16_pixel_conv.h"
#include "kernels/common.h"
#include "kernels/register.h"

namespace lite {
namespace {

using ms_schema::CoordinateTransform;
using ms_schema::NearestMode;
using ms_schema::ResizeMode;

struct AxisTaps {
  int64_t in = 0, out = 0, taps = 1;
  std::vector<int64_t> index;    // out * taps; -1 = extrapolation value
  std::vector<float> weight;     // out * taps
};

class ResizeKernel : public Kernel {
 public:
  using Kernel::Kernel;

  void Infer(KernelIO& io) override {
    TensorRec& x = In(io, 0);
    Require(x.dtype == DataType::kFloat32, "only float32 is supported");
    const auto* a = node_.fb->attr_as_ResizeAttr();
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    std::vector<int64_t> axes;
    if (a->axes() && a->axes()->size()) {
      for (int64_t v : *a->axes()) {
        Require(NormalizeAxis(v, rank), "axis out of range");
        axes.push_back(v);
      }
    } else {
      for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
    }
    std::vector<double> scales(rank, 1.0);
    Shape out = x.shape;
    const bool has_sizes = io.has(3) && io.in[3]->numel() > 0;
    const bool has_scales = io.has(2) && io.in[2]->numel() > 0;
    Require(has_sizes != has_scales, "exactly one of scales and sizes must be given");
    if (has_sizes) {
      const std::vector<int64_t> sizes = ReadInts(RequireValue(io, 3, "sizes"));
      Require(sizes.size() == axes.size(), "sizes must have one value per resized axis");
      for (size_t i = 0; i < axes.size(); ++i) {
        Require(sizes[i] >= 0, "negative size");
        out[axes[i]] = sizes[i];
        scales[axes[i]] = x.shape[axes[i]] ? static_cast<double>(static_cast<float>(sizes[i]) / static_cast<float>(x.shape[axes[i]])) : 1.0;
      }
    } else {
      const TensorRec& st = RequireValue(io, 2, "scales");
      Require(st.dtype == DataType::kFloat32 && st.numel() == static_cast<int64_t>(axes.size()),
              "scales must be float32 with one value per resized axis");
      for (size_t i = 0; i < axes.size(); ++i) {
        const float s = st.as<float>()[i];
        Require(s > 0 && std::isfinite(s), "scales must be positive");
        scales[axes[i]] = s;
        const double o = std::floor(static_cast<double>(x.shape[axes[i]]) * s);
        Require(o < 1e12, "output too large");
        out[axes[i]] = static_cast<int64_t>(o);
      }
    }
    std::vector<float> roi;
    if (a->coordinate_transform() == CoordinateTransform::TF_CROP_AND_RESIZE) {
      const TensorRec& r = RequireValue(io, 1, "roi");
      Require(r.dtype == DataType::kFloat32 && r.numel() == 2 * static_cast<int64_t>(axes.size()),
              "roi must hold start and end per resized axis");
      roi.assign(r.as<float>(), r.as<float>() + r.numel());
    }
    taps_.clear();
    axis_order_.clear();
    for (size_t i = 0; i < axes.size(); ++i) {
      const int64_t ax = axes[i];
      if (out[ax] == x.shape[ax] && scales[ax] == 1.0 && roi.empty()) continue;   // identity axis
      const float start = roi.empty() ? 0.f : roi[i], end = roi.empty() ? 1.f : roi[i + axes.size()];
      taps_.push_back(MakeTaps(x.shape[ax], out[ax], scales[ax], start, end, *a));
      axis_order_.push_back(ax);
    }
    io.out[0]->shape = out;
    io.out[0]->dtype = DataType::kFloat32;
    // Nearest resizing of the last two axes only (2x upsampling in FPN / YOLO necks, UNet decoders): one gather
    // per output row instead of a pass per axis with a per-element loop over the last one.
    nearest_planes_ = a->mode() == ResizeMode::NEAREST && rank >= 2 && !taps_.empty() &&
                      std::all_of(axis_order_.begin(), axis_order_.end(), [&](int64_t ax) { return ax >= rank - 2; });
    for (const AxisTaps& t : taps_)
      nearest_planes_ = nearest_planes_ && std::all_of(t.index.begin(), t.index.end(), [](int64_t i) { return i >= 0; });
    if (nearest_planes_) {
      const auto identity = [](int64_t n) {
        std::vector<int64_t> v(n);
        for (int64_t i = 0; i < n; ++i) v[i] = i;
        return v;
      };
      rows_ = identity(x.shape[rank - 2]);
      cols_ = identity(x.shape[rank - 1]);
      for (size_t i = 0; i < taps_.size(); ++i) (axis_order_[i] == rank - 2 ? rows_ : cols_) = taps_[i].index;
    }
  }

  // The nearest gather of the last two axes reads and writes channel-blocked tensors (both or neither): an FPN's
  // upsampling between blocked Convs and a channel Concat.
  bool AcceptsLayouts(const KernelIO& io) const override {
    const bool blocked = io.in[0]->channel_blocked;
    if (!blocked && !io.out[0]->channel_blocked) return true;
    return blocked && io.out[0]->channel_blocked && nearest_planes_ && io.in[0]->shape.size() == 4;
  }

  // At compute precision bfloat16 the nearest gather copies bf16 rows (both sides): YOLO's upsampling between a
  // bf16 pixel-major Conv and a channel join.
  bool AcceptsBf16Pixels(const KernelIO& io) const override {
    const TensorRec& x = *io.in[0];
    const TensorRec& y = *io.out[0];
    if (!x.bf16_pixels && !y.bf16_pixels) return true;
#ifdef LITE_X86_SIMD
    const auto fits = [](const TensorRec& t) {
      return t.shape.size() == 4 && t.nbytes >= static_cast<size_t>(t.shape[0]) *
                                                   Bf16PixelConv::Bf16RowsBytes(t.shape[1], t.shape[2] * t.shape[3]);
    };
    return x.bf16_pixels && y.bf16_pixels && nearest_planes_ && fits(x) && fits(y) && x.shape[1] == y.shape[1] &&
           x.shape[0] == y.shape[0];
#else
    return false;
#endif
  }

  void Run(KernelIO& io, const KernelContext& ctx) override {
#ifdef LITE_X86_SIMD
    if (io.out[0]->bf16_pixels) return RunBf16Rows(io, ctx);
#endif
    const float extrapolation = node_.fb->attr_as_ResizeAttr()->extrapolation_value();
    Shape shape = io.in[0]->shape;
    const float* src = io.in[0]->as<float>();
    if (taps_.empty()) {
      std::memcpy(io.out[0]->data, src, io.in[0]->nbytes);
      return;
    }
    if (nearest_planes_) {
      RunNearestPlanes(src, io.out[0]->as<float>(), shape, io.in[0]->channel_blocked, ctx);
      return;
    }
    std::vector<float> buf[2];
    for (size_t pass = 0; pass < taps_.size(); ++pass) {
      const AxisTaps& t = taps_[pass];
      const int64_t ax = axis_order_[pass];
      int64_t outer = 1, inner = 1;
      for (int64_t i = 0; i < ax; ++i) outer *= shape[i];
      for (size_t i = ax + 1; i < shape.size(); ++i) inner *= shape[i];
      shape[ax] = t.out;
      const bool last = pass + 1 == taps_.size();
      float* dst;
      if (last) {
        dst = io.out[0]->as<float>();
      } else {
        buf[pass % 2].resize(outer * t.out * inner);
        dst = buf[pass % 2].data();
      }
      ctx.pool->ParallelFor(outer * t.out, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, inner)),
                            [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
          const int64_t o = r / t.out, j = r % t.out;
          float* y = dst + r * inner;
          const int64_t* idx = &t.index[j * t.taps];
          const float* w = &t.weight[j * t.taps];
          if (idx[0] < 0) {
            std::fill(y, y + inner, extrapolation);
            continue;
          }
          const float* xo = src + o * t.in * inner;
          std::fill(y, y + inner, 0.f);
          for (int64_t k = 0; k < t.taps; ++k) {
            if (w[k] == 0.f) continue;
            const float* xr = xo + idx[k] * inner;
            for (int64_t i = 0; i < inner; ++i) y[i] += w[k] * xr[i];
          }
        }
      });
      src = dst;
    }
  }

 private:
#ifdef LITE_X86_SIMD
  // Output pixel (j, i) of each image: the bf16 row of input pixel (rows_[j], cols_[i]); then the row of zeros.
  void RunBf16Rows(KernelIO& io, const KernelContext& ctx) const {
    const Shape& xs = io.in[0]->shape;
    const int64_t ld = Bf16PixelConv::Bf16RowStride(xs[1]), h_in = xs[2], w_in = xs[3];
    const int64_t h_out = static_cast<int64_t>(rows_.size()), w_out = static_cast<int64_t>(cols_.size());
    const int64_t in_image = (h_in * w_in + 1) * ld, out_image = (h_out * w_out + 1) * ld;
    const uint16_t* x = io.in[0]->as<uint16_t>();
    uint16_t* y = io.out[0]->as<uint16_t>();
    ctx.pool->ParallelFor(xs[0] * h_out, 1, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const int64_t n = r / h_out, j = r % h_out;
        const uint16_t* src = x + n * in_image + rows_[j] * w_in * ld;
        uint16_t* dst = y + n * out_image + j * w_out * ld;
        for (int64_t i = 0; i < w_out; ++i)
          std::memcpy(dst + i * ld, src + cols_[i] * ld, static_cast<size_t>(ld) * sizeof(uint16_t));
      }
    });
    for (int64_t n = 0; n < xs[0]; ++n)
      std::memset(y + n * out_image + h_out * w_out * ld, 0, static_cast<size_t>(ld) * sizeof(uint16_t));
  }
#endif

  // y[p, j, i] = x[p, rows_[j], cols_[i]], a pixel being one float (NCHW) or a block of 8 channels ([N][C/8][H][W][8]:
  // the same gather over C/8 planes); an output row equal to the one above it is copied.
  void RunNearestPlanes(const float* x, float* y, const Shape& in_shape, bool blocked, const KernelContext& ctx) const {
    const int64_t rank = static_cast<int64_t>(in_shape.size());
    const int64_t lanes = blocked ? kChannelBlock : 1;
    const int64_t h_in = in_shape[rank - 2], w_in = in_shape[rank - 1];
    const int64_t h_out = static_cast<int64_t>(rows_.size()), w_out = static_cast<int64_t>(cols_.size());
    int64_t planes = 1;
    for (int64_t i = 0; i < rank - 2; ++i) planes *= in_shape[i];
    planes /= lanes;
    const int64_t row_in = w_in * lanes, row_out = w_out * lanes;
    ctx.pool->ParallelFor(planes * h_out, std::max<int64_t>(1, 8192 / std::max<int64_t>(1, row_out)),
                          [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const int64_t p = r / h_out, j = r % h_out;
        float* yr = y + r * row_out;
        if (r > b && j > 0 && rows_[j] == rows_[j - 1]) {
          std::memcpy(yr, yr - row_out, row_out * sizeof(float));
          continue;
        }
        const float* xr = x + (p * h_in + rows_[j]) * row_in;
        if (lanes == 1) {
          for (int64_t i = 0; i < w_out; ++i) yr[i] = xr[cols_[i]];
        } else {
          for (int64_t i = 0; i < w_out; ++i) std::memcpy(yr + i * lanes, xr + cols_[i] * lanes, lanes * sizeof(float));
        }
      }
    });
  }

  static double Original(int64_t o, int64_t in, int64_t out, double scale, float start, float end,
                         const ms_schema::ResizeAttr& a) {
    switch (a.coordinate_transform()) {
      case CoordinateTransform::HALF_PIXEL_SYMMETRIC: {
        const double adjustment = out / (scale * in);
        const double center = in / 2.0;
        return center * (1 - adjustment) + (o + 0.5) / scale - 0.5;
      }
      case CoordinateTransform::PYTORCH_HALF_PIXEL: return out > 1 ? (o + 0.5) / scale - 0.5 : 0.0;
      case CoordinateTransform::ALIGN_CORNERS: return out == 1 ? 0.0 : o * static_cast<double>(in - 1) / (out - 1);
      case CoordinateTransform::ASYMMETRIC: return o / scale;
      case CoordinateTransform::TF_CROP_AND_RESIZE:
        return out > 1 ? start * (in - 1) + o * (end - start) * (in - 1) / static_cast<double>(out - 1)
                       : 0.5 * (start + end) * (in - 1);
      default: return (o + 0.5) / scale - 0.5;
    }
  }

  static float OriginalFloat(int64_t o, int64_t in, int64_t out, double scale_d, float start, float end,
                             const ms_schema::ResizeAttr& a) {
    const float scale = static_cast<float>(scale_d), of = static_cast<float>(o);
    switch (a.coordinate_transform()) {
      case CoordinateTransform::PYTORCH_HALF_PIXEL: return out > 1 ? (of + 0.5f) / scale - 0.5f : 0.f;
      case CoordinateTransform::ASYMMETRIC: return of / scale;
      case CoordinateTransform::HALF_PIXEL: return (of + 0.5f) / scale - 0.5f;
      default: return static_cast<float>(Original(o, in, out, scale_d, start, end, a));
    }
  }

  static double CubicWeight(double d, double A) {
    d = std::fabs(d);
    if (d <= 1) return ((A + 2) * d - (A + 3)) * d * d + 1;
    if (d < 2) return ((A * d - 5 * A) * d + 8 * A) * d - 4 * A;
    return 0;
  }

  AxisTaps MakeTaps(int64_t in, int64_t out, double scale, float start, float end, const ms_schema::ResizeAttr& a) {
    AxisTaps t;
    t.in = in;
    t.out = out;
    const ResizeMode mode = a.mode();
    t.taps = mode == ResizeMode::NEAREST ? 1 : (mode == ResizeMode::LINEAR ? 2 : 4);
    t.index.assign(out * t.taps, 0);
    t.weight.assign(out * t.taps, 0.f);
    const bool crop = a.coordinate_transform() == CoordinateTransform::TF_CROP_AND_RESIZE;
    for (int64_t o = 0; o < out; ++o) {
      double x = Original(o, in, out, scale, start, end, a);
      int64_t* idx = &t.index[o * t.taps];
      float* w = &t.weight[o * t.taps];
      if (crop && (x < 0 || x > in - 1)) {
        idx[0] = -1;
        continue;
      }
      if (mode == ResizeMode::NEAREST) {
        // ONNX Runtime computes the source coordinate in float: at a scale such as 7/6 (a size given) a coordinate
        // lands on x.5 in float and just above it in double, and the rounding then picks another row.
        x = static_cast<float>(OriginalFloat(o, in, out, scale, start, end, a));
        double r;
        switch (a.nearest_mode()) {
          case NearestMode::ROUND_PREFER_CEIL: r = std::floor(x + 0.5); break;
          case NearestMode::FLOOR: r = std::floor(x); break;
          case NearestMode::CEIL: r = std::ceil(x); break;
          default: r = (x == std::floor(x) + 0.5) ? std::floor(x) : std::round(x); break;
        }
        idx[0] = std::clamp<int64_t>(static_cast<int64_t>(r), 0, in - 1);
        w[0] = 1.f;
      } else if (mode == ResizeMode::LINEAR) {
        x = std::clamp(x, 0.0, static_cast<double>(in - 1));
        const int64_t x0 = static_cast<int64_t>(std::floor(x));
        const double f = x - x0;
        idx[0] = x0;
        idx[1] = std::min(x0 + 1, in - 1);
        w[0] = static_cast<float>(1 - f);
        w[1] = static_cast<float>(f);
      } else {
        const int64_t x0 = static_cast<int64_t>(std::floor(x));
        const double f = x - x0;
        double sum = 0;
        for (int k = 0; k < 4; ++k) {
          const int64_t p = x0 - 1 + k;
          double wk = CubicWeight(f - (k - 1), a.cubic_coeff_a());
          if (a.exclude_outside() && (p < 0 || p >= in)) wk = 0;
          idx[k] = std::clamp<int64_t>(p, 0, in - 1);
          w[k] = static_cast<float>(wk);
          sum += wk;
        }
        if (a.exclude_outside() && sum != 0)
          for (int k = 0; k < 4; ++k) w[k] = static_cast<float>(w[k] / sum);
      }
    }
    return t;
  }

  std::vector<AxisTaps> taps_;
  std::vector<int64_t> axis_order_;
  bool nearest_planes_ = false;
  std::vector<int64_t> rows_, cols_;   // nearest_planes_: the source row and column of each output row / column
};

}  // namespace

void RegisterResizeKernels(KernelRegistry& r) {
  r.Register(ms_schema::OpType::Resize, DataType::kFloat32, MakeKernel<ResizeKernel>);
}

}  // namespace lite
