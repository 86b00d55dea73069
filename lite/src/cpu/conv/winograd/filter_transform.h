// The Winograd filter transform U = G g G^T for 3x3 filters, shared by the float32 kernels (winograd_conv.h,
// winograd_blocked.h): each of the (tile + 2)^2 positions is a fixed combination of the 9 taps (coefficients from G,
// formed in double), applied to a whole row of channels at once.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

namespace lite {

// Per position (row-major over the (tile + 2) x (tile + 2) positions), the coefficients of the 9 taps: G of
// F(4x4, 3x3) for tile 4, of F(2x2, 3x3) for tile 2.
std::vector<std::array<float, 9>> WinogradFilterCoefficients(int tile);

// out[c] = sum_t coef[t] * taps[t * n + c]: one position of the transform for n channels whose 9 taps lie n apart.
void WinogradFilterPosition(const float* coef, const float* taps, int64_t n, float* out);

}  // namespace lite
