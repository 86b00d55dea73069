// One row of LayerNormalization / RMSNormalization: y = (x - mean) / sqrt(var + eps) * scale + bias, the mean and
// the variance in two passes (no cancellation), float32 sums.
#pragma once
#include <cstdint>

namespace lite {

// rms: no mean subtracted (RMSNormalization); bias may be null.
void LayerNormRow(const float* x, float* y, int64_t n, float eps, bool rms, const float* scale, const float* bias);

}  // namespace lite
