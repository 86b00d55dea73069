// Rows of a paged KV cache in its element type: float32, float16 / bfloat16 halves (rounded to nearest even when
// written), or int8 codes with the row's float32 scale after them (AttentionElem::kInt8Rows: symmetric, scale =
// max |x| / 127, codes rounded half to even; a row of zeros has scale 0). One place for the writer (the Attention
// kernel appending a step's keys and values) and the readers (the tiled path, the decode path).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "cpu/simd/float16.h"
#include "lite/attention.h"

namespace lite {

// Bytes of one element (int8 rows: one code), the unit of a cache operand's strides.
inline int64_t CacheElemBytes(AttentionElem e) {
  return e == AttentionElem::kFloat32 ? 4 : e == AttentionElem::kInt8Rows ? 1 : 2;
}
// Elements (bytes for int8 rows) of a row of `cols` values: the codes and, for int8 rows, the scale.
inline int64_t CacheRowElems(int64_t cols, AttentionElem e) { return e == AttentionElem::kInt8Rows ? cols + 4 : cols; }

inline void LoadCacheRow(const void* row, int64_t cols, AttentionElem e, float* out) {
  switch (e) {
    case AttentionElem::kFloat32:
      std::memcpy(out, row, static_cast<size_t>(cols) * sizeof(float));
      return;
    case AttentionElem::kInt8Rows: {
      const auto* codes = static_cast<const int8_t*>(row);
      float scale;
      std::memcpy(&scale, codes + cols, sizeof scale);
      for (int64_t c = 0; c < cols; ++c) out[c] = static_cast<float>(codes[c]) * scale;
      return;
    }
    default: {
      const auto* h = static_cast<const uint16_t*>(row);
      for (int64_t c = 0; c < cols; ++c) out[c] = e == AttentionElem::kFloat16 ? HalfToFloat(h[c]) : BFloat16ToFloat(h[c]);
    }
  }
}

// A row of a non-finite value is stored with a NaN scale (every value NaN), rather than codes that hide it.
inline void StoreCacheRow(const float* x, int64_t cols, AttentionElem e, void* row) {
  switch (e) {
    case AttentionElem::kFloat32:
      std::memcpy(row, x, static_cast<size_t>(cols) * sizeof(float));
      return;
    case AttentionElem::kInt8Rows: {
      auto* codes = static_cast<int8_t*>(row);
      float top = 0.f;
      bool finite = true;
      for (int64_t c = 0; c < cols; ++c) {
        finite = finite && std::isfinite(x[c]);
        top = std::max(top, std::fabs(x[c]));
      }
      const float scale = !finite ? std::nanf("") : top / 127.f;
      const float inv = finite && top > 0.f ? 127.f / top : 0.f;
      for (int64_t c = 0; c < cols; ++c) codes[c] = finite ? static_cast<int8_t>(std::nearbyint(x[c] * inv)) : 0;
      std::memcpy(codes + cols, &scale, sizeof scale);
      return;
    }
    default: {
      auto* h = static_cast<uint16_t*>(row);
      for (int64_t c = 0; c < cols; ++c) h[c] = e == AttentionElem::kBFloat16 ? FloatToBFloat16(x[c]) : FloatToHalf(x[c]);
    }
  }
}

}  // namespace lite
