#include "cpu/simd/layer_norm_row.h"

#include <cmath>

#include "cpu/isa_dispatch.h"
#include "cpu/simd/simd.h"

#ifdef LITE_X86_SIMD
#include <immintrin.h>
#endif

namespace lite {

// The portable row (and the AVX2 one, through the clones): plain loops the compiler vectorises.

// Sum of x[0..n) in float with 16 independent partial sums (vectorisable without reassociating).
LITE_VECTOR_CLONES float SumLanes(const float* x, int64_t n) {
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; ++l) acc[l] += x[i + l];
  float s = 0.f;
  for (; i < n; ++i) s += x[i];
  for (int l = 0; l < 16; ++l) s += acc[l];
  return s;
}

// Sum of (x[i] - mean)^2, likewise.
LITE_VECTOR_CLONES float SumSquaredDeviation(const float* x, int64_t n, float mean) {
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; ++l) {
      const float d = x[i + l] - mean;
      acc[l] += d * d;
    }
  float s = 0.f;
  for (; i < n; ++i) s += (x[i] - mean) * (x[i] - mean);
  for (int l = 0; l < 16; ++l) s += acc[l];
  return s;
}

// y = (x - mean) * inv * scale + bias (bias may be null).
LITE_VECTOR_CLONES void NormalizeRow(const float* x, float* y, int64_t n, float mean, float inv, const float* scale,
                                     const float* bias) {
  if (bias) {
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * inv * scale[i] + bias[i];
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * inv * scale[i];
  }
}

namespace {

void RowPortable(const float* x, float* y, int64_t n, float eps, bool rms, const float* scale, const float* bias) {
  const float m = rms ? 0.f : SumLanes(x, n) / static_cast<float>(n);
  const float var = SumSquaredDeviation(x, n, m) / static_cast<float>(n);
  NormalizeRow(x, y, n, m, 1.f / std::sqrt(var + eps), scale, bias);
}

#ifdef LITE_X86_SIMD
// Four 16-lane partial sums per pass, so the adds' latency does not serialise a 768-value row (BERT-base's: the
// clone-vectorised loops above, two 8-lane chains, took ~1000 cycles a row on a Xeon).
__attribute__((target("avx512f"))) void RowAvx512(const float* x, float* y, int64_t n, float eps, bool rms,
                                                   const float* scale, const float* bias) {
  const int64_t n64 = n / 64 * 64, n16 = n / 16 * 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (n - n16)) - 1);
  float mean = 0.f;
  if (!rms) {
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i < n64; i += 64) {
      s0 = _mm512_add_ps(s0, _mm512_loadu_ps(x + i));
      s1 = _mm512_add_ps(s1, _mm512_loadu_ps(x + i + 16));
      s2 = _mm512_add_ps(s2, _mm512_loadu_ps(x + i + 32));
      s3 = _mm512_add_ps(s3, _mm512_loadu_ps(x + i + 48));
    }
    for (; i < n16; i += 16) s0 = _mm512_add_ps(s0, _mm512_loadu_ps(x + i));
    s0 = _mm512_add_ps(s0, _mm512_maskz_loadu_ps(tail, x + n16));
    mean = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3))) / static_cast<float>(n);
  }
  const __m512 m = _mm512_set1_ps(mean);
  __m512 q0 = _mm512_setzero_ps(), q1 = q0, q2 = q0, q3 = q0;
  int64_t i = 0;
  for (; i < n64; i += 64) {
    const __m512 d0 = _mm512_sub_ps(_mm512_loadu_ps(x + i), m), d1 = _mm512_sub_ps(_mm512_loadu_ps(x + i + 16), m);
    const __m512 d2 = _mm512_sub_ps(_mm512_loadu_ps(x + i + 32), m), d3 = _mm512_sub_ps(_mm512_loadu_ps(x + i + 48), m);
    q0 = _mm512_fmadd_ps(d0, d0, q0);
    q1 = _mm512_fmadd_ps(d1, d1, q1);
    q2 = _mm512_fmadd_ps(d2, d2, q2);
    q3 = _mm512_fmadd_ps(d3, d3, q3);
  }
  for (; i < n16; i += 16) {
    const __m512 d = _mm512_sub_ps(_mm512_loadu_ps(x + i), m);
    q0 = _mm512_fmadd_ps(d, d, q0);
  }
  const __m512 dt = _mm512_maskz_sub_ps(tail, _mm512_maskz_loadu_ps(tail, x + n16), m);
  q0 = _mm512_fmadd_ps(dt, dt, q0);
  const float var = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(q0, q1), _mm512_add_ps(q2, q3))) / static_cast<float>(n);
  const __m512 inv = _mm512_set1_ps(1.f / std::sqrt(var + eps));
  for (i = 0; i < n16; i += 16) {
    const __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), m), inv), _mm512_loadu_ps(scale + i));
    _mm512_storeu_ps(y + i, bias ? _mm512_add_ps(v, _mm512_loadu_ps(bias + i)) : v);
  }
  if (tail) {
    const __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, x + n16), m), inv),
                                   _mm512_maskz_loadu_ps(tail, scale + n16));
    _mm512_mask_storeu_ps(y + n16, tail, bias ? _mm512_add_ps(v, _mm512_maskz_loadu_ps(tail, bias + n16)) : v);
  }
}
#endif

using RowFn = void (*)(const float*, float*, int64_t, float, bool, const float*, const float*);

}  // namespace

void LayerNormRow(const float* x, float* y, int64_t n, float eps, bool rms, const float* scale, const float* bias) {
  static const IsaKernel<RowFn> k = PickIsaKernel<RowFn>(RowPortable, nullptr, LITE_IF_X86_SIMD(RowAvx512));
  k.fn(x, y, n, eps, rms, scale, bias);
}

}  // namespace lite
