#include "cpu/conv/winograd/filter_transform.h"

#include "cpu/simd/simd.h"

namespace lite {

std::vector<std::array<float, 9>> WinogradFilterCoefficients(int tile) {
  static const double G4[6][3] = {{0.25, 0, 0},           {-1. / 6, -1. / 6, -1. / 6}, {-1. / 6, 1. / 6, -1. / 6},
                                  {1. / 24, 1. / 12, 1. / 6}, {1. / 24, -1. / 12, 1. / 6}, {0, 0, 1}};
  static const double G2[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
  const int alpha = tile + 2;
  auto G = [&](int i, int a) { return tile == 4 ? G4[i][a] : G2[i][a]; };
  std::vector<std::array<float, 9>> coef(static_cast<size_t>(alpha * alpha));
  for (int i = 0; i < alpha; ++i)
    for (int k = 0; k < alpha; ++k)
      for (int a = 0; a < 3; ++a)
        for (int b = 0; b < 3; ++b) coef[i * alpha + k][a * 3 + b] = static_cast<float>(G(i, a) * G(k, b));
  return coef;
}

LITE_VECTOR_CLONES void WinogradFilterPosition(const float* coef, const float* __restrict taps, int64_t n,
                                               float* __restrict out) {
  for (int64_t c = 0; c < n; ++c) {
    float v = 0.f;
    for (int t = 0; t < 9; ++t) v += coef[t] * taps[t * n + c];
    out[c] = v;
  }
}

}  // namespace lite
