#include "cpu/conv/blocked_rows.h"

#include <algorithm>
#include <cstring>

#include "cpu/simd/simd.h"
#include "cpu/simd/transpose8x8.h"

namespace lite {

LITE_VECTOR_CLONES void BlockedRowToLines(const float* src, int64_t n, float* dst, int64_t ld) {
  if (n >= 8) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) Transpose8x8(src + i * 8, 8, dst + i, ld);
    if (i < n) Transpose8x8(src + (n - 8) * 8, 8, dst + n - 8, ld);   // overlaps: same values
    return;
  }
  for (int64_t c = 0; c < 8; ++c)
    for (int64_t p = 0; p < n; ++p) dst[c * ld + p] = src[p * 8 + c];
}

LITE_VECTOR_CLONES void LinesToBlockedRow(const float* src, int64_t ld, int64_t n, float* dst) {
  if (n >= 8) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) Transpose8x8(src + i, ld, dst + i * 8, 8);
    if (i < n) Transpose8x8(src + n - 8, ld, dst + (n - 8) * 8, 8);   // overlaps: same values
    return;
  }
  for (int64_t p = 0; p < n; ++p)
    for (int64_t c = 0; c < 8; ++c) dst[p * 8 + c] = src[c * ld + p];
}

LITE_VECTOR_CLONES void BlockedRowEpilogue(float* y, int64_t n, const float* bias, const float* residual,
                                           EpilogueAct act) {
  if (bias || residual) {
    float b[8] = {};
    if (bias) std::copy(bias, bias + 8, b);
    for (int64_t p = 0; p < n; ++p)
      for (int64_t c = 0; c < 8; ++c) y[p * 8 + c] += b[c] + (residual ? residual[p * 8 + c] : 0.f);
  }
  if (act == EpilogueAct::kNone) return;
  GemmEpilogue ep;
  ep.act = act;
  ApplyEpilogue(y, 0, 0, 1, 0, n * 8, ep);
}

LITE_VECTOR_CLONES void StoreLinesAsBlockedRow(const float* src, int64_t ld, int64_t n, const float* bias,
                                               const float* residual, EpilogueAct act, float* dst) {
  if (n < 8 || (act != EpilogueAct::kNone && act != EpilogueAct::kRelu && act != EpilogueAct::kRelu6)) {
    LinesToBlockedRow(src, ld, n, dst);
    BlockedRowEpilogue(dst, n, bias, residual, act);
    return;
  }
  v8sf_t b = {};
  if (bias) b = LoadV8(bias);
  const v8sf_t zero = {}, six = zero + 6.f;
  for (int64_t i = 0; i < n; i += 8) {
    // The last 8 pixels of a row not a multiple of 8: transposed from n - 8, the ones done already skipped.
    const int64_t at = std::min(i, n - 8);
    alignas(32) float t[64];
    Transpose8x8(src + at, ld, t, 8);
    for (int64_t p = i - at; p < 8; ++p) {
      v8sf_t v = LoadV8(t + p * 8) + b;
      if (residual) v += LoadV8(residual + (at + p) * 8);
      // NaN stays NaN through ReLU / ReLU6 (as ONNX Runtime's): the comparisons are false for it.
      if (act != EpilogueAct::kNone) v = v < zero ? zero : v;
      if (act == EpilogueAct::kRelu6) v = v > six ? six : v;
      std::memcpy(dst + (at + p) * 8, &v, sizeof(v));
    }
  }
}

}  // namespace lite
