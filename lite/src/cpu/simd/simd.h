// Elementwise loops compiled twice: for x86-64-v3 (AVX2 + FMA) and for the baseline ISA, chosen at load time by CPU
// features (GCC function multi-versioning). The loop bodies are plain C++ that the compiler vectorises;
// this header only decides which vector width they get.
#pragma once
#include <cstdint>
#include <cstring>

#include "cpu/simd/vmath.h"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
// The x86-64-v3 feature level (AVX2, FMA, BMI, F16C, ...): the resolver tests the CPU's features (not its
// model name, as "arch=haswell" would), and unlike an "avx2" clone the code may contract a*b+c into FMAs,
// which the polynomial and rational math of vmath.h is made of.
#define LITE_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define LITE_VECTOR_CLONES
#endif

namespace lite {

template <typename R, typename T, typename Op>
LITE_VECTOR_CLONES void MapLoop(const T* x, R* y, int64_t n, Op op) {
  for (int64_t i = 0; i < n; ++i) y[i] = op(x[i]);
}

// y[i] = op(a[i], b[i]) with either operand optionally a broadcast scalar (stride 0).
template <typename R, typename T, typename Op>
LITE_VECTOR_CLONES void ZipLoop(const T* a, bool a_vec, const T* b, bool b_vec, R* y, int64_t n, Op op) {
  if (a_vec && b_vec) {
    for (int64_t i = 0; i < n; ++i) y[i] = op(a[i], b[i]);
  } else if (a_vec) {
    const T vb = b[0];
    for (int64_t i = 0; i < n; ++i) y[i] = op(a[i], vb);
  } else if (b_vec) {
    const T va = a[0];
    for (int64_t i = 0; i < n; ++i) y[i] = op(va, b[i]);
  } else {
    const R v = op(a[0], b[0]);
    for (int64_t i = 0; i < n; ++i) y[i] = v;
  }
}

// Max of x[0..n) (n >= 1), 16 lanes. NaN-free inputs assumed by callers that need an exact max; a NaN
// anywhere may or may not be returned.
// Written with vector types: as a 16-lane array loop (like SumLanes) GCC kept the compare-selects scalar.
LITE_VECTOR_CLONES inline float MaxLanes(const float* x, int64_t n) {
  typedef float V8 __attribute__((vector_size(32)));
  V8 a, b;
  for (int l = 0; l < 8; ++l) a[l] = x[0];
  b = a;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    V8 u, v;
    std::memcpy(&u, x + i, sizeof(V8));
    std::memcpy(&v, x + i + 8, sizeof(V8));
    a = u > a ? u : a;
    b = v > b ? v : b;
  }
  a = b > a ? b : a;
  float m = x[0];
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  for (int l = 0; l < 8; ++l) m = a[l] > m ? a[l] : m;
  return m;
}

// y = exp(x - shift), returning the sum of y (16 lanes; 8 on ARM64).
LITE_VECTOR_CLONES inline float ExpShiftSum(const float* x, float* y, int64_t n, float shift) {
#ifdef __aarch64__
  // Two NEON registers of lanes: GCC vectorised the 16-lane array loop below with its lanes staged through the stack
  // on aarch64 (~4 stack accesses per fmla in the decode attention's softmax).
  const float32x4_t sv = vdupq_n_f32(shift);
  float32x4_t a0 = vdupq_n_f32(0.f), a1 = a0;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const float32x4_t u = FastExpNeon(vsubq_f32(vld1q_f32(x + i), sv));
    const float32x4_t v = FastExpNeon(vsubq_f32(vld1q_f32(x + i + 4), sv));
    vst1q_f32(y + i, u);
    vst1q_f32(y + i + 4, v);
    a0 = vaddq_f32(a0, u);
    a1 = vaddq_f32(a1, v);
  }
  float s = vaddvq_f32(vaddq_f32(a0, a1));
  for (; i < n; ++i) {
    y[i] = FastExp(x[i] - shift);
    s += y[i];
  }
  return s;
#else
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; ++l) {
      const float v = FastExp(x[i + l] - shift);
      y[i + l] = v;
      acc[l] += v;
    }
  float s = 0.f;
  for (; i < n; ++i) {
    y[i] = FastExp(x[i] - shift);
    s += y[i];
  }
  for (int l = 0; l < 16; ++l) s += acc[l];
  return s;
#endif
}

LITE_VECTOR_CLONES inline void ScaleRow(float* y, int64_t n, float k) {
  for (int64_t i = 0; i < n; ++i) y[i] *= k;
}

}  // namespace lite
