// DFT and STFT (ONNX opset 17+): real or complex input (last dim 1 or 2), complex output (last dim 2).
// Direct O(n^2) transform per vector with double-precision twiddles and accumulation.
#include <cmath>
#include <cstring>

#include "kernels/common.h"
#include "kernels/register.h"

namespace lite {
namespace {

using ms_schema::OpType;

// out[k] = sum_t in[t] * exp(sign * 2*pi*i*k*t/n), k < bins; `in` holds `len` complex samples (zero
// padded to n), stride in complex elements.
void Transform(const float* in, int64_t len, int64_t in_stride, bool complex_in, int64_t n, int64_t bins, bool inverse,
               const float* window, float* out, int64_t out_stride) {
  const double sign = inverse ? 1.0 : -1.0;
  const double scale = inverse ? 1.0 / static_cast<double>(n) : 1.0;
  for (int64_t k = 0; k < bins; ++k) {
    double re = 0, im = 0;
    for (int64_t t = 0; t < std::min(len, n); ++t) {
      const float* v = in + t * in_stride * (complex_in ? 2 : 1);
      const double w = window ? window[t] : 1.0;
      const double xr = v[0] * w, xi = complex_in ? v[1] * w : 0.0;
      const double ang = sign * 2.0 * M_PI * static_cast<double>((k * t) % n) / static_cast<double>(n);
      const double c = std::cos(ang), s = std::sin(ang);
      re += xr * c - xi * s;
      im += xr * s + xi * c;
    }
    out[k * out_stride * 2] = static_cast<float>(re * scale);
    out[k * out_stride * 2 + 1] = static_cast<float>(im * scale);
  }
}

class DftKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void Infer(KernelIO& io) override {
    TensorRec& x = In(io, 0);
    Require(x.dtype == DataType::kFloat32, "only float32 is supported");
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    Require(rank >= 2 && (x.shape.back() == 1 || x.shape.back() == 2), "last dim must be 1 (real) or 2 (complex)");
    const auto* a = node_.fb->attr_as_DftAttr();
    axis_ = a->axis();
    if (io.has(2)) {   // opset 20: the axis as an input (the converter folds a constant one into the attribute)
      const std::vector<int64_t> v = ReadInts(RequireValue(io, 2, "axis"));
      Require(v.size() == 1, "axis must be one value");
      axis_ = v[0];
    }
    // A negative axis counts from the back of the whole shape, the real/imaginary dim included: -2 is the last
    // signal dim. Valid: [-rank, -2] and [0, rank - 2].
    Require(axis_ >= -rank && axis_ <= rank - 2 && axis_ != -1,
            "axis " + std::to_string(axis_) + " out of range for rank " + std::to_string(rank) +
                " (the last dim holds real/imaginary parts)");
    if (axis_ < 0) axis_ += rank;
    len_ = x.shape[axis_];
    n_ = len_;
    if (io.has(1)) {
      const std::vector<int64_t> l = ReadInts(RequireValue(io, 1, "dft_length"));
      Require(l.size() == 1 && l[0] >= 1, "dft_length must be one positive value");
      n_ = l[0];
    }
    Require(!(a->onesided() && a->inverse()), "onesided inverse DFT is not defined");
    bins_ = a->onesided() ? n_ / 2 + 1 : n_;
    Shape out = x.shape;
    out[axis_] = bins_;
    out.back() = 2;
    io.out[0]->shape = out;
    io.out[0]->dtype = DataType::kFloat32;
  }
  void Run(KernelIO& io, const KernelContext&) override {
    const Shape& s = io.in[0]->shape;
    const bool complex_in = s.back() == 2;
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < axis_; ++i) outer *= s[i];
    for (size_t i = axis_ + 1; i + 1 < s.size(); ++i) inner *= s[i];
    const int64_t cin = complex_in ? 2 : 1;
    const float* x = io.in[0]->as<float>();
    float* y = io.out[0]->as<float>();
    const bool inverse = node_.fb->attr_as_DftAttr()->inverse();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t in = 0; in < inner; ++in)
        Transform(x + (o * len_ * inner + in) * cin, len_, inner, complex_in, n_, bins_, inverse, nullptr,
                  y + (o * bins_ * inner + in) * 2, inner);
  }

 private:
  int64_t axis_ = 1, len_ = 0, n_ = 0, bins_ = 0;
};

class StftKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void Infer(KernelIO& io) override {
    TensorRec& x = In(io, 0);
    // [batch, length] is a real signal too (ONNX Runtime accepts it; speech front ends feed it so).
    Require(x.dtype == DataType::kFloat32 &&
                (x.shape.size() == 2 || (x.shape.size() == 3 && (x.shape[2] == 1 || x.shape[2] == 2))),
            "signal must be float32 [batch, length], [batch, length, 1] or [batch, length, 2], got " +
                ShapeToString(x.shape));
    const std::vector<int64_t> step = ReadInts(RequireValue(io, 1, "frame_step"));
    Require(step.size() == 1 && step[0] >= 1, "frame_step must be one positive value");
    step_ = step[0];
    frame_ = -1;
    if (io.has(2)) {
      Require(io.in[2]->shape.size() == 1 && io.in[2]->dtype == DataType::kFloat32, "window must be 1-D float32");
      frame_ = io.in[2]->shape[0];
    }
    if (io.has(3)) {
      const std::vector<int64_t> f = ReadInts(RequireValue(io, 3, "frame_length"));
      Require(f.size() == 1 && f[0] >= 1, "frame_length must be one positive value");
      Require(frame_ < 0 || frame_ == f[0], "window length differs from frame_length");
      frame_ = f[0];
    }
    Require(frame_ >= 1 && frame_ <= x.shape[1], "frame length must be in [1, signal length]");
    frames_ = (x.shape[1] - frame_) / step_ + 1;
    bins_ = node_.fb->attr_as_DftAttr()->onesided() ? frame_ / 2 + 1 : frame_;
    io.out[0]->shape = {x.shape[0], frames_, bins_, 2};
    io.out[0]->dtype = DataType::kFloat32;
  }
  void Run(KernelIO& io, const KernelContext&) override {
    const Shape& s = io.in[0]->shape;
    const bool complex_in = s.size() == 3 && s[2] == 2;
    const int64_t cin = complex_in ? 2 : 1;
    const float* window = io.has(2) ? io.in[2]->as<float>() : nullptr;
    const float* x = io.in[0]->as<float>();
    float* y = io.out[0]->as<float>();
    for (int64_t b = 0; b < s[0]; ++b)
      for (int64_t f = 0; f < frames_; ++f)
        Transform(x + (b * s[1] + f * step_) * cin, frame_, 1, complex_in, frame_, bins_, false, window,
                  y + ((b * frames_ + f) * bins_) * 2, 1);
  }

 private:
  int64_t step_ = 1, frame_ = 0, frames_ = 0, bins_ = 0;
};

}  // namespace

void RegisterSpectralKernels(KernelRegistry& r) {
  r.Register(OpType::DFT, DataType::kFloat32, MakeKernel<DftKernel>);
  r.Register(OpType::STFT, DataType::kFloat32, MakeKernel<StftKernel>);
}

}  // namespace lite
