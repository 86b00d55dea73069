// MatMul, Gemm and Conv in 8-bit integer arithmetic (format 1.8, Node.int8): the weight's int8 codes are packed
// once, the float input is quantised to uint8 each run (fixed scale and zero point, or its own range when
// dynamic), and cpu/quantized/qgemm multiplies and dequantises, with bias, residual and activation fused.
#include "kernels/integer_compute.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include "core/channel_blocked_layout.h"
#include "cpu/isa_dispatch.h"
#include "cpu/onednn/onednn_conv.h"
#include "cpu/quantized/qconv_direct.h"
#include "cpu/quantized/qgemm.h"
#include "cpu/quantized/u8_depthwise.h"
#include "cpu/quantized/u8_pixel_conv.h"
#include "kernels/common.h"
#include "kernels/spatial.h"

#ifdef LITE_X86_SIMD
#include <immintrin.h>
#endif

namespace lite {

EpilogueAct EpilogueFromSchema(ms_schema::Activation a);

namespace {

// A channel-blocked float input ([C/8][P][8]) as the NCHW plane of codes the integer Convs read: each block's P x 8
// values quantised as one contiguous run (QuantizeRowsU8: the same rounding and saturation), then its [P][8] codes
// transposed into 8 channel lines, 8 pixels at a time by byte unpacks.
#ifdef LITE_X86_SIMD
__attribute__((target("avx2"))) void PixelCodesToLines(const uint8_t* codes, int64_t P, uint8_t* lines) {
  int64_t p = 0;
  for (; p + 8 <= P; p += 8) {
    const __m128i* at = reinterpret_cast<const __m128i*>(codes + p * 8);
    const __m128i a0 = _mm_loadu_si128(at), a1 = _mm_loadu_si128(at + 1);   // pixels (0, 1), (2, 3)
    const __m128i a2 = _mm_loadu_si128(at + 2), a3 = _mm_loadu_si128(at + 3);   // (4, 5), (6, 7)
    const __m128i b0 = _mm_unpacklo_epi8(a0, a1), b1 = _mm_unpackhi_epi8(a0, a1);   // pixels 0 / 2, 1 / 3
    const __m128i b2 = _mm_unpacklo_epi8(a2, a3), b3 = _mm_unpackhi_epi8(a2, a3);   // 4 / 6, 5 / 7
    const __m128i c0 = _mm_unpacklo_epi8(b0, b1), c1 = _mm_unpackhi_epi8(b0, b1);   // channels 0-3, 4-7 of pixels 0-3
    const __m128i c2 = _mm_unpacklo_epi8(b2, b3), c3 = _mm_unpackhi_epi8(b2, b3);   // ... of pixels 4-7
    const __m128i d[4] = {_mm_unpacklo_epi32(c0, c2), _mm_unpackhi_epi32(c0, c2), _mm_unpacklo_epi32(c1, c3),
                          _mm_unpackhi_epi32(c1, c3)};   // channels (0, 1), (2, 3), (4, 5), (6, 7): 8 pixels each
    for (int k = 0; k < 4; ++k) {
      _mm_storel_epi64(reinterpret_cast<__m128i*>(lines + (2 * k) * P + p), d[k]);
      _mm_storel_epi64(reinterpret_cast<__m128i*>(lines + (2 * k + 1) * P + p), _mm_srli_si128(d[k], 8));
    }
  }
  for (; p < P; ++p)
    for (int k = 0; k < 8; ++k) lines[k * P + p] = codes[p * 8 + k];
}
#else
void PixelCodesToLines(const uint8_t* codes, int64_t P, uint8_t* lines) {
  for (int64_t p = 0; p < P; ++p)
    for (int k = 0; k < 8; ++k) lines[k * P + p] = codes[p * 8 + k];
}
#endif

void QuantizeBlockedToPlane(const float* x, int64_t C, int64_t P, ActQuant q, uint8_t* plane, ThreadPool* pool) {
  pool->ParallelFor(C / 8, 1, [&](int64_t b0, int64_t b1) {
    thread_local std::vector<uint8_t> codes;
    if (codes.size() < static_cast<size_t>(P * 8)) codes.resize(static_cast<size_t>(P * 8));
    for (int64_t b = b0; b < b1; ++b) {
      QuantizeRowsU8(x + b * P * 8, 1, P * 8, P * 8, q, codes.data(), P * 8, nullptr);
      PixelCodesToLines(codes.data(), P, plane + b * 8 * P);
    }
  });
}


// Scratch is carved in 64-byte aligned pieces.
size_t Align64(size_t n) { return (n + 63) / 64 * 64; }

class IntegerKernelBase : public Kernel {
 public:
  using Kernel::Kernel;
  // The weight's codes are read as codes: its float32 copy is never needed.
  bool NeedsDecodedInput(size_t i, const TensorRec&) const override { return i != 1; }

 protected:
  // Packs the weight (input 1) from its INT8 record, code(o, k) = codes[o * so + k * sk]: 8- or 4-bit codes with a
  // scale per output channel (quant axis = channel_axis), or, for MatMul/Gemm, 4- or 8-bit codes with a scale per
  // block of group_size values along the reduction axis (ONNX's blocked layout).
  // The packing lives on the weight (SharedPacked): one copy for every plan and every model sharing the weights.
  void PackWeight(TensorRec& w, int64_t outputs, int64_t depth, int64_t so, int64_t sk, int channel_axis, bool as_b) {
    if (weights_) return;
    const std::string key = std::string("qweights:") + (as_b ? "b:" : "a:") + std::to_string(outputs) + "," +
                            std::to_string(depth) + "," + std::to_string(so) + "," + std::to_string(sk) + "," +
                            std::to_string(channel_axis);
    weights_ = SharedPacked<QWeights>(w, key, [&] {
      const WeightCodes wc = ReadWeightCodes(w, outputs, depth, channel_axis, as_b);
      try {
        return PackQWeights(wc.codes, outputs, depth, so, sk, wc.scales.data(), as_b, wc.group_size);
      } catch (const std::invalid_argument& e) {
        Fail(std::string("weight '") + w.name + "': " + e.what());
      }
    });
    weights_key_ = key;
    ReleaseMappedPages(w);
  }

  // A weight's codes as stored (4-bit ones unpacked into `unpacked`) and its scales, block-major.
  struct WeightCodes {
    const int8_t* codes = nullptr;
    std::vector<int8_t> unpacked;
    std::vector<float> scales;
    int64_t group_size = 0;
  };
  WeightCodes ReadWeightCodes(TensorRec& w, int64_t outputs, int64_t depth, int channel_axis, bool as_b) const {
    Require(w.kind == TensorRec::Kind::kConstant && w.decoded != nullptr &&
                w.decoded->record.storage == ms_schema::DataType::INT8,
            "integer compute needs the weight '" + w.name + "' stored as INT8 codes");
    const StoredWeight& rec = w.decoded->record;
    const ms_schema::QuantParam* q = rec.quant;
    const int reduce_axis = 1 - channel_axis;   // 2-D weights; Conv's are never blocked
    const bool blocked = q != nullptr && q->group_size() > 0;
    const int64_t blocks = blocked ? (depth + q->group_size() - 1) / q->group_size() : 1;
    Require(q != nullptr && (q->bits() == 8 || q->bits() == 4) && q->scale() &&
                q->axis() == (blocked ? reduce_axis : channel_axis) &&
                static_cast<int64_t>(q->scale()->size()) == blocks * outputs && (!blocked || as_b),
            "integer compute needs 8- or 4-bit codes with one scale per output channel (axis " +
                std::to_string(channel_axis) + "), or MatMul/Gemm codes in blocks along the reduction axis, on weight '" +
                w.name + "'");
    if (q->zero_point())
      for (int64_t z : *q->zero_point()) Require(z == 0, "integer compute needs symmetric weight codes (zero point 0)");
    WeightCodes out;
    out.codes = reinterpret_cast<const int8_t*>(rec.bytes);
    std::vector<int8_t>& unpacked = out.unpacked;
    if (q->bits() == 4) {   // two signed codes per byte, the even element in the low nibble
      const size_t n = static_cast<size_t>(outputs * depth);
      unpacked.resize(n + 1);
      for (size_t i = 0; i < (n + 1) / 2; ++i) {   // sign-extend each nibble by shifting it to the top and back
        const int8_t byte = static_cast<int8_t>(rec.bytes[i]);
        unpacked[2 * i] = static_cast<int8_t>(static_cast<int8_t>(byte << 4) >> 4);
        unpacked[2 * i + 1] = static_cast<int8_t>(byte >> 4);
      }
      out.codes = unpacked.data();
    }
    // Scales block-major ([block][output]); the file lays them out as the weight with its blocked axis shortened.
    std::vector<float>& scales = out.scales;
    scales.assign(q->scale()->begin(), q->scale()->end());
    if (blocked && reduce_axis == 1)   // a [N, K] weight: scale[o][b]
      for (int64_t o = 0; o < outputs; ++o)
        for (int64_t b = 0; b < blocks; ++b) scales[b * outputs + o] = q->scale()->Get(o * blocks + b);
    out.group_size = blocked ? q->group_size() : 0;
    return out;
  }

  // The input's quantisation for this run.
  ActQuant InputQuant(const float* x, int64_t n, ThreadPool* pool) const {
    const auto* ic = node_.fb->int8();
    if (!ic->dynamic()) {
      ActQuant q;
      q.scale = ic->input_scale();
      q.zero_point = ic->input_zero_point();
      return q;
    }
    float lo = 0.f, hi = 0.f;
    if (n > 0) MinMax(x, n, &lo, &hi, pool);
    return ChooseActQuant(lo, hi);
  }

  void CheckStaticQuant() const {
    const auto* ic = node_.fb->int8();
    if (ic->dynamic()) return;
    Require(ic->input_scale() > 0.f && std::isfinite(ic->input_scale()) && ic->input_zero_point() >= 0 &&
                ic->input_zero_point() <= 255,
            "integer compute needs input_scale > 0 and input_zero_point in [0, 255], got " +
                std::to_string(ic->input_scale()) + " and " + std::to_string(ic->input_zero_point()));
  }

  std::shared_ptr<const QWeights> weights_;
  std::string weights_key_;   // its packing's key (a reordering of it keys on from there)
};

// MatMul (A[..., M, K] x W[K, N]) and Gemm (A[M, K] x W or W^T, alpha = beta = 1) with a constant weight.
class IntegerLinearKernel : public IntegerKernelBase {
 public:
  using IntegerKernelBase::IntegerKernelBase;

  void Infer(KernelIO& io) override {
    CheckStaticQuant();
    TensorRec& a = In(io, 0);
    TensorRec& w = In(io, 1);
    Require(a.dtype == DataType::kFloat32, "only float32 inputs are supported");
    Require(w.shape.size() == 2, "integer compute needs a 2-D weight, got " + ShapeToString(w.shape));
    trans_w_ = false;
    ms_schema::Activation act = ms_schema::Activation::NONE;
    if (node_.op == ms_schema::OpType::Gemm) {
      const auto* attr = node_.fb->attr_as_GemmAttr();
      Require(!attr->trans_a() && attr->alpha() == 1.f && (attr->beta() == 1.f || !io.has(2)),
              "integer Gemm needs trans_a = 0, alpha = 1 and beta = 1");
      Require(a.shape.size() == 2, "Gemm's A must be 2-D, got " + ShapeToString(a.shape));
      trans_w_ = attr->trans_b();
      act = attr->activation();
    } else {
      Require(a.shape.size() >= 2, "integer MatMul needs A of rank >= 2, got " + ShapeToString(a.shape));
      act = node_.fb->attr_as_MatMulAttr() ? node_.fb->attr_as_MatMulAttr()->activation() : act;
    }
    act_ = EpilogueFromSchema(act);
    K_ = a.shape.back();
    N_ = trans_w_ ? w.shape[0] : w.shape[1];
    Require((trans_w_ ? w.shape[1] : w.shape[0]) == K_,
            "inner dims differ: " + ShapeToString(a.shape) + " x " + ShapeToString(w.shape));
    Require(K_ <= (1 << 17), "integer compute sums at most 131072 products per output");
    rows_ = ShapeNumel(a.shape) / std::max<int64_t>(1, K_);
    Shape out = a.shape;
    out.back() = N_;
    if (io.has(2))
      Require(io.in[2]->dtype == DataType::kFloat32 && io.in[2]->numel() == N_,
              "bias must hold N = " + std::to_string(N_) + " floats, got " + ShapeToString(io.in[2]->shape));
    product_shape_ = out;
    addend_in_tile_ = false;
    if (io.has(3)) {   // an addend (a fused residual Add, with Add's broadcasting)
      const TensorRec& r = *io.in[3];
      Require(r.dtype == DataType::kFloat32, "the addend (input 3) must be float32");
      Shape sum;
      Require(BroadcastShapes({&out, &r.shape}, sum),
              "addend " + ShapeToString(r.shape) + " does not broadcast with the product " + ShapeToString(out));
      addend_in_tile_ = r.shape == out;
      out = sum;
    }
    if (io.has(4))   // MatMul's multiplier (a gated linear unit), applied after the activation
      Require(io.in[4]->dtype == DataType::kFloat32 && io.in[4]->shape == out && out == product_shape_,
              "the multiplier (input 4) " + ShapeToString(io.in[4]->shape) + " must be float32 of the product's shape " +
                  ShapeToString(product_shape_));
    io.out[0]->shape = out;
    io.out[0]->dtype = DataType::kFloat32;
  }

  // The uint8 rows of A, then (for an addend that broadcasts into a larger output) the product.
  size_t ScratchBytes(const KernelIO& io) const override {
    const bool separate = io.has(3) && !addend_in_tile_ && product_shape_ != io.out[0]->shape;
    return Align64(rows_ * QDepth4(K_)) + (separate ? ShapeNumel(product_shape_) * sizeof(float) : 0);
  }

  void Prepare(KernelIO& io) override {
    // W[K, N] holds output n's codes down column n; W^T[N, K] along row n.
    const int64_t so = trans_w_ ? K_ : 1, sk = trans_w_ ? 1 : N_;
    PackWeight(*io.in[1], N_, K_, so, sk, trans_w_ ? 0 : 1, true);
  }

  std::string Implementation() const override { return ran_; }

  void Run(KernelIO& io, const KernelContext& ctx) override {
    const float* a = io.in[0]->as<float>();
    const ActQuant aq = InputQuant(a, rows_ * K_, ctx.pool);
    uint8_t* qa = static_cast<uint8_t*>(ctx.scratch);
    const int64_t lda = QDepth4(K_);
    QuantizeRowsU8(a, rows_, K_, K_, aq, qa, lda, ctx.pool);
    const float* bias = io.has(2) ? io.in[2]->as<float>() : nullptr;
    float* y = io.out[0]->as<float>();
    GemmEpilogue ep;
    ep.act = act_;
    if (io.has(4)) ep.multiplier = io.in[4]->as<float>(), ep.ld_multiplier = N_;
    if (!io.has(3) || addend_in_tile_) {
      if (io.has(3)) ep.residual = io.in[3]->as<float>(), ep.ld_residual = N_;
      ran_ = QgemmActByWeightsName(*weights_, ep);
      QgemmActByWeights(rows_, qa, lda, aq, *weights_, bias, y, N_, ep, ctx.pool);
      return;
    }
    // An addend that broadcasts: the product, then the broadcast sum, then the activation.
    const Shape& out = io.out[0]->shape;
    float* product = product_shape_ == out ? y : reinterpret_cast<float*>(qa + Align64(rows_ * lda));
    ran_ = QgemmActByWeightsName(*weights_, GemmEpilogue{});
    QgemmActByWeights(rows_, qa, lda, aq, *weights_, bias, product, N_, GemmEpilogue{}, ctx.pool);
    const float* r = io.in[3]->as<float>();
    const BroadcastPlan plan = MakeBroadcastPlan(out, {&product_shape_, &io.in[3]->shape});
    ForEachRow(plan, 0, plan.rows, [&](int64_t o, const int64_t* off, const int64_t* st, int64_t n) {
      for (int64_t k = 0; k < n; ++k) y[o + k] = product[off[0] + k * st[0]] + r[off[1] + k * st[1]];
    });
    GemmEpilogue act_only;
    act_only.act = act_;
    if (act_ != EpilogueAct::kNone) ApplyEpilogue(y, 0, 0, 1, 0, ShapeNumel(out), act_only);
  }

 private:
  const char* ran_ = "";   // the product the last Run took (Implementation)
  bool trans_w_ = false, addend_in_tile_ = false;
  EpilogueAct act_ = EpilogueAct::kNone;
  Shape product_shape_;
  int64_t K_ = 0, N_ = 0, rows_ = 0;
};

// 1-D and 2-D Conv with group 1: the input quantised once per image, im2col'd into uint8 panels.
class IntegerConvKernel : public IntegerKernelBase {
 public:
  using IntegerKernelBase::IntegerKernelBase;

  void Infer(KernelIO& io) override {
    CheckStaticQuant();
    const auto* attr = node_.fb->attr_as_ConvAttr();
    TensorRec& x = In(io, 0);
    TensorRec& w = In(io, 1);
    Require(x.dtype == DataType::kFloat32 || (x.dtype == DataType::kUInt8 && x.act_scale > 0.f),
            "integer Conv takes float32 or quantised uint8 input, got " + std::string(DataTypeName(x.dtype)) +
                (x.dtype == DataType::kUInt8 ? " without a scale" : ""));
    Require((x.shape.size() == 3 || x.shape.size() == 4) && w.shape.size() == x.shape.size(),
            "integer Conv is 1-D or 2-D, got input " + ShapeToString(x.shape) + " and weight " + ShapeToString(w.shape));
    batch_ = x.shape[0], C_ = x.shape[1], M_ = w.shape[0];
    // One group, or depthwise (FULL_QUANT MobileNets: one filter per channel, uint8 codes in and out).
    depthwise_ = attr->group() > 1 && attr->group() == C_ && M_ == C_ && w.shape.size() == 4 && w.shape[1] == 1;
    Require(attr->group() == 1 || depthwise_, "integer Conv needs group = 1 or a depthwise weight [C, 1, kh, kw], got "
                                              "group " + std::to_string(attr->group()) + " and weight " +
                                              ShapeToString(w.shape));
    Require(depthwise_ || w.shape[1] == C_, "weight " + ShapeToString(w.shape) + " does not match " +
                                                std::to_string(C_) + " input channels");
    Require(!depthwise_ || !io.has(3), "an integer depthwise Conv takes no residual input");
    std::vector<int64_t> in_dims(x.shape.begin() + 2, x.shape.end());
    std::vector<int64_t> kernel(w.shape.begin() + 2, w.shape.end());
    std::string err = ResolveSpatial(in_dims, kernel, attr->strides(), attr->pads(), attr->dilations(),
                                     attr->auto_pad(), false, sp_);
    Require(err.empty(), err);
    Shape out = {batch_, M_};
    out.insert(out.end(), sp_.out.begin(), sp_.out.end());
    if (sp_.kernel.size() == 1) {   // as 2-D of height 1
      for (auto* v : {&sp_.kernel, &sp_.strides, &sp_.dilations, &sp_.out}) v->insert(v->begin(), 1);
      for (auto* v : {&sp_.pad_begin, &sp_.pad_end}) v->insert(v->begin(), 0);
      in_dims.insert(in_dims.begin(), 1);
    }
    H_ = in_dims[0], W_ = in_dims[1];
    OH_ = sp_.out[0], OW_ = sp_.out[1];
    K_ = (depthwise_ ? 1 : C_) * sp_.kernel[0] * sp_.kernel[1];
    Require(K_ <= (1 << 17), "integer compute sums at most 131072 products per output");
    if (io.has(2)) Require(io.in[2]->numel() == M_ && io.in[2]->dtype == DataType::kFloat32, "bias must hold M floats");
    if (io.has(3)) {
      const TensorRec& r = *io.in[3];
      Require(r.shape == out && (r.dtype == DataType::kFloat32 || (r.dtype == DataType::kUInt8 && r.act_scale > 0.f)),
              "residual " + ShapeToString(r.shape) + " " + DataTypeName(r.dtype) + " must be float32 or quantised "
              "uint8 of the output shape " + ShapeToString(out));
    }
    act_ = EpilogueFromSchema(attr->activation());
    // KxK Convs read the input in place from a padded channel-quad copy (no im2col) where VNNI runs.
    // (1x1 layers keep the packed panels: read from 16 contiguous panel groups their tiles ran 1.1-1.2x faster than
    // from the quad planes.)
    direct_ = !depthwise_ && QconvDirectAvailable() && sp_.kernel[0] * sp_.kernel[1] > 1 && sp_.dilations[0] == 1 &&
              sp_.dilations[1] == 1;
    dg_ = QDirectGeometry{C_, H_, W_, sp_.kernel[0], sp_.kernel[1], sp_.pad_begin[0], sp_.pad_begin[1],
                          sp_.pad_end[0], sp_.pad_end[1], sp_.strides[0], sp_.strides[1]};
    Require(!direct_ || (dg_.OH() == OH_ && dg_.OW() == OW_), "direct integer Conv geometry mismatch");
    pointwise_ = sp_.kernel[0] == 1 && sp_.kernel[1] == 1 && sp_.pad_begin[0] == 0 && sp_.pad_begin[1] == 0 &&
                 sp_.pad_end[0] == 0 && sp_.pad_end[1] == 0;
    io.out[0]->shape = out;
    // An output the file declares as quantised uint8 is requantised in the epilogue (format 1.11).
    io.out[0]->dtype = io.out[0]->act_scale > 0.f ? DataType::kUInt8 : DataType::kFloat32;
    pg_ = ConvGeometry{C_, H_, W_, M_, OH_, OW_, sp_.kernel[0], sp_.kernel[1], sp_.strides[0], sp_.strides[1],
                       sp_.dilations[0], sp_.dilations[1], sp_.pad_begin[0], sp_.pad_begin[1]};
    use_pixel_ = !depthwise_ && UsePixelKernel(io);
    if (depthwise_)
      Require(act_ == EpilogueAct::kNone || act_ == EpilogueAct::kRelu || act_ == EpilogueAct::kRelu6,
              "an integer depthwise Conv applies ReLU, ReLU6 or no activation");
  }

  // A constant bias, a uint8 residual (or none) and ReLU / ReLU6 (or none): the pixel-major kernel
  // (cpu/quantized/u8_pixel_conv.h) where the CPU has VNNI, for quantised input, or for a float one (quantised per run into
  // an NCHW plane of codes) when the output is quantised. (Float in and out, as DYNAMIC_QUANT's are, stays on the
  // channel-major kernels: the pixel-major one's float output needs a transposing pass, ResNet-50 DYNAMIC_QUANT
  // 1.02x the time.) LITE_INT8_PIXEL=0 turns it off (comparisons).
  bool UsePixelKernel(const KernelIO& io) const {
    static const bool enabled = [] {
      const char* v = std::getenv("LITE_INT8_PIXEL");
      return !(v && std::strcmp(v, "0") == 0);
    }();
    const TensorRec& x = *io.in[0];
    // Float in and out with a calibrated (static) input scale also: FULL_QUANT Convs between float neighbours
    // (YOLO's, beside Concat / Slice / Resize) quantise their input in one pass and write float (blocked) rows;
    // on the channel-major kernels YOLOv8n's took 2.7x its float32 time.
    const bool static_float = !node_.fb->int8()->dynamic() && io.out[0]->dtype == DataType::kFloat32;
    return enabled && (x.dtype == DataType::kUInt8 || io.out[0]->dtype == DataType::kUInt8 || static_float) &&
           (!io.has(2) || io.in[2]->kind == TensorRec::Kind::kConstant) &&
           (!io.has(3) || io.in[3]->dtype == DataType::kUInt8) &&
           (act_ == EpilogueAct::kNone || act_ == EpilogueAct::kRelu || act_ == EpilogueAct::kRelu6 ||
            act_ == EpilogueAct::kSilu) &&
           U8PixelConv::Supports(pg_);
  }

  // A float32 output of the pixel-major kernel may be channel-blocked (NCHW8c): its tiles store each pixel's 8-channel
  // runs in place. As float rows transposed into NCHW, int8 ResNet-50's last Conv (49 pixels x 2048 channels, read by
  // the global pool) took 0.165 ms, 0.097 for the same Conv into uint8 rows. Nothing else of this kernel is blocked.
  // A float32 input may be channel-blocked too (a pixel-major kernel's, not a stem's): it is quantised into the NCHW
  // plane of codes the kernel reads in any case (QuantizeBlockedToPlane), so float32 neighbours between integer Convs
  // (YOLOv10's SiLU depthwise layers) keep their blocked kernels.
  bool AcceptsLayouts(const KernelIO& io) const override {
    if (!AnyTensorMarked(io, &TensorRec::channel_blocked)) return true;
    const TensorRec& x = *io.in[0];
    const TensorRec& y = *io.out[0];
    if (!use_pixel_ || depthwise_) return false;
    if (y.channel_blocked && (y.dtype != DataType::kFloat32 || pg_.M % kChannelBlock != 0)) return false;
    if (x.channel_blocked && (x.dtype != DataType::kFloat32 || pg_.C % kChannelBlock != 0 || pg_.C <= 4)) return false;
    for (size_t i = 1; i < io.in.size(); ++i)
      if (io.in[i] && io.in[i]->channel_blocked) return false;
    return true;
  }

  // uint8 rows (core/u8_pixel_layout.h) in, out and as the residual, in any combination, on the pixel-major kernel.
  bool AcceptsU8Pixels(const KernelIO& io) const override {
    if (!AnyTensorMarked(io, &TensorRec::u8_pixels)) return true;
    // A stem's pixel-major kernel (1-3 channels) reads NCHW codes only: it makes its own padded copy.
    if (use_pixel_ && pg_.C % 4 != 0 && io.in[0]->u8_pixels) return false;
    return (use_pixel_ || depthwise_) && !io.in[1]->u8_pixels && !(io.has(2) && io.in[2]->u8_pixels);
  }

  // The pixel-major kernel loads a tile's uint8 residual before it stores the tile's codes over the same elements:
  // with both as uint8 rows the output can take the residual's buffer (Kernel::InPlaceInput).
  int InPlaceInput(const KernelIO& io) const override {
    if ((!pixel_ && !onednn_) || !io.has(3) || io.in[3] == io.in[0] || OutKind(io) != U8PixelOut::kRows) return -1;
    const TensorRec& r = *io.in[3];
    return r.dtype == DataType::kUInt8 && r.u8_pixels && r.nbytes >= io.out[0]->nbytes ? 3 : -1;
  }

  size_t ScratchBytes(const KernelIO& io) const override {   // a float input's quantised plane, then the panels
    if (dw_)
      return (io.in[0]->dtype == DataType::kUInt8 ? 0 : Align64(C_ * H_ * W_)) + dw_->ScratchBytes(InStorage(io), OutKind(io));
    if (onednn_) return onednn_->ScratchBytes();
    if (pixel_)   // a float input's quantised NCHW plane first
      return (io.in[0]->dtype == DataType::kUInt8 ? 0 : Align64(C_ * H_ * W_)) +
             pixel_->ScratchBytes(InStorage(io), io.has(3) && !io.in[3]->u8_pixels, OutKind(io));
    return (io.in[0]->dtype == DataType::kUInt8 ? 0 : Align64(C_ * H_ * W_)) +
           Align64(direct_ ? dg_.quad_bytes() : QPanelBytes(K_, OH_ * OW_));
  }

  void Prepare(KernelIO& io) override {
    if (depthwise_) {
      if (!dw_) {
        TensorRec& w = *io.in[1];
        const WeightCodes wc = ReadWeightCodes(w, M_, K_, 0, false);
        dw_ = std::make_unique<U8DepthwiseConv>(pg_, wc.codes, wc.scales.data());
        ReleaseMappedPages(w);
      }
      bias_ = io.has(2) ? io.in[2]->as<float>() : nullptr;
      bound_ = io.in[0]->dtype == DataType::kUInt8 ? ActQuant{io.in[0]->act_scale, io.in[0]->act_zero_point}
                                                   : InputQuant(nullptr, 0, nullptr);
      dw_->Bind(bound_, bias_);
      return;
    }
    if (use_pixel_) {
      if (UseOneDnn(io) && !onednn_) {   // nullptr where oneDNN offers no AMX kernel: lite's below
        TensorRec& w = *io.in[1];
        const WeightCodes wc = CheckedWeightCodes(w);
        const TensorRec &x = *io.in[0], &y = *io.out[0];
        OneDnnConv::Options o;
        o.int8 = true;
        o.bias = io.has(2);
        o.residual = io.has(3);
        o.act = act_;
        o.parts = io.pool ? io.pool->size() : 1;
        o.in = {x.act_scale, x.act_zero_point};
        o.out = {y.act_scale, y.act_zero_point};
        if (o.residual) o.res = {io.in[3]->act_scale, io.in[3]->act_zero_point};
        std::string key = "onednn_u8_conv";   // shared on the weight by plans of the same geometry and quantisation
        for (int64_t v : {pg_.C, pg_.H, pg_.W, pg_.M, pg_.OH, pg_.OW, pg_.KH, pg_.KW, pg_.SH, pg_.SW, pg_.DH, pg_.DW,
                          pg_.pad_top, pg_.pad_left, int64_t{o.bias}, int64_t{o.residual},
                          static_cast<int64_t>(o.act), int64_t{o.parts}})
          key += "," + std::to_string(v);
        for (const OneDnnConv::Quant& q : {o.in, o.out, o.res})
          key += ":" + std::to_string(q.scale) + "/" + std::to_string(q.zero_point);
        onednn_ = SharedObject<OneDnnConv>(w, key, [&] {
          return OneDnnConv::Create(pg_, wc.codes, wc.scales.data(), o, nullptr);
        });
        if (onednn_) ReleaseMappedPages(w);
      }
      if (onednn_) {
        bias_ = io.has(2) ? io.in[2]->as<float>() : nullptr;
        onednn_bias_ = onednn_->RunBias(bias_);
        return;
      }
      if (!pixel_) {
        TensorRec& w = *io.in[1];
        const WeightCodes wc = CheckedWeightCodes(w);
        std::string key = "u8_pixel_conv";   // shared on the weight: by every plan of this geometry and every worker
        for (int64_t v : {pg_.C, pg_.H, pg_.W, pg_.M, pg_.OH, pg_.OW, pg_.KH, pg_.KW, pg_.SH, pg_.SW, pg_.DH, pg_.DW,
                          pg_.pad_top, pg_.pad_left})
          key += "," + std::to_string(v);
        pixel_ = SharedObject<U8PixelConv>(w, key, [&] {
          return std::make_shared<const U8PixelConv>(pg_, wc.codes, wc.scales.data());
        });
        ReleaseMappedPages(w);
      }
      bias_ = io.has(2) ? io.in[2]->as<float>() : nullptr;
      bound_ = io.in[0]->dtype == DataType::kUInt8 ? ActQuant{io.in[0]->act_scale, io.in[0]->act_zero_point}
                                                   : InputQuant(nullptr, 0, nullptr);   // the fixed one, if any
      out_quant_ = ActQuant{io.out[0]->act_scale, io.out[0]->act_zero_point};
      has_res_ = io.has(3);
      if (has_res_) res_quant_ = ActQuant{io.in[3]->act_scale, io.in[3]->act_zero_point};
      codes_out_ = io.out[0]->dtype == DataType::kUInt8;
      pixel_bound_ = BindPixel(bound_);
      return;
    }
    PackWeight(*io.in[1], M_, K_, K_, 1, 0, false);
    if (direct_ && !tap_major_) {
      std::string key = weights_key_ + ":tap_major";
      for (int64_t v : {dg_.C, dg_.H, dg_.W, dg_.KH, dg_.KW, dg_.pad_top, dg_.pad_left, dg_.pad_bottom, dg_.pad_right,
                        dg_.SH, dg_.SW})
        key += "," + std::to_string(v);
      const std::shared_ptr<const QWeights> plain = weights_;
      weights_ = SharedPacked<QWeights>(*io.in[1], key, [&] { return TapMajorQWeights(*plain, dg_); });
      tap_major_ = true;
    }
  }

  // In Run's order of precedence.
  std::string Implementation() const override {
    if (onednn_) return "onednn:" + onednn_->implementation();
    if (pixel_) return pixel_->amx() ? "u8_pixel_major_amx" : "u8_pixel_major_vnni";
    if (dw_) return "u8_depthwise";
    if (direct_) return "qconv_direct";
    return pointwise_ ? "qgemm" : "qgemm_im2col";
  }

  void Run(KernelIO& io, const KernelContext& ctx) override {
    if (onednn_) return RunOneDnn(io, ctx);
    if (pixel_ || dw_) return RunPixel(io, ctx);
    const int64_t plane = C_ * H_ * W_, pixels = OH_ * OW_;
    uint8_t* scratch_x = static_cast<uint8_t*>(ctx.scratch);
    uint8_t* panels = scratch_x + (io.in[0]->dtype == DataType::kUInt8 ? 0 : Align64(plane));
    const TensorRec& x = *io.in[0];
    TensorRec& y = *io.out[0];
    const TensorRec* r = io.has(3) ? io.in[3] : nullptr;
    const float* bias = io.has(2) ? io.in[2]->as<float>() : nullptr;
    for (int64_t b = 0; b < batch_; ++b) {
      // A quantised input is multiplied as it is; a float one is quantised into the scratch first.
      ActQuant aq{x.act_scale, x.act_zero_point};
      const uint8_t* qx = scratch_x;
      if (x.dtype == DataType::kUInt8) {
        qx = x.as<uint8_t>() + b * plane;
      } else {
        const float* xb = x.as<float>() + b * plane;
        aq = InputQuant(xb, plane, ctx.pool);
        QuantizeRowsU8(xb, C_, H_ * W_, H_ * W_, aq, scratch_x, H_ * W_, ctx.pool);
      }
      if (direct_) {
        PadToChannelQuads(qx, static_cast<uint8_t>(aq.zero_point), dg_, panels, ctx.pool);
      } else if (!pointwise_) {   // a pointwise Conv packs its panels as it multiplies them
        PackPanels(qx, static_cast<uint8_t>(aq.zero_point), panels, ctx.pool);
      }
      GemmEpilogue ep;
      ep.act = act_;
      QuantizedIO q;
      const int64_t at = b * M_ * pixels;
      if (r && r->dtype == DataType::kUInt8) {
        q.residual = r->as<uint8_t>() + at, q.ld_residual = pixels, q.residual_quant = {r->act_scale, r->act_zero_point};
      } else if (r) {
        ep.residual = r->as<float>() + at, ep.ld_residual = pixels;
      }
      float* yf = nullptr;
      if (y.dtype == DataType::kUInt8) {
        q.out = y.as<uint8_t>() + at, q.out_quant = {y.act_scale, y.act_zero_point};
      } else {
        yf = y.as<float>() + at;
      }
      if (direct_) {
        QconvDirect(*weights_, panels, dg_, aq, bias, yf, ep, ctx.pool, q);
      } else if (pointwise_) {
        const uint8_t zp = static_cast<uint8_t>(aq.zero_point);
        QgemmWeightsByActPacking(
            *weights_, pixels, [&](int64_t p0, int64_t p1, uint8_t* dst) { PackPointwisePanels(qx, zp, p0, p1, dst); },
            panels, aq, bias, yf, pixels, ep, ctx.pool, q);
      } else {
        QgemmWeightsByAct(*weights_, pixels, panels, aq, bias, yf, pixels, ep, ctx.pool, q);
      }
    }
  }

 private:
  static U8Storage Storage(const TensorRec& t) { return t.u8_pixels ? U8Storage::kRows : U8Storage::kNchw; }
  static U8Storage InStorage(const KernelIO& io) { return Storage(*io.in[0]); }
  static U8PixelOut OutKind(const KernelIO& io) {
    const TensorRec& y = *io.out[0];
    if (y.dtype != DataType::kUInt8) return y.channel_blocked ? U8PixelOut::kFloatBlocked : U8PixelOut::kFloatNchw;
    return y.u8_pixels ? U8PixelOut::kRows : U8PixelOut::kNchw;
  }
  // The pixel-major kernel's constants for an input quantisation: with a uint8 output, its code-unit tables too.
  U8PixelConv::Bound BindPixel(ActQuant in) const {
    return pixel_->Bind(in, bias_, codes_out_ ? &out_quant_ : nullptr,
                        codes_out_ && has_res_ ? &res_quant_ : nullptr);
  }
  // Bytes per image of a tensor of C channels over HW pixels, as stored.
  static int64_t ImageBytes(const TensorRec& t, int64_t C, int64_t HW) {
    return t.u8_pixels ? static_cast<int64_t>(U8PixelConv::RowsBytes(C, HW)) : C * HW * DataTypeSize(t.dtype);
  }

  // The weight's int8 codes, checked to lie in the range the integer kernels multiply exactly.
  WeightCodes CheckedWeightCodes(TensorRec& w) const {
    WeightCodes wc = ReadWeightCodes(w, M_, K_, 0, false);
    int lo = 0, hi = 0;   // a plain min/max loop: vectorised (std::minmax_element was 40% of ResNet-50's load)
    for (int64_t i = 0; i < M_ * K_; ++i) lo = std::min<int>(lo, wc.codes[i]), hi = std::max<int>(hi, wc.codes[i]);
    Require(lo >= kQWeightMin && hi <= kQWeightMax, "weight '" + w.name + "': a code outside [" +
                                                        std::to_string(kQWeightMin) + ", " +
                                                        std::to_string(kQWeightMax) + "]");
    return wc;
  }

  // On AMX-INT8 CPUs where oneDNN is loaded (cpu/onednn/onednn_library.h), the pixel-major kernel's Convs from uint8
  // rows into uint8 rows, the residual rows or none, run on oneDNN's AMX convolutions (ResNet-50's int8 Convs 7.8 ->
  // 5.3 ms at one thread in benchmarks/results/onednn_xeon.md) where OneDnnConv::Worthwhile. LITE_ONEDNN=0 keeps
  // lite's kernels.
  bool UseOneDnn(const KernelIO& io) const {
    const TensorRec &x = *io.in[0], &y = *io.out[0];
    // Codes as rows in: a stem reading NCHW codes or the float input stays on lite's AMX stem kernel (ResNet-50's:
    // 0.40 ms, on oneDNN 0.45 with the quantisation and the nhwc copy: its kernel for a signed input's zero point is
    // the older JIT one).
    if (!CpuHasAmxInt8() || x.dtype != DataType::kUInt8 || !x.u8_pixels) return false;
    if (act_ == EpilogueAct::kSilu) return false;   // (its post-ops here: ReLU and clip only)
    if (y.dtype != DataType::kUInt8 || !y.u8_pixels || (io.has(3) && !io.in[3]->u8_pixels)) return false;
    if (!OneDnnConv::Worthwhile(pg_, io.pool ? io.pool->size() : 1, true)) return false;
    // A depth of one AMX step (C x taps <= 64 codes) leaves most of the work to the epilogue, where lite's into uint8
    // (CodeEpilogue's packs) takes less than oneDNN 3.2's: ResNet-50's 64 -> 256 1x1 Convs on 56x56 at one thread 0.13
    // against 0.17 ms with the residual, 0.11 against 0.12 without, 64 -> 64 0.034 against 0.042. Not under 32 outputs:
    // lite's tiles are 32 channels wide (half or more of their products and epilogue lanes padding), oneDNN's 16:
    // MobileNetV2's 32 -> 16 1x1 on 112x112 0.099 -> 0.060 ms on oneDNN.
    if (pg_.C * pg_.KH * pg_.KW <= 64 && pg_.M >= 32) return false;
    // Nor the stride-1 1x1 Convs on planes under 8 rows (at two threads Worthwhile already leaves them to lite):
    // weight-heavy (ResNet-50's 2048 <-> 512 on 7x7: 1 MiB of codes for 49 pixels), where lite's kernel, its next
    // panel's weights fetched during the tiles, was the faster at one thread too: ResNet-50's five such layers 0.62
    // -> 0.54 ms summed (medians of 8 alternations; 0.56 -> 0.52 in 6 others).
    if (pg_.KH == 1 && pg_.KW == 1 && pg_.SH == 1 && pg_.SW == 1 && pg_.OH < 8) return false;
    // oneDNN's AMX kernels take dense nhwc only: rows exactly C codes apart (so while oneDNN is loaded).
    return U8PixelConv::RowStride(C_) == C_ && U8PixelConv::RowStride(M_) == M_;
  }

  void RunOneDnn(KernelIO& io, const KernelContext& ctx) const {
    const TensorRec& x = *io.in[0];
    TensorRec& y = *io.out[0];
    const TensorRec* r = io.has(3) ? io.in[3] : nullptr;
    const int64_t x_image = ImageBytes(x, C_, H_ * W_), y_image = ImageBytes(y, M_, OH_ * OW_);
    const float* bias = onednn_bias_.empty() ? bias_ : onednn_bias_.data();
    for (int64_t b = 0; b < batch_; ++b)
      onednn_->Run(x.as<uint8_t>() + b * x_image, bias, r ? r->as<uint8_t>() + b * y_image : nullptr,
                   static_cast<uint8_t*>(y.data) + b * y_image, ctx.scratch, ctx.pool);
  }

  void RunPixel(KernelIO& io, const KernelContext& ctx) {
    const TensorRec& x = *io.in[0];
    TensorRec& y = *io.out[0];
    const TensorRec* r = io.has(3) ? io.in[3] : nullptr;
    const int clamp = act_ == EpilogueAct::kRelu ? 1 : act_ == EpilogueAct::kRelu6 ? 2
                      : act_ == EpilogueAct::kSilu ? 3 : 0;
    const int64_t x_image = ImageBytes(x, C_, H_ * W_), y_image = ImageBytes(y, M_, OH_ * OW_);
    const int64_t r_image = r ? ImageBytes(*r, M_, OH_ * OW_) : 0;
    const bool codes = x.dtype == DataType::kUInt8;
    uint8_t* quantised = static_cast<uint8_t*>(ctx.scratch);
    void* scratch = quantised + (codes ? 0 : Align64(C_ * H_ * W_));
    for (int64_t b = 0; b < batch_; ++b) {
      const uint8_t* xb = x.as<uint8_t>() + b * x_image;
      const float* x_float = nullptr;
      if (!codes) {   // a float input: quantised into an NCHW plane of codes (each run's range when dynamic)
        const float* xf = x.as<float>() + b * C_ * H_ * W_;
        const ActQuant aq = InputQuant(xf, C_ * H_ * W_, ctx.pool);
        // A stem quantises its float input straight into its padded copy (no plane of codes between).
        const bool stem = !dw_ && pixel_->TakesFloatInput();
        if (x.channel_blocked) {
          QuantizeBlockedToPlane(xf, C_, H_ * W_, aq, quantised, ctx.pool);
        } else if (!stem) {
          QuantizeRowsU8(xf, C_, H_ * W_, H_ * W_, aq, quantised, H_ * W_, ctx.pool);
        }
        if (aq.scale != bound_.scale || aq.zero_point != bound_.zero_point) {
          if (dw_) dw_->Bind(aq, bias_); else pixel_bound_ = BindPixel(aq);
          bound_ = aq;
        }
        xb = quantised;
        x_float = stem ? xf : nullptr;
      }
      if (dw_) {
        dw_->Run(xb, Storage(x), clamp, static_cast<uint8_t*>(y.data) + b * y_image, OutKind(io),
                 ActQuant{y.act_scale, y.act_zero_point}, scratch, ctx.pool);
        continue;
      }
      pixel_->Run(pixel_bound_, xb, Storage(x), r ? r->as<uint8_t>() + b * r_image : nullptr,
                  r ? ActQuant{r->act_scale, r->act_zero_point} : ActQuant{}, r ? Storage(*r) : U8Storage::kNchw, clamp,
                  static_cast<uint8_t*>(y.data) + b * y_image, OutKind(io), ActQuant{y.act_scale, y.act_zero_point},
                  scratch, ctx.pool, x_float);
    }
  }

  // im2col of the uint8 plane into panels of 16 output pixels x depth (groups of 4 taps interleaved); taps
  // outside the input read the zero point, which is float zero. Built a group of 4 taps at a time: each tap's
  // row of B (every output pixel) is copied out of the plane a whole output row at a time, then the 4 rows are
  // interleaved into every panel. (Unpadded 1x1 Convs take PackPointwisePanels instead.)
  void PackPanels(const uint8_t* qx, uint8_t zp, uint8_t* dst, ThreadPool* pool) const {
    const int64_t pixels = OH_ * OW_, panels = (pixels + kQgemmNR - 1) / kQgemmNR, depth4 = QDepth4(K_);
    const int64_t padded = panels * kQgemmNR, groups = depth4 / 4;
    auto pack = [&](int64_t gb, int64_t ge) {
      std::vector<uint8_t> rows(5 * padded, zp);   // 4 tap rows, then a row of zero points
      const uint8_t* zp_row = rows.data() + 4 * padded;
      for (int64_t g = gb; g < ge; ++g) {
        const uint8_t* r[4];
        for (int64_t i = 0; i < 4; ++i) {
          const int64_t k = 4 * g + i;
          if (k >= K_) {
            r[i] = zp_row;
          } else {
            uint8_t* row = rows.data() + i * padded;
            TapRow(qx, k, zp, row);
            r[i] = row;
          }
        }
        for (int64_t p = 0; p < panels; ++p) {
          const int64_t o = p * kQgemmNR;
          InterleaveK4(r[0] + o, r[1] + o, r[2] + o, r[3] + o, dst + p * kQgemmNR * depth4 + g * 4 * kQgemmNR);
        }
      }
    };
    if (pool && pool->size() > 1 && groups > 1) {
      pool->ParallelFor(groups, 1, pack);
    } else {
      pack(0, groups);
    }
  }

  // Panels [p0, p1) of an unpadded 1x1 Conv (any stride) at dst: channel k's value at output pixel i is
  // qx[k][(i / OW) * SH * W + (i % OW) * SW]; pixels past the plane and channels past C read the zero point.
  void PackPointwisePanels(const uint8_t* qx, uint8_t zp, int64_t p0, int64_t p1, uint8_t* dst) const {
    const int64_t pixels = OH_ * OW_, depth4 = QDepth4(K_), plane = H_ * W_;
    const int64_t i0 = p0 * kQgemmNR, i1 = std::min(pixels, p1 * kQgemmNR);
    const bool unit = sp_.strides[0] == 1 && sp_.strides[1] == 1;
    thread_local std::vector<uint8_t> rows;   // copied or gathered rows of the range's pixels, per channel
    const int64_t n = (p1 - p0) * kQgemmNR;
    rows.assign(static_cast<size_t>(4 * n), zp);
    for (int64_t g = 0; g < depth4 / 4; ++g) {
      const uint8_t* r[4];
      for (int64_t c = 0; c < 4; ++c) {
        const int64_t k = 4 * g + c;
        uint8_t* row = rows.data() + c * n;
        if (k >= K_) {
          r[c] = row;   // zero points (a row never written)
        } else if (unit) {   // in place, but the last panel's pixels when the plane ends inside it
          r[c] = qx + k * plane + i0;
          if (i1 - i0 < n) {
            const int64_t whole = (i1 - i0) / kQgemmNR * kQgemmNR;
            std::memcpy(row + whole, r[c] + whole, i1 - i0 - whole);
          }
        } else {   // strided: a run of each output row at a time
          const uint8_t* src = qx + k * plane;
          const int64_t SH = sp_.strides[0], SW = sp_.strides[1];
          for (int64_t i = i0; i < i1;) {
            const int64_t oh = i / OW_, ow0 = i % OW_, len = std::min(OW_ - ow0, i1 - i);
            const uint8_t* line = src + oh * SH * W_ + ow0 * SW;
            uint8_t* out = row + (i - i0);
            for (int64_t ow = 0; ow < len; ++ow) out[ow] = line[ow * SW];
            i += len;
          }
          r[c] = row;
        }
      }
      const int64_t whole_panels = unit ? (i1 - i0) / kQgemmNR : p1 - p0;
      for (int64_t p = 0; p < p1 - p0; ++p) {
        const int64_t o = p * kQgemmNR;
        const uint8_t* src[4] = {r[0] + o, r[1] + o, r[2] + o, r[3] + o};
        if (p >= whole_panels)   // the plane's last, partial panel: from the copies in `rows`
          for (int64_t c = 0; c < 4; ++c)
            if (4 * g + c < K_) src[c] = rows.data() + c * n + o;
        InterleaveK4(src[0], src[1], src[2], src[3], dst + p * kQgemmNR * depth4 + g * 4 * kQgemmNR);
      }
    }
  }

  // Row k of B (tap k = channel, kh, kw): the input value each output pixel multiplies, or the zero point.
  void TapRow(const uint8_t* qx, int64_t k, uint8_t zp, uint8_t* r) const {
    const int64_t KH = sp_.kernel[0], KW = sp_.kernel[1], SH = sp_.strides[0], SW = sp_.strides[1];
    const int64_t c = k / (KH * KW), kh = (k / KW) % KH, kw = k % KW;
    const int64_t dh = kh * sp_.dilations[0] - sp_.pad_begin[0], dw = kw * sp_.dilations[1] - sp_.pad_begin[1];
    const uint8_t* src = qx + c * H_ * W_;
    // Output columns [lo, hi) read inside the row: iw = ow * SW + dw in [0, W).
    const int64_t lo = std::min(OW_, dw >= 0 ? 0 : (-dw + SW - 1) / SW);
    const int64_t hi = std::max(lo, std::min(OW_, W_ - dw <= 0 ? 0 : (W_ - dw + SW - 1) / SW));
    for (int64_t oh = 0; oh < OH_; ++oh, r += OW_) {
      const int64_t ih = oh * SH + dh;
      if (ih < 0 || ih >= H_) {
        for (int64_t ow = 0; ow < OW_; ++ow) r[ow] = zp;
        continue;
      }
      // Plain loops, not memcpy/memset: the runs are short (7 to 112 bytes) and a library call each cost more.
      const uint8_t* line = src + ih * W_ + dw;
      for (int64_t ow = 0; ow < lo; ++ow) r[ow] = zp;
      if (SW == 1) {
        for (int64_t ow = lo; ow < hi; ++ow) r[ow] = line[ow];
      } else {
        for (int64_t ow = lo; ow < hi; ++ow) r[ow] = line[ow * SW];
      }
      for (int64_t ow = hi; ow < OW_; ++ow) r[ow] = zp;
    }
  }

  SpatialParams sp_;
  EpilogueAct act_ = EpilogueAct::kNone;
  int64_t batch_ = 0, C_ = 0, M_ = 0, H_ = 0, W_ = 0, OH_ = 0, OW_ = 0, K_ = 0;
  bool direct_ = false, tap_major_ = false;   // tap_major_: weights_ reordered for the direct kernel
  bool pointwise_ = false;                     // 1x1, unpadded: panels packed as the product goes
  QDirectGeometry dg_;
  ConvGeometry pg_;
  bool use_pixel_ = false;                     // the pixel-major kernel runs it (UsePixelKernel)
  std::shared_ptr<const OneDnnConv> onednn_;   // AMX-INT8 with oneDNN loaded: in place of pixel_ (UseOneDnn)
  std::vector<float> onednn_bias_;             // its RunBias (an output zero point folded in), or empty
  bool codes_out_ = false, has_res_ = false;   // the pixel-major kernel's output is uint8 codes; a residual is added
  ActQuant out_quant_, res_quant_;             // their quantisations
  std::shared_ptr<const U8PixelConv> pixel_;   // built at the first prepare (or shared: SharedObject)
  U8PixelConv::Bound pixel_bound_;             // its epilogue constants for this kernel's input quantisation
  bool depthwise_ = false;                     // one filter per channel: U8DepthwiseConv runs it
  std::unique_ptr<U8DepthwiseConv> dw_;
  const float* bias_ = nullptr;                // the constant bias the pixel kernel's epilogue adds
  ActQuant bound_;                             // the input quantisation the pixel kernel is bound to
};

}  // namespace

std::unique_ptr<Kernel> MakeIntegerLinearKernel(const NodeRec& node) { return std::make_unique<IntegerLinearKernel>(node); }
std::unique_ptr<Kernel> MakeIntegerConvKernel(const NodeRec& node) { return std::make_unique<IntegerConvKernel>(node); }

}  // namespace lite
