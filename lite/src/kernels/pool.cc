// MaxPool, AveragePool (1-D to 3-D, pads, dilations, ceil_mode, count_include_pad) and GlobalAveragePool.
#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/channel_blocked_layout.h"
#include "cpu/conv/bf16_pixel_conv.h"
#include "cpu/conv/blocked_rows.h"
#include "cpu/isa_dispatch.h"
#include "cpu/quantized/u8_pixel_conv.h"
#include "cpu/simd/simd.h"

#ifdef LITE_X86_SIMD
#include <immintrin.h>
#endif
#include "kernels/common.h"
#include "kernels/register.h"
#include "kernels/spatial.h"

namespace lite {
namespace {

// out[w] = max (or sum) over `count` rows (ld apart) of row[w]; NaN propagates like the direct form. T is float, or
// uint8_t for the max of quantisation codes.
template <typename T>
LITE_VECTOR_CLONES void CombineRows(const T* row, int64_t ld, int64_t count, int64_t W, bool is_max, T* out) {
  std::copy(row, row + W, out);
  for (int64_t h = 1; h < count; ++h) {
    const T* rh = row + h * ld;
    if (is_max) {
      for (int64_t w = 0; w < W; ++w) out[w] = (rh[w] > out[w] || rh[w] != rh[w]) ? rh[w] : out[w];
    } else {
      for (int64_t w = 0; w < W; ++w) out[w] += rh[w];
    }
  }
}

// y[i] = max(y[i], src[i * stride]) (or +=); strides 1 and 2 get constant-stride loops the compiler vectorises.
template <typename T>
LITE_VECTOR_CLONES void CombineStrided(const T* src, int64_t stride, int64_t n, bool is_max, T* y) {
  auto step = [](T v, T m) { return (v > m || v != v) ? v : m; };
  if (!is_max) {
    if (stride == 1) {
      for (int64_t i = 0; i < n; ++i) y[i] += src[i];
    } else if (stride == 2) {
      for (int64_t i = 0; i < n; ++i) y[i] += src[2 * i];
    } else {
      for (int64_t i = 0; i < n; ++i) y[i] += src[i * stride];
    }
  } else if (stride == 1) {
    for (int64_t i = 0; i < n; ++i) y[i] = step(src[i], y[i]);
  } else if (stride == 2) {
    for (int64_t i = 0; i < n; ++i) y[i] = step(src[2 * i], y[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = step(src[i * stride], y[i]);
  }
}

// y[ow] = max over kw < KW of rp[2 ow + kw] (NaN propagates), for a row rp padded with -inf: 8 outputs per step,
// each tap the even lanes of 16 consecutive floats. rp is readable up to 2 * OW + KW + 14.
LITE_VECTOR_CLONES void MaxStride2(const float* rp, int64_t OW, int64_t KW, float* y) {
  typedef float v8 __attribute__((vector_size(32)));
  typedef int32_t v8i __attribute__((vector_size(32)));
  int64_t ow = 0;
  for (; ow + 8 <= OW; ow += 8) {
    v8 a, b;
    std::memcpy(&a, rp + 2 * ow, sizeof(v8));
    std::memcpy(&b, rp + 2 * ow + 8, sizeof(v8));
    v8 m = __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14);
    for (int64_t kw = 1; kw < KW; ++kw) {
      std::memcpy(&a, rp + 2 * ow + kw, sizeof(v8));
      std::memcpy(&b, rp + 2 * ow + kw + 8, sizeof(v8));
      const v8 v = __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14);
      const v8i take = (v > m) | (v != v);   // lanes of all ones: a bitwise select (a vector ?: went scalar)
      m = (v8)(((v8i)v & take) | ((v8i)m & ~take));
    }
    std::memcpy(y + ow, &m, sizeof(v8));
  }
  for (; ow < OW; ++ow) {
    float m = rp[2 * ow];
    for (int64_t kw = 1; kw < KW; ++kw) {
      const float v = rp[2 * ow + kw];
      m = (v > m || v != v) ? v : m;
    }
    y[ow] = m;
  }
}

// MaxStride2 for uint8 codes (rp padded with code 0, the lowest): 16 outputs per step, the even bytes of 32.
LITE_VECTOR_CLONES void MaxStride2Codes(const uint8_t* rp, int64_t OW, int64_t KW, uint8_t* y) {
  typedef uint8_t v16 __attribute__((vector_size(16)));
  auto even_bytes = [rp](int64_t at) {   // rp[at], rp[at + 2], ..., rp[at + 30]
    v16 a, b;
    std::memcpy(&a, rp + at, sizeof(v16));
    std::memcpy(&b, rp + at + 16, sizeof(v16));
    return __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  };
  if (OW < 16) {
    for (int64_t ow = 0; ow < OW; ++ow) {
      uint8_t m = rp[2 * ow];
      for (int64_t kw = 1; kw < KW; ++kw) m = std::max(m, rp[2 * ow + kw]);
      y[ow] = m;
    }
    return;
  }
  for (int64_t step = 0;; step += 16) {
    const int64_t ow = std::min(step, OW - 16);   // the last 16 end at OW (recomputing a few: the same values)
    v16 m = even_bytes(2 * ow);
    for (int64_t kw = 1; kw < KW; ++kw) {
      const v16 v = even_bytes(2 * ow + kw);
      const v16 take = (v16)(v > m);
      m = (v & take) | (m & ~take);
    }
    std::memcpy(y + ow, &m, sizeof(v16));
    if (ow == OW - 16) break;
  }
}

// Channel-blocked 2-D max pool of one plane of 8-channel vectors (H x W x 8 -> OH x OW x 8): per output row the window's
// rows are combined into one row of W x 8 values, then each output takes the max of its columns' vectors.
LITE_VECTOR_CLONES void MaxPoolBlockedPlane(const float* x, int64_t W, int64_t OH, int64_t OW,
                                            const int64_t* hlo, const int64_t* hhi, const int64_t* wlo,
                                            const int64_t* whi, float* row, float* y) {
  constexpr int64_t kB = kChannelBlock;
  static_assert(kChannelBlock == 8, "a pixel's block is one 8-float vector");
  typedef float v8 __attribute__((vector_size(32)));
  typedef int32_t v8i __attribute__((vector_size(32)));
  // The max of the values and, apart, whether any was NaN: a NaN lane is made all ones (a NaN) once, when the
  // vector is stored, so NaN propagates as in the NCHW form. `v > m ? v : m` is one vmaxps; the per-value select
  // that propagated NaN took six vector operations a value (the pool ran 1.6x ONNX Runtime's time). (Vectors by
  // reference only: this function's default clone has no AVX, and a vector passed by value would change its
  // calling convention.)
  auto take = [](const float* p, v8& m, v8i& nan) {
    v8 v;
    std::memcpy(&v, p, sizeof(v));
    nan |= (v8i)(v != v);
    m = v > m ? v : m;
  };
  auto store = [](float* p, const v8& m, const v8i& nan) {
    const v8 out = (v8)((v8i)m | nan);
    std::memcpy(p, &out, sizeof(out));
  };
  for (int64_t oh = 0; oh < OH; ++oh) {
    float* yr = y + oh * OW * kB;
    const int64_t rows = hhi[oh] - hlo[oh];
    if (rows <= 0) {
      std::fill(yr, yr + OW * kB, -std::numeric_limits<float>::infinity());
      continue;
    }
    // The window's rows combined into one (in a single pass for two or three rows: a 3x3 pool's), then each output
    // takes its columns of it.
    const float* r0 = x + hlo[oh] * W * kB;
    const float* combined = r0;
    if (rows == 2 || rows == 3) {
      const float* r1 = r0 + W * kB;
      const float* r2 = rows == 3 ? r1 + W * kB : r1;
      for (int64_t w = 0; w < W * kB; w += kB) {
        v8 m;
        std::memcpy(&m, r0 + w, sizeof(m));
        v8i nan = (v8i)(m != m);
        take(r1 + w, m, nan);
        take(r2 + w, m, nan);
        store(row + w, m, nan);
      }
      combined = row;
    } else if (rows > 3) {
      CombineRows(r0, W * kB, rows, W * kB, true, row);
      combined = row;
    }
    for (int64_t ow = 0; ow < OW; ++ow) {   // one pixel's 8 channels are one vector
      const int64_t lo = wlo[ow], hi = whi[ow];
      v8 m = v8{} - std::numeric_limits<float>::infinity();
      v8i nan = {};
      if (hi - lo == 3) {
        std::memcpy(&m, combined + lo * kB, sizeof(m));
        nan = (v8i)(m != m);
        take(combined + (lo + 1) * kB, m, nan);
        take(combined + (lo + 2) * kB, m, nan);
      } else {
        for (int64_t iw = lo; iw < hi; ++iw) take(combined + iw * kB, m, nan);
      }
      store(yr + ow * kB, m, nan);
    }
  }
}

// One block's area x 8 values reduced to 8 (max with NaN propagating, or the mean). Four pixels at a time, in four
// independent chains per channel (one chain of 49 dependent adds per block was most of a 7x7 x 2048 global pool).
LITE_VECTOR_CLONES void ReduceBlock(const float* x, int64_t area, bool is_max, float* y) {
  constexpr int64_t kB = kChannelBlock, kLanes = 4 * kB;
  auto take = [](float a, float v) { return (v > a || v != v) ? v : a; };
  float acc[kLanes];
  std::fill(acc, acc + kLanes, is_max ? -std::numeric_limits<float>::infinity() : 0.f);
  const int64_t n = area * kB, whole = n / kLanes * kLanes;
  if (is_max) {
    for (int64_t i = 0; i < whole; i += kLanes)
      for (int64_t j = 0; j < kLanes; ++j) acc[j] = take(acc[j], x[i + j]);
    for (int64_t i = whole; i < n; ++i) acc[i - whole] = take(acc[i - whole], x[i]);
  } else {
    for (int64_t i = 0; i < whole; i += kLanes)
      for (int64_t j = 0; j < kLanes; ++j) acc[j] += x[i + j];
    for (int64_t i = whole; i < n; ++i) acc[i - whole] += x[i];
  }
  for (int64_t c = 0; c < kB; ++c) {
    float r = acc[c];
    for (int64_t k = 1; k < 4; ++k) r = is_max ? take(r, acc[k * kB + c]) : r + acc[k * kB + c];
    y[c] = area == 0 ? 0.f : is_max ? r : r / static_cast<float>(area);
  }
}

#ifdef LITE_X86_SIMD
#define LITE_POOL_BF16 __attribute__((target("avx512f,avx512bw,avx512vl")))
// bf16 bits as int16 keys ordered like their values (negatives' magnitude bits flipped), any NaN made the quiet
// positive one first so that it sorts above +inf and propagates; the map is its own inverse on the result.
LITE_POOL_BF16 inline __m512i Bf16OrderKey(__m512i b) {
  const __mmask32 nan = _mm512_cmpgt_epu16_mask(_mm512_and_si512(b, _mm512_set1_epi16(0x7FFF)), _mm512_set1_epi16(0x7F80));
  b = _mm512_mask_mov_epi16(b, nan, _mm512_set1_epi16(0x7FC0));
  return _mm512_xor_si512(b, _mm512_and_si512(_mm512_srai_epi16(b, 15), _mm512_set1_epi16(0x7FFF)));
}

// Output rows [oh0, oh1) of a 2-D max pool over bf16 rows (core/bf16_pixel_layout.h: pixel-major, ld values apart,
// C channels used). Per output row the window's input rows are combined first (one contiguous run of W x ld values
// each), then each output pixel takes the max of its columns: 32 channels per instruction, on order keys.
LITE_POOL_BF16 void MaxPoolBf16Rows(const uint16_t* x, int64_t W, int64_t C, int64_t ld, int64_t OW,
                                    const int64_t* hlo, const int64_t* hhi, const int64_t* wlo, const int64_t* whi,
                                    int64_t oh0, int64_t oh1, uint16_t* row, uint16_t* y) {
  const int64_t span = W * ld;
  for (int64_t oh = oh0; oh < oh1; ++oh) {
    for (int64_t i = 0; i < span; i += 32) {
      const __mmask32 m = span - i >= 32 ? 0xFFFFFFFFu : static_cast<__mmask32>((1u << (span - i)) - 1);
      __m512i best = _mm512_set1_epi16(static_cast<int16_t>(0x807F));   // the key of -inf
      for (int64_t ih = hlo[oh]; ih < hhi[oh]; ++ih)
        best = _mm512_max_epi16(best, Bf16OrderKey(_mm512_maskz_loadu_epi16(m, x + ih * span + i)));
      _mm512_mask_storeu_epi16(row + i, m, best);
    }
    for (int64_t ow = 0; ow < OW; ++ow)
      for (int64_t c = 0; c < C; c += 32) {
        const __mmask32 m = C - c >= 32 ? 0xFFFFFFFFu : static_cast<__mmask32>((1u << (C - c)) - 1);
        __m512i best = _mm512_set1_epi16(static_cast<int16_t>(0x807F));
        for (int64_t iw = wlo[ow]; iw < whi[ow]; ++iw)
          best = _mm512_max_epi16(best, _mm512_maskz_loadu_epi16(m, row + iw * ld + c));
        _mm512_mask_storeu_epi16(y + (oh * OW + ow) * ld + c, m, Bf16OrderKey(best));
      }
  }
}

// The same over uint8 rows of quantisation codes (core/u8_pixel_layout.h): the codes' max is the max's code (one scale
// and zero point in and out), 64 channels per instruction.
LITE_POOL_BF16 void MaxPoolU8Rows(const uint8_t* x, int64_t W, int64_t C, int64_t ld, int64_t OW, const int64_t* hlo,
                                  const int64_t* hhi, const int64_t* wlo, const int64_t* whi, int64_t oh0, int64_t oh1,
                                  uint8_t* row, uint8_t* y) {
  const int64_t span = W * ld;
  for (int64_t oh = oh0; oh < oh1; ++oh) {
    for (int64_t i = 0; i < span; i += 64) {
      const __mmask64 m = span - i >= 64 ? ~__mmask64{0} : (__mmask64{1} << (span - i)) - 1;
      __m512i best = _mm512_setzero_si512();
      for (int64_t ih = hlo[oh]; ih < hhi[oh]; ++ih)
        best = _mm512_max_epu8(best, _mm512_maskz_loadu_epi8(m, x + ih * span + i));
      _mm512_mask_storeu_epi8(row + i, m, best);
    }
    for (int64_t ow = 0; ow < OW; ++ow)
      for (int64_t c = 0; c < C; c += 64) {
        const __mmask64 m = C - c >= 64 ? ~__mmask64{0} : (__mmask64{1} << (C - c)) - 1;
        __m512i best = _mm512_setzero_si512();
        for (int64_t iw = wlo[ow]; iw < whi[ow]; ++iw)
          best = _mm512_max_epu8(best, _mm512_maskz_loadu_epi8(m, row + iw * ld + c));
        _mm512_mask_storeu_epi8(y + (oh * OW + ow) * ld + c, m, best);
      }
  }
}
#endif

using ms_schema::OpType;

class PoolKernel : public Kernel {
 public:
  using Kernel::Kernel;

  void Infer(KernelIO& io) override {
    const auto* attr = node_.fb->attr_as_PoolAttr();
    TensorRec& x = In(io, 0);
    codes_ = x.dtype == DataType::kUInt8;
    Require(x.dtype == DataType::kFloat32 || (codes_ && node_.op == OpType::MaxPool && x.act_scale > 0.f),
            "only float32 is supported (and MaxPool of quantised uint8 codes)");
    Require(x.shape.size() >= 3 && x.shape.size() <= 5, "input must be 3-D to 5-D, got " + ShapeToString(x.shape));
    Require(io.out.size() == 1, "the Indices output is not supported");
    if (codes_)   // the codes' max is the max's code only under one scale and zero point
      Require(io.out[0]->act_scale == x.act_scale && io.out[0]->act_zero_point == x.act_zero_point,
              "MaxPool of uint8 codes needs its output quantised like its input");
    std::vector<int64_t> in_dims(x.shape.begin() + 2, x.shape.end());
    Require(attr->kernel_shape() && attr->kernel_shape()->size() == in_dims.size(), "kernel_shape is required");
    std::vector<int64_t> kernel(attr->kernel_shape()->begin(), attr->kernel_shape()->end());
    std::string err = ResolveSpatial(in_dims, kernel, attr->strides(), attr->pads(), attr->dilations(),
                                     attr->auto_pad(), attr->ceil_mode(), sp_);
    Require(err.empty(), err);
    Shape out = {x.shape[0], x.shape[1]};
    out.insert(out.end(), sp_.out.begin(), sp_.out.end());
    // The window tables below hold 24 bytes per output position of each dim: a hostile pad or stride must not make
    // them (or the output) larger than memory.
    for (int64_t d : sp_.out)
      Require(d <= static_cast<int64_t>(PhysicalMemoryBytes() / 64), "output dim " + std::to_string(d) + " of shape " +
                                                                        ShapeToString(out) + " is larger than memory");
    io.out[0]->shape = out;
    io.out[0]->dtype = x.dtype;
    // Treat every pool as 3-D: missing leading spatial dims become size 1.
    const size_t pad = 3 - in_dims.size();
    auto widen = [&](const std::vector<int64_t>& v, int64_t fill) {
      std::vector<int64_t> r(pad, fill);
      r.insert(r.end(), v.begin(), v.end());
      return r;
    };
    in3_ = widen(in_dims, 1);
    out3_ = widen(sp_.out, 1);
    k3_ = widen(sp_.kernel, 1);
    s3_ = widen(sp_.strides, 1);
    d3_ = widen(sp_.dilations, 1);
    pb3_ = widen(sp_.pad_begin, 0);
    pe3_ = widen(sp_.pad_end, 0);
    planes_ = x.shape[0] * x.shape[1];
    // Per output position and dim: first in-bounds tap on the dilation grid, the bound, and the
    // window size counted with padding (count_include_pad). Hoisted out of the pooling loops.
    for (int i = 0; i < 3; ++i) {
      win_lo_[i].resize(out3_[i]);
      win_hi_[i].resize(out3_[i]);
      win_padded_[i].resize(out3_[i]);
      for (int64_t o = 0; o < out3_[i]; ++o) {
        const int64_t begin = o * s3_[i] - pb3_[i];
        const int64_t end = begin + (k3_[i] - 1) * d3_[i] + 1;
        win_padded_[i][o] = (std::min(end, in3_[i] + pe3_[i]) - begin + d3_[i] - 1) / d3_[i];
        win_lo_[i][o] = begin >= 0 ? begin : begin + (-begin + d3_[i] - 1) / d3_[i] * d3_[i];
        win_hi_[i][o] = std::min(end, in3_[i]);
      }
    }
  }

  // A float 2-D max pool without dilation reads and writes channel-blocked tensors: the stem's output then stays
  // blocked into the network (ResNet-50: no transposition after the stem's Conv). It also writes blocks from an NCHW
  // input (a stem whose kernel writes NCHW): pooled as NCHW 8 planes at a time, then transposed into a block.
  bool AcceptsLayouts(const KernelIO& io) const override {
    const bool in_blocked = io.in[0]->channel_blocked, out_blocked = io.out[0]->channel_blocked;
    if (!in_blocked && !out_blocked) return true;
    return out_blocked && node_.op == OpType::MaxPool && !codes_ && TwoD();
  }

  // At compute precision bfloat16 a 2-D max pool between bf16 pixel-major Convs reads and writes their bf16 rows
  // (both, or neither): a stem's output then stays bf16 into the network (ResNet-50: no float32 pass between the
  // stem and the first block, whose two Convs read the pool's rows in place).
  bool AcceptsBf16Pixels(const KernelIO& io) const override {
    const TensorRec& x = *io.in[0];
    const TensorRec& y = *io.out[0];
    if (!x.bf16_pixels && !y.bf16_pixels) return true;
#ifdef LITE_X86_SIMD
    if (x.bf16_pixels != y.bf16_pixels || node_.op != OpType::MaxPool || codes_ || !TwoD()) return false;
    const int64_t N = x.shape[0], C = x.shape[1];
    return x.nbytes >= static_cast<size_t>(N) * Bf16PixelConv::Bf16RowsBytes(C, in3_[1] * in3_[2]) &&
           y.nbytes >= static_cast<size_t>(N) * Bf16PixelConv::Bf16RowsBytes(C, out3_[1] * out3_[2]);
#else
    return false;
#endif
  }

  // A 2-D max pool of uint8 codes between pixel-major integer Convs reads and writes their uint8 rows (both, or
  // neither): a stem's output then stays in rows into the network (ResNet-50 int8: no transposition to NCHW and back
  // around the pool).
  bool AcceptsU8Pixels(const KernelIO& io) const override {
    const TensorRec& x = *io.in[0];
    const TensorRec& y = *io.out[0];
    if (!x.u8_pixels && !y.u8_pixels) return true;
#ifdef LITE_X86_SIMD
    // (the pass grows the marked tensors' bytes to the rows' size after every kernel has answered)
    return x.u8_pixels == y.u8_pixels && node_.op == OpType::MaxPool && codes_ && TwoD() && x.shape.size() == 4;
#else
    return false;
#endif
  }

  void Run(KernelIO& io, const KernelContext& ctx) override {
    const bool is_max = node_.op == OpType::MaxPool;
    const bool include_pad = node_.fb->attr_as_PoolAttr()->count_include_pad();
    const bool two_d = TwoD();
    if (io.in[0]->bf16_pixels) return RunBf16RowsMax(io, ctx);
    if (io.in[0]->u8_pixels) return RunU8RowsMax(io, ctx);
    if (io.in[0]->channel_blocked) return RunBlockedMax(io.in[0]->as<float>(), io.out[0]->as<float>(), ctx);
    if (io.out[0]->channel_blocked) {   // 8 planes at a time pooled into a buffer, then transposed into a block
      const int64_t P = out3_[1] * out3_[2], in_block = kChannelBlock * in3_[1] * in3_[2];
      const float* x = io.in[0]->as<float>();
      float* y = io.out[0]->as<float>();
      ctx.pool->ParallelFor(planes_ / kChannelBlock, 1, [&](int64_t b, int64_t e) {
        thread_local std::vector<float> planes;
        if (planes.size() < static_cast<size_t>(kChannelBlock * P)) planes.resize(kChannelBlock * P);
        for (int64_t blk = b; blk < e; ++blk) {
          Pool2DPlanes(x + blk * in_block, planes.data(), 0, kChannelBlock, true, false);
          LinesToBlockedRow(planes.data(), P, P, y + blk * kChannelBlock * P);
        }
      });
      return;
    }
    if (codes_) {
      Require(two_d, "MaxPool of uint8 codes is 2-D without dilation");
      return Run2D(io.in[0]->as<uint8_t>(), io.out[0]->as<uint8_t>(), true, false, ctx);
    }
    const float* x = io.in[0]->as<float>();
    float* y = io.out[0]->as<float>();
    const int64_t in_plane = in3_[0] * in3_[1] * in3_[2];
    const int64_t out_plane = out3_[0] * out3_[1] * out3_[2];
    if (two_d) return Run2D(x, y, is_max, include_pad, ctx);
    ctx.pool->ParallelFor(planes_, 1, [&](int64_t pb, int64_t pe) {
      for (int64_t p = pb; p < pe; ++p) {
        const float* xp = x + p * in_plane;
        float* yp = y + p * out_plane;
        for (int64_t od = 0; od < out3_[0]; ++od)
          for (int64_t oh = 0; oh < out3_[1]; ++oh)
            for (int64_t ow = 0; ow < out3_[2]; ++ow) {
              const int64_t o[3] = {od, oh, ow};
              float acc = is_max ? -std::numeric_limits<float>::infinity() : 0.f;
              int64_t count = 0, padded = 1;
              int64_t lo[3], hi[3];
              for (int i = 0; i < 3; ++i) {
                lo[i] = win_lo_[i][o[i]];
                hi[i] = win_hi_[i][o[i]];
                padded *= win_padded_[i][o[i]];
              }
              for (int64_t a = lo[0]; a < hi[0]; a += d3_[0]) {
                for (int64_t b = lo[1]; b < hi[1]; b += d3_[1]) {
                  const float* row = xp + (a * in3_[1] + b) * in3_[2];
                  if (is_max) {
                    for (int64_t c = lo[2]; c < hi[2]; c += d3_[2]) {
                      const float v = row[c];
                      acc = (v > acc || v != v) ? v : acc;
                    }
                  } else {
                    for (int64_t c = lo[2]; c < hi[2]; c += d3_[2]) acc += row[c];
                  }
                }
              }
              if (!is_max) {
                const auto taps = [&](int i) { return hi[i] > lo[i] ? (hi[i] - lo[i] + d3_[i] - 1) / d3_[i] : 0; };
                count = taps(0) * taps(1) * taps(2);
              }
              if (!is_max) acc = (include_pad ? padded : count) > 0 ? acc / (include_pad ? padded : count) : 0.f;
              yp[(od * out3_[1] + oh) * out3_[2] + ow] = acc;
            }
      }
    });
  }

 private:
  bool TwoD() const { return in3_[0] == 1 && out3_[0] == 1 && d3_[1] == 1 && d3_[2] == 1; }

#ifdef LITE_X86_SIMD
  // A max pool over pixel-major rows (bf16 values or uint8 codes): ld elements between rows, the images' bytes, the
  // value of the padding row the consumers read after the pixels, and the kernel for a run of output rows.
  template <typename T>
  using RowsMaxFn = void (*)(const T*, int64_t, int64_t, int64_t, int64_t, const int64_t*, const int64_t*,
                             const int64_t*, const int64_t*, int64_t, int64_t, T*, T*);
  template <typename T>
  void RunRowsMax(KernelIO& io, const KernelContext& ctx, int64_t ld, size_t in_bytes, size_t out_bytes, T pad,
                  RowsMaxFn<T> max_rows) const {
    const int64_t N = io.in[0]->shape[0], C = io.in[0]->shape[1];
    const int64_t W = in3_[2], OH = out3_[1], OW = out3_[2];
    for (int64_t n = 0; n < N; ++n) {
      const T* x = io.in[0]->as<T>() + n * (in_bytes / sizeof(T));
      T* y = io.out[0]->as<T>() + n * (out_bytes / sizeof(T));
      ctx.pool->ParallelFor(OH, 2, [&](int64_t r0, int64_t r1) {
        thread_local std::vector<T> row;
        if (row.size() < static_cast<size_t>(W * ld)) row.resize(W * ld);
        max_rows(x, W, C, ld, OW, win_lo_[1].data(), win_hi_[1].data(), win_lo_[2].data(), win_hi_[2].data(), r0, r1,
                 row.data(), y);
      });
      std::fill(y + OH * OW * ld, y + (OH * OW + 1) * ld, pad);
    }
  }
#endif

  void RunU8RowsMax(KernelIO& io, const KernelContext& ctx) const {
#ifdef LITE_X86_SIMD
    const int64_t C = io.in[0]->shape[1];   // the padding row: the output's zero point (its codes' zero)
    RunRowsMax<uint8_t>(io, ctx, U8PixelConv::RowStride(C), U8PixelConv::RowsBytes(C, in3_[1] * in3_[2]),
                        U8PixelConv::RowsBytes(C, out3_[1] * out3_[2]),
                        static_cast<uint8_t>(io.out[0]->act_zero_point), MaxPoolU8Rows);
#else
    (void)io, (void)ctx;
#endif
  }

  void RunBf16RowsMax(KernelIO& io, const KernelContext& ctx) const {
#ifdef LITE_X86_SIMD
    const int64_t C = io.in[0]->shape[1];
    RunRowsMax<uint16_t>(io, ctx, Bf16PixelConv::Bf16RowStride(C), Bf16PixelConv::Bf16RowsBytes(C, in3_[1] * in3_[2]),
                         Bf16PixelConv::Bf16RowsBytes(C, out3_[1] * out3_[2]), 0, MaxPoolBf16Rows);
#else
    (void)io, (void)ctx;
#endif
  }

  void RunBlockedMax(const float* x, float* y, const KernelContext& ctx) const {
    const int64_t H = in3_[1], W = in3_[2], OH = out3_[1], OW = out3_[2];
    const int64_t blocks = planes_ / kChannelBlock;   // planes_ = N x C, C a multiple of 8
    ctx.pool->ParallelFor(blocks, 1, [&](int64_t b0, int64_t b1) {
      thread_local std::vector<float> row;
      if (row.size() < static_cast<size_t>(W * kChannelBlock)) row.resize(W * kChannelBlock);
      for (int64_t b = b0; b < b1; ++b)
        MaxPoolBlockedPlane(x + b * H * W * kChannelBlock, W, OH, OW, win_lo_[1].data(), win_hi_[1].data(),
                            win_lo_[2].data(), win_hi_[2].data(), row.data(), y + b * OH * OW * kChannelBlock);
    });
  }

  // 2-D pooling without dilation: the common case, with the window bounds of each row and column hoisted.
  // Per output row, the window's input rows are combined first (contiguous, vectorised), then each output
  // takes its KW columns of that one row: KH + KW steps per output instead of KH * KW strided ones
  // (ResNet-50's 3x3 stride-2 max pool: 0.4x the time). A float max pool at stride 2 combines the rows into a
  // copy padded with -inf and takes the columns 8 outputs at a time (MaxStride2): 0.38x the time again.
  template <typename T>
  void Pool2DPlanes(const T* x, T* y, int64_t pb, int64_t pe, bool is_max, bool include_pad) const {
    const int64_t H = in3_[1], W = in3_[2], OH = out3_[1], OW = out3_[2];
    const int64_t* hlo = win_lo_[1].data();
    const int64_t* hhi = win_hi_[1].data();
    const int64_t* wlo = win_lo_[2].data();
    const int64_t* whi = win_hi_[2].data();
    const int64_t KW = k3_[2], SW = s3_[2], pad_w = pb3_[2];
    const bool stride2_max = is_max && SW == 2 && pad_w < KW;
    const int64_t padded = 2 * OW + KW + 32;   // MaxStride2's reach, past the row and its padding
    thread_local std::vector<T> rows;
    if (rows.size() < static_cast<size_t>(W + padded)) rows.resize(W + padded);
    T* r = rows.data();
    if (stride2_max) {   // -inf (codes: 0, the lowest) around the row: rp[i] = input column i - pad_w
      std::fill(rows.begin(), rows.end(), std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                                                : std::numeric_limits<T>::lowest());
      r += pad_w;
    }
    for (int64_t p = pb; p < pe; ++p) {
      const T* xp = x + p * H * W;
      T* yp = y + p * OH * OW;
      for (int64_t oh = 0; oh < OH; ++oh) {
        T* yr = yp + oh * OW;
        // A window entirely in the padding: -inf, or for codes the lowest one (no such window in practice).
        const T empty = !is_max ? T(0)
                        : std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                               : std::numeric_limits<T>::lowest();
        if (hhi[oh] <= hlo[oh]) {
          std::fill(yr, yr + OW, empty);
        } else {
          CombineRows(xp + hlo[oh] * W, W, hhi[oh] - hlo[oh], W, is_max, r);
          if (stride2_max) {
            if constexpr (std::is_same_v<T, float>) {
              MaxStride2(r - pad_w, OW, KW, yr);
            } else {
              MaxStride2Codes(r - pad_w, OW, KW, yr);
            }
            continue;
          }
          std::fill(yr, yr + OW, empty);
          for (int64_t kw = 0; kw < KW; ++kw) {
            const int64_t off = kw - pad_w;   // input column = ow * SW + off
            const int64_t first = off >= 0 ? 0 : (-off + SW - 1) / SW;
            const int64_t last = std::min<int64_t>(OW, W - 1 - off < 0 ? 0 : (W - 1 - off) / SW + 1);
            if (first >= last) continue;
            CombineStrided(r + first * SW + off, SW, last - first, is_max, yr + first);
          }
        }
        if constexpr (std::is_same_v<T, float>) {
          if (is_max) continue;
          for (int64_t ow = 0; ow < OW; ++ow) {
            const int64_t count =
                include_pad ? win_padded_[1][oh] * win_padded_[2][ow]
                            : std::max<int64_t>(0, hhi[oh] - hlo[oh]) * std::max<int64_t>(0, whi[ow] - wlo[ow]);
            yr[ow] = count > 0 ? yr[ow] / static_cast<float>(count) : 0.f;
          }
        }
      }
    }
  }

  template <typename T>
  void Run2D(const T* x, T* y, bool is_max, bool include_pad, const KernelContext& ctx) const {
    ctx.pool->ParallelFor(planes_, 1, [&](int64_t pb, int64_t pe) { Pool2DPlanes(x, y, pb, pe, is_max, include_pad); });
  }

  SpatialParams sp_;
  std::vector<int64_t> in3_, out3_, k3_, s3_, d3_, pb3_, pe3_;
  std::vector<int64_t> win_lo_[3], win_hi_[3], win_padded_[3];
  int64_t planes_ = 0;
  bool codes_ = false;   // a MaxPool of uint8 quantisation codes (format 1.11)
};

class GlobalAveragePoolKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void Infer(KernelIO& io) override {
    TensorRec& x = In(io, 0);
    Require(x.dtype == DataType::kFloat32, "only float32 is supported");
    Require(x.shape.size() >= 3, "input must have rank >= 3, got " + ShapeToString(x.shape));
    Shape out = {x.shape[0], x.shape[1]};
    out.resize(x.shape.size(), 1);
    io.out[0]->shape = out;
    io.out[0]->dtype = DataType::kFloat32;
  }
  // A channel-blocked input is reduced 8 channels at a time; the output's plane is 1 pixel, where both layouts are
  // the same order, so it may be either.
  bool AcceptsLayouts(const KernelIO& io) const override {
    return !io.out[0]->channel_blocked || io.in[0]->channel_blocked;
  }

  void Run(KernelIO& io, const KernelContext& ctx) override {
    const Shape& s = io.in[0]->shape;
    const int64_t planes = s[0] * s[1];
    const int64_t area = io.in[0]->numel() / std::max<int64_t>(1, planes);
    const float* x = io.in[0]->as<float>();
    float* y = io.out[0]->as<float>();
    const bool is_max = node_.op == OpType::GlobalMaxPool;
    if (io.in[0]->channel_blocked) return RunBlocked(x, planes / kChannelBlock, area, is_max, y, ctx);
    ctx.pool->ParallelFor(planes, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, area)), [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) {
        const float* xp = x + p * area;
        if (is_max) {
          float m = -std::numeric_limits<float>::infinity();
          for (int64_t i = 0; i < area; ++i) m = (xp[i] > m || xp[i] != xp[i]) ? xp[i] : m;
          y[p] = m;
          continue;
        }
        float acc = 0.f;
        for (int64_t i = 0; i < area; ++i) acc += xp[i];
        y[p] = area ? acc / static_cast<float>(area) : 0.f;
      }
    });
  }

 private:
  // blocks of area x 8 values -> 8 outputs each (channel order: block b's channel c is output 8 b + c).
  static void RunBlocked(const float* x, int64_t blocks, int64_t area, bool is_max, float* y, const KernelContext& ctx) {
    ctx.pool->ParallelFor(blocks, std::max<int64_t>(1, 512 / std::max<int64_t>(1, area)), [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) ReduceBlock(x + b * area * kChannelBlock, area, is_max, y + b * kChannelBlock);
    });
  }
};

}  // namespace

void RegisterPoolKernels(KernelRegistry& r) {
  r.Register(OpType::MaxPool, DataType::kFloat32, MakeKernel<PoolKernel>);
  r.Register(OpType::MaxPool, DataType::kUInt8, MakeKernel<PoolKernel>);
  r.Register(OpType::AveragePool, DataType::kFloat32, MakeKernel<PoolKernel>);
  r.Register(OpType::GlobalAveragePool, DataType::kFloat32, MakeKernel<GlobalAveragePoolKernel>);
  r.Register(OpType::GlobalMaxPool, DataType::kFloat32, MakeKernel<GlobalAveragePoolKernel>);
}

}  // namespace lite
