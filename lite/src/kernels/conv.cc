// Convolution: depthwise 2-D by cpu/depthwise/depthwise, 1x1 as GEMM, 3x3 stride 1 by Winograd F(4x4, 3x3), small output
// planes pixel-major, other 2-D ones by direct kernels or implicit im2col + GEMM. Bias, residual and activation fused.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "cpu/depthwise/depthwise.h"
#include "core/channel_blocked_layout.h"
#include "cpu/gemm/bf16_gemm.h"
#include "cpu/conv/bf16_pixel_conv.h"
#include "cpu/onednn/onednn_conv.h"
#include "cpu/isa_dispatch.h"
#include "cpu/conv/winograd/bf16_winograd_conv.h"
#include "cpu/conv/blocked_pointwise.h"
#include "cpu/depthwise/depthwise_bf16_rows.h"
#include "cpu/depthwise/depthwise_channels.h"
#include "cpu/depthwise/depthwise_small_planes.h"
#include "cpu/conv/direct_conv.h"
#include "cpu/conv/pixel_major_conv.h"
#include "cpu/conv/pixel_tile_conv.h"
#include "cpu/conv/winograd/winograd_blocked.h"
#include "cpu/conv/winograd/winograd_conv.h"
#include "cpu/gemm/gemm.h"
#include "kernels/common.h"
#include "kernels/integer_compute.h"
#include "kernels/register.h"
#include "kernels/spatial.h"

namespace lite {

EpilogueAct EpilogueFromSchema(ms_schema::Activation a);

namespace {

using ms_schema::OpType;

constexpr int64_t kDirectMinOutputWidth = 96;   // see ConvKernel::UseDirect
constexpr int64_t kDirectMaxTaps = 160;          // see ConvKernel::UseDirect (stems: 27-147 taps)
constexpr int64_t kWinogradMinChannels = 64;     // see ConvKernel::UseWinograd
constexpr int64_t kWinogradMinTiles = 16;
constexpr int64_t kBlockedWinogradF4MinTiles = 36;   // see ConvKernel::BlockedWinogradTile
constexpr int64_t kPixelTilesIntelMaxChannels = 256;   // see ConvKernel::PixelTilesTrail
constexpr int64_t kBf16PixelMinPointwisePixels = 64;   // see ConvKernel::UseBf16Pixel
constexpr int64_t kBf16PixelMinStemPixels = 1024;       // likewise
constexpr int64_t kBf16WinogradMinTiles = 49;   // 28x28 outputs: see ConvKernel::UseBf16

// Implicit im2col for 2-D and 3-D convolution: GEMM B panels are packed straight from the NC(D)HW input, so the
// (C*KD*KH*KW) x (OD*OH*OW) column matrix never exists. Row k of B is one (channel, kd, kh, kw) tap; its
// per-row offsets are computed once per shape. A 2-D convolution is the 3-D one with D = 1.
class Im2ColPacker : public BPacker {
 public:
  struct Tap {
    int64_t plane;   // channel * D * H * W
    int64_t dh;      // kh * dilation - pad_top
    int64_t dw;      // kw * dilation - pad_left
    int64_t dd = 0;  // kd * dilation - pad_front (3-D)
  };
  Im2ColPacker(const float* x, const std::vector<Tap>& taps, int64_t D, int64_t H, int64_t W, int64_t OH, int64_t OW,
               int64_t SD, int64_t SH, int64_t SW)
      : x_(x), taps_(taps), D_(D), H_(H), W_(W), OH_(OH), OW_(OW), SD_(SD), SH_(SH), SW_(SW) {}

  void Pack(int64_t k0, int64_t kc, int64_t n0, int64_t nc, float* dst) const override {
    constexpr int64_t NR = kGemmNR;
    for (int64_t p = 0; p < nc; p += NR, dst += kc * NR) {
      // The panel's columns split into runs that lie on one output row.
      struct Run {
        int64_t j, len, od, oh, ow;
      } runs[NR];
      int nruns = 0;
      const int64_t cols = std::min(NR, nc - p);
      for (int64_t j = 0; j < cols;) {
        const int64_t n = n0 + p + j, row = n / OW_, ow = n % OW_;
        const int64_t len = std::min(cols - j, OW_ - ow);
        runs[nruns++] = {j, len, row / OH_, row % OH_, ow};
        j += len;
      }
      for (int64_t k = 0; k < kc; ++k) {
        const Tap& t = taps_[k0 + k];
        float* d = dst + k * NR;
        for (int r = 0; r < nruns; ++r) {
          const Run& run = runs[r];
          float* dr = d + run.j;
          const int64_t ih = run.oh * SH_ + t.dh, id = run.od * SD_ + t.dd;
          if (ih < 0 || ih >= H_ || id < 0 || id >= D_) {
#pragma GCC unroll 16
            for (int64_t e = 0; e < NR; ++e)
              if (e < run.len) dr[e] = 0.f;
            continue;
          }
          const float* row = x_ + t.plane + (id * H_ + ih) * W_;
          const int64_t iw0 = run.ow * SW_ + t.dw;
          if (SW_ == 1 && iw0 >= 0 && iw0 + run.len <= W_) {
            if (run.len == NR) {
              std::memcpy(dr, row + iw0, NR * sizeof(float));   // constant size: inlined vector moves
            } else {   // a fixed-trip loop: no library call per short run (rows of 7 or 14 outputs)
              const float* src = row + iw0;
#pragma GCC unroll 16
              for (int64_t e = 0; e < NR; ++e)
                if (e < run.len) dr[e] = src[e];
            }
          } else if (iw0 >= 0 && iw0 + (run.len - 1) * SW_ < W_) {   // strided, all inside the row
            const float* src = row + iw0;
            if (SW_ == 2) {   // a constant stride: the compiler vectorises it with shuffles
              for (int64_t i = 0; i < run.len; ++i) dr[i] = src[2 * i];
            } else {
              for (int64_t i = 0; i < run.len; ++i) dr[i] = src[i * SW_];
            }
          } else {
            for (int64_t i = 0; i < run.len; ++i) {
              const int64_t iw = iw0 + i * SW_;
              dr[i] = iw >= 0 && iw < W_ ? row[iw] : 0.f;
            }
          }
        }
#pragma GCC unroll 16
        for (int64_t e = 0; e < NR; ++e)
          if (e >= cols) d[e] = 0.f;
      }
    }
  }

 private:
  const float* x_;
  const std::vector<Tap>& taps_;
  int64_t D_, H_, W_, OH_, OW_, SD_, SH_, SW_;
};

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
    // Optional 4th input: a residual added before the activation (fused by the converter).
    if (io.has(3))
      Require(io.in[3]->shape == out && io.in[3]->dtype == DataType::kFloat32,
              "residual " + ShapeToString(io.in[3]->shape) + " must have the output shape " + ShapeToString(out));
    io.out[0]->shape = out;
    io.out[0]->dtype = DataType::kFloat32;
    // A 1-D convolution runs as a 2-D one of height 1 (same memory layout), so it gets the 2-D kernels
    // (direct, pixel tiles, implicit im2col, depthwise) rather than an explicit column buffer.
    if (sp_.kernel.size() == 1) {
      for (auto* v : {&sp_.kernel, &sp_.strides, &sp_.dilations, &sp_.out}) v->insert(v->begin(), 1);
      for (auto* v : {&sp_.pad_begin, &sp_.pad_end}) v->insert(v->begin(), 0);
      in_dims.insert(in_dims.begin(), 1);
    }
    in_spatial_ = ShapeNumel(in_dims);
    out_spatial_ = ShapeNumel(sp_.out);
    kernel_size_ = ShapeNumel(sp_.kernel);
    pointwise_ = kernel_size_ == 1;
    for (size_t i = 0; i < sp_.kernel.size(); ++i)
      pointwise_ &= sp_.strides[i] == 1 && sp_.pad_begin[i] == 0 && sp_.pad_end[i] == 0;
    depthwise_ = group_ == C_ && M_ % C_ == 0 && sp_.kernel.size() == 2;
    subsampled_pointwise_ = kernel_size_ == 1 && !pointwise_ && sp_.kernel.size() == 2;   // strided, then
    for (size_t i = 0; i < sp_.kernel.size(); ++i)
      subsampled_pointwise_ &= sp_.pad_begin[i] == 0 && sp_.pad_end[i] == 0;
    in_dims_ = in_dims;
    taps_.clear();
    if ((sp_.kernel.size() == 2 || sp_.kernel.size() == 3) && !pointwise_ && !depthwise_) {
      const int64_t cg = C_ / group_;
      const size_t r = sp_.kernel.size() - 2;   // the row / column dims are the last two
      const int64_t kd_n = r ? sp_.kernel[0] : 1;
      for (int64_t c = 0; c < cg; ++c)
        for (int64_t kd = 0; kd < kd_n; ++kd)
          for (int64_t kh = 0; kh < sp_.kernel[r]; ++kh)
            for (int64_t kw = 0; kw < sp_.kernel[r + 1]; ++kw)
              taps_.push_back({c * in_spatial_, kh * sp_.dilations[r] - sp_.pad_begin[r],
                               kw * sp_.dilations[r + 1] - sp_.pad_begin[r + 1],
                               r ? kd * sp_.dilations[0] - sp_.pad_begin[0] : 0});
    }
  }

  // float16 on x86 (AVX512-FP16): the Convs float32 runs on its channel-blocked kernels (Winograd, pixel tiles, stems)
  // stay float32, so activations stay blocked from the stem to the pool and the 1x1 layers run the blocked float16
  // tiles (BlockedPointwiseConv::UseHalfTiles; strided ones on their sampled copy). Their float16 kernels (the
  // float16 GEMM, pixel-major) read and write NCHW planes only: ResNet-50 at float16 changed layouts around every 3x3
  // and strided layer (its 56x56 1x1 expansions 1.8-1.9x their float32 time), MobileNetV2's 1x1 layers kept float32.
  // Measured (benchmarks/results/fp16_xeon.md): MobileNetV2 0.88x float32's time at one thread (1.0x before), ResNet-50
  // 0.82x (0.88x before). 1-D Convs (Whisper's front end) keep the float16 GEMM, and so do patch
  // embeddings (Patchify: their output leaves for a Reshape or a LayerNorm, no blocked chain; ViT-B/16's 1.05 ms at
  // float16 on pixel-major, 1.58 on the float32 pixel tiles).
  // LITE_FP16_FLOAT32_CONVS=0 keeps every Conv at float16.
  bool Float32Faster(const KernelIO& io) const override {
#ifdef LITE_X86_SIMD
    static const bool rule = [] {
      const char* v = std::getenv("LITE_FP16_FLOAT32_CONVS");
      return !(v && std::strcmp(v, "0") == 0);
    }();
    if (!io.fp16 || !rule || !CpuHasAvx512Fp16() || sp_.kernel.size() != 2 || depthwise_ || group_ != 1 ||
        io.in[1]->kind != TensorRec::Kind::kConstant || Patchify())
      return false;
    return UseWinograd() || UsePixelTiles(true) || UseDirect();
#else
    (void)io;
    return false;
#endif
  }

  // Non-overlapping patches (stride = kernel, no padding, kernel over 1x1): a transformer's patch embedding.
  bool Patchify() const {
    if (kernel_size_ == 1) return false;
    for (size_t i = 0; i < sp_.kernel.size(); ++i)
      if (sp_.strides[i] != sp_.kernel[i] || sp_.pad_begin[i] != 0 || sp_.pad_end[i] != 0) return false;
    return true;
  }

  size_t ScratchBytes(const KernelIO& io) const override {
    if (bf16_winograd_) return bf16_winograd_->ScratchBytes(io.pool ? io.pool->size() : 1);
    if (onednn_) return onednn_->ScratchBytes();
    if (bf16_pixel_)
      return bf16_pixel_->ScratchBytes(io.in[0]->bf16_pixels, !io.out[0]->channel_blocked && !io.out[0]->bf16_pixels);
    if (!direct_.empty()) return direct_[0]->ScratchBytes();
    if (subsampled_pointwise_ && io.in[0]->channel_blocked)   // the sampled input the blocked kernel reads
      return static_cast<size_t>(N_ * C_ * out_spatial_) * sizeof(float);
    if (pointwise_ || depthwise_ || Implicit(io)) return 0;
    return static_cast<size_t>((C_ / group_) * kernel_size_ * out_spatial_) * sizeof(float);
  }

  // Channel-blocked tensors (core/channel_blocked_layout.h): a depthwise Conv (one filter per channel) reads
  // and writes either layout; a pointwise one with constant weights reads blocks and writes either (with an
  // NCHW input it stays on the GEMM, so its output stays NCHW too), its residual in the output's layout (float32;
  // MobileNetV2's projections with their block's Add); a strided 1x1 one likewise through a sampled copy (float32 or
  // float16: bf16 runs those on the pixel-major kernel).
  // Float32 Winograd and pixel-tile Convs read and write either, the residual laid out as the output; the direct
  // kernel (stems) writes either from NCHW. Any other Conv keeps NCHW.
  bool AcceptsLayouts(const KernelIO& io) const override {
    if (!AnyTensorMarked(io, &TensorRec::channel_blocked)) return true;
    const bool in_blocked = io.in[0]->channel_blocked, out_blocked = io.out[0]->channel_blocked;
    // The bf16 pixel-major kernel reads and writes either layout, its residual in either too.
    if (UseBf16Pixel(io)) return !io.in[1]->channel_blocked && !(io.has(2) && io.in[2]->channel_blocked);
    for (size_t i = 1; i < 3 && i < io.in.size(); ++i)
      if (io.in[i] && io.in[i]->channel_blocked) return false;
    if (sp_.kernel.size() != 2) return false;
    const bool constant_one_group = group_ == 1 && io.in[1]->kind == TensorRec::Kind::kConstant;
    const bool pointwise_blocked = (pointwise_ || (subsampled_pointwise_ && (!io.bf16 || io.fp16))) && constant_one_group &&
                                   in_blocked && C_ % kChannelBlock == 0 && M_ % kChannelBlock == 0;
    // ResNet-50 then keeps its activations blocked from the stem to the global pool.
    if (!io.bf16 && constant_one_group && !pointwise_ && !subsampled_pointwise_) {
      if (UseWinograd() || UsePixelTiles(in_blocked))
        return (!in_blocked || C_ % kChannelBlock == 0) && (!out_blocked || M_ % kChannelBlock == 0) &&
               (!io.has(3) || io.in[3]->channel_blocked == out_blocked);
      if (UseDirect()) return !in_blocked && M_ % kChannelBlock == 0 && !io.has(3);   // blocks out (stems)
    }
    // (At float16 the blocked pointwise kernel, its float16 tiles on ARM64 and its float32 instance elsewhere, takes
    // the residual: MobileNetV2's projections then keep the blocked chain, its depthwise layers off NCHW planes:
    // 0.96-0.97x the model's time on x86.)
    if (io.has(3)) return pointwise_blocked && (!io.bf16 || io.fp16) && io.in[3]->channel_blocked == out_blocked;
    if (depthwise_) return M_ == C_;
    return pointwise_blocked;
  }

  // Constant weights are packed into GEMM panels once, not on every run.
  void Prepare(KernelIO& io) override {
    TensorRec& w = *io.in[1];
    in_blocked_ = io.in[0]->channel_blocked;
    out_blocked_ = io.out[0]->channel_blocked;
    // Packed forms live on the weight (SharedObject): one copy for every plan of this geometry, and for every model
    // sharing these weights (ModelParallelRunner's workers).
    if (UseBf16Pixel(io)) {
      if (UseOneDnn(io) && !onednn_) {   // nullptr where oneDNN offers no AMX kernel: lite's below
        OneDnnConv::Options o;
        o.nchw_input = !io.in[0]->bf16_pixels;
        o.bias = io.has(2);
        o.residual = io.has(3);
        o.act = EpilogueFromSchema(node_.fb->attr_as_ConvAttr()->activation());
        o.parts = io.pool ? io.pool->size() : 1;
        const std::string key = PackKey("onednn", 0) + ":" + std::to_string(o.nchw_input) + std::to_string(o.bias) +
                                std::to_string(o.residual) + std::to_string(static_cast<int>(o.act)) + ":" +
                                std::to_string(o.parts);
        onednn_ = SharedObject<OneDnnConv>(w, key, [&] {
          return OneDnnConv::Create(Geometry(), w.as<float>(), nullptr, o, nullptr);
        });
      }
      if (onednn_) {
        ReleaseMappedPages(w);
        return;
      }
      if (UseBf16Winograd(io)) {
        if (!bf16_winograd_)
          bf16_winograd_ = SharedObject<Bf16WinogradConv>(w, PackKey("bf16_winograd", 0), [&] {
            return std::make_shared<const Bf16WinogradConv>(Geometry(), w.as<float>());
          });
      } else if (!bf16_pixel_) {
        bf16_pixel_ = SharedObject<Bf16PixelConv>(w, PackKey("bf16_pixel", 0), [&] {
          return std::make_shared<const Bf16PixelConv>(Geometry(), w.as<float>());
        });
      }
      ReleaseMappedPages(w);
      return;
    }
    // (One group only: a 1x1 depthwise Conv on blocks is the depthwise kernel's, its weights one per channel.)
    if ((pointwise_ || subsampled_pointwise_) && group_ == 1 && in_blocked_ && !blocked_pointwise_) {
      // Reduced precision: bf16 pairs on AVX512_BF16, float16 on ARM64 FP16 and (32+ channels in and out) AVX512-FP16,
      // else the float32 tiles.
      const bool bf16 = io.bf16 && !io.fp16, fp16 = io.fp16 && BlockedPointwiseConv::UseHalfTiles(C_, M_);
      blocked_pointwise_ = SharedObject<BlockedPointwiseConv>(
          w, PackKey(bf16 ? "pointwise_bf16" : fp16 ? "pointwise_fp16" : "pointwise", 0), [&] {
            return std::make_shared<const BlockedPointwiseConv>(C_, M_, w.as<float>(), bf16, fp16);
          });
      ReleaseMappedPages(w);
      return;
    }
    if (io.in[0]->bf16_pixels && UseBf16RowsDepthwise(io)) {
      if (!dw_rows_)
        dw_rows_ = SharedObject<Bf16RowsDepthwise>(w, PackKey("depthwise_bf16_rows", 0), [&] {
          return std::make_shared<const Bf16RowsDepthwise>(DepthwiseGeometry(), w.as<float>());
        });
      ReleaseMappedPages(w);
      return;
    }
    if (depthwise_ && w.kind == TensorRec::Kind::kConstant && ChannelBlocks() && dw_filters_.taps == 0) {
      dw_filters_ = PackDepthwiseBlockFilters(C_, kernel_size_, w.as<float>());
      ReleaseMappedPages(w);
      return;
    }
    if (depthwise_ || w.kind != TensorRec::Kind::kConstant || !packed_w_.empty() || !direct_.empty() ||
        !bf16_w_.empty())
      return;
    const int64_t mg = M_ / group_, kdim = (C_ / group_) * kernel_size_;
    if (io.bf16 && UsePixelMajor(true)) {   // small planes at bf16: pixels x the bf16-packed transposed weights
      direct_.push_back(SharedObject<GroupConvolution>(w, PackKey(io.fp16 ? "pixel_major_fp16" : "pixel_major_bf16", 0), [&] {
        return std::shared_ptr<const GroupConvolution>(std::make_shared<const PixelMajorConv>(
            Geometry(), w.as<float>(), true, io.fp16 ? HalfFormat::kFp16 : HalfFormat::kBf16));
      }));
      direct_kind_ = io.fp16 ? "pixel_major_fp16" : "pixel_major_bf16";
      ReleaseMappedPages(w);
      return;
    }
    if (io.bf16 && UseBf16()) {   // the product runs on the bf16 GEMM: weights as bf16 rows
      for (int64_t g = 0; g < group_; ++g)
        bf16_w_.push_back(SharedPacked<Bf16RowsA>(w, PackKey(io.fp16 ? "fp16_rows" : "bf16_rows", g), [&] {
          return ToBf16Rows(mg, kdim, w.as<float>() + g * mg * kdim, kdim,
                            io.fp16 ? HalfFormat::kFp16 : HalfFormat::kBf16);
        }));
      ReleaseMappedPages(w);
      return;
    }
    const bool winograd = UseWinograd(), pixel_tiles = !winograd && UsePixelTiles(in_blocked_);
    const bool pixel_major = !winograd && !pixel_tiles && UsePixelMajor(false);
    if (winograd || pixel_tiles || pixel_major || UseDirect()) {   // direct kernels: no activation packing
      const ConvGeometry d = Geometry();
      const int64_t per_group = d.M * d.C * d.KH * d.KW;
      for (int64_t g = 0; g < group_; ++g) {
        const float* wg = w.as<float>() + g * per_group;
        const ConvLayouts layouts{in_blocked_, out_blocked_};
        // Winograd at float16 / bfloat16 on ARM64: its products on the float16 / bf16 GEMM (the transforms stay
        // float32).
        const HalfFormat half_format = io.fp16 ? HalfFormat::kFp16 : HalfFormat::kBf16;
        const bool half_winograd = winograd && io.bf16 && WinogradConv3x3::HalfProductsAvailable(half_format);
        const bool blocked_winograd = winograd && !half_winograd && UseBlockedWinograd();
        const int blocked_tile = BlockedWinogradTile();
        const char* blocked_name = blocked_tile == 4 ? "winograd_f4x4_blocked" : "winograd_f2x2_blocked";
        const char* kind = half_winograd ? (io.fp16 ? "winograd_fp16" : "winograd_bf16")
                           : blocked_winograd ? blocked_name : winograd ? "winograd"
                           : pixel_tiles ? "pixel_tiles" : pixel_major ? "pixel_major" : "direct";
        direct_kind_ = std::string(blocked_winograd ? blocked_name : winograd ? "winograd_f4x4" : kind) +
                       (half_winograd ? (io.fp16 ? "_fp16" : "_bf16") : "");
        direct_.push_back(SharedObject<GroupConvolution>(w, PackKey(kind, g), [&]() -> std::shared_ptr<const GroupConvolution> {
          if (blocked_winograd) return std::make_shared<const WinogradBlockedConv3x3>(d, wg, blocked_tile, layouts);
          if (winograd) return std::make_shared<const WinogradConv3x3>(d, wg, layouts, half_winograd, half_format);
          if (pixel_tiles) return std::make_shared<const PixelTileConv2D>(d, wg, layouts);
          if (pixel_major) return std::make_shared<const PixelMajorConv>(d, wg);
          return std::make_shared<const DirectConv2D>(d, wg, layouts);
        }));
      }
      ReleaseMappedPages(w);
      return;
    }
    for (int64_t g = 0; g < group_; ++g)
      packed_w_.push_back(SharedPacked<std::vector<float>>(w, PackKey("gemm_a", g), [&] {
        return PackAOnce(false, mg, kdim, 1.f, w.as<float>() + g * mg * kdim, kdim);
      }));
    ReleaseMappedPages(w);
  }

  // What a packed form of this node's weight depends on beside the weight: the packing, the group, the geometry of
  // the plan and the activation layouts.
  std::string PackKey(const char* kind, int64_t group) const {
    const ConvGeometry d = Geometry();
    std::string key = std::string("conv:") + kind + ":" + std::to_string(group) + ":" + std::to_string(group_);
    for (int64_t v : {d.C, d.H, d.W, d.M, d.OH, d.OW, d.KH, d.KW, d.SH, d.SW, d.DH, d.DW, d.pad_top, d.pad_left})
      key += "," + std::to_string(v);
    return key + (in_blocked_ ? ":ib" : ":in") + (out_blocked_ ? ":ob" : ":on");
  }

  // In Run's order of precedence.
  std::string Implementation() const override {
    if (bf16_winograd_) return "winograd_f2x2_bf16";
    if (onednn_) return "onednn:" + onednn_->implementation();
    if (bf16_pixel_) return bf16_pixel_->amx() ? "pixel_major_bf16_amx" : "pixel_major_bf16";
    if (dw_rows_) return "depthwise_bf16_rows";
    if (blocked_pointwise_) return blocked_pointwise_->Name();
    if (depthwise_)
      return !ChannelBlocks() ? "depthwise" : UseDepthwiseSmallPlanes() ? "depthwise_small_planes"
                                                                        : "depthwise_channel_blocks";
    if (!direct_.empty()) return direct_kind_;
    const char* gemm = bf16_w_.empty() ? "gemm" : bf16_w_[0]->amx_steps > 0 ? "gemm_bf16_amx" : "gemm_bf16";
    const bool implicit = !taps_.empty() && (!packed_w_.empty() || !bf16_w_.empty());   // constant weights
    return std::string(gemm) + (implicit ? "_implicit_im2col" : pointwise_ ? "" : "_im2col");
  }

  void Run(KernelIO& io, const KernelContext& ctx) override {
    const float* x = io.in[0]->as<float>();
    const float* w = io.in[1]->as<float>();
    const float* bias = io.has(2) ? io.in[2]->as<float>() : nullptr;
    float* y = io.out[0]->as<float>();
    GemmEpilogue ep;
    ep.act = EpilogueFromSchema(node_.fb->attr_as_ConvAttr()->activation());
    const float* residual = io.has(3) ? io.in[3]->as<float>() : nullptr;
    if (bf16_winograd_) return RunBf16Winograd(io, bias, ep.act, ctx);
    if (onednn_) return RunOneDnn(io, bias, ctx);
    if (bf16_pixel_) return RunBf16Pixel(io, bias, ep.act, ctx);
    if (dw_rows_) {   // bf16 rows in and out
      const int clamp = ep.act == EpilogueAct::kRelu ? 1 : ep.act == EpilogueAct::kRelu6 ? 2 : 0;
      const size_t in_bytes = Bf16PixelConv::Bf16RowsBytes(C_, in_spatial_);
      const size_t out_bytes = Bf16PixelConv::Bf16RowsBytes(M_, out_spatial_);
      for (int64_t n = 0; n < N_; ++n)
        dw_rows_->Run(reinterpret_cast<const uint16_t*>(static_cast<const char*>(io.in[0]->data) + n * in_bytes), bias,
                      clamp, reinterpret_cast<uint16_t*>(static_cast<char*>(io.out[0]->data) + n * out_bytes),
                      ctx.pool);
      return;
    }
    if (blocked_pointwise_) {
      if (subsampled_pointwise_) x = SampleBlocked(x, static_cast<float*>(ctx.scratch), ctx);
      return blocked_pointwise_->Run(N_, out_spatial_, x, bias, ep.act, out_blocked_, y, ctx.pool, residual);
    }
    if (depthwise_) {
      if (!residual) return Depthwise(x, w, bias, y, ep, ctx);
      GemmEpilogue tail;   // residual, then the activation, after the depthwise pass
      tail.residual = residual;
      tail.ld_residual = out_spatial_;
      tail.act = ep.act;
      ep.act = EpilogueAct::kNone;
      Depthwise(x, w, bias, y, ep, ctx);
      ctx.pool->ParallelFor(N_ * M_, 16, [&](int64_t b, int64_t e) { ApplyEpilogue(y, out_spatial_, b, e - b, 0, out_spatial_, tail); });
      return;
    }
    const int64_t cg = C_ / group_, mg = M_ / group_, kdim = cg * kernel_size_;
    if (!direct_.empty()) {
      for (int64_t n = 0; n < N_; ++n)
        for (int64_t g = 0; g < group_; ++g) {
          const int64_t o = (n * M_ + g * mg) * out_spatial_;
          direct_[g]->Run(x + (n * C_ + g * cg) * in_spatial_, bias ? bias + g * mg : nullptr,
                          residual ? residual + o : nullptr, ep.act, y + o, static_cast<float*>(ctx.scratch), ctx.pool);
        }
      return;
    }
    float* col = static_cast<float*>(ctx.scratch);
    for (int64_t n = 0; n < N_; ++n) {
      for (int64_t g = 0; g < group_; ++g) {
        const float* xg = x + (n * C_ + g * cg) * in_spatial_;
        ep.row_bias = bias ? bias + g * mg : nullptr;
        ep.residual = residual ? residual + (n * M_ + g * mg) * out_spatial_ : nullptr;
        ep.ld_residual = out_spatial_;
        if (Implicit(io)) {
          const size_t r = sp_.kernel.size() - 2;   // 3-D: depth first
          Im2ColPacker packer(xg, taps_, r ? in_dims_[0] : 1, in_dims_[r], in_dims_[r + 1], sp_.out[r], sp_.out[r + 1],
                              r ? sp_.strides[0] : 1, sp_.strides[r], sp_.strides[r + 1]);
          if (!bf16_w_.empty()) {
            Bf16GemmRowsA(*bf16_w_[g], out_spatial_, packer, y + (n * M_ + g * mg) * out_spatial_, out_spatial_, ep,
                          ctx.pool);
            continue;
          }
          SgemmPackedAWithPacker(packed_w_[g]->data(), mg, out_spatial_, kdim, packer,
                                 y + (n * M_ + g * mg) * out_spatial_, out_spatial_, ep, ctx.pool);
          continue;
        }
        const float* b = xg;
        if (!pointwise_) {
          Im2Col(xg, cg, col, ctx);
          b = col;
        }
        float* yg = y + (n * M_ + g * mg) * out_spatial_;
        if (!bf16_w_.empty()) {
          Bf16GemmRowsA(*bf16_w_[g], out_spatial_, b, out_spatial_, yg, out_spatial_, ep, ctx.pool);
        } else if (!packed_w_.empty()) {
          SgemmPackedA(packed_w_[g]->data(), mg, out_spatial_, kdim, false, b, out_spatial_, 0.f, yg, out_spatial_, ep,
                       ctx.pool);
        } else {
          Sgemm(false, false, mg, out_spatial_, kdim, 1.f, w + g * mg * kdim, kdim, b, out_spatial_, 0.f, yg,
                out_spatial_, ep, ctx.pool);
        }
      }
    }
  }

 private:
  // The direct kernel: 2-D, constant weights, not pointwise (those read the input as B with no copy).
  ConvGeometry Geometry() const {
    ConvGeometry d;
    d.C = C_ / group_;
    d.H = in_dims_[0];
    d.W = in_dims_[1];
    d.M = M_ / group_;
    d.OH = sp_.out[0];
    d.OW = sp_.out[1];
    d.KH = sp_.kernel[0];
    d.KW = sp_.kernel[1];
    d.SH = sp_.strides[0];
    d.SW = sp_.strides[1];
    d.DH = sp_.dilations[0];
    d.DW = sp_.dilations[1];
    d.pad_top = sp_.pad_begin[0];
    d.pad_left = sp_.pad_begin[1];
    return d;
  }

  // Winograd F(4x4, 3x3): 3x3 stride-1 layers with 64+ channels in and out and 16+ output tiles (planes of
  // 13x13 and up). Measured on ResNet-50's layers (one thread): 0.45-0.5x the pixel-tile kernel's time at
  // 56x56, 28x28 and 14x14; at 7x7 (four tiles) and with 16-32 channels the transforms dominate and it is
  // 1.1-1.4x slower. LITE_CONV_WINOGRAD=0 turns it off (its float32 rounding differs from direct summation
  // by ~2e-5 of the output's scale).
  bool UseWinograd() const {
    static const bool enabled = [] {
      const char* v = std::getenv("LITE_CONV_WINOGRAD");
      return !(v && std::strcmp(v, "0") == 0);
    }();
    if (!enabled || sp_.kernel.size() != 2 || depthwise_ || group_ != 1) return false;
    const ConvGeometry g = Geometry();
    const int64_t tiles = ((g.OH + 3) / 4) * ((g.OW + 3) / 4);
    return WinogradConv3x3::Supports(g) && g.C >= kWinogradMinChannels && g.M >= kWinogradMinChannels &&
           tiles >= kWinogradMinTiles;
  }

  // Winograd on WinogradBlockedConv3x3 where its rule is on (cpu/conv/winograd/winograd_blocked.h: Intel by default,
  // LITE_CONV_WINOGRAD_BLOCKED=1 / 0 on any CPU) and the channels are whole 8-channel blocks: between channel-blocked
  // tensors (ResNet-50's chain), or with an NCHW side converted by bands of rows (Convs beside GroupNorm, Concat or
  // Resize, which keep NCHW: 0.79-0.80x WinogradConv3x3's time over NCHW planes of 32x32 to 128x128, conversions
  // included).
  bool UseBlockedWinograd() const {
    return WinogradBlockedConv3x3::Enabled() && WinogradBlockedConv3x3::Supports(Geometry());
  }
  // Planes of under 36 F(4x4) tiles (under 24x24) take F(2x2): the transformed filters are then what a layer waits
  // on. ResNet-50's 14x14 x 256 layers in the model (Xeon, one / two threads): 0.99-1.03 / 0.60-0.65 ms in F(2x2)
  // against 1.20-1.35 / 0.72-0.81 in F(4x4) (9.4 MB of transformed filters against 4.2). On 7x7 x 512 (16.8 MB in
  // F(2x2)) the pixel tiles stay faster (1.75-1.79 against 2.13-2.18 ms), so Winograd still starts at 16 F(4x4) tiles.
  int BlockedWinogradTile() const {
    return ((sp_.out[0] + 3) / 4) * ((sp_.out[1] + 3) / 4) >= kBlockedWinogradF4MinTiles ? 4 : 2;
  }

  // At precision bfloat16, of the Convs the pixel-major kernel does not take (UseBf16Pixel: grouped ones, channels
  // not in whole blocks of 8), every GEMM-shaped one takes the bf16 GEMM except the stems (the direct kernel reads the
  // few input channels in place; implicit im2col in bf16 took 1.3x its time on ResNet-50's) and Winograd layers on
  // planes of 28x28 and up (ResNet-50's stage 1-2 3x3 layers took 1.1-1.4x their Winograd time in bf16; from 14x14
  // down the bf16 GEMM is faster, 0.8-0.88x).
  bool UseBf16() const {
    if (UseDirect()) return false;
    if (!UseWinograd()) return true;
    return ((sp_.out[0] + 3) / 4) * ((sp_.out[1] + 3) / 4) < kBf16WinogradMinTiles;
  }

  // At precision bfloat16, 2-D convolutions of one group with constant weights, whole 8-channel blocks out and in
  // (or 1-4 channels in: stems) run pixel-major on the bf16 kernels (cpu/conv/bf16_pixel_conv.h), in any activation
  // layout, except (without AMX) pointwise ones reading a float32 blocked input with no residual on planes of over 64
  // pixels, which the blocked pointwise kernel's 12-pixel tiles run faster on vector bf16 products (MobileNetV2's
  // 1.03-1.27x in pixel-major, ResNet-50's reduce layers 1.04-1.09x; from 7x7 down pixel-major's 7-pixel rows win,
  // 0.82-0.85x). On AMX tiles the pixel-major kernel takes those too: MobileNetV2 bf16 at one thread 1.76x -> 1.22x
  // OpenVINO's time, its pointwise layers had run 2-10x OpenVINO's AMX 1x1 kernel's. Measured on
  // ResNet-50, one thread, against the bf16 GEMM (channel-major, the input packed per run) and Winograd (float32)
  // it replaced: 3x3 layers 0.55-0.9x the time (stage 1's stride-2 one 0.57x), 22.9 -> 20.7 ms in all (18.7 with
  // the later bf16 rows, stems, padding-tap skipping and depth blocking).
  bool UseBf16Pixel(const KernelIO& io) const {
    // (float16: the bf16 pixel layouts and kernels have no float16 form; such Convs take the GEMM at float16.)
    if (!io.bf16 || io.fp16 || sp_.kernel.size() != 2 || depthwise_ || group_ != 1) return false;
    const bool in_blocked = io.in[0]->channel_blocked && !io.in[0]->bf16_pixels;   // bf16 rows win over blocks
    if (pointwise_ && in_blocked && !io.has(3) && out_spatial_ > kBf16PixelMinPointwisePixels && !CpuHasAmxBf16())
      return false;
    // A 3-channel stem pads each pixel to 4 values (a third more products): worth it on full-resolution planes
    // (ResNet-50's 7x7 one 0.73x its float32 direct kernel's time, ConvNeXt-Tiny's 4x4 patches 0.84x the bf16
    // GEMM's), not on ViT-B/16's 196 patches of 16x16 (1.16x the bf16 GEMM's).
    if (C_ % 8 != 0 && C_ != 4 && C_ != 2 && out_spatial_ < kBf16PixelMinStemPixels) return false;
    return io.in[1]->kind == TensorRec::Kind::kConstant && Bf16PixelConv::Supports(Geometry());
  }

  // At precision bfloat16, depthwise Convs of whole 8-channel blocks with constant weights, no residual and no
  // activation but ReLU / ReLU6 run between bf16 rows (cpu/depthwise/depthwise_bf16_rows.h) where their input and
  // output are stored so: MobileNetV2's blocks then keep bf16 rows from expansion to projection.
  bool UseBf16RowsDepthwise(const KernelIO& io) const {
    if (!io.bf16 || io.fp16 || !depthwise_ || M_ != C_ || io.has(3) || io.in[1]->kind != TensorRec::Kind::kConstant)
      return false;
    const EpilogueAct act = EpilogueFromSchema(node_.fb->attr_as_ConvAttr()->activation());
    if (act != EpilogueAct::kNone && act != EpilogueAct::kRelu && act != EpilogueAct::kRelu6) return false;
    return Bf16RowsDepthwise::Supports(DepthwiseGeometry());
  }

  // Geometry() of a depthwise Conv over all its channels (one group each).
  ConvGeometry DepthwiseGeometry() const {
    ConvGeometry d = Geometry();
    d.C = C_, d.M = M_;
    return d;
  }

 public:
  // bf16 rows (core/bf16_pixel_layout.h) for the input, the output and the residual of the pixel-major kernel: the
  // input in 8-channel multiples; the output when ReLU/ReLU6 or no activation follows (rounded in registers); every
  // bf16 tensor large enough for its rows (per image (pixels + 1) x Bf16RowStride(C) values).
  bool AcceptsBf16Pixels(const KernelIO& io) const override {
    bool any = false;
    for (const TensorRec* t : io.in) any |= t && t->bf16_pixels;
    any |= io.out[0]->bf16_pixels;
    if (!any) return true;
    if (io.in[1]->bf16_pixels || (io.has(2) && io.in[2]->bf16_pixels)) return false;
    auto fits = [&](const TensorRec* t, int64_t channels, int64_t pixels) {
      return !t->bf16_pixels || t->nbytes >= static_cast<size_t>(N_) * Bf16PixelConv::Bf16RowsBytes(channels, pixels);
    };
    if (UseBf16RowsDepthwise(io))   // bf16 rows in and out, or neither
      return io.in[0]->bf16_pixels && io.out[0]->bf16_pixels && fits(io.in[0], C_, in_spatial_) &&
             fits(io.out[0], M_, out_spatial_);
    if (!UseBf16Pixel(io)) return false;
    if (io.in[0]->bf16_pixels && (C_ % 8 != 0 || !fits(io.in[0], C_, in_spatial_))) return false;
    const EpilogueAct act = EpilogueFromSchema(node_.fb->attr_as_ConvAttr()->activation());
    const bool out16 = io.out[0]->bf16_pixels;
    if (out16 && (!fits(io.out[0], M_, out_spatial_) ||
                  (act != EpilogueAct::kNone && act != EpilogueAct::kRelu && act != EpilogueAct::kRelu6 &&
                   act != EpilogueAct::kSilu)))
      return false;
    return !io.has(3) || fits(io.in[3], M_, out_spatial_);
  }

  // The kernels that load each tile's residual before they store the tile's result over the same elements, with
  // residual and output in the same storage, let the output take the residual's buffer: the bf16 pixel-major one
  // (bf16 rows or channel blocks), the bf16 Winograd (its output transform; bf16 rows) and the float32 blocked
  // pointwise one. (An NCHW output is transposed from scratch with the residual added after: not in place.)
  int InPlaceInput(const KernelIO& io) const override {
    if (!io.has(3) || io.in[3] == io.in[0] || io.in[3]->nbytes < io.out[0]->nbytes) return -1;
    const TensorRec& r = *io.in[3];
    const TensorRec& y = *io.out[0];
    const bool rows = r.bf16_pixels && y.bf16_pixels;
    const bool blocked = r.channel_blocked && y.channel_blocked && !r.bf16_pixels && !y.bf16_pixels;
    if (bf16_winograd_ || onednn_) return rows ? 3 : -1;
    if (bf16_pixel_) return rows || blocked ? 3 : -1;
    if (blocked_pointwise_) return blocked ? 3 : -1;
    return -1;
  }

 private:
  // A 3x3 stride-1 Conv between bf16 rows (its residual rows too) with ReLU, ReLU6 or no activation runs Winograd
  // F(2x2, 3x3) in bf16 (cpu/conv/winograd/bf16_winograd_conv.h; the channel counts it takes there): 2.25x fewer products than the
  // pixel-major kernel. LITE_BF16_WINOGRAD=0 keeps them on the pixel-major kernel (for comparisons).
  bool UseBf16Winograd(const KernelIO& io) const {
    static const bool enabled = [] {
      const char* v = std::getenv("LITE_BF16_WINOGRAD");
      return !(v && std::string(v) == "0");
    }();
    const EpilogueAct act = EpilogueFromSchema(node_.fb->attr_as_ConvAttr()->activation());
    return enabled && io.in[0]->bf16_pixels && io.out[0]->bf16_pixels && (!io.has(3) || io.in[3]->bf16_pixels) &&
           (act == EpilogueAct::kNone || act == EpilogueAct::kRelu || act == EpilogueAct::kRelu6) &&
           Bf16WinogradConv::Supports(Geometry());
  }

  void RunBf16Winograd(KernelIO& io, const float* bias, EpilogueAct act, const KernelContext& ctx) const {
    const size_t in_image = Bf16PixelConv::Bf16RowsBytes(C_, in_spatial_) / sizeof(uint16_t);
    const size_t out_image = Bf16PixelConv::Bf16RowsBytes(M_, out_spatial_) / sizeof(uint16_t);
    const uint16_t* x = static_cast<const uint16_t*>(io.in[0]->data);
    const uint16_t* res = io.has(3) ? static_cast<const uint16_t*>(io.in[3]->data) : nullptr;
    uint16_t* y = static_cast<uint16_t*>(io.out[0]->data);
    for (int64_t n = 0; n < N_; ++n)
      bf16_winograd_->Run(x + n * in_image, bias, res ? res + n * out_image : nullptr, act, y + n * out_image,
                          ctx.scratch, ctx.pool);
  }

  // On AMX CPUs where oneDNN is loaded (cpu/onednn/onednn_library.h), the Convs the pixel-major bf16 kernel would run
  // from bf16 rows or an NCHW float32 input (stems) into bf16 rows, with a bf16-rows residual or none and ReLU / ReLU6
  // or no activation, run on oneDNN's AMX convolutions: ResNet-50's Convs at one thread 12.3 -> 9.1 ms in
  // benchmarks/results/onednn_xeon.md (its 3x3 ones on 14x14-56x56 planes 1.5-1.8x faster, the stem 2.4x).
  // LITE_ONEDNN=0 keeps lite's kernels.
  bool UseOneDnn(const KernelIO& io) const {
    if (!CpuHasAmxBf16() || !io.out[0]->bf16_pixels || (io.has(3) && !io.in[3]->bf16_pixels)) return false;
    if (!io.in[0]->bf16_pixels && io.in[0]->channel_blocked) return false;
    const EpilogueAct act = EpilogueFromSchema(node_.fb->attr_as_ConvAttr()->activation());
    if (act != EpilogueAct::kNone && act != EpilogueAct::kRelu && act != EpilogueAct::kRelu6) return false;
    // Stems with a product depth under 64 stay on lite's kernels (MobileNetV2's 3x3 stem of 27: 1.24x its time on
    // oneDNN; ResNet-50's 7x7 one of 147 runs 0.6x).
    if (!io.in[0]->bf16_pixels && C_ * kernel_size_ < 64) return false;
    if (!OneDnnConv::Worthwhile(Geometry(), io.pool ? io.pool->size() : 1, false)) return false;
    // oneDNN's AMX kernels take dense nhwc only: bf16 rows exactly C values apart (so while oneDNN is loaded).
    return Bf16PixelConv::Bf16RowStride(C_) == C_ && Bf16PixelConv::Bf16RowStride(M_) == M_;
  }

  void RunOneDnn(KernelIO& io, const float* bias, const KernelContext& ctx) const {
    const char* x = static_cast<const char*>(io.in[0]->data);
    const size_t in_image = io.in[0]->bf16_pixels ? Bf16PixelConv::Bf16RowsBytes(C_, in_spatial_)
                                                  : static_cast<size_t>(C_ * in_spatial_) * sizeof(float);
    const size_t out_image = Bf16PixelConv::Bf16RowsBytes(M_, out_spatial_);
    const char* res = io.has(3) ? static_cast<const char*>(io.in[3]->data) : nullptr;
    char* y = static_cast<char*>(io.out[0]->data);
    for (int64_t n = 0; n < N_; ++n)
      onednn_->Run(x + n * in_image, bias, res ? res + n * out_image : nullptr, y + n * out_image, ctx.scratch,
                   ctx.pool);
  }

  // The pixel-major bf16 kernel, image by image; each tensor as it is stored (bf16 rows, blocked or NCHW float32).
  void RunBf16Pixel(KernelIO& io, const float* bias, EpilogueAct act, const KernelContext& ctx) const {
    auto storage = [](const TensorRec* t) {
      return t->bf16_pixels ? PixelStorage::kBf16Rows : t->channel_blocked ? PixelStorage::kBlocked : PixelStorage::kNchw;
    };
    // Image n of a tensor of `channels` x `pixels`: bf16 rows are (pixels + 1) x row stride values per image.
    auto image = [&](TensorRec* t, int64_t channels, int64_t pixels, int64_t n) -> void* {
      if (!t) return nullptr;
      char* base = static_cast<char*>(t->data);
      return base + n * (t->bf16_pixels ? Bf16PixelConv::Bf16RowsBytes(channels, pixels)
                                        : static_cast<size_t>(channels * pixels) * sizeof(float));
    };
    TensorRec* res = io.has(3) ? io.in[3] : nullptr;
    for (int64_t n = 0; n < N_; ++n)
      bf16_pixel_->Run(image(io.in[0], C_, in_spatial_, n), storage(io.in[0]), bias, image(res, M_, out_spatial_, n),
                       res ? storage(res) : PixelStorage::kNchw, act, image(io.out[0], M_, out_spatial_, n),
                       storage(io.out[0]), ctx.scratch, ctx.pool);
  }

  // The pixel-tile kernel: 2-D KxK (K > 1) at any stride, unless the direct kernel takes it. Measured on
  // ResNet-50 (1 thread): its 3x3 layers take 0.65-0.8x the time of implicit im2col + GEMM, whose packing
  // costs as much as the products when a layer has 64-128 output channels; the stride-2 ones 0.75x (into 28x28,
  // against the GEMM), 0.87x and 0.97x (into 14x14 and 7x7, against pixel-major), ConvNeXt-Tiny's 2x2 stride-2
  // downsampling layers 0.85-0.97x the GEMM's time. Pointwise layers stay on the GEMM.
  // Pixel-major (cpu/conv/pixel_major_conv.h): 1x1 layers with up to 64 output pixels, or up to 196 with at most 512
  // output channels (any count when strided), and 1x1 reductions on any plane (see the end; float32; KxK layers all
  // take the kernels above: the KxK figures below are from before). Measured
  // on ResNet-50's layers, one thread: 7x7 1x1 0.82-0.94x the time, the stride-2 1x1 into 7x7 0.69-0.83x, 14x14
  // 1x1 with 256-512 outputs 0.94-0.96x, stride-2 3x3 into 7x7 0.72-0.75x and into 14x14 0.9-0.93x; two threads
  // 0.82-0.91x. Slower: 14x14 1x1 with 1024 outputs (1.07x: the transposed result is as large as the input),
  // 28x28 1x1 (1.01-1.2x) and 3x3 into 28x28 (1.06x). LITE_CONV_PIXEL_MAJOR=0 turns it off, =N scales the limits.
  // At precision bfloat16 (bf16): the KxK layers with up to 196 output pixels, stride 1 too (ResNet-50's 14x14
  // and 7x7 3x3 layers 0.72 and 0.67x the time of the bf16 implicit im2col, the stride-2 ones 0.74-0.86x: 26.3
  // -> 23.9 ms); its 1x1 layers stay on the bf16 rows-A GEMM (pixel-major 1.06-1.3x slower, with the input read
  // transposed or transposed first).
  bool UsePixelMajor(bool bf16) const {
    static const int64_t scale = [] {
      const char* v = std::getenv("LITE_CONV_PIXEL_MAJOR");
      return v ? std::atoll(v) : int64_t{1};
    }();
    if (sp_.kernel.size() != 2 || depthwise_ || group_ != 1 || UseDirect() || M_ % 32 != 0) return false;
    if (bf16 && kernel_size_ == 1) return false;   // see above: the bf16 rows-A GEMM is faster there
    if (kernel_size_ != 1) return out_spatial_ <= scale * 196;
    // Reductions (at least twice as many input channels as outputs) at any plane size: with A read in place
    // (the NCHW input is the transposed A the GEMM reads directly) nothing is packed per run, and the transposed
    // result is at most half the input (ResNet-50's 256-to-64 56x56 layers 0.81-0.91x the time of the GEMM,
    // which packs the input per run; its 512-to-128 28x28 ones 0.91-0.92x). Expansions stay on the GEMM
    // (1.15-1.46x pixel-major: the transposed result is 4x the input).
    // Strided ones into up to 196 pixels with any output count: their input is sampled once, where the GEMM's
    // packer reads half of every cache line per panel (ResNet-50's 512-to-1024 stride-2 shortcut 0.93x the time).
    const bool strided = std::any_of(sp_.strides.begin(), sp_.strides.end(), [](int64_t v) { return v > 1; });
    return out_spatial_ <= scale * 64 || (out_spatial_ <= scale * 196 && (M_ <= 512 || strided)) ||
           (scale > 0 && C_ >= 2 * M_);
  }

  bool UsePixelTiles(bool in_blocked) const {
    if (sp_.kernel.size() != 2 || depthwise_ || kernel_size_ == 1 || UseDirect()) return false;
    return !PixelTilesTrail(in_blocked);
  }

  // On Intel cores (measured on a Sapphire Rapids Xeon, one thread) the pixel tiles trail implicit im2col + GEMM (or
  // pixel-major, into up to 196 pixels) on one-row planes (1-D Convs) and on plain NCHW inputs of 256+ channels:
  // Whisper-tiny's 1-D front end 0.59x the time on the GEMM (384 channels at stride 2) and 0.86x (80 channels), 384
  // and 256 NCHW channels into 28x28 at stride 2 0.84x and 0.91x. Each pixel-tile step reads two weight vectors from
  // L2 and broadcasts from as many input lines as the tile has taps; the GEMM's packed panels stream instead. With
  // 64-128 channels on 2-D planes the pixel tiles stay ahead there (0.74-0.82x the GEMM's time), and on a
  // channel-blocked input (eight channels of a pixel on one line) too: ResNet-50 level or slower without them
  // (its blocked activations then stop at the layers that leave). AMD Zen 4 takes the rule too (MobileNetV2 and
  // Whisper-tiny 0.95-0.99x the time, ResNet-50 level: CpuTakesXeonConvRules); Zen 5 keeps the pixel tiles everywhere
  // (measured there: 0.75-0.97x the GEMM's and pixel-major's time). LITE_CONV_PIXEL_TILES=all / intel picks a rule
  // on any CPU.
  static bool IntelConvRules() {
    static const bool intel_rule = [] {
      const char* v = std::getenv("LITE_CONV_PIXEL_TILES");
      if (v && std::strcmp(v, "all") == 0) return false;
      return (v && std::strcmp(v, "intel") == 0) || CpuTakesXeonConvRules();
    }();
    return intel_rule;
  }
  bool PixelTilesTrail(bool in_blocked) const {
    if (!IntelConvRules()) return false;
    const ConvGeometry g = Geometry();
    return (g.H == 1 && g.KH == 1) || (!in_blocked && g.C >= kPixelTilesIntelMaxChannels);
  }

  // The direct kernel (6 channels x 16 pixels): wide rows (96+ outputs) with few taps per output, i.e. the
  // stems (27-147 taps, few input channels), where it beats implicit im2col (ResNet-50, MobileNetV2). On
  // narrower rows its partial pixel vectors cost more; with more taps the other kernels win (Whisper's 1-D
  // front end: 240 taps at stride 1 take 0.75x its time in pixel tiles, 1152 at stride 2 0.65x on the GEMM).
  // Under the Intel rules (PixelTilesTrail) the pixel tiles take the stems: on a Sapphire Rapids Xeon ResNet-50's
  // 7x7 stride-2 stem ran 0.89-0.92x the direct kernel's time there at one and two threads (MobileNetV2's 3x3 level).
  bool UseDirect() const {
    return sp_.kernel.size() == 2 && !pointwise_ && !depthwise_ && sp_.out[1] >= kDirectMinOutputWidth &&
           (C_ / group_) * kernel_size_ <= kDirectMaxTaps && !IntelConvRules();
  }

  // 2-D convolution with constant weights packs B from the input directly (no column matrix).
  bool Implicit(const KernelIO& io) const {
    return !taps_.empty() && io.in[1]->kind == TensorRec::Kind::kConstant;
  }

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
        if (nd == 2 || nd == 3) {
          // Rows of OW outputs: the input row they read (or zeros), copied where it overlaps; 3-D convolutions
          // (video VAEs) add a depth loop, so they no longer index element by element.
          const size_t r = nd - 2;   // the row / column dims are the last two
          const int64_t D = nd == 3 ? in_dims_[0] : 1, H = in_dims_[r], W = in_dims_[r + 1];
          const int64_t OD = nd == 3 ? sp_.out[0] : 1, OH = sp_.out[r], OW = sp_.out[r + 1];
          // iw = ow * sw + off is inside [0, W) for ow in [lo, hi): no per-element bounds test.
          const int64_t sw = sp_.strides[r + 1], off = kpos[r + 1] * sp_.dilations[r + 1] - sp_.pad_begin[r + 1];
          const int64_t lo = std::min<int64_t>(OW, off >= 0 ? 0 : (-off + sw - 1) / sw);
          const int64_t hi = W - 1 - off < 0 ? lo : std::max(lo, std::min<int64_t>(OW, (W - 1 - off) / sw + 1));
          for (int64_t od = 0; od < OD; ++od) {
            const int64_t id = nd == 3 ? od * sp_.strides[0] - sp_.pad_begin[0] + kpos[0] * sp_.dilations[0] : 0;
            for (int64_t oh = 0; oh < OH; ++oh) {
              const int64_t ih = oh * sp_.strides[r] - sp_.pad_begin[r] + kpos[r] * sp_.dilations[r];
              float* drow = dst + (od * OH + oh) * OW;
              if (id < 0 || id >= D || ih < 0 || ih >= H) {
                std::fill(drow, drow + OW, 0.f);
                continue;
              }
              const float* xrow = xc + (id * H + ih) * W;
              std::fill(drow, drow + lo, 0.f);
              if (sw == 1) {
                std::memcpy(drow + lo, xrow + lo + off, (hi - lo) * sizeof(float));
              } else {
                for (int64_t ow = lo; ow < hi; ++ow) drow[ow] = xrow[ow * sw + off];
              }
              std::fill(drow + hi, drow + OW, 0.f);
            }
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

  DepthwiseShape DwShape() const {
    DepthwiseShape s;
    s.H = in_dims_[0];
    s.W = in_dims_[1];
    s.OH = sp_.out[0];
    s.OW = sp_.out[1];
    s.KH = sp_.kernel[0];
    s.KW = sp_.kernel[1];
    s.SH = sp_.strides[0];
    s.SW = sp_.strides[1];
    s.DH = sp_.dilations[0];
    s.DW = sp_.dilations[1];
    s.pad_top = sp_.pad_begin[0];
    s.pad_left = sp_.pad_begin[1];
    return s;
  }

  // A strided 1x1 Conv on a blocked input: the sampled pixels copied into dst ([N][C/8][OH*OW][8]) for the
  // blocked pointwise kernel (a quarter of the input at stride 2, read once; the GEMM's packer read half of every
  // line per panel).
  const float* SampleBlocked(const float* x, float* dst, const KernelContext& ctx) const {
    constexpr int64_t B = kChannelBlock;
    const int64_t H = in_dims_[0], W = in_dims_[1], OH = sp_.out[0], OW = sp_.out[1];
    const int64_t SH = sp_.strides[0], SW = sp_.strides[1], blocks = N_ * C_ / B;
    ctx.pool->ParallelFor(blocks * OH, 4, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const int64_t blk = t / OH, oh = t % OH;
        const float* src = x + (blk * H + oh * SH) * W * B;
        float* out = dst + (blk * OH + oh) * OW * B;
        for (int64_t ow = 0; ow < OW; ++ow) std::memcpy(out + ow * B, src + ow * SW * B, B * sizeof(float));
      }
    });
    return dst;
  }

  // Whether a depthwise Conv runs the channel-block kernel (cpu/depthwise/depthwise_channels.h) rather than the plane one.
  bool ChannelBlocks() const {
    return in_blocked_ || out_blocked_ || (M_ == C_ && PreferDepthwiseChannelBlocks(DwShape()));
  }

  // Blocked depthwise Convs with packed filters, blocks in and out, on planes the small-plane kernel takes.
  bool UseDepthwiseSmallPlanes() const {
    return dw_filters_.taps && in_blocked_ && out_blocked_ && M_ == C_ && DepthwiseSmallPlanesSupported(DwShape(), C_);
  }

  void Depthwise(const float* x, const float* w, const float* bias, float* y, GemmEpilogue ep,
                 const KernelContext& ctx) const {
    const DepthwiseShape s = DwShape();
    if (!ChannelBlocks()) return DepthwiseConv2D(s, N_, C_, M_ / C_, x, w, bias, y, ep.act, ctx.pool);
    if (UseDepthwiseSmallPlanes())
      return DepthwiseSmallPlanes(s, N_, C_, x, dw_filters_.single.data(), bias, y, ep.act, ctx.pool);
    if (dw_filters_.taps)
      return DepthwiseChannelBlocks(s, N_, C_, x, dw_filters_, bias, y, ep.act, ctx.pool, in_blocked_, out_blocked_);
    DepthwiseChannelBlocks(s, N_, C_, x, PackDepthwiseBlockFilters(C_, kernel_size_, w), bias, y, ep.act, ctx.pool,
                           in_blocked_, out_blocked_);   // weights computed at run time
  }

  SpatialParams sp_;
  bool in_blocked_ = false, out_blocked_ = false;   // channel-blocked input / output, fixed at Prepare
  bool subsampled_pointwise_ = false;   // 1x1, unpadded, strided: on a blocked input, the blocked pointwise kernel
  std::shared_ptr<const BlockedPointwiseConv> blocked_pointwise_;   // pointwise with a channel-blocked input
  DepthwiseBlockFilters dw_filters_;   // constant depthwise filters for the channel-block kernel
  std::vector<int64_t> in_dims_;
  int64_t group_ = 1, N_ = 0, C_ = 0, M_ = 0, in_spatial_ = 0, out_spatial_ = 0, kernel_size_ = 0;
  bool pointwise_ = false, depthwise_ = false;
  std::vector<Im2ColPacker::Tap> taps_;
  std::vector<std::shared_ptr<const GroupConvolution>> direct_;   // per group, when UsePixelTiles() or UseDirect()
  std::string direct_kind_;   // which kernel direct_ holds (Implementation)
  std::vector<std::shared_ptr<const std::vector<float>>> packed_w_;   // per group, when the weights are constant
  std::shared_ptr<const Bf16WinogradConv> bf16_winograd_;   // precision bfloat16, 3x3 between bf16 rows: in its place
  std::shared_ptr<const OneDnnConv> onednn_;          // precision bfloat16 on AMX with oneDNN loaded: before bf16_pixel_
  std::shared_ptr<const Bf16PixelConv> bf16_pixel_;   // precision bfloat16: in place of all the others
  std::shared_ptr<const Bf16RowsDepthwise> dw_rows_;   // precision bfloat16, depthwise between bf16 rows
  std::vector<std::shared_ptr<const Bf16RowsA>> bf16_w_;             // per group, in place of all the above at precision bfloat16
};

}  // namespace

namespace {
std::unique_ptr<Kernel> MakeConv(const NodeRec& n) {
  return IsIntegerCompute(n) ? MakeIntegerConvKernel(n) : MakeKernel<ConvKernel>(n);
}
}  // namespace

void RegisterConvKernels(KernelRegistry& r) {
  r.Register(OpType::Conv, DataType::kFloat32, MakeConv);
  r.Register(OpType::Conv, DataType::kUInt8, MakeConv);   // quantised activations (format 1.11): integer Convs only
}

}  // namespace lite

namespace lite {
namespace {

// ConvTranspose as GEMM + col2im: col[(M/g)*K, HW] = W_g^T x X_g, then each column entry is added
// into the output position it maps to. Bias is added last.
class ConvTransposeKernel : public Kernel {
 public:
  using Kernel::Kernel;

  void Infer(KernelIO& io) override {
    const auto* a = node_.fb->attr_as_ConvTransposeAttr();
    TensorRec& x = In(io, 0);
    TensorRec& w = In(io, 1);
    Require(x.dtype == DataType::kFloat32 && w.dtype == DataType::kFloat32, "only float32 is supported");
    Require(x.shape.size() >= 3 && x.shape.size() <= 5, "input must be 3-D to 5-D, got " + ShapeToString(x.shape));
    Require(w.shape.size() == x.shape.size(), "weight rank differs from input rank");
    const size_t nd = x.shape.size() - 2;
    group_ = a->group();
    N_ = x.shape[0];
    C_ = x.shape[1];
    Require(group_ >= 1 && C_ % group_ == 0 && w.shape[0] == C_, "weight " + ShapeToString(w.shape) +
                                                                     " does not match " + std::to_string(C_) + " input channels");
    M_ = w.shape[1] * group_;
    auto vec = [&](const flatbuffers::Vector<int64_t>* v, int64_t dflt, size_t n) {
      std::vector<int64_t> out(n, dflt);
      if (v && v->size() == n) out.assign(v->begin(), v->end());
      else if (v && v->size() != 0) Fail("attribute has " + std::to_string(v->size()) + " values, expected " + std::to_string(n));
      return out;
    };
    kernel_.assign(w.shape.begin() + 2, w.shape.end());
    if (a->kernel_shape() && a->kernel_shape()->size()) {
      Require(vec(a->kernel_shape(), 1, nd) == kernel_, "kernel_shape disagrees with the weight shape");
    }
    strides_ = vec(a->strides(), 1, nd);
    dilations_ = vec(a->dilations(), 1, nd);
    std::vector<int64_t> pads = vec(a->pads(), 0, 2 * nd);
    std::vector<int64_t> out_pad = vec(a->output_padding(), 0, nd);
    std::vector<int64_t> out_shape;
    if (a->output_shape() && a->output_shape()->size()) {
      out_shape.assign(a->output_shape()->begin(), a->output_shape()->end());
      if (out_shape.size() == nd + 2) out_shape.erase(out_shape.begin(), out_shape.begin() + 2);
      Require(out_shape.size() == nd, "output_shape must give every spatial dim");
    }
    in_dims_.assign(x.shape.begin() + 2, x.shape.end());
    out_dims_.assign(nd, 0);
    pad_begin_.assign(nd, 0);
    const auto ap = a->auto_pad();
    for (size_t i = 0; i < nd; ++i) {
      Require(kernel_[i] >= 1 && strides_[i] >= 1 && dilations_[i] >= 1 && strides_[i] <= (1 << 20) &&
                  dilations_[i] <= (1 << 20) && out_pad[i] >= 0 && pads[i] >= 0 && pads[i + nd] >= 0,
              "invalid kernel, stride, dilation or padding");
      const int64_t eff = (kernel_[i] - 1) * dilations_[i] + 1;
      const int64_t full = strides_[i] * (in_dims_[i] - 1) + out_pad[i] + eff;
      if (!out_shape.empty() || ap == ms_schema::AutoPad::SAME_UPPER || ap == ms_schema::AutoPad::SAME_LOWER) {
        const int64_t target = out_shape.empty() ? in_dims_[i] * strides_[i] : out_shape[i];
        // An output larger than the full result is padded with zeros at the end, never shifted (as ONNX
        // Runtime and the spec's reference do: a negative total padding counts as none).
        const int64_t total = std::max<int64_t>(0, full - target);
        pad_begin_[i] = ap == ms_schema::AutoPad::SAME_UPPER ? total / 2 : total - total / 2;
        out_dims_[i] = target;
      } else {
        if (ap == ms_schema::AutoPad::VALID) pads[i] = pads[i + nd] = 0;
        pad_begin_[i] = pads[i];
        out_dims_[i] = full - pads[i] - pads[i + nd];
      }
      Require(out_dims_[i] >= 0, "output size would be negative");
    }
    if (io.has(2)) Require(io.in[2]->numel() == M_, "bias must hold one value per output channel");
    Shape out = {N_, M_};
    out.insert(out.end(), out_dims_.begin(), out_dims_.end());
    io.out[0]->shape = out;
    io.out[0]->dtype = DataType::kFloat32;
    in_spatial_ = ShapeNumel(in_dims_);
    out_spatial_ = ShapeNumel(out_dims_);
    kernel_size_ = ShapeNumel(kernel_);
  }

  size_t ScratchBytes(const KernelIO&) const override {
    return static_cast<size_t>((M_ / group_) * kernel_size_ * in_spatial_) * sizeof(float);
  }

  void Run(KernelIO& io, const KernelContext& ctx) override {
    const float* x = io.in[0]->as<float>();
    const float* w = io.in[1]->as<float>();
    const float* bias = io.has(2) ? io.in[2]->as<float>() : nullptr;
    float* y = io.out[0]->as<float>();
    const int64_t cg = C_ / group_, mg = M_ / group_, rows = mg * kernel_size_;
    float* col = static_cast<float*>(ctx.scratch);
    for (int64_t n = 0; n < N_; ++n) {
      for (int64_t g = 0; g < group_; ++g) {
        Sgemm(true, false, rows, in_spatial_, cg, 1.f, w + g * cg * rows, rows, x + (n * C_ + g * cg) * in_spatial_,
              in_spatial_, 0.f, col, in_spatial_, {}, ctx.pool);
        float* yg = y + (n * M_ + g * mg) * out_spatial_;
        ctx.pool->ParallelFor(mg, 1, [&](int64_t mb, int64_t me) {
          for (int64_t m = mb; m < me; ++m) {
            float* ym = yg + m * out_spatial_;
            std::fill(ym, ym + out_spatial_, bias ? bias[g * mg + m] : 0.f);
            for (int64_t k = 0; k < kernel_size_; ++k) Col2Im(col + (m * kernel_size_ + k) * in_spatial_, k, ym);
          }
        });
      }
    }
  }

 private:
  // Adds one kernel tap's column (over all input positions) into the output plane.
  void Col2Im(const float* c, int64_t k, float* ym) const {
    const size_t nd = kernel_.size();
    std::vector<int64_t> kpos(nd), ipos(nd);
    int64_t rem = k;
    for (size_t d = nd; d-- > 0;) {
      kpos[d] = rem % kernel_[d];
      rem /= kernel_[d];
    }
    if (nd == 2) {
      const int64_t H = in_dims_[0], W = in_dims_[1], OH = out_dims_[0], OW = out_dims_[1];
      for (int64_t h = 0; h < H; ++h) {
        const int64_t oh = h * strides_[0] - pad_begin_[0] + kpos[0] * dilations_[0];
        if (oh < 0 || oh >= OH) continue;
        for (int64_t ww = 0; ww < W; ++ww) {
          const int64_t ow = ww * strides_[1] - pad_begin_[1] + kpos[1] * dilations_[1];
          if (ow >= 0 && ow < OW) ym[oh * OW + ow] += c[h * W + ww];
        }
      }
      return;
    }
    for (int64_t p = 0; p < in_spatial_; ++p) {
      int64_t r = p, off = 0, stride = 1;
      bool inside = true;
      for (size_t d = nd; d-- > 0;) {
        ipos[d] = r % in_dims_[d];
        r /= in_dims_[d];
      }
      for (size_t d = nd; d-- > 0;) {
        const int64_t o = ipos[d] * strides_[d] - pad_begin_[d] + kpos[d] * dilations_[d];
        inside &= o >= 0 && o < out_dims_[d];
        off += o * stride;
        stride *= out_dims_[d];
      }
      if (inside) ym[off] += c[p];
    }
  }

  std::vector<int64_t> kernel_, strides_, dilations_, pad_begin_, in_dims_, out_dims_;
  int64_t group_ = 1, N_ = 0, C_ = 0, M_ = 0, in_spatial_ = 0, out_spatial_ = 0, kernel_size_ = 0;
};

}  // namespace

void RegisterConvTransposeKernels(KernelRegistry& r) {
  r.Register(ms_schema::OpType::ConvTranspose, DataType::kFloat32, MakeKernel<ConvTransposeKernel>);
}

}  // namespace lite
