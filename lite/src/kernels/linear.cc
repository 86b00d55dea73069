// MatMul (batched, broadcast) and Gemm on the packed SGEMM.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "cpu/gemm/bf16_gemm.h"
#include "cpu/gemm/gemm.h"
#include "cpu/gemm/skinny_gemm.h"
#include "kernels/common.h"
#include "kernels/constant_matrix.h"
#include "kernels/integer_compute.h"
#include "kernels/register.h"

namespace lite {
namespace {

using ms_schema::OpType;

EpilogueAct ToEpilogue(ms_schema::Activation a);

class MatMulKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void Infer(KernelIO& io) override {
    TensorRec& a = In(io, 0);
    TensorRec& b = In(io, 1);
    Require(a.dtype == DataType::kFloat32 && b.dtype == DataType::kFloat32, "only float32 is supported");
    Require(!a.shape.empty() && !b.shape.empty(), "operands must have rank >= 1");
    Shape as = a.shape, bs = b.shape;
    const auto* attr = node_.fb->attr_as_MatMulAttr();
    b_transposed_ = attr != nullptr && attr->b_transposed();
    if (b_transposed_) {   // format 1.14: a constant weight stored [N, K]
      Require(b.kind == TensorRec::Kind::kConstant && bs.size() == 2,
              "b_transposed needs a constant 2-D B, got " + ShapeToString(b.shape));
      bs = {bs[1], bs[0]};
    }
    a_vec_ = as.size() == 1;
    b_vec_ = bs.size() == 1;
    if (a_vec_) as.insert(as.begin(), 1);
    if (b_vec_) bs.push_back(1);
    M_ = as[as.size() - 2];
    K_ = as.back();
    N_ = bs.back();
    Require(bs[bs.size() - 2] == K_, "inner dims differ: " + ShapeToString(a.shape) + " x " + ShapeToString(b.shape));
    Shape abatch(as.begin(), as.end() - 2), bbatch(bs.begin(), bs.end() - 2);
    Shape batch;
    Require(BroadcastShapes({&abatch, &bbatch}, batch), "batch dims do not broadcast");
    plan_ = MakeBroadcastPlan(batch, {&abatch, &bbatch});
    batch_ = ShapeNumel(batch);
    // The broadcast plan walks batch rows x inner; record per-batch operand offsets.
    a_off_.clear();
    b_off_.clear();
    if (batch_ > 0) {
      ForEachRow(plan_, 0, plan_.rows, [&](int64_t, const int64_t* off, const int64_t* st, int64_t n) {
        for (int64_t i = 0; i < n; ++i) {
          a_off_.push_back((off[0] + i * st[0]) * M_ * K_);
          b_off_.push_back((off[1] + i * st[1]) * K_ * N_);
        }
      });
    }
    Shape out = batch;
    if (!a_vec_) out.push_back(M_);
    if (!b_vec_) out.push_back(N_);
    product_shape_ = out;
    // Fused epilogue: a bias of N values as input 2 (format 1.4), an addend as input 3 (format 1.5: a
    // residual Add, with Add's broadcasting), then the activation.
    if (io.has(2))
      Require(io.in[2]->dtype == DataType::kFloat32 && io.in[2]->numel() == N_ && !b_vec_,
              "bias must hold N = " + std::to_string(N_) + " floats, got " + ShapeToString(io.in[2]->shape));
    addend_in_tile_ = false;
    if (io.has(3)) {
      const TensorRec& r = *io.in[3];
      Require(r.dtype == DataType::kFloat32, "the addend (input 3) must be float32");
      Shape sum;
      Require(BroadcastShapes({&out, &r.shape}, sum), "addend " + ShapeToString(r.shape) +
                                                          " does not broadcast with the product " + ShapeToString(out));
      addend_in_tile_ = r.shape == out;   // a residual of the product's shape: added in the GEMM's registers
      out = sum;
    }
    // Format 1.9: a multiplier of the output's shape as input 4, applied after the activation (a gated linear
    // unit: SwiGLU's up projection times silu(gate)).
    if (io.has(4)) {
      const TensorRec& g = *io.in[4];
      Require(g.dtype == DataType::kFloat32 && g.shape == out && out == product_shape_,
              "the multiplier (input 4) " + ShapeToString(g.shape) + " must be float32 of the product's shape " +
                  ShapeToString(product_shape_));
    }
    io.out[0]->shape = out;
    io.out[0]->dtype = DataType::kFloat32;
  }

  // A product smaller than the broadcast sum is computed here first.
  size_t ScratchBytes(const KernelIO& io) const override {
    if (!io.has(3) || addend_in_tile_ || product_shape_ == io.out[0]->shape) return 0;
    return static_cast<size_t>(ShapeNumel(product_shape_)) * sizeof(float);
  }

  // (A B stored [N, K] is packed from its float values: its codes would be read across their panels.)
  bool NeedsDecodedInput(size_t i, const TensorRec& t) const override {
    const auto* attr = node_.fb->attr_as_MatMulAttr();
    return (attr != nullptr && attr->b_transposed()) || !(i == 1 && IsCompressedMatrix(t));
  }

  // A constant 2-D B (a weight) is packed once (or, stored compressed, laid out as panels of its codes); batches of
  // A then run as one tall product.
  void Prepare(KernelIO& io) override {
    TensorRec& b = *io.in[1];
    if (b.kind == TensorRec::Kind::kConstant && b.shape.size() == 2)
      weight_.Prepare(b, K_, N_, io.bf16, io.dynamic_quant, b_transposed_, io.fp16);
  }

  void Run(KernelIO& io, const KernelContext& ctx) override {
    GemmEpilogue ep;
    if (io.has(2)) ep.col_bias = io.in[2]->as<float>();
    if (const auto* attr = node_.fb->attr_as_MatMulAttr()) ep.act = ToEpilogue(attr->activation());
    if (io.has(4)) ep.multiplier = io.in[4]->as<float>(), ep.ld_multiplier = N_;
    if (!io.has(3)) return Product(io, ctx, ep, io.out[0]->as<float>());
    if (addend_in_tile_) {
      ep.residual = io.in[3]->as<float>();
      ep.ld_residual = N_;
      return Product(io, ctx, ep, io.out[0]->as<float>());
    }
    // An addend that broadcasts: product, then the broadcast sum, then the activation.
    GemmEpilogue linear = ep, act_only;
    linear.act = EpilogueAct::kNone;
    act_only.act = ep.act;
    const Shape& out = io.out[0]->shape;
    float* y = io.out[0]->as<float>();
    float* product = product_shape_ == out ? y : static_cast<float*>(ctx.scratch);
    Product(io, ctx, linear, product);
    const float* r = io.in[3]->as<float>();
    const BroadcastPlan plan = MakeBroadcastPlan(out, {&product_shape_, &io.in[3]->shape});
    ctx.pool->ParallelFor(plan.rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, plan.inner)),
                          [&](int64_t rb, int64_t re) {
      ForEachRow(plan, rb, re, [&](int64_t o, const int64_t* off, const int64_t* st, int64_t n) {
        for (int64_t k = 0; k < n; ++k) y[o + k] = product[off[0] + k * st[0]] + r[off[1] + k * st[1]];
      });
    });
    if (ep.act != EpilogueAct::kNone) ApplyEpilogue(y, 0, 0, 1, 0, ShapeNumel(out), act_only);
  }

 private:
  // y = act(A x B + bias (+ a residual of y's shape)), per ep.
  void Product(KernelIO& io, const KernelContext& ctx, const GemmEpilogue& ep, float* y) const {
    const float* a = io.in[0]->as<float>();
    const float* b = io.in[1]->as<float>();
    const int64_t count = static_cast<int64_t>(a_off_.size());
    const int64_t mn = M_ * N_;
    if (weight_.prepared()) {   // every batch reads the same B: A's batches are consecutive rows
      weight_.Multiply(count * M_, a, K_, y, N_, ep, ctx.pool);
      return;
    }
    const int64_t threads = ctx.pool->size();
    if (count > 1 && (mn * K_ < (1 << 20) ? count >= threads : count % threads == 0 || count >= 4 * threads)) {
      // Batches of products (attention heads): one product per task, each single-threaded, when that keeps
      // every thread equally busy (or the products are too small to split). Splitting each product of
      // ViT-B's 12 heads (197 x 64 x 197) over 2 threads instead did not scale at all.
      ctx.pool->ParallelFor(count, 1, [&](int64_t bb, int64_t be) {
        for (int64_t i = bb; i < be; ++i)
          Sgemm(false, false, M_, N_, K_, 1.f, a + a_off_[i], K_, b + b_off_[i], N_, 0.f, y + i * mn, N_,
                Shifted(ep, i * mn), nullptr);
      });
      return;
    }
    for (int64_t i = 0; i < count; ++i)
      Sgemm(false, false, M_, N_, K_, 1.f, a + a_off_[i], K_, b + b_off_[i], N_, 0.f, y + i * mn, N_,
            Shifted(ep, i * mn), ctx.pool);
  }

  std::string Implementation() const override {
    if (weight_.prepared()) return weight_.Name(static_cast<int64_t>(a_off_.size()) * M_);
    return a_off_.size() > 1 ? "gemm_batched" : "gemm";
  }

  // The epilogue of batch i: a residual advances with the output.
  static GemmEpilogue Shifted(GemmEpilogue ep, int64_t offset) {
    if (ep.residual) ep.residual += offset;
    if (ep.multiplier) ep.multiplier += offset;
    return ep;
  }

  bool a_vec_ = false, b_vec_ = false, addend_in_tile_ = false;
  bool b_transposed_ = false;   // MatMulAttr.b_transposed: B is a constant stored [N, K]
  Shape product_shape_;
  int64_t M_ = 0, N_ = 0, K_ = 0, batch_ = 0;
  BroadcastPlan plan_;
  std::vector<int64_t> a_off_, b_off_;
  ConstantMatrix weight_;   // a constant B, packed or laid out once for every plan
};

EpilogueAct ToEpilogue(ms_schema::Activation a) {
  switch (a) {
    case ms_schema::Activation::RELU: return EpilogueAct::kRelu;
    case ms_schema::Activation::RELU6: return EpilogueAct::kRelu6;
    case ms_schema::Activation::SIGMOID: return EpilogueAct::kSigmoid;
    case ms_schema::Activation::TANH: return EpilogueAct::kTanh;
    case ms_schema::Activation::HARD_SWISH: return EpilogueAct::kHardSwish;
    case ms_schema::Activation::GELU: return EpilogueAct::kGelu;
    case ms_schema::Activation::SILU: return EpilogueAct::kSilu;
    case ms_schema::Activation::GELU_TANH: return EpilogueAct::kGeluTanh;
    case ms_schema::Activation::QUICK_GELU: return EpilogueAct::kQuickGelu;
    case ms_schema::Activation::NONE: return EpilogueAct::kNone;
  }
  // A file from a newer converter: refuse it rather than silently skip the activation.
  throw ModelFormatError("fused activation code " + std::to_string(static_cast<int>(a)) +
                         " is not known to this runtime");
}

class GemmKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void Infer(KernelIO& io) override {
    const auto* attr = node_.fb->attr_as_GemmAttr();
    TensorRec& a = In(io, 0);
    TensorRec& b = In(io, 1);
    Require(a.dtype == DataType::kFloat32 && b.dtype == DataType::kFloat32, "only float32 is supported");
    Require(a.shape.size() == 2 && b.shape.size() == 2, "A and B must be 2-D, got " + ShapeToString(a.shape) +
                                                            " and " + ShapeToString(b.shape));
    ta_ = attr->trans_a();
    tb_ = attr->trans_b();
    M_ = ta_ ? a.shape[1] : a.shape[0];
    K_ = ta_ ? a.shape[0] : a.shape[1];
    const int64_t kb = tb_ ? b.shape[1] : b.shape[0];
    N_ = tb_ ? b.shape[0] : b.shape[1];
    Require(K_ == kb, "inner dims differ: " + ShapeToString(a.shape) + " x " + ShapeToString(b.shape));
    io.out[0]->shape = {M_, N_};
    io.out[0]->dtype = DataType::kFloat32;
    if (io.has(2)) {
      const Shape& cs = io.in[2]->shape;
      Shape out;
      Require(cs.size() <= 2 && BroadcastShapes({&cs, &io.out[0]->shape}, out) && out == io.out[0]->shape,
              "C of shape " + ShapeToString(cs) + " does not broadcast to " + ShapeToString(io.out[0]->shape));
      c_plan_ = MakeBroadcastPlan(io.out[0]->shape, {&cs});
    }
  }

  void Run(KernelIO& io, const KernelContext& ctx) override {
    const auto* attr = node_.fb->attr_as_GemmAttr();
    float* y = io.out[0]->as<float>();
    GemmEpilogue ep;
    ep.act = ToEpilogue(attr->activation());
    float beta = 0.f;
    if (io.has(2) && attr->beta() != 0.f) {
      const TensorRec& c = *io.in[2];
      const float* cd = c.as<float>();
      const float bscale = attr->beta();
      if (c.shape.size() >= 1 && c.numel() == N_ && bscale == 1.f && (c.shape.size() == 1 || c.shape[0] == 1)) {
        ep.col_bias = cd;   // the common FullyConnected bias: fused into the epilogue
      } else {
        ForEachRow(c_plan_, 0, c_plan_.rows, [&](int64_t yo, const int64_t* off, const int64_t* st, int64_t n) {
          for (int64_t i = 0; i < n; ++i) y[yo + i] = bscale * cd[off[0] + i * st[0]];
        });
        beta = 1.f;
      }
    }
    // A few rows (not transposed, unscaled, nothing to add to): the skinny product reads the weight once.
    const bool skinny = M_ <= kSkinnyMaxRows && !ta_ && attr->alpha() == 1.f && beta == 0.f;
    ran_ = stored_b_ ? (skinny ? "skinny_gemm_compressed" : "gemm_compressed")
           : bf16_b_ ? (Bf16ProductsOnAmx(bf16_b_->format) ? "gemm_bf16_amx" : "gemm_bf16")
           : packed_b_ ? (skinny ? "skinny_gemm" : "gemm_packed_b") : "gemm";
    if (stored_b_) {
      if (skinny) return SkinnyGemm(M_, io.in[0]->as<float>(), K_, stored_b_->matrix(), y, N_, ep, ctx.pool);
      SgemmWithBPacker(ta_, M_, N_, K_, attr->alpha(), io.in[0]->as<float>(), io.in[0]->shape[1], *stored_b_, beta, y,
                       N_, ep, ctx.pool);
      return;
    }
    if (bf16_b_) {
      Bf16GemmPackedB(ta_, M_, N_, K_, attr->alpha(), io.in[0]->as<float>(), io.in[0]->shape[1], *bf16_b_, beta, y, N_,
                      ep, ctx.pool);
      return;
    }
    if (packed_b_) {
      if (skinny) return SkinnyGemmPackedB(M_, N_, K_, io.in[0]->as<float>(), K_, packed_b_->data(), y, N_, ep, ctx.pool);
      SgemmPackedB(ta_, M_, N_, K_, attr->alpha(), io.in[0]->as<float>(), io.in[0]->shape[1], packed_b_->data(), beta,
                   y, N_, ep, ctx.pool);
      return;
    }
    Sgemm(ta_, tb_, M_, N_, K_, attr->alpha(), io.in[0]->as<float>(), io.in[0]->shape[1], io.in[1]->as<float>(),
          io.in[1]->shape[1], beta, y, N_, ep, ctx.pool);
  }

  // Only [K, N] weights are packed from their stored values (a transposed one would decode along its columns).
  bool NeedsDecodedInput(size_t i, const TensorRec& t) const override {
    return !(i == 1 && IsCompressedMatrix(t) && !node_.fb->attr_as_GemmAttr()->trans_b());
  }

  void Prepare(KernelIO& io) override {
    TensorRec& b = *io.in[1];
    if (IsCompressedMatrix(b) && !tb_ && !stored_b_) {
      stored_b_ = std::make_unique<PanelMatrixPacker>(SharedPanels(b));
      ReleaseMappedPages(b);
    } else if (b.kind == TensorRec::Kind::kConstant && !packed_b_ && !stored_b_ && !bf16_b_) {
      const std::string key = std::string(tb_ ? ":t" : ":n") + std::to_string(K_) + "x" + std::to_string(N_);
      if (io.bf16) {
        const HalfFormat format = io.fp16 ? HalfFormat::kFp16 : HalfFormat::kBf16;
        bf16_b_ = SharedPacked<Bf16PanelsB>(b, (io.fp16 ? "fp16_b" : "bf16_b") + key, [&] {
          return PackBf16B(tb_, K_, N_, b.as<float>(), b.shape[1], format);
        });
      } else {
        packed_b_ = SharedPacked<WeightVector<float>>(b, "sgemm_b" + key,
                                                     [&] { return PackBOnce(tb_, K_, N_, b.as<float>(), b.shape[1]); });
      }
      ReleaseMappedPages(b);
    }
  }

  std::string Implementation() const override { return ran_; }

 private:
  const char* ran_ = "";   // the product the last Run took (Implementation)
  bool ta_ = false, tb_ = false;
  int64_t M_ = 0, N_ = 0, K_ = 0;
  BroadcastPlan c_plan_;
  std::shared_ptr<const WeightVector<float>> packed_b_;   // shared by every plan (TensorRec::packed)
  std::shared_ptr<const Bf16PanelsB> bf16_b_;   // precision bfloat16: the bf16 kernel's B, in place of packed_b_
  std::unique_ptr<PanelMatrixPacker> stored_b_;   // a compressed weight's panels
};

}  // namespace

EpilogueAct EpilogueFromSchema(ms_schema::Activation a) { return ToEpilogue(a); }

namespace {
std::unique_ptr<Kernel> MakeMatMul(const NodeRec& n) {
  return IsIntegerCompute(n) ? MakeIntegerLinearKernel(n) : MakeKernel<MatMulKernel>(n);
}
std::unique_ptr<Kernel> MakeGemm(const NodeRec& n) {
  return IsIntegerCompute(n) ? MakeIntegerLinearKernel(n) : MakeKernel<GemmKernel>(n);
}
}  // namespace

void RegisterLinearKernels(KernelRegistry& r) {
  r.Register(OpType::MatMul, DataType::kFloat32, MakeMatMul);
  r.Register(OpType::Gemm, DataType::kFloat32, MakeGemm);
}

}  // namespace lite
