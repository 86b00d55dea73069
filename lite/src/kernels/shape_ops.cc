// Data movement: Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Concat, Split, Slice, Gather, Expand, Shape.
// These work on any dtype by element size.
#include <algorithm>
#include <cstring>
#include <limits>

#include "cpu/isa_dispatch.h"
#include "cpu/simd/transpose8x8.h"
#include "core/channel_blocked_layout.h"
#include "cpu/conv/bf16_pixel_conv.h"
#include "cpu/conv/blocked_rows.h"
#include "kernels/common.h"
#include "kernels/register.h"

namespace lite {
namespace {

using ms_schema::OpType;

void CopyBytes(const TensorRec& src, TensorRec& dst) {
  if (src.nbytes && src.data != dst.data) std::memcpy(dst.data, src.data, src.nbytes);
}

// Same data, new shape: Reshape, Flatten, Squeeze, Unsqueeze.
class ViewKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void Infer(KernelIO& io) override {
    TensorRec& x = In(io, 0);
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    Shape out;
    switch (node_.op) {
      case OpType::Reshape: {
        std::vector<int64_t> spec = ReadInts(RequireValue(io, 1, "shape"));
        const bool allowzero = node_.fb->attr_as_ReshapeAttr() && node_.fb->attr_as_ReshapeAttr()->allowzero();
        int64_t infer_at = -1, known = 1;
        for (size_t i = 0; i < spec.size(); ++i) {
          int64_t d = spec[i];
          if (d == 0 && !allowzero) {
            Require(static_cast<int64_t>(i) < rank, "shape value 0 copies a dim the input does not have");
            d = x.shape[i];
          }
          if (d == -1) {
            Require(infer_at < 0, "more than one -1 in shape");
            infer_at = static_cast<int64_t>(i);
          } else {
            Require(d >= 0, "invalid shape value " + std::to_string(d));
            Require(!__builtin_mul_overflow(known, d, &known), "shape " + ShapeToString(spec) + " has too many elements");
          }
          out.push_back(d);
        }
        const int64_t total = x.numel();
        if (infer_at >= 0) {
          Require(known != 0 && total % known == 0, "cannot reshape " + ShapeToString(x.shape) + " to " +
                                                       ShapeToString(spec));
          out[infer_at] = total / known;
        }
        Require(ShapeNumel(out) == total, "cannot reshape " + ShapeToString(x.shape) + " (" + std::to_string(total) +
                                              " elements) to " + ShapeToString(out));
        break;
      }
      case OpType::Flatten: {
        int64_t axis = node_.fb->attr_as_AxisAttr()->axis();
        Require(axis >= -rank && axis <= rank, "axis out of range");
        if (axis < 0) axis += rank;
        int64_t a = 1, b = 1;
        for (int64_t i = 0; i < rank; ++i) (i < axis ? a : b) *= x.shape[i];
        out = {a, b};
        break;
      }
      case OpType::Squeeze: {
        std::vector<int64_t> axes;
        if (io.has(1)) axes = ReadInts(RequireValue(io, 1, "axes"));
        std::vector<bool> drop(rank, false);
        if (axes.empty()) {
          for (int64_t i = 0; i < rank; ++i) drop[i] = x.shape[i] == 1;
        }
        for (int64_t a : axes) {
          Require(NormalizeAxis(a, rank), "axis out of range");
          Require(x.shape[a] == 1, "cannot squeeze axis " + std::to_string(a) + " of size " + std::to_string(x.shape[a]));
          drop[a] = true;
        }
        for (int64_t i = 0; i < rank; ++i)
          if (!drop[i]) out.push_back(x.shape[i]);
        break;
      }
      case OpType::Unsqueeze: {
        std::vector<int64_t> axes = ReadInts(RequireValue(io, 1, "axes"));
        const int64_t out_rank = rank + static_cast<int64_t>(axes.size());
        std::vector<bool> ins(out_rank, false);
        for (int64_t a : axes) {
          Require(NormalizeAxis(a, out_rank), "axis out of range");
          Require(!ins[a], "axis repeated");
          ins[a] = true;
        }
        for (int64_t i = 0, j = 0; i < out_rank; ++i) out.push_back(ins[i] ? 1 : x.shape[j++]);
        break;
      }
      default: Fail("not a view operator");
    }
    io.out[0]->shape = out;
    io.out[0]->dtype = x.dtype;
  }
  // The output is the input's bytes: where nothing reads the input after this node the two share one buffer and Run's
  // copy is skipped (a decoder's q/k reshapes around the rotation copied 2 MB each in a 512-token prompt).
  int InPlaceInput(const KernelIO& io) const override {
    const TensorRec& x = *io.in[0];
    const TensorRec& y = *io.out[0];
    const bool plain = !x.channel_blocked && !y.channel_blocked && !x.bf16_pixels && !y.bf16_pixels &&
                       !x.u8_pixels && !y.u8_pixels;
    return plain && x.nbytes == y.nbytes ? 0 : -1;
  }
  void Run(KernelIO& io, const KernelContext&) override { CopyBytes(*io.in[0], *io.out[0]); }
};

class ShapeKernel : public Kernel {
 public:
  using Kernel::Kernel;
  bool ReadsInputData() const override { return false; }
  // Only the input's shape is read: any storage (channel blocks, bf16 or uint8 rows) of a run-time input will do.
  bool AcceptsLayouts(const KernelIO&) const override { return true; }
  bool AcceptsBf16Pixels(const KernelIO&) const override { return true; }
  bool AcceptsU8Pixels(const KernelIO&) const override { return true; }
  void Infer(KernelIO& io) override {
    const int64_t rank = static_cast<int64_t>(In(io, 0).shape.size());
    const auto* attr = node_.fb->attr_as_ShapeAttr();
    int64_t start = attr ? attr->start() : 0, end = attr ? attr->end() : rank;
    auto clamp = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank); };
    start_ = clamp(start);
    end_ = std::max(start_, clamp(end));
    io.out[0]->shape = {end_ - start_};
    io.out[0]->dtype = DataType::kInt64;
  }
  void Run(KernelIO& io, const KernelContext&) override {
    int64_t* y = io.out[0]->as<int64_t>();
    for (int64_t i = start_; i < end_; ++i) y[i - start_] = io.in[0]->shape[i];
  }

 private:
  int64_t start_ = 0, end_ = 0;
};

// y (32 x 32, row stride ldy) = x^T (32 x 32, row stride ldx) for 4-byte values, as sixteen 8x8 register transposes.
using TileFn32 = void (*)(const float*, int64_t, float*, int64_t);
__attribute__((always_inline)) inline void FullTileBody(const float* x, int64_t ldx, float* y, int64_t ldy) {
  for (int64_t pb = 0; pb < 32; pb += 8)
    for (int64_t qb = 0; qb < 32; qb += 8) Transpose8x8(x + pb * ldx + qb, ldx, y + qb * ldy + pb, ldy);
}
void FullTilePortable(const float* x, int64_t ldx, float* y, int64_t ldy) { FullTileBody(x, ldx, y, ldy); }
#ifdef LITE_X86_SIMD
__attribute__((target("avx2"))) void FullTileAvx2(const float* x, int64_t ldx, float* y, int64_t ldy) {
  FullTileBody(x, ldx, y, ldy);
}
#endif

class TransposeKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void Infer(KernelIO& io) override {
    TensorRec& x = In(io, 0);
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    const auto* p = node_.fb->attr_as_TransposeAttr()->perm();
    perm_.clear();
    if (!p || p->size() == 0) {
      for (int64_t i = rank - 1; i >= 0; --i) perm_.push_back(i);
    } else {
      Require(static_cast<int64_t>(p->size()) == rank, "perm length differs from rank " + std::to_string(rank));
      std::vector<bool> seen(rank, false);
      for (int64_t v : *p) {
        Require(NormalizeAxis(v, rank) && !seen[v], "perm is not a permutation");
        seen[v] = true;
        perm_.push_back(v);
      }
    }
    Shape out;
    for (int64_t a : perm_) out.push_back(x.shape[a]);
    io.out[0]->shape = out;
    io.out[0]->dtype = x.dtype;
    // Output walked in order; each output dim reads the input with the permuted stride.
    const auto in_strides = Strides(x.shape);
    dims_ = out;
    src_strides_.clear();
    for (int64_t a : perm_) src_strides_.push_back(in_strides[a]);
    // Merge input dims that stay adjacent and in order (dropping size-1 dims): NCHW <-> NHWC becomes a
    // batch of 2-D transposes [P, Q] -> [Q, P], done in cache-sized tiles.
    std::vector<int64_t> kept;
    for (int64_t a : perm_)
      if (x.shape[a] != 1) kept.push_back(a);
    std::vector<std::vector<int64_t>> groups;   // runs of consecutive input axes, in output order
    for (int64_t a : kept) {
      if (!groups.empty() && groups.back().back() + 1 == a) {
        groups.back().push_back(a);
      } else {
        groups.push_back({a});
      }
    }
    tile_batch_ = 0;
    auto size_of = [&](const std::vector<int64_t>& g) {
      int64_t n = 1;
      for (int64_t a : g) n *= x.shape[a];
      return n;
    };
    if (groups.size() == 2 && groups[0].front() > groups[1].front()) {   // [P, Q] -> [Q, P]
      tile_batch_ = 1;
      tile_q_ = size_of(groups[0]);
      tile_p_ = size_of(groups[1]);
    } else if (groups.size() == 3 && groups[0].front() < groups[1].front() && groups[1].front() > groups[2].front() &&
               groups[0].back() + 1 == groups[2].front()) {             // [B, P, Q] -> [B, Q, P]
      tile_batch_ = size_of(groups[0]);
      tile_q_ = size_of(groups[1]);
      tile_p_ = size_of(groups[2]);
    }
  }
  void Run(KernelIO& io, const KernelContext& ctx) override {
    BySize(io.in[0]->dtype, [&](auto tag) { Apply<decltype(tag)>(io, ctx); });
  }

 private:
  template <typename T>
  void Apply(KernelIO& io, const KernelContext& ctx) {
    const T* x = io.in[0]->as<T>();
    T* y = io.out[0]->as<T>();
    const int64_t n = io.out[0]->numel();
    if (n == 0) return;
    const size_t nd = dims_.size();
    if (nd == 0) {
      y[0] = x[0];
      return;
    }
    if (tile_batch_ > 0) return Tiled<T>(x, y, ctx);
    const int64_t inner = dims_[nd - 1], inner_stride = src_strides_[nd - 1];
    const int64_t rows = n / inner;
    ctx.pool->ParallelFor(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, inner)), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        int64_t rem = r, src = 0;
        for (size_t d = nd - 1; d-- > 0;) {
          src += (rem % dims_[d]) * src_strides_[d];
          rem /= dims_[d];
        }
        T* yr = y + r * inner;
        for (int64_t i = 0; i < inner; ++i) yr[i] = x[src + i * inner_stride];
      }
    });
  }
  // y[b][q][p] = x[b][p][q] in 32 x 32 tiles: both sides touch whole cache lines. A full tile of 4-byte values
  // goes through 8x8 register transposes (AVX2 where the CPU has it).
  template <typename T>
  void Tiled(const T* x, T* y, const KernelContext& ctx) const {
    static const TileFn32 full_tile =
        PickIsaKernel<TileFn32>(FullTilePortable, LITE_IF_X86_SIMD(FullTileAvx2), nullptr).fn;
    constexpr int64_t kT = 32;
    const int64_t P = tile_p_, Q = tile_q_, pt = (P + kT - 1) / kT, qt = (Q + kT - 1) / kT;
    ctx.pool->ParallelFor(tile_batch_ * pt * qt, 4, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const int64_t batch = t / (pt * qt), rem = t % (pt * qt), p0 = rem / qt * kT, q0 = rem % qt * kT;
        const T* xb = x + batch * P * Q;
        T* yb = y + batch * P * Q;
        const int64_t p1 = std::min(P, p0 + kT), q1 = std::min(Q, q0 + kT);
        if constexpr (sizeof(T) == 4) {
          if (p1 - p0 == kT && q1 - q0 == kT) {
            full_tile(reinterpret_cast<const float*>(xb + p0 * Q + q0), Q, reinterpret_cast<float*>(yb + q0 * P + p0),
                      P);
            continue;
          }
        }
        T tile[kT][kT];   // read rows of x, write rows of y: both sides stream whole lines
        for (int64_t p = p0; p < p1; ++p)
          for (int64_t q = q0; q < q1; ++q) tile[q - q0][p - p0] = xb[p * Q + q];
        for (int64_t q = q0; q < q1; ++q)
          for (int64_t p = p0; p < p1; ++p) yb[q * P + p] = tile[q - q0][p - p0];
      }
    });
  }

  std::vector<int64_t> perm_, dims_, src_strides_;
  int64_t tile_batch_ = 0, tile_p_ = 0, tile_q_ = 0;   // batch of [P, Q] -> [Q, P] when > 0
};

// Layouts of the channel copies (Concat / Split along axis 1, a Slice of a channel run). In a channel-blocked tensor
// ([N][C/8][H][W][8]) channel c of an image starts at c * H * W as in NCHW when c is a multiple of 8, so a run of
// whole blocks is one contiguous copy either way; where the two sides differ in layout the run is transposed on the
// way (8-channel blocks of 8 lines), so one NCHW neighbour does not turn a whole Concat / Slice chain back to NCHW.
bool AllNchw(const KernelIO& io) { return !AnyTensorMarked(io, &TensorRec::channel_blocked); }

// Whether a run of `channels` channels starting at channel `at` can be copied between the layouts given: a blocked
// side needs whole blocks.
bool RunFits(bool from_blocked, bool to_blocked, int64_t at_from, int64_t at_to, int64_t channels) {
  const auto whole = [](int64_t c) { return c % kChannelBlock == 0; };
  return (!from_blocked || (whole(at_from) && whole(channels))) && (!to_blocked || (whole(at_to) && whole(channels)));
}

// `channels` channels of one image (planes of `plane` pixels) from src to dst, each in its layout; src and dst point
// at the run's first channel (c * plane in either layout). Tasks of one 8-channel block on the pool.
void CopyChannelRun(const float* src, bool src_blocked, float* dst, bool dst_blocked, int64_t channels, int64_t plane,
                    ThreadPool* pool) {
  if (src_blocked == dst_blocked) {
    std::memcpy(dst, src, static_cast<size_t>(channels * plane) * sizeof(float));
    return;
  }
  const int64_t blocks = channels / kChannelBlock;
  const auto convert = [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t at = b * kChannelBlock * plane;
      if (dst_blocked) {
        LinesToBlockedRow(src + at, plane, plane, dst + at);
      } else {
        BlockedRowToLines(src + at, plane, dst + at, plane);
      }
    }
  };
  if (pool) {
    pool->ParallelFor(blocks, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, kChannelBlock * plane)), convert);
  } else {
    convert(0, blocks);
  }
}

#ifdef LITE_X86_SIMD
// bf16 rows (core/bf16_pixel_layout.h): per image H x W rows of Bf16RowStride(C) values, then a row of zeros that
// padding taps read. A channel copy moves each pixel's run of values from row to row.
struct Bf16Rows {
  uint16_t* data;
  int64_t ld, image, pixels;   // values a row, values an image ((pixels + 1) rows), rows an image

  explicit Bf16Rows(const TensorRec& t)
      : data(static_cast<uint16_t*>(t.data)), ld(Bf16PixelConv::Bf16RowStride(t.shape[1])),
        image((t.shape[2] * t.shape[3] + 1) * Bf16PixelConv::Bf16RowStride(t.shape[1])),
        pixels(t.shape[2] * t.shape[3]) {}
};

bool FitsBf16Rows(const TensorRec& t);
bool AllBf16Rows(const KernelIO& io, size_t data_inputs);
#endif

// The channel copies' answer at compute precision bfloat16: no bf16 rows around them, or (`copies_channels`) bf16 rows
// on every data input (the first `data_inputs`) and output.
bool AcceptsBf16Copy(const KernelIO& io, bool copies_channels, size_t data_inputs) {
  if (!AnyTensorMarked(io, &TensorRec::bf16_pixels)) return true;
#ifdef LITE_X86_SIMD
  return copies_channels && AllBf16Rows(io, data_inputs);
#else
  (void)copies_channels, (void)data_inputs;
  return false;
#endif
}

#ifdef LITE_X86_SIMD
bool FitsBf16Rows(const TensorRec& t) {
  return t.bf16_pixels && t.shape.size() == 4 &&
         t.nbytes >= static_cast<size_t>(t.shape[0]) * Bf16PixelConv::Bf16RowsBytes(t.shape[1], t.shape[2] * t.shape[3]);
}

// Every data input (the first `data_inputs`) and every output in bf16 rows; nothing else marked.
bool AllBf16Rows(const KernelIO& io, size_t data_inputs) {
  for (size_t i = 0; i < io.in.size(); ++i)
    if (io.in[i] && (i < data_inputs ? !FitsBf16Rows(*io.in[i]) : io.in[i]->bf16_pixels)) return false;
  for (const TensorRec* t : io.out)
    if (!FitsBf16Rows(*t)) return false;
  return true;
}

// count values from channel c0 of every pixel row of x into channel d0 of y's, image by image.
void CopyBf16Runs(const TensorRec& x, int64_t c0, const TensorRec& y, int64_t d0, int64_t count, ThreadPool* pool) {
  const Bf16Rows src(x), dst(y);
  const int64_t images = x.shape[0];
  pool->ParallelFor(images * src.pixels, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, count)),
                    [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const int64_t n = r / src.pixels, p = r % src.pixels;
      std::memcpy(dst.data + n * dst.image + p * dst.ld + d0, src.data + n * src.image + p * src.ld + c0,
                  static_cast<size_t>(count) * sizeof(uint16_t));
    }
  });
}

void ZeroBf16PaddingRows(const TensorRec& y) {
  const Bf16Rows rows(y);
  for (int64_t n = 0; n < y.shape[0]; ++n)
    std::memset(rows.data + n * rows.image + rows.pixels * rows.ld, 0, static_cast<size_t>(rows.ld) * sizeof(uint16_t));
}
#endif

class ConcatKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void Infer(KernelIO& io) override {
    Require(!io.in.empty(), "needs at least one input");
    TensorRec& first = In(io, 0);
    const int64_t rank = static_cast<int64_t>(first.shape.size());
    axis_ = node_.fb->attr_as_AxisAttr()->axis();
    Require(rank >= 1 && NormalizeAxis(axis_, rank), "axis out of range for rank " + std::to_string(rank));
    Shape out = first.shape;
    out[axis_] = 0;
    for (size_t i = 0; i < io.in.size(); ++i) {
      TensorRec& t = In(io, i);
      Require(t.dtype == first.dtype, "inputs have different dtypes");
      Require(static_cast<int64_t>(t.shape.size()) == rank, "inputs have different ranks");
      for (int64_t d = 0; d < rank; ++d)
        Require(d == axis_ || t.shape[d] == first.shape[d],
                "input shapes " + ShapeToString(first.shape) + " and " + ShapeToString(t.shape) + " differ off the axis");
      out[axis_] += t.shape[axis_];
    }
    io.out[0]->shape = out;
    io.out[0]->dtype = first.dtype;
  }
  // Along the channels of 4-D float tensors any input or the output may be channel-blocked (runs of whole blocks:
  // RunFits): C2f / CSP blocks and FPN necks stay blocked through their concatenations.
  bool AcceptsLayouts(const KernelIO& io) const override {
    if (AllNchw(io)) return true;
    if (axis_ != 1 || io.out[0]->shape.size() != 4 || io.out[0]->dtype != DataType::kFloat32) return false;
    int64_t at = 0;
    for (const TensorRec* t : io.in) {
      if (!RunFits(t->channel_blocked, io.out[0]->channel_blocked, 0, at, t->shape[1])) return false;
      at += t->shape[1];
    }
    return true;
  }
  // At compute precision bfloat16 the channel join of bf16 rows (every side): C2f / FPN joins between bf16 pixel-major
  // Convs stay bf16 (YOLOv8n).
  bool AcceptsBf16Pixels(const KernelIO& io) const override {
    return AcceptsBf16Copy(io, axis_ == 1, io.in.size());
  }
  void Run(KernelIO& io, const KernelContext& ctx) override {
#ifdef LITE_X86_SIMD
    if (io.out[0]->bf16_pixels) {
      int64_t at = 0;
      for (const TensorRec* t : io.in) {
        CopyBf16Runs(*t, 0, *io.out[0], at, t->shape[1], ctx.pool);
        at += t->shape[1];
      }
      return ZeroBf16PaddingRows(*io.out[0]);
    }
#endif
    if (!AllNchw(io)) return RunChannelRuns(io, ctx);
    const Shape& out = io.out[0]->shape;
    const size_t es = DataTypeSize(io.out[0]->dtype);
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < axis_; ++i) outer *= out[i];
    for (size_t i = axis_ + 1; i < out.size(); ++i) inner *= out[i];
    uint8_t* y = static_cast<uint8_t*>(io.out[0]->data);
    const int64_t out_row = out[axis_] * inner * es;
    int64_t col = 0;
    for (TensorRec* t : io.in) {
      const int64_t row = t->shape[axis_] * inner * es;
      const uint8_t* x = static_cast<const uint8_t*>(t->data);
      if (row)
        for (int64_t o = 0; o < outer; ++o) std::memcpy(y + o * out_row + col, x + o * row, row);
      col += row;
    }
  }

 private:
  void RunChannelRuns(KernelIO& io, const KernelContext& ctx) const {
    const Shape& out = io.out[0]->shape;
    const int64_t plane = out[2] * out[3];
    float* y = io.out[0]->as<float>();
    int64_t at = 0;
    for (const TensorRec* t : io.in) {
      const int64_t c = t->shape[1];
      for (int64_t n = 0; n < out[0]; ++n)
        CopyChannelRun(t->as<float>() + n * c * plane, t->channel_blocked, y + (n * out[1] + at) * plane,
                       io.out[0]->channel_blocked, c, plane, ctx.pool);
      at += c;
    }
  }

  int64_t axis_ = 0;
};

class SplitKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void Infer(KernelIO& io) override {
    TensorRec& x = In(io, 0);
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    const auto* attr = node_.fb->attr_as_SplitAttr();
    axis_ = attr->axis();
    Require(rank >= 1 && NormalizeAxis(axis_, rank), "axis out of range");
    const int64_t len = x.shape[axis_];
    const int64_t parts = static_cast<int64_t>(io.out.size());
    sizes_.clear();
    if (io.has(1)) {
      sizes_ = ReadInts(RequireValue(io, 1, "split"));
      Require(static_cast<int64_t>(sizes_.size()) == parts, "split has " + std::to_string(sizes_.size()) +
                                                                " sizes for " + std::to_string(parts) + " outputs");
      int64_t sum = 0;
      for (int64_t s : sizes_) {
        Require(s >= 0, "negative split size");
        sum += s;
      }
      Require(sum == len, "split sizes sum to " + std::to_string(sum) + ", axis has " + std::to_string(len));
    } else {
      // Equal parts; with opset-18 num_outputs the last part may be smaller.
      const int64_t chunk = (len + parts - 1) / parts;
      Require(attr->num_outputs() > 0 || len % parts == 0,
              "axis of " + std::to_string(len) + " does not split into " + std::to_string(parts) + " equal parts");
      for (int64_t i = 0, left = len; i < parts; ++i) {
        sizes_.push_back(std::min(chunk, left));
        left -= sizes_.back();
      }
    }
    for (int64_t i = 0; i < parts; ++i) {
      Shape s = x.shape;
      s[axis_] = sizes_[i];
      io.out[i]->shape = s;
      io.out[i]->dtype = x.dtype;
    }
  }
  // As Concat: parts along the channels, each side in either layout.
  bool AcceptsLayouts(const KernelIO& io) const override {
    if (AllNchw(io)) return true;
    const TensorRec& x = *io.in[0];
    if (axis_ != 1 || x.shape.size() != 4 || x.dtype != DataType::kFloat32) return false;
    int64_t at = 0;
    for (size_t p = 0; p < io.out.size(); ++p) {
      if (!RunFits(x.channel_blocked, io.out[p]->channel_blocked, at, 0, sizes_[p])) return false;
      at += sizes_[p];
    }
    return true;
  }
  bool AcceptsBf16Pixels(const KernelIO& io) const override { return AcceptsBf16Copy(io, axis_ == 1, 1); }
  void Run(KernelIO& io, const KernelContext& ctx) override {
#ifdef LITE_X86_SIMD
    if (io.in[0]->bf16_pixels) {
      int64_t at = 0;
      for (size_t p = 0; p < io.out.size(); ++p) {
        CopyBf16Runs(*io.in[0], at, *io.out[p], 0, sizes_[p], ctx.pool);
        ZeroBf16PaddingRows(*io.out[p]);
        at += sizes_[p];
      }
      return;
    }
#endif
    if (!AllNchw(io)) {
      const TensorRec& x = *io.in[0];
      const int64_t plane = x.shape[2] * x.shape[3];
      int64_t at = 0;
      for (size_t p = 0; p < io.out.size(); ++p) {
        for (int64_t n = 0; n < x.shape[0]; ++n)
          CopyChannelRun(x.as<float>() + (n * x.shape[1] + at) * plane, x.channel_blocked,
                         io.out[p]->as<float>() + n * sizes_[p] * plane, io.out[p]->channel_blocked, sizes_[p], plane,
                         ctx.pool);
        at += sizes_[p];
      }
      return;
    }
    const Shape& s = io.in[0]->shape;
    const size_t es = DataTypeSize(io.in[0]->dtype);
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < axis_; ++i) outer *= s[i];
    for (size_t i = axis_ + 1; i < s.size(); ++i) inner *= s[i];
    const uint8_t* x = static_cast<const uint8_t*>(io.in[0]->data);
    const int64_t in_row = s[axis_] * inner * es;
    int64_t col = 0;
    for (size_t p = 0; p < io.out.size(); ++p) {
      const int64_t row = sizes_[p] * inner * es;
      uint8_t* y = static_cast<uint8_t*>(io.out[p]->data);
      if (row)
        for (int64_t o = 0; o < outer; ++o) std::memcpy(y + o * row, x + o * in_row + col, row);
      col += row;
    }
  }

 private:
  int64_t axis_ = 0;
  std::vector<int64_t> sizes_;
};

class SliceKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void Infer(KernelIO& io) override {
    TensorRec& x = In(io, 0);
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    std::vector<int64_t> starts = ReadInts(RequireValue(io, 1, "starts"));
    std::vector<int64_t> ends = ReadInts(RequireValue(io, 2, "ends"));
    std::vector<int64_t> axes, steps;
    if (io.has(3)) axes = ReadInts(RequireValue(io, 3, "axes"));
    if (io.has(4)) steps = ReadInts(RequireValue(io, 4, "steps"));
    Require(starts.size() == ends.size(), "starts and ends differ in length");
    if (axes.empty())
      for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
    if (steps.empty()) steps.assign(starts.size(), 1);
    Require(axes.size() == starts.size() && steps.size() == starts.size(), "axes/steps length differs from starts");
    start_.assign(rank, 0);
    step_.assign(rank, 1);
    Shape out = x.shape;
    std::vector<bool> seen(rank, false);
    for (size_t i = 0; i < starts.size(); ++i) {
      int64_t a = axes[i];
      Require(NormalizeAxis(a, rank) && !seen[a], "invalid or repeated axis");
      seen[a] = true;
      const int64_t dim = x.shape[a], step = steps[i];
      Require(step != 0 && step != std::numeric_limits<int64_t>::min(), "step must be non-zero");
      int64_t s = starts[i], e = ends[i];
      // ONNX clamping rules: negative values count from the end; then clamp to the valid range.
      if (s < 0) s = s < -dim ? -1 : s + dim;
      if (e < 0) e = e < -dim ? -1 : e + dim;
      int64_t count;
      if (step > 0) {
        s = std::clamp<int64_t>(s, 0, dim);
        e = std::clamp<int64_t>(e, 0, dim);
        count = e > s ? (e - s - 1) / step + 1 : 0;
      } else {
        s = std::clamp<int64_t>(s, 0, dim - 1);
        e = std::clamp<int64_t>(e, -1, dim - 1);
        count = s > e ? (s - e - 1) / (-step) + 1 : 0;
      }
      start_[a] = count ? s : 0;
      step_[a] = step;
      out[a] = count;
    }
    io.out[0]->shape = out;
    io.out[0]->dtype = x.dtype;
    in_strides_ = Strides(x.shape);
    // Only axis 1 cut, with step 1 (C2f's channel halves, a QKV split): one contiguous run per batch row.
    channel_run_ = rank >= 2 && step_[1] == 1;
    for (int64_t d = 0; d < rank && channel_run_; ++d)
      channel_run_ = d == 1 || (start_[d] == 0 && step_[d] == 1 && out[d] == x.shape[d]);
  }
  bool AcceptsBf16Pixels(const KernelIO& io) const override { return AcceptsBf16Copy(io, channel_run_, 1); }
  // A channel run of 4-D float tensors reads and writes either layout (whole blocks on a blocked side).
  bool AcceptsLayouts(const KernelIO& io) const override {
    if (AllNchw(io)) return true;
    const TensorRec& x = *io.in[0];
    return channel_run_ && x.shape.size() == 4 && x.dtype == DataType::kFloat32 &&
           RunFits(x.channel_blocked, io.out[0]->channel_blocked, start_[1], 0, io.out[0]->shape[1]);
  }
  void Run(KernelIO& io, const KernelContext& ctx) override {
    const Shape& out = io.out[0]->shape;
    const int64_t n = io.out[0]->numel();
    if (n == 0) return;
    const size_t es = DataTypeSize(io.in[0]->dtype);
#ifdef LITE_X86_SIMD
    if (io.in[0]->bf16_pixels) {   // (AcceptsBf16Pixels: a channel run)
      CopyBf16Runs(*io.in[0], start_[1], *io.out[0], 0, out[1], ctx.pool);
      return ZeroBf16PaddingRows(*io.out[0]);
    }
#endif
    if (channel_run_) {   // one contiguous run per image (in the blocked layout too: CopyChannelRun)
      const Shape& in = io.in[0]->shape;
      const int64_t plane = in_strides_[1], batches = out[0];
      if (!AllNchw(io)) {
        for (int64_t b = 0; b < batches; ++b)
          CopyChannelRun(io.in[0]->as<float>() + (b * in[1] + start_[1]) * plane, io.in[0]->channel_blocked,
                         io.out[0]->as<float>() + b * out[1] * plane, io.out[0]->channel_blocked, out[1], plane,
                         ctx.pool);
        return;
      }
      const int64_t run = out[1] * plane * es;
      const uint8_t* x = static_cast<const uint8_t*>(io.in[0]->data) + start_[1] * plane * es;
      uint8_t* y = static_cast<uint8_t*>(io.out[0]->data);
      for (int64_t b = 0; b < batches; ++b) std::memcpy(y + b * run, x + b * in[1] * plane * es, run);
      return;
    }
    const size_t nd = out.size();
    const uint8_t* x = static_cast<const uint8_t*>(io.in[0]->data);
    uint8_t* y = static_cast<uint8_t*>(io.out[0]->data);
    if (nd == 0) {
      std::memcpy(y, x, es);
      return;
    }
    const int64_t inner = out[nd - 1];
    const int64_t rows = n / inner;
    const bool contiguous = step_[nd - 1] == 1;
    ctx.pool->ParallelFor(rows, 256, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        int64_t rem = r, src = 0;
        for (size_t d = nd - 1; d-- > 0;) {
          const int64_t idx = rem % out[d];
          rem /= out[d];
          src += (start_[d] + idx * step_[d]) * in_strides_[d];
        }
        src += start_[nd - 1];
        uint8_t* yr = y + r * inner * es;
        if (contiguous) {
          std::memcpy(yr, x + src * es, inner * es);
        } else {
          for (int64_t i = 0; i < inner; ++i) std::memcpy(yr + i * es, x + (src + i * step_[nd - 1]) * es, es);
        }
      }
    });
  }

 private:
  std::vector<int64_t> start_, step_, in_strides_;
  bool channel_run_ = false;
};

class GatherKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void Infer(KernelIO& io) override {
    TensorRec& x = In(io, 0);
    TensorRec& idx = In(io, 1);
    Require(idx.dtype == DataType::kInt64 || idx.dtype == DataType::kInt32, "indices must be int64 or int32");
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    axis_ = node_.fb->attr_as_AxisAttr()->axis();
    Require(rank >= 1 && NormalizeAxis(axis_, rank), "axis out of range for rank " + std::to_string(rank));
    Shape out(x.shape.begin(), x.shape.begin() + axis_);
    out.insert(out.end(), idx.shape.begin(), idx.shape.end());
    out.insert(out.end(), x.shape.begin() + axis_ + 1, x.shape.end());
    io.out[0]->shape = out;
    io.out[0]->dtype = x.dtype;
  }
  // A table stored compressed (an int8/int4/fp16 embedding): the rows are decoded from the codes at run time,
  // so the float32 copy the loader made can go (freed once its other readers, if any, have packed it).
  bool NeedsDecodedInput(size_t i, const TensorRec&) const override { return i != 0; }
  void Prepare(KernelIO& io) override {
    TensorRec& x = *io.in[0];
    if (x.kind == TensorRec::Kind::kConstant && x.decoded && stored_ == nullptr) {
      stored_ = &x.decoded->record;
      ReleaseMappedPages(x);
    }
    // A table in the file mapping is read a row at a time: its pages made resident now, not a fault per row in runs.
    if (x.kind == TensorRec::Kind::kConstant && !x.populated) {
      if (stored_) {
        PopulateMappedRange(stored_->bytes, stored_->length);
      } else if (x.mapped) {
        PopulateMappedRange(x.data, x.nbytes);
      }
      x.populated = true;
    }
  }
  void Run(KernelIO& io, const KernelContext& ctx) override {
    const Shape& s = io.in[0]->shape;
    const size_t es = DataTypeSize(io.in[0]->dtype);
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < axis_; ++i) outer *= s[i];
    for (size_t i = axis_ + 1; i < s.size(); ++i) inner *= s[i];
    const int64_t dim = s[axis_];
    const std::vector<int64_t> ids = ReadInts(*io.in[1]);
    for (int64_t v : ids)
      if (v < -dim || v >= dim)
        Fail("index " + std::to_string(v) + " out of range for axis of size " + std::to_string(dim));
    const int64_t nidx = static_cast<int64_t>(ids.size());
    const uint8_t* x = static_cast<const uint8_t*>(io.in[0]->data);
    uint8_t* y = static_cast<uint8_t*>(io.out[0]->data);
    const int64_t block = inner * es;
    ctx.pool->ParallelFor(outer * nidx, 64, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const int64_t o = r / nidx, k = r % nidx;
        const int64_t src = ids[k] < 0 ? ids[k] + dim : ids[k];
        if (stored_) {
          DecodeStoredRange(*stored_, (o * dim + src) * inner, inner, reinterpret_cast<float*>(y + r * block));
        } else {
          std::memcpy(y + r * block, x + (o * dim + src) * block, block);
        }
      }
    });
  }

 private:
  int64_t axis_ = 0;
  const StoredWeight* stored_ = nullptr;   // set when the table is a compressed constant
};

class ExpandKernel : public Kernel {
 public:
  using Kernel::Kernel;
  void Infer(KernelIO& io) override {
    TensorRec& x = In(io, 0);
    std::vector<int64_t> target = ReadInts(RequireValue(io, 1, "shape"));
    for (int64_t d : target) Require(d >= 0, "negative dim in shape");
    Shape out;
    Require(BroadcastShapes({&x.shape, &target}, out),
            "cannot expand " + ShapeToString(x.shape) + " to " + ShapeToString(target));
    io.out[0]->shape = out;
    io.out[0]->dtype = x.dtype;
    plan_ = MakeBroadcastPlan(out, {&x.shape});
  }
  void Run(KernelIO& io, const KernelContext& ctx) override {
    const size_t es = DataTypeSize(io.in[0]->dtype);
    const uint8_t* x = static_cast<const uint8_t*>(io.in[0]->data);
    uint8_t* y = static_cast<uint8_t*>(io.out[0]->data);
    ctx.pool->ParallelFor(plan_.rows, 64, [&](int64_t b, int64_t e) {
      ForEachRow(plan_, b, e, [&](int64_t yo, const int64_t* off, const int64_t* st, int64_t n) {
        if (st[0]) {
          std::memcpy(y + yo * es, x + off[0] * es, n * es);
        } else {
          for (int64_t i = 0; i < n; ++i) std::memcpy(y + (yo + i) * es, x + off[0] * es, es);
        }
      });
    });
  }

 private:
  BroadcastPlan plan_;
};

}  // namespace

void RegisterShapeKernels(KernelRegistry& r) {
  for (OpType op : {OpType::Reshape, OpType::Flatten, OpType::Squeeze, OpType::Unsqueeze})
    r.Register(op, DataType::kUnknown, MakeKernel<ViewKernel>);
  r.Register(OpType::Shape, DataType::kUnknown, MakeKernel<ShapeKernel>);
  r.Register(OpType::Transpose, DataType::kUnknown, MakeKernel<TransposeKernel>);
  r.Register(OpType::Concat, DataType::kUnknown, MakeKernel<ConcatKernel>);
  r.Register(OpType::Split, DataType::kUnknown, MakeKernel<SplitKernel>);
  r.Register(OpType::Slice, DataType::kUnknown, MakeKernel<SliceKernel>);
  r.Register(OpType::Gather, DataType::kUnknown, MakeKernel<GatherKernel>);
  r.Register(OpType::Expand, DataType::kUnknown, MakeKernel<ExpandKernel>);
}

}  // namespace lite
