// Branch-free float math that compilers vectorise (libm's expf/tanhf/erff are scalar calls).
// Accuracy: exp ~2 ulp; tanh/sigmoid abs error < 1e-7; erf abs error < 5e-7 (Abramowitz-Stegun 7.1.26; series near 0).
#pragma once
#include <cstdint>
#include <cstring>

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
  x = x < -87.3365f ? -87.3365f : (x > 88.7228f ? 88.7228f : x);
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
  return p * BitsToFloat((half + 127) << 23) * BitsToFloat((ni - half + 127) << 23);
}

inline float FastSigmoid(float x) { return 1.f / (1.f + FastExp(-x)); }

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

inline float FastErf(float x) {
  const float ax = x < 0.f ? -x : x;
  const float t = 1.f / (1.f + 0.3275911f * ax);
  const float poly =
      t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
  float y = 1.f - poly * FastExp(-ax * ax);
  // Near zero the formula cancels; the Maclaurin series is exact to float precision for |x| < 0.5.
  const float x2 = ax * ax;
  const float series = 1.12837917f * ax *
      (1.f + x2 * (-0.333333333f + x2 * (0.1f + x2 * (-0.0238095238f + x2 * (0.00462962963f + x2 * -0.000757575758f)))));
  y = ax < 0.5f ? series : y;
  return x < 0.f ? -y : y;
}

}  // namespace lite
