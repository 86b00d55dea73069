// Rotary position embedding: one pass over x (read once, written once), rows of (batch, position) split over
// the threads, every head of a position rotated with that position's table row while it is in L1.
#include <algorithm>
#include <string>

#include "cpu/simd/float16.h"
#include "cpu/shared_pools.h"
#include "cpu/simd/simd.h"
#include "lite/errors.h"
#include "cpu/attention/rotary_on_pool.h"
#include "lite/rotary.h"

namespace lite {
namespace {

// Pairs (2i, 2i + 1): out[2i] = x[2i] c - x[2i+1] s, out[2i+1] = x[2i] s + x[2i+1] c.
LITE_VECTOR_CLONES void RotateInterleaved(const float* x, float* out, const float* c, const float* s, int64_t half) {
  for (int64_t i = 0; i < half; ++i) {
    const float x1 = x[2 * i], x2 = x[2 * i + 1];
    out[2 * i] = x1 * c[i] - x2 * s[i];
    out[2 * i + 1] = x1 * s[i] + x2 * c[i];
  }
}

// Halves (i, i + d/2), Llama's rotate_half.
LITE_VECTOR_CLONES void RotateHalves(const float* x, float* out, const float* c, const float* s, int64_t half) {
  for (int64_t i = 0; i < half; ++i) {
    const float x1 = x[i], x2 = x[i + half];
    out[i] = x1 * c[i] - x2 * s[i];
    out[i + half] = x2 * c[i] + x1 * s[i];
  }
}

float Load(const void* p, int64_t i, AttentionElem e) {
  if (e == AttentionElem::kFloat16) return HalfToFloat(static_cast<const uint16_t*>(p)[i]);
  if (e == AttentionElem::kBFloat16) return BFloat16ToFloat(static_cast<const uint16_t*>(p)[i]);
  return static_cast<const float*>(p)[i];
}

void Store(void* p, int64_t i, float v, AttentionElem e) {
  if (e == AttentionElem::kFloat16) static_cast<uint16_t*>(p)[i] = FloatToHalf(v);
  else if (e == AttentionElem::kBFloat16) static_cast<uint16_t*>(p)[i] = FloatToBFloat16(v);
  else static_cast<float*>(p)[i] = v;
}

void RotateRows(const RotaryArgs& a, int64_t row_begin, int64_t row_end) {
  const int64_t rot = a.rotary_dim ? a.rotary_dim : a.dim, half = rot / 2;
  std::vector<float> in, out;
  if (a.elem != AttentionElem::kFloat32) {
    in.resize(a.dim);
    out.resize(a.dim);
  }
  for (int64_t r = row_begin; r < row_end; ++r) {
    const int64_t b = r / a.seq, p = r % a.seq;
    const int64_t row = a.position_ids ? a.position_ids[r] : p;
    const float* c = a.cos + b * a.table_batch_stride + row * half;
    const float* s = a.sin + b * a.table_batch_stride + row * half;
    for (int64_t h = 0; h < a.heads; ++h) {
      const int64_t xo = b * a.x_strides[0] + p * a.x_strides[1] + h * a.x_strides[2];
      const int64_t oo = b * a.out_strides[0] + p * a.out_strides[1] + h * a.out_strides[2];
      const float* src;
      float* dst;
      if (a.elem == AttentionElem::kFloat32) {
        src = static_cast<const float*>(a.x) + xo;
        dst = static_cast<float*>(a.out) + oo;
      } else {
        for (int64_t i = 0; i < a.dim; ++i) in[i] = Load(a.x, xo + i, a.elem);
        src = in.data();
        dst = out.data();
      }
      if (a.interleaved) RotateInterleaved(src, dst, c, s, half); else RotateHalves(src, dst, c, s, half);
      if (rot < a.dim && dst != src) std::copy(src + rot, src + a.dim, dst + rot);
      if (a.elem != AttentionElem::kFloat32)
        for (int64_t i = 0; i < a.dim; ++i) Store(a.out, oo + i, out[i], a.elem);
    }
  }
}

}  // namespace

void ComputeRotaryOn(const RotaryArgs& a, ThreadPool* pool) {
  const int64_t rot = a.rotary_dim ? a.rotary_dim : a.dim;
  if (a.batch < 0 || a.seq < 0 || a.heads < 0 || a.dim <= 0 || rot <= 0 || rot > a.dim || rot % 2)
    throw InvalidArgument("rotary: sizes must be non-negative and the rotated dims even and within the head dim, got dim " +
                          std::to_string(a.dim) + ", rotary dim " + std::to_string(rot));
  if (!a.x || !a.out || !a.cos || !a.sin) throw InvalidArgument("rotary: missing buffer");
  const int64_t rows = a.batch * a.seq;
  if (a.position_ids) {   // checked before any thread reads the tables with them
    for (int64_t r = 0; r < rows; ++r)
      if (a.position_ids[r] < 0 || a.position_ids[r] >= a.table_rows)
        throw InvalidArgument("rotary: position id " + std::to_string(a.position_ids[r]) + " is outside the table's " +
                              std::to_string(a.table_rows) + " rows");
  }
  const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, a.heads * a.dim));
  if (pool) pool->ParallelFor(rows, grain, [&](int64_t rb, int64_t re) { RotateRows(a, rb, re); });
  else RotateRows(a, 0, rows);
}

void ComputeRotary(const RotaryArgs& a, int threads) {
  RunOnSharedPool(threads, [&](ThreadPool* pool) { ComputeRotaryOn(a, pool); });
}

}  // namespace lite
