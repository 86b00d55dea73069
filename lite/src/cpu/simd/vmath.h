// Branch-free float math that compilers vectorise (libm's expf/tanhf/erff are scalar calls).
// Accuracy: exp ~2 ulp; tanh/sigmoid abs error < 1e-7; erf abs error < 5e-7 (rational fit).
#pragma once
#include <cstdint>
#include <cstring>
#include <limits>

#ifdef __aarch64__
#include <arm_neon.h>
#endif

namespace lite {

inline float BitsToFloat(int32_t i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}

inline int32_t FloatToBits(float f) {
  int32_t i;
  std::memcpy(&i, &f, 4);
  return i;
}

inline float FastExp(float x) {
  // Below -87.3 the true result is denormal or 0: return 0, so exp(-inf) of a masked attention score is
  // exactly 0 (the clamped input alone gave ~1e-38, a denormal that then flowed into sums and products,
  // where x86 handles denormals slowly). Above ln(FLT_MAX) it is +inf, and NaN stays NaN; neither reaches the
  // integer steps below (converting a NaN to int32 is undefined).
  const float input = x;
  const bool underflow = x < -87.3365f, overflow = x > 88.7228394f, nan = x != x;
  x = underflow || nan ? -87.3365f : (x > 88.7228f ? 88.7228f : x);
  // x = n*ln2 + r, |r| <= ln2/2; n rounded with the 1.5*2^23 trick (vectorises without SSE4.1).
  const float n = (x * 1.44269504088896341f + 12582912.f) - 12582912.f;
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.f;
  // Scale by 2^n in two halves so n = 128 (x near the top of the range) does not overflow the exponent.
  const int32_t ni = static_cast<int32_t>(n);
  const int32_t half = ni >> 1;
  const float y = p * BitsToFloat((half + 127) << 23) * BitsToFloat((ni - half + 127) << 23);
  return nan ? input : overflow ? std::numeric_limits<float>::infinity() : underflow ? 0.f : y;
}

#ifdef __aarch64__
// FastExp on four lanes in NEON registers, the same steps (results equal FastExp's up to the rounding of its
// multiply-adds, which GCC may fuse or not): for the softmax loops, whose scalar form GCC vectorised on aarch64 with
// the lanes staged through the stack.
inline float32x4_t FastExpNeon(float32x4_t x) {
  const float32x4_t input = x;
  const uint32x4_t underflow = vcltq_f32(x, vdupq_n_f32(-87.3365f));
  const uint32x4_t overflow = vcgtq_f32(x, vdupq_n_f32(88.7228394f));
  const uint32x4_t nan = vmvnq_u32(vceqq_f32(x, x));
  // (fmax / fmin keep a NaN, whose lane is replaced at the end; its conversion to int32 below gives 0 on ARM)
  x = vminq_f32(vmaxq_f32(x, vdupq_n_f32(-87.3365f)), vdupq_n_f32(88.7228f));
  const float32x4_t big = vdupq_n_f32(12582912.f);
  const float32x4_t n = vsubq_f32(vfmaq_f32(big, x, vdupq_n_f32(1.44269504088896341f)), big);
  const float32x4_t r = vfmaq_f32(vfmsq_f32(x, n, vdupq_n_f32(0.693359375f)), n, vdupq_n_f32(2.12194440e-4f));
  float32x4_t p = vfmaq_f32(vdupq_n_f32(1.3981999507e-3f), r, vdupq_n_f32(1.9875691500e-4f));
  p = vfmaq_f32(vdupq_n_f32(8.3334519073e-3f), p, r);
  p = vfmaq_f32(vdupq_n_f32(4.1665795894e-2f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.6666665459e-1f), p, r);
  p = vfmaq_f32(vdupq_n_f32(5.0000001201e-1f), p, r);
  p = vaddq_f32(vfmaq_f32(r, vmulq_f32(p, r), r), vdupq_n_f32(1.f));
  const int32x4_t ni = vcvtq_s32_f32(n), half = vshrq_n_s32(ni, 1), bias = vdupq_n_s32(127);
  const float32x4_t lo = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(half, bias), 23));
  const float32x4_t hi = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(vsubq_s32(ni, half), bias), 23));
  float32x4_t y = vmulq_f32(vmulq_f32(p, lo), hi);
  y = vbslq_f32(underflow, vdupq_n_f32(0.f), y);
  y = vbslq_f32(overflow, vdupq_n_f32(std::numeric_limits<float>::infinity()), y);
  return vbslq_f32(nan, input, y);
}
#endif

inline float FastSigmoid(float x) { return 1.f / (1.f + FastExp(-x)); }

// sin (cos with quarter = 1) for |x| <= kFastSinLimit: x = n*pi/2 + r by a three-part Cody-Waite reduction (Cephes'
// constants), then sin or cos of r (|r| <= pi/4) by Cephes' polynomials, chosen and signed by n's quadrant;
// abs error < 2e-7 over the range. Larger or non-finite x are for the caller's libm fallback.
constexpr float kFastSinLimit = 8192.f;
inline float FastSinQuadrant(float x, int32_t quarter) {
  const float n = (x * 0.636619772367581343f + 12582912.f) - 12582912.f;
  const float r = ((x - n * 1.5703125f) - n * 4.837512969970703125e-4f) - n * 7.54978995489188216e-8f;
  const float z = r * r;
  const float s = r + r * z * (-1.6666654611e-1f + z * (8.3321608736e-3f + z * -1.9515295891e-4f));
  const float c = 1.f - 0.5f * z + z * z * (4.166664568298827e-2f + z * (-1.388731625493765e-3f +
                                                                         z * 2.443315711809948e-5f));
  const int32_t q = (static_cast<int32_t>(n) + quarter) & 3;
  const float v = (q & 1) ? c : s;
  return (q & 2) ? -v : v;
}

inline float FastTanh(float x) {
  // tanh(x) = sign(x) * (1 - 2 / (exp(2|x|) + 1)); small |x| uses its odd Taylor series (no cancellation).
  const float ax = x < 0.f ? -x : x;
  const float e = FastExp(2.f * ax);
  float t = 1.f - 2.f / (e + 1.f);
  const float x2 = ax * ax;
  const float small = ax * (1.f + x2 * (-0.333333333f + x2 * (0.133333333f + x2 * -0.0539682540f)));
  t = ax < 0.0625f ? small : t;
  return x < 0.f ? -t : t;
}

// erf's rational fit on an already clamped argument: x * P(x^2) / Q(x^2), for a float or a GCC vector of floats
// (always inline: compiled in the caller's ISA).
template <typename T>
__attribute__((always_inline)) inline T ErfFit(T x) {
  const T x2 = x * x;
  T p = x2 * -2.72614225801306e-10f + 2.77068142495902e-08f;
  p = p * x2 + -2.10102402082508e-06f;
  p = p * x2 + -5.69250639462346e-05f;
  p = p * x2 + -7.34990630326855e-04f;
  p = p * x2 + -2.95459980854025e-03f;
  p = p * x2 + -1.60960333262415e-02f;
  T q = x2 * -1.45660718464996e-05f + -2.13374055278905e-04f;
  q = q * x2 + -1.68282697438203e-03f;
  q = q * x2 + -7.37332916720468e-03f;
  q = q * x2 + -1.42647390514189e-02f;
  return x * p / q;
}

inline float FastErf(float x) {
  // x * P(x^2) / Q(x^2) on [-4, 4] (erf is 1 to float precision beyond): a rational minimax fit, the
  // form Eigen and XLA use; no exp and no branch. Max abs error 4.2e-7 (checked against libm on a grid).
  return ErfFit(x < -4.f ? -4.f : (x > 4.f ? 4.f : x));
}

// GELU (erf form) of a GCC vector of floats (any width), FastErf lane by lane: for kernels that apply it in
// registers.
template <typename V>
__attribute__((always_inline)) inline V FastGeluVec(V x) {
  V z = x * 0.7071067811865476f;
  z = z < -4.f ? V{} - 4.f : z;
  z = z > 4.f ? V{} + 4.f : z;
  return 0.5f * x * (1.f + ErfFit(z));
}

// x * sigmoid(x) (SiLU) of a GCC vector of floats (any width), FastExp's steps lane by lane: for kernels that apply
// it in registers.
template <typename V>
__attribute__((always_inline)) inline V FastSiluVec(V x) {
  typedef int32_t VI __attribute__((vector_size(sizeof(V))));
  V t = -x;   // exp(-x), clamped as FastExp clamps (a NaN lane computes on a stand-in: x / (1 + e) keeps it NaN)
  const VI underflow = t < -87.3365f;
  // exp(-x) overflows to +inf as FastExp's does: x / inf is -0 for a very negative x, and NaN for x = -inf, as
  // x * sigmoid(x) = -inf * 0 gives (ONNX Runtime's value; the clamped e alone gave -inf)
  const VI overflow = t > 88.7228394f;
  // One comparison, false for NaN (`t < lo || t != t` was compiled lane by lane: scalar compares and inserts, the
  // SiLU epilogue ~22% of a bf16 SwiGLU gate product's time)
  t = t >= -87.3365f ? t : V{} - 87.3365f;
  t = t > 88.7228f ? V{} + 88.7228f : t;
  const V n = (t * 1.44269504088896341f + 12582912.f) - 12582912.f;
  const V r = t - n * 0.693359375f + n * 2.12194440e-4f;
  V p = r * 1.9875691500e-4f + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.f;
  const VI ni = __builtin_convertvector(n, VI);
  const VI half = ni >> 1;
  V lo, hi;
  const VI lo_bits = (half + 127) << 23, hi_bits = (ni - half + 127) << 23;
  std::memcpy(&lo, &lo_bits, sizeof(V));
  std::memcpy(&hi, &hi_bits, sizeof(V));
  V e = p * lo * hi;
  e = underflow ? V{} : e;
  e = overflow ? V{} + std::numeric_limits<float>::infinity() : e;
  return x / (1.f + e);
}

}  // namespace lite
