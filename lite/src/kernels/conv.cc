// Convolution: direct depthwise for 2-D, 1x1 as GEMM, otherwise im2col + GEMM. Bias and activation fused.
#include <algorithm>
#include <cstring>

#include "cpu/gemm.h"
#include "kernels/common.h"
#include "kernels/register.h"
#include "kernels/spatial.h"

namespace lite {

EpilogueAct EpilogueFromSchema(ms_schema::Activation a);

namespace {

using ms_schema::OpType;

class ConvKernel : public Kernel {
 public:
  using Kernel::Kernel;

  void Infer(KernelIO& io) override {
    const auto* attr = node_.fb->attr_as_ConvAttr();
    TensorRec& x = In(io, 0);
    TensorRec& w = In(io, 1);
    Require(x.dtype == DataType::kFloat32 && w.dtype == DataType::kFloat32, "only float32 is supported");
    Require(x.shape.size() >= 3 && x.shape.size() <= 5, "input must be 3-D to 5-D, got " + ShapeToString(x.shape));
    Require(w.shape.size() == x.shape.size(), "weight rank differs from input rank");
    group_ = attr->group();
    N_ = x.shape[0];
    C_ = x.shape[1];
    M_ = w.shape[0];
    Require(group_ >= 1 && C_ % group_ == 0 && M_ % group_ == 0 && w.shape[1] * group_ == C_,
            "channels (" + std::to_string(C_) + " in, weight " + ShapeToString(w.shape) + ") do not match group " +
                std::to_string(group_));
    std::vector<int64_t> in_dims(x.shape.begin() + 2, x.shape.end());
    std::vector<int64_t> kernel(w.shape.begin() + 2, w.shape.end());
    if (attr->kernel_shape() && attr->kernel_shape()->size() > 0) kernel.assign(attr->kernel_shape()->begin(), attr->kernel_shape()->end());
    std::string err = ResolveSpatial(in_dims, kernel, attr->strides(), attr->pads(),
                                     attr->dilations(), attr->auto_pad(), false, sp_);
    Require(err.empty(), err);
    for (size_t i = 0; i < sp_.kernel.size(); ++i)
      Require(sp_.kernel[i] == w.shape[2 + i], "kernel_shape disagrees with the weight shape " + ShapeToString(w.shape));
    if (io.has(2)) Require(io.in[2]->numel() == M_ && io.in[2]->dtype == DataType::kFloat32, "bias must hold M floats");
    Shape out = {N_, M_};
    out.insert(out.end(), sp_.out.begin(), sp_.out.end());
    io.out[0]->shape = out;
    io.out[0]->dtype = DataType::kFloat32;
    in_spatial_ = ShapeNumel(in_dims);
    out_spatial_ = ShapeNumel(sp_.out);
    kernel_size_ = ShapeNumel(sp_.kernel);
    pointwise_ = kernel_size_ == 1;
    for (size_t i = 0; i < sp_.kernel.size(); ++i)
      pointwise_ &= sp_.strides[i] == 1 && sp_.pad_begin[i] == 0 && sp_.pad_end[i] == 0;
    depthwise_ = group_ == C_ && M_ == C_ && sp_.kernel.size() == 2;
    in_dims_ = in_dims;
  }

  size_t ScratchBytes(const KernelIO&) const override {
    if (pointwise_ || depthwise_) return 0;
    return static_cast<size_t>((C_ / group_) * kernel_size_ * out_spatial_) * sizeof(float);
  }

  void Run(KernelIO& io, const KernelContext& ctx) override {
    const float* x = io.in[0]->as<float>();
    const float* w = io.in[1]->as<float>();
    const float* bias = io.has(2) ? io.in[2]->as<float>() : nullptr;
    float* y = io.out[0]->as<float>();
    GemmEpilogue ep;
    ep.act = EpilogueFromSchema(node_.fb->attr_as_ConvAttr()->activation());
    if (depthwise_) return Depthwise(x, w, bias, y, ep, ctx);
    const int64_t cg = C_ / group_, mg = M_ / group_, kdim = cg * kernel_size_;
    float* col = static_cast<float*>(ctx.scratch);
    for (int64_t n = 0; n < N_; ++n) {
      for (int64_t g = 0; g < group_; ++g) {
        const float* xg = x + (n * C_ + g * cg) * in_spatial_;
        const float* b = xg;
        if (!pointwise_) {
          Im2Col(xg, cg, col, ctx);
          b = col;
        }
        ep.row_bias = bias ? bias + g * mg : nullptr;
        Sgemm(false, false, mg, out_spatial_, kdim, 1.f, w + g * mg * kdim, kdim, b, out_spatial_, 0.f,
              y + (n * M_ + g * mg) * out_spatial_, out_spatial_, ep, ctx.pool);
      }
    }
  }

 private:
  void Im2Col(const float* x, int64_t channels, float* col, const KernelContext& ctx) const {
    const size_t nd = sp_.kernel.size();
    const int64_t rows = channels * kernel_size_;
    ctx.pool->ParallelFor(rows, 8, [&](int64_t rb, int64_t re) {
      std::vector<int64_t> kpos(nd), opos(nd);
      for (int64_t r = rb; r < re; ++r) {
        int64_t rem = r % kernel_size_;
        const int64_t c = r / kernel_size_;
        for (size_t d = nd; d-- > 0;) {
          kpos[d] = rem % sp_.kernel[d];
          rem /= sp_.kernel[d];
        }
        const float* xc = x + c * in_spatial_;
        float* dst = col + r * out_spatial_;
        if (nd == 2) {
          const int64_t H = in_dims_[0], W = in_dims_[1], OH = sp_.out[0], OW = sp_.out[1];
          for (int64_t oh = 0; oh < OH; ++oh) {
            const int64_t ih = oh * sp_.strides[0] - sp_.pad_begin[0] + kpos[0] * sp_.dilations[0];
            float* drow = dst + oh * OW;
            if (ih < 0 || ih >= H) {
              std::fill(drow, drow + OW, 0.f);
              continue;
            }
            const float* xrow = xc + ih * W;
            // iw = ow * sw + off is inside [0, W) for ow in [lo, hi): no per-element bounds test.
            const int64_t sw = sp_.strides[1], off = kpos[1] * sp_.dilations[1] - sp_.pad_begin[1];
            const int64_t lo = std::min<int64_t>(OW, off >= 0 ? 0 : (-off + sw - 1) / sw);
            const int64_t hi = W - 1 - off < 0 ? lo : std::max(lo, std::min<int64_t>(OW, (W - 1 - off) / sw + 1));
            std::fill(drow, drow + lo, 0.f);
            if (sw == 1) {
              std::memcpy(drow + lo, xrow + lo + off, (hi - lo) * sizeof(float));
            } else {
              for (int64_t ow = lo; ow < hi; ++ow) drow[ow] = xrow[ow * sw + off];
            }
            std::fill(drow + hi, drow + OW, 0.f);
          }
          continue;
        }
        for (int64_t o = 0; o < out_spatial_; ++o) {
          int64_t orem = o, in_off = 0, stride = 1;
          bool inside = true;
          for (size_t d = nd; d-- > 0;) {
            opos[d] = orem % sp_.out[d];
            orem /= sp_.out[d];
          }
          for (size_t d = nd; d-- > 0;) {
            const int64_t i = opos[d] * sp_.strides[d] - sp_.pad_begin[d] + kpos[d] * sp_.dilations[d];
            inside &= i >= 0 && i < in_dims_[d];
            in_off += i * stride;
            stride *= in_dims_[d];
          }
          dst[o] = inside ? xc[in_off] : 0.f;
        }
      }
    });
  }

  void Depthwise(const float* x, const float* w, const float* bias, float* y, GemmEpilogue ep,
                 const KernelContext& ctx) const {
    const int64_t H = in_dims_[0], W = in_dims_[1], OH = sp_.out[0], OW = sp_.out[1];
    const int64_t KH = sp_.kernel[0], KW = sp_.kernel[1];
    ctx.pool->ParallelFor(N_ * C_, 1, [&](int64_t b, int64_t e) {
      for (int64_t nc = b; nc < e; ++nc) {
        const int64_t c = nc % C_;
        const float* xc = x + nc * H * W;
        const float* wc = w + c * KH * KW;
        float* yc = y + nc * OH * OW;
        const float b0 = bias ? bias[c] : 0.f;
        for (int64_t oh = 0; oh < OH; ++oh) {
          for (int64_t ow = 0; ow < OW; ++ow) {
            float acc = b0;
            for (int64_t kh = 0; kh < KH; ++kh) {
              const int64_t ih = oh * sp_.strides[0] - sp_.pad_begin[0] + kh * sp_.dilations[0];
              if (ih < 0 || ih >= H) continue;
              for (int64_t kw = 0; kw < KW; ++kw) {
                const int64_t iw = ow * sp_.strides[1] - sp_.pad_begin[1] + kw * sp_.dilations[1];
                if (iw >= 0 && iw < W) acc += xc[ih * W + iw] * wc[kh * KW + kw];
              }
            }
            yc[oh * OW + ow] = acc;
          }
        }
        GemmEpilogue act_only;
        act_only.act = ep.act;
        ApplyEpilogue(yc, OW, 0, OH, 0, OW, act_only);
      }
    });
  }

  SpatialParams sp_;
  std::vector<int64_t> in_dims_;
  int64_t group_ = 1, N_ = 0, C_ = 0, M_ = 0, in_spatial_ = 0, out_spatial_ = 0, kernel_size_ = 0;
  bool pointwise_ = false, depthwise_ = false;
};

}  // namespace

void RegisterConvKernels(KernelRegistry& r) { r.Register(OpType::Conv, DataType::kFloat32, MakeKernel<ConvKernel>); }

}  // namespace lite
