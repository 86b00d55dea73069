// Broadcasting binary operators, Where, unary activations and math, Clip, Cast.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "cpu/conv/bf16_pixel_conv.h"
#include "cpu/gemm/bf16_gemm.h"
#include "cpu/simd/float16.h"
#include "cpu/simd/simd.h"
#include "cpu/simd/vmath.h"
#include "kernels/common.h"
#include "kernels/register.h"

#ifdef LITE_X86_SIMD
#include <immintrin.h>
#endif

namespace lite {
namespace {

using ms_schema::OpType;

constexpr int64_t kParallelElems = 1 << 15;   // below this, threading costs more than it saves


template <typename T>
T DivSafe(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    if (b == 0) return 0;   // no SIGFPE on hostile data
    if (std::is_signed_v<T> && b == T(-1)) return T(0) - a;
    return a / b;
  } else {
    return a / b;
  }
}

template <typename T>
T PowOf(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(std::pow(static_cast<double>(a), static_cast<double>(b)));
  } else {
    return std::pow(a, b);
  }
}

bool IsComparison(OpType op) {
  return op == OpType::Equal || op == OpType::Less || op == OpType::LessOrEqual || op == OpType::Greater ||
         op == OpType::GreaterOrEqual;
}

bool IsVariadic(OpType op) { return op == OpType::Max || op == OpType::Min || op == OpType::Sum || op == OpType::Mean; }

template <typename T>
T ModOf(T a, T b, bool fmod) {
  if constexpr (std::is_integral_v<T>) {
    if (b == 0) return 0;
    if (std::is_signed_v<T> && b == T(-1)) return 0;
    const T r = a % b;
    // Python-style (sign of the divisor) unless fmod.
    return (!fmod && r != 0 && ((r < 0) != (b < 0))) ? T(r + b) : r;
  } else {
    const T r = std::fmod(a, b);
    return (!fmod && r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
  }
}

// Binary and variadic elementwise operators with NumPy broadcasting. Variadic ones fold left:
// y = op(x0, x1), then y = op(y, xk).
#ifdef LITE_X86_SIMD
// out[i] = bf16(float(a[i]) + float(b[i])) for i < n, 32 at a time (bf16 -> float32 is a 16-bit shift; the sum rounded
// to nearest even by vcvtne2ps2bf16, as the bf16 Convs round their outputs).
__attribute__((target("avx512f,avx512bw,avx512bf16"), always_inline)) inline __m512 WidenBf16(const uint16_t* p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(
      _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
}

__attribute__((target("avx512f,avx512bw,avx512bf16"))) void AddBf16Values(const uint16_t* a, const uint16_t* b,
                                                                          uint16_t* out, int64_t n) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 lo = _mm512_add_ps(WidenBf16(a + i), WidenBf16(b + i));
    const __m512 hi = _mm512_add_ps(WidenBf16(a + i + 16), WidenBf16(b + i + 16));
    _mm512_storeu_si512(out + i, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
  }
  for (; i < n; ++i) out[i] = FloatToBf16(Bf16ToFloat(a[i]) + Bf16ToFloat(b[i]));
}

// y = a + b over bf16 rows of one shape (the padding lanes and the zero row included: their sums are zero plus zero).
void AddBf16Rows(KernelIO& io, const KernelContext& ctx) {
  const TensorRec& y = *io.out[0];
  const int64_t values = y.shape[0] * (y.shape[2] * y.shape[3] + 1) * Bf16PixelConv::Bf16RowStride(y.shape[1]);
  const uint16_t* a = io.in[0]->as<uint16_t>();
  const uint16_t* b = io.in[1]->as<uint16_t>();
  uint16_t* out = io.out[0]->as<uint16_t>();
  ctx.pool->ParallelFor((values + 4095) / 4096, 1, [&](int64_t t0, int64_t t1) {
    const int64_t begin = t0 * 4096, end = std::min(values, t1 * 4096);
    AddBf16Values(a + begin, b + begin, out + begin, end - begin);
  });
}
#endif

class BinaryKernel : public Kernel {
 public:
  using Kernel::Kernel;

  void Infer(KernelIO& io) override {
    const size_t n = io.in.size();
    Require(n >= (IsVariadic(node_.op) ? 1u : 2u), "too few inputs");
    Require(IsVariadic(node_.op) || n == 2, "expects 2 inputs");
    std::vector<const Shape*> shapes;
    for (size_t i = 0; i < n; ++i) {
      TensorRec& t = In(io, i);
      Require(node_.op == OpType::PRelu || t.dtype == io.in[0]->dtype,
              std::string("operand dtypes differ: ") + DataTypeName(io.in[0]->dtype) + " vs " + DataTypeName(t.dtype));
      shapes.push_back(&t.shape);
    }
    Shape& out = io.out[0]->shape;
    std::string all;
    for (const Shape* s : shapes) all += (all.empty() ? "" : " and ") + ShapeToString(*s);
    Require(BroadcastShapes(shapes, out), "shapes " + all + " do not broadcast");
    const OpType op = node_.op;
    const bool to_bool = IsComparison(op);
    io.out[0]->dtype = to_bool ? DataType::kBool : io.in[0]->dtype;
    plans_.clear();
    if (n == 1) return;
    plans_.push_back(MakeBroadcastPlan(out, {shapes[0], shapes[1]}));
    for (size_t i = 2; i < n; ++i) plans_.push_back(MakeBroadcastPlan(out, {&out, shapes[i]}));
  }

  // Same-shape arithmetic is elementwise whatever the element order, so it runs on channel-blocked operands
  // as long as all of them (and the result) share the layout.
  bool AcceptsLayouts(const KernelIO& io) const override {
    const bool blocked = io.out[0]->channel_blocked;
    const bool arithmetic = node_.op == OpType::Add || node_.op == OpType::Sub || node_.op == OpType::Mul ||
                            node_.op == OpType::Div || node_.op == OpType::Max || node_.op == OpType::Min ||
                            node_.op == OpType::Sum || node_.op == OpType::Mean;
    for (const TensorRec* t : io.in) {
      if (t->channel_blocked != blocked) return false;
      if (blocked && (!arithmetic || t->shape != io.out[0]->shape)) return false;
    }
    return true;
  }

  // At compute precision bfloat16 a same-shape Add of bf16 rows (core/bf16_pixel_layout.h: every operand and the
  // result) adds the rows' values in float32 and rounds the sum to bf16 once: the bottleneck shortcuts of C2f blocks
  // between bf16 pixel-major Convs (YOLOv8n), whose values are bf16 already.
  bool AcceptsBf16Pixels(const KernelIO& io) const override {
    if (!AnyTensorMarked(io, &TensorRec::bf16_pixels)) return true;
#ifdef LITE_X86_SIMD
    if (node_.op != OpType::Add || io.in.size() != 2) return false;
    for (const TensorRec* t : {io.in[0], io.in[1], io.out[0]})
      if (!t->bf16_pixels || t->shape != io.out[0]->shape || t->shape.size() != 4 ||
          t->nbytes < static_cast<size_t>(t->shape[0]) *
                          Bf16PixelConv::Bf16RowsBytes(t->shape[1], t->shape[2] * t->shape[3]))
        return false;
    return true;
#else
    return false;
#endif
  }

  void Run(KernelIO& io, const KernelContext& ctx) override {
    if (io.in.size() == 1) {   // Sum/Max/Min/Mean of one tensor
      std::memcpy(io.out[0]->data, io.in[0]->data, io.in[0]->nbytes);
      return;
    }
#ifdef LITE_X86_SIMD
    if (io.out[0]->bf16_pixels) return AddBf16Rows(io, ctx);
#endif
    const OpType op = node_.op;
    switch (io.in[0]->dtype) {
      case DataType::kFloat32: return Dispatch<float>(io, ctx);
      case DataType::kFloat64: return Dispatch<double>(io, ctx);
      case DataType::kInt64: return Dispatch<int64_t>(io, ctx);
      case DataType::kInt32: return Dispatch<int32_t>(io, ctx);
      case DataType::kInt16: return Dispatch<int16_t>(io, ctx);
      case DataType::kInt8: return Dispatch<int8_t>(io, ctx);
      case DataType::kUInt8:
        if (op == OpType::BitShift) return Shift<uint8_t>(io, ctx);
        return Dispatch<uint8_t>(io, ctx);
      case DataType::kUInt16:
        if (op == OpType::BitShift) return Shift<uint16_t>(io, ctx);
        return Dispatch<uint16_t>(io, ctx);
      case DataType::kUInt32:
        if (op == OpType::BitShift) return Shift<uint32_t>(io, ctx);
        return Dispatch<uint32_t>(io, ctx);
      case DataType::kUInt64:
        if (op == OpType::BitShift) return Shift<uint64_t>(io, ctx);
        return Dispatch<uint64_t>(io, ctx);
      case DataType::kBool:
        if (op == OpType::And) return Apply<bool, bool>(io, ctx, [](bool a, bool b) { return a && b; });
        if (op == OpType::Or) return Apply<bool, bool>(io, ctx, [](bool a, bool b) { return a || b; });
        if (op == OpType::Xor) return Apply<bool, bool>(io, ctx, [](bool a, bool b) { return a != b; });
        if (op == OpType::Equal) return Apply<bool, bool>(io, ctx, [](bool a, bool b) { return a == b; });
        break;
      default: break;
    }
    Fail(std::string("unsupported dtype ") + DataTypeName(io.in[0]->dtype));
  }

 private:
  template <typename T>
  void Shift(KernelIO& io, const KernelContext& ctx) {
    const bool left = node_.fb->attr_as_BitShiftAttr() && node_.fb->attr_as_BitShiftAttr()->left();
    constexpr T bits = sizeof(T) * 8;
    if (left) return Apply<T, T>(io, ctx, [](T a, T b) { return b >= bits ? T(0) : T(a << b); });
    return Apply<T, T>(io, ctx, [](T a, T b) { return b >= bits ? T(0) : T(a >> b); });
  }

  template <typename T>
  void Dispatch(KernelIO& io, const KernelContext& ctx) {
    switch (node_.op) {
      case OpType::Add:
      case OpType::Sum: return Apply<T, T>(io, ctx, [](T a, T b) { return T(a + b); });
      case OpType::Sub: return Apply<T, T>(io, ctx, [](T a, T b) { return T(a - b); });
      case OpType::Mul: return Apply<T, T>(io, ctx, [](T a, T b) { return T(a * b); });
      case OpType::Div: return Apply<T, T>(io, ctx, [](T a, T b) { return DivSafe<T>(a, b); });
      case OpType::Mod: {
        const bool fmod = node_.fb->attr_as_ModAttr() && node_.fb->attr_as_ModAttr()->fmod();
        return Apply<T, T>(io, ctx, [=](T a, T b) { return ModOf<T>(a, b, fmod); });
      }
      case OpType::Max: return Apply<T, T>(io, ctx, [](T a, T b) { return (a > b || a != a) ? a : b; });
      case OpType::Min: return Apply<T, T>(io, ctx, [](T a, T b) { return (a < b || a != a) ? a : b; });
      case OpType::Mean:
        if constexpr (std::is_same_v<T, float>) {
          Apply<T, T>(io, ctx, [](T a, T b) { return T(a + b); });
          const float inv = 1.f / static_cast<float>(io.in.size());
          float* y = io.out[0]->as<float>();
          const int64_t n = io.out[0]->numel();
          for (int64_t i = 0; i < n; ++i) y[i] *= inv;
          return;
        }
        break;
      case OpType::PRelu:
        if constexpr (std::is_same_v<T, float>) return Apply<T, T>(io, ctx, [](T a, T s) { return a < 0 ? a * s : a; });
        break;
      case OpType::Pow:
        if constexpr (std::is_same_v<T, float>) {
          if (io.in[1]->numel() == 1 && io.in[1]->known) {
            const float e = io.in[1]->template as<float>()[0];
            if (e == 2.f) return Apply<T, T>(io, ctx, [](T a, T) { return a * a; });
            if (e == 0.5f) return Apply<T, T>(io, ctx, [](T a, T) { return std::sqrt(a); });
            if (e == 1.f) return Apply<T, T>(io, ctx, [](T a, T) { return a; });
          }
        }
        return Apply<T, T>(io, ctx, [](T a, T b) { return PowOf<T>(a, b); });
      case OpType::Equal: return Apply<T, bool>(io, ctx, [](T a, T b) { return a == b; });
      case OpType::Less: return Apply<T, bool>(io, ctx, [](T a, T b) { return a < b; });
      case OpType::LessOrEqual: return Apply<T, bool>(io, ctx, [](T a, T b) { return a <= b; });
      case OpType::Greater: return Apply<T, bool>(io, ctx, [](T a, T b) { return a > b; });
      case OpType::GreaterOrEqual: return Apply<T, bool>(io, ctx, [](T a, T b) { return a >= b; });
      default: break;
    }
    Fail(std::string("unsupported dtype ") + DataTypeName(io.in[0]->dtype));
  }

  // Applies op over the broadcast plans: the first pair, then the running result with each further input.
  template <typename T, typename R, typename Op>
  void Apply(KernelIO& io, const KernelContext& ctx, Op op) {
    R* y = io.out[0]->template as<R>();
    for (size_t step = 0; step < plans_.size(); ++step) {
      const BroadcastPlan& plan = plans_[step];
      const T* a = step == 0 ? io.in[0]->template as<T>() : reinterpret_cast<const T*>(y);
      const T* b = io.in[step + 1]->template as<T>();
      ParallelForEachRow(ctx.pool, plan, kParallelElems, [&](int64_t yo, const int64_t* off, const int64_t* st,
                                                             int64_t n) {
        ZipLoop<R, T>(a + off[0], st[0] != 0, b + off[1], st[1] != 0, y + yo, n, op);
      });
    }
  }

  std::vector<BroadcastPlan> plans_;
};

class WhereKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void Infer(KernelIO& io) override {
    TensorRec& c = In(io, 0);
    TensorRec& x = In(io, 1);
    TensorRec& y = In(io, 2);
    Require(c.dtype == DataType::kBool, "condition must be bool");
    Require(x.dtype == y.dtype, "X and Y dtypes differ");
    Require(BroadcastShapes({&c.shape, &x.shape, &y.shape}, io.out[0]->shape), "condition, X and Y do not broadcast");
    io.out[0]->dtype = x.dtype;
    plan_ = MakeBroadcastPlan(io.out[0]->shape, {&c.shape, &x.shape, &y.shape});
  }
  void Run(KernelIO& io, const KernelContext& ctx) override {
    BySize(io.in[1]->dtype, [&](auto tag) { Apply<decltype(tag)>(io, ctx); });
  }

 private:
  template <typename T>
  void Apply(KernelIO& io, const KernelContext& ctx) {
    const bool* c = io.in[0]->as<bool>();
    const T* x = io.in[1]->as<T>();
    const T* y = io.in[2]->as<T>();
    T* out = io.out[0]->as<T>();
    ParallelForEachRow(ctx.pool, plan_, kParallelElems, [&](int64_t oo, const int64_t* off, const int64_t* st,
                                                            int64_t n) {
      for (int64_t i = 0; i < n; ++i)
        out[oo + i] = c[off[0] + i * st[0]] ? x[off[1] + i * st[1]] : y[off[2] + i * st[2]];
    });
  }
  BroadcastPlan plan_;
};

inline float Softplus(float v) {
  // log(1 + e^v) without overflow: v + log1p(e^-v) for large v.
  return v > 0.f ? v + std::log1p(FastExp(-v)) : std::log1p(FastExp(v));
}

class UnaryKernel : public Kernel {
 public:
  using Kernel::Kernel;
  // Elementwise: any layout, the same in and out (Clip's bounds are scalars).
  bool AcceptsLayouts(const KernelIO& io) const override {
    for (size_t i = 1; i < io.in.size(); ++i)
      if (io.in[i] && io.in[i]->channel_blocked) return false;
    return io.in[0]->channel_blocked == io.out[0]->channel_blocked;
  }
  void Infer(KernelIO& io) override {
    TensorRec& x = In(io, 0);
    const bool int_ok = node_.op == OpType::Neg || node_.op == OpType::Relu || node_.op == OpType::Clip ||
                        node_.op == OpType::Abs || node_.op == OpType::Sign;
    Require(x.dtype == DataType::kFloat32 ||
                (int_ok && (x.dtype == DataType::kInt64 || x.dtype == DataType::kInt32)),
            std::string("unsupported dtype ") + DataTypeName(x.dtype));
    io.out[0]->shape = x.shape;
    io.out[0]->dtype = x.dtype;
    if (node_.op == OpType::Clip) {
      for (size_t i = 1; i < 3; ++i)
        if (io.has(i)) {
          Require(io.in[i]->dtype == x.dtype, "min/max dtype differs from input");
          Require(io.in[i]->numel() == 1, "min/max must be scalars");
        }
    }
  }
  void Run(KernelIO& io, const KernelContext& ctx) override {
    switch (io.in[0]->dtype) {
      case DataType::kFloat32: return RunFloat(io, ctx);
      case DataType::kInt64: return RunInt<int64_t>(io, ctx);
      case DataType::kInt32: return RunInt<int32_t>(io, ctx);
      default: Fail("unsupported dtype");
    }
  }

 private:
  float Param(float (ms_schema::ActivationAttr::*get)() const, float fallback) const {
    const auto* a = node_.fb->attr_as_ActivationAttr();
    return a ? (a->*get)() : fallback;
  }

  template <typename T, typename Op>
  void Map(KernelIO& io, const KernelContext& ctx, Op op) {
    const T* x = io.in[0]->as<T>();
    T* y = io.out[0]->as<T>();
    ctx.pool->ParallelFor(io.in[0]->numel(), kParallelElems / 4, [&](int64_t b, int64_t e) {
      MapLoop<T, T>(x + b, y + b, e - b, op);
    });
  }

  // Sin (quarter 0) / Cos (quarter 1): the vectorised polynomial, then libm for the few inputs beyond its range
  // (and NaN / inf), block by block from a copy of the input (the output may be the input's own buffer).
  void MapSinCos(KernelIO& io, const KernelContext& ctx, int32_t quarter) {
    const float* x = io.in[0]->as<float>();
    float* y = io.out[0]->as<float>();
    ctx.pool->ParallelFor(io.in[0]->numel(), kParallelElems / 4, [&](int64_t b, int64_t e) {
      float block[256];
      for (int64_t i = b; i < e; i += 256) {
        const int64_t n = std::min<int64_t>(256, e - i);
        std::memcpy(block, x + i, n * sizeof(float));
        MapLoop<float, float>(block, y + i, n, [quarter](float v) {
          const float clamped = v < -kFastSinLimit || v > kFastSinLimit || v != v ? 0.f : v;
          return FastSinQuadrant(clamped, quarter);
        });
        for (int64_t k = 0; k < n; ++k) {
          if (!(block[k] >= -kFastSinLimit && block[k] <= kFastSinLimit)) {
            y[i + k] = quarter ? std::cos(block[k]) : std::sin(block[k]);
          }
        }
      }
    });
  }

  template <typename T>
  void ClipBounds(KernelIO& io, T& lo, T& hi) {
    lo = std::numeric_limits<T>::lowest();
    hi = std::numeric_limits<T>::max();
    if (auto* a = node_.fb->attr_as_ClipAttr(); a && std::is_same_v<T, float>) {
      lo = static_cast<T>(a->min());
      hi = static_cast<T>(a->max());
    }
    if (io.has(1)) lo = io.in[1]->as<T>()[0];
    if (io.has(2)) hi = io.in[2]->as<T>()[0];
  }

  template <typename T>
  void RunInt(KernelIO& io, const KernelContext& ctx) {
    switch (node_.op) {
      case OpType::Neg: return Map<T>(io, ctx, [](T v) { return T(T(0) - v); });
      case OpType::Relu: return Map<T>(io, ctx, [](T v) { return v > 0 ? v : T(0); });
      case OpType::Abs: return Map<T>(io, ctx, [](T v) { return v < 0 ? T(T(0) - v) : v; });
      case OpType::Sign: return Map<T>(io, ctx, [](T v) { return T((v > 0) - (v < 0)); });
      case OpType::Clip: {
        T lo, hi;
        ClipBounds(io, lo, hi);
        // min(max(v, lo), hi): with lo > hi every element becomes hi (the spec, and ONNX Runtime).
        return Map<T>(io, ctx, [=](T v) {
          const T t = v < lo ? lo : v;
          return t > hi ? hi : t;
        });
      }
      default: Fail("unsupported dtype");
    }
  }

  void RunFloat(KernelIO& io, const KernelContext& ctx) {
    switch (node_.op) {
      case OpType::Relu: return Map<float>(io, ctx, [](float v) { return v < 0.f ? 0.f : v; });   // NaN stays
      case OpType::Sigmoid: return Map<float>(io, ctx, [](float v) { return FastSigmoid(v); });
      case OpType::Tanh: return Map<float>(io, ctx, [](float v) { return FastTanh(v); });
      case OpType::HardSwish:
        return Map<float>(io, ctx, [](float v) { return v * std::min(std::max(v / 6.f + 0.5f, 0.f), 1.f); });
      case OpType::LeakyRelu: {
        const float alpha = node_.fb->attr_as_AlphaAttr() ? node_.fb->attr_as_AlphaAttr()->alpha() : 0.01f;
        return Map<float>(io, ctx, [=](float v) { return v >= 0.f ? v : v * alpha; });
      }
      case OpType::Sqrt: return Map<float>(io, ctx, [](float v) { return std::sqrt(v); });
      case OpType::Reciprocal: return Map<float>(io, ctx, [](float v) { return 1.f / v; });
      case OpType::Neg: return Map<float>(io, ctx, [](float v) { return -v; });
      case OpType::Exp: return Map<float>(io, ctx, [](float v) { return FastExp(v); });
      case OpType::Erf: return Map<float>(io, ctx, [](float v) { return FastErf(v); });
      case OpType::Abs: return Map<float>(io, ctx, [](float v) { return std::fabs(v); });
      case OpType::Sign: return Map<float>(io, ctx, [](float v) { return v > 0.f ? 1.f : (v < 0.f ? -1.f : v); });
      case OpType::Ceil: return Map<float>(io, ctx, [](float v) { return std::ceil(v); });
      case OpType::Floor: return Map<float>(io, ctx, [](float v) { return std::floor(v); });
      case OpType::Round: return Map<float>(io, ctx, [](float v) { return std::nearbyint(v); });   // half to even
      case OpType::Log: return Map<float>(io, ctx, [](float v) { return std::log(v); });
      case OpType::Sin: return MapSinCos(io, ctx, 0);
      case OpType::Cos: return MapSinCos(io, ctx, 1);
      case OpType::Tan: return Map<float>(io, ctx, [](float v) { return std::tan(v); });
      case OpType::Atan: return Map<float>(io, ctx, [](float v) { return std::atan(v); });
      case OpType::Asin: return Map<float>(io, ctx, [](float v) { return std::asin(v); });
      case OpType::Acos: return Map<float>(io, ctx, [](float v) { return std::acos(v); });
      case OpType::Sinh: return Map<float>(io, ctx, [](float v) { return std::sinh(v); });
      case OpType::Cosh: return Map<float>(io, ctx, [](float v) { return std::cosh(v); });
      case OpType::Softplus: return Map<float>(io, ctx, [](float v) { return Softplus(v); });
      case OpType::Softsign: return Map<float>(io, ctx, [](float v) { return v / (1.f + std::fabs(v)); });
      case OpType::Mish: return Map<float>(io, ctx, [](float v) { return v * FastTanh(Softplus(v)); });
      case OpType::Elu: {
        const float alpha = Param(&ms_schema::ActivationAttr::alpha, 1.f);
        return Map<float>(io, ctx, [=](float v) { return v >= 0.f ? v : alpha * (FastExp(v) - 1.f); });
      }
      case OpType::Selu: {
        const float alpha = Param(&ms_schema::ActivationAttr::alpha, 1.67326319217681884765625f);
        const float gamma = Param(&ms_schema::ActivationAttr::gamma, 1.05070102214813232421875f);
        return Map<float>(io, ctx, [=](float v) { return gamma * (v > 0.f ? v : alpha * (FastExp(v) - 1.f)); });
      }
      case OpType::Celu: {
        const float alpha = Param(&ms_schema::ActivationAttr::alpha, 1.f);
        return Map<float>(io, ctx, [=](float v) {
          return std::max(v, 0.f) + std::min(alpha * (FastExp(v / alpha) - 1.f), 0.f);   // (NaN stays)
        });
      }
      case OpType::HardSigmoid: {
        const float alpha = Param(&ms_schema::ActivationAttr::alpha, 0.2f);
        const float beta = Param(&ms_schema::ActivationAttr::beta, 0.5f);
        return Map<float>(io, ctx, [=](float v) { return std::max(std::min(alpha * v + beta, 1.f), 0.f); });   // (NaN stays)
      }
      case OpType::ThresholdedRelu: {
        const float alpha = Param(&ms_schema::ActivationAttr::alpha, 1.f);
        return Map<float>(io, ctx, [=](float v) { return v > alpha ? v : 0.f; });
      }
      case OpType::Gelu: {
        if (node_.fb->attr_as_GeluAttr() && node_.fb->attr_as_GeluAttr()->tanh_approximation())
          return Map<float>(io, ctx, [](float v) {
            return 0.5f * v * (1.f + FastTanh(0.7978845608028654f * (v + 0.044715f * v * v * v)));
          });
        return Map<float>(io, ctx, [](float v) { return 0.5f * v * (1.f + FastErf(v * 0.7071067811865476f)); });
      }
      case OpType::Clip: {
        float lo, hi;
        ClipBounds(io, lo, hi);
        // min(max(v, lo), hi): lo > hi gives hi everywhere (the spec, and ONNX Runtime). NaN propagates like
        // ONNX Runtime: comparisons with NaN are false.
        return Map<float>(io, ctx, [=](float v) {
          const float t = v < lo ? lo : v;
          return t > hi ? hi : t;
        });
      }
      default: Fail("not a unary operator");
    }
  }
};

// IsNaN, IsInf (float -> bool) and Not (bool -> bool).
class PredicateKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void Infer(KernelIO& io) override {
    TensorRec& x = In(io, 0);
    Require(x.dtype == (node_.op == OpType::Not ? DataType::kBool : DataType::kFloat32),
            std::string("unsupported dtype ") + DataTypeName(x.dtype));
    io.out[0]->shape = x.shape;
    io.out[0]->dtype = DataType::kBool;
  }
  void Run(KernelIO& io, const KernelContext&) override {
    const int64_t n = io.in[0]->numel();
    bool* y = io.out[0]->as<bool>();
    if (node_.op == OpType::Not) {
      const bool* x = io.in[0]->as<bool>();
      for (int64_t i = 0; i < n; ++i) y[i] = !x[i];
      return;
    }
    const float* x = io.in[0]->as<float>();
    if (node_.op == OpType::IsNaN) {
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] != x[i];
      return;
    }
    const auto* a = node_.fb->attr_as_IsInfAttr();
    const bool pos = !a || a->detect_positive(), neg = !a || a->detect_negative();
    for (int64_t i = 0; i < n; ++i) y[i] = (pos && x[i] == INFINITY) || (neg && x[i] == -INFINITY);
  }
};

template <typename S, typename D>
D ConvertValue(S v) {
  if constexpr (std::is_same_v<D, bool>) {
    return v != S(0);
  } else if constexpr (std::is_floating_point_v<S> && std::is_integral_v<D>) {
    // Out-of-range and NaN values have no defined result; clamp instead of invoking UB.
    if (!(v == v)) return D(0);
    const double d = static_cast<double>(v);
    if (d <= static_cast<double>(std::numeric_limits<D>::lowest())) return std::numeric_limits<D>::lowest();
    if (d >= static_cast<double>(std::numeric_limits<D>::max())) return std::numeric_limits<D>::max();
    return static_cast<D>(v);
  } else {
    return static_cast<D>(v);
  }
}

class CastKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void Infer(KernelIO& io) override {
    TensorRec& x = In(io, 0);
    to_ = static_cast<DataType>(node_.fb->attr_as_CastAttr()->to());
    Require(DataTypeSize(to_) != 0, "unknown target dtype");
    io.out[0]->shape = x.shape;
    io.out[0]->dtype = to_;
  }
  void Run(KernelIO& io, const KernelContext& ctx) override {
    const DataType from = io.in[0]->dtype;
    if (from == to_) {
      std::memcpy(io.out[0]->data, io.in[0]->data, io.in[0]->nbytes);
      return;
    }
    switch (from) {
      case DataType::kFloat32: return To<float>(io);
      case DataType::kFloat64: return To<double>(io);
      case DataType::kInt64: return To<int64_t>(io);
      case DataType::kInt32: return To<int32_t>(io);
      case DataType::kInt16: return To<int16_t>(io);
      case DataType::kInt8: return To<int8_t>(io);
      case DataType::kUInt8: return To<uint8_t>(io);
      case DataType::kUInt16: return To<uint16_t>(io);
      case DataType::kUInt32: return To<uint32_t>(io);
      case DataType::kUInt64: return To<uint64_t>(io);
      case DataType::kBool: return To<bool>(io);
      case DataType::kFloat16: return FromHalf(io, false);
      case DataType::kBFloat16: return FromHalf(io, true);
      default: Fail(std::string("cannot cast from ") + DataTypeName(from));
    }
  }

 private:
  template <typename S>
  void To(KernelIO& io) {
    const S* x = io.in[0]->as<S>();
    const int64_t n = io.in[0]->numel();
    void* y = io.out[0]->data;
    switch (to_) {
      case DataType::kFloat32: return Loop<S, float>(x, y, n);
      case DataType::kFloat64: return Loop<S, double>(x, y, n);
      case DataType::kInt64: return Loop<S, int64_t>(x, y, n);
      case DataType::kInt32: return Loop<S, int32_t>(x, y, n);
      case DataType::kInt16: return Loop<S, int16_t>(x, y, n);
      case DataType::kInt8: return Loop<S, int8_t>(x, y, n);
      case DataType::kUInt8: return Loop<S, uint8_t>(x, y, n);
      case DataType::kUInt16: return Loop<S, uint16_t>(x, y, n);
      case DataType::kUInt32: return Loop<S, uint32_t>(x, y, n);
      case DataType::kUInt64: return Loop<S, uint64_t>(x, y, n);
      case DataType::kBool: return Loop<S, bool>(x, y, n);
      case DataType::kFloat16:
      case DataType::kBFloat16: {
        uint16_t* h = static_cast<uint16_t*>(y);
        for (int64_t i = 0; i < n; ++i) {
          const float f = static_cast<float>(x[i]);
          h[i] = to_ == DataType::kFloat16 ? FloatToHalf(f) : FloatToBFloat16(f);
        }
        return;
      }
      default: Fail(std::string("cannot cast to ") + DataTypeName(to_));
    }
  }
  template <typename S, typename D>
  static void Loop(const S* x, void* y, int64_t n) {
    D* d = static_cast<D*>(y);
    for (int64_t i = 0; i < n; ++i) d[i] = ConvertValue<S, D>(x[i]);
  }
  void FromHalf(KernelIO& io, bool bf16) {
    const int64_t n = io.in[0]->numel();
    std::vector<float> tmp(n);
    const uint16_t* h = io.in[0]->as<uint16_t>();
    for (int64_t i = 0; i < n; ++i) tmp[i] = bf16 ? BFloat16ToFloat(h[i]) : HalfToFloat(h[i]);
    TensorRec f = *io.in[0];
    f.owned.clear();
    f.dtype = DataType::kFloat32;
    f.data = tmp.data();
    KernelIO sub = io;
    sub.in = {&f};
    To<float>(sub);
  }
  DataType to_ = DataType::kUnknown;
};

}  // namespace

void RegisterElementwiseKernels(KernelRegistry& r) {
  for (OpType op : {OpType::Add, OpType::Sub, OpType::Mul, OpType::Div, OpType::Pow, OpType::Equal, OpType::Mod,
                    OpType::Less, OpType::LessOrEqual, OpType::Greater, OpType::GreaterOrEqual, OpType::Max,
                    OpType::Min, OpType::Sum})
    for (DataType t : {DataType::kFloat32, DataType::kFloat64, DataType::kInt64, DataType::kInt32, DataType::kInt16,
                       DataType::kInt8, DataType::kUInt8, DataType::kUInt16, DataType::kUInt32, DataType::kUInt64})
      r.Register(op, t, MakeKernel<BinaryKernel>);
  for (OpType op : {OpType::Mean, OpType::PRelu}) r.Register(op, DataType::kFloat32, MakeKernel<BinaryKernel>);
  for (OpType op : {OpType::Equal, OpType::And, OpType::Or, OpType::Xor})
    r.Register(op, DataType::kBool, MakeKernel<BinaryKernel>);
  for (DataType t : {DataType::kUInt8, DataType::kUInt16, DataType::kUInt32, DataType::kUInt64})
    r.Register(OpType::BitShift, t, MakeKernel<BinaryKernel>);
  r.Register(OpType::Where, DataType::kBool, MakeKernel<WhereKernel>);
  for (OpType op : {OpType::Relu, OpType::Sigmoid, OpType::Tanh, OpType::HardSwish, OpType::LeakyRelu, OpType::Sqrt,
                    OpType::Reciprocal, OpType::Neg, OpType::Exp, OpType::Erf, OpType::Clip, OpType::Abs, OpType::Sign,
                    OpType::Ceil, OpType::Floor, OpType::Round, OpType::Log, OpType::Sin, OpType::Cos, OpType::Tan,
                    OpType::Atan, OpType::Asin, OpType::Acos, OpType::Sinh, OpType::Cosh, OpType::Softplus,
                    OpType::Softsign, OpType::Mish, OpType::Elu, OpType::Selu, OpType::Celu, OpType::HardSigmoid,
                    OpType::ThresholdedRelu, OpType::Gelu})
    r.Register(op, DataType::kFloat32, MakeKernel<UnaryKernel>);
  for (OpType op : {OpType::Neg, OpType::Relu, OpType::Clip, OpType::Abs, OpType::Sign})
    for (DataType t : {DataType::kInt64, DataType::kInt32}) r.Register(op, t, MakeKernel<UnaryKernel>);
  r.Register(OpType::IsNaN, DataType::kFloat32, MakeKernel<PredicateKernel>);
  r.Register(OpType::IsInf, DataType::kFloat32, MakeKernel<PredicateKernel>);
  r.Register(OpType::Not, DataType::kBool, MakeKernel<PredicateKernel>);
  r.Register(OpType::Cast, DataType::kUnknown, MakeKernel<CastKernel>);
}

}  // namespace lite
