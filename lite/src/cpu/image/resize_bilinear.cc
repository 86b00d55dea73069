#include "cpu/image/resize_bilinear.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace lite {
namespace {

struct AxisTaps {
  std::vector<int64_t> lo, hi;
  std::vector<float> t;   // the weight of hi
};

AxisTaps Taps(int64_t n_in, int64_t n_out) {
  AxisTaps a;
  a.lo.resize(n_out), a.hi.resize(n_out), a.t.resize(n_out);
  const double scale = static_cast<double>(n_in) / static_cast<double>(n_out);
  for (int64_t i = 0; i < n_out; ++i) {
    const double x = std::clamp((i + 0.5) * scale - 0.5, 0.0, static_cast<double>(n_in - 1));
    a.lo[i] = static_cast<int64_t>(std::floor(x));
    a.hi[i] = std::min(a.lo[i] + 1, n_in - 1);
    a.t[i] = static_cast<float>(x - static_cast<double>(a.lo[i]));
  }
  return a;
}

}  // namespace

void ResizeBilinearU8(const uint8_t* src, int64_t h, int64_t w, int64_t c, uint8_t* dst, int64_t oh, int64_t ow) {
  if (oh <= 0 || ow <= 0 || h <= 0 || w <= 0 || c <= 0) return;
  const AxisTaps ys = Taps(h, oh), xs = Taps(w, ow);
  std::vector<float> row(static_cast<size_t>(w * c));
  for (int64_t y = 0; y < oh; ++y) {
    const uint8_t* a = src + ys.lo[y] * w * c;
    const uint8_t* b = src + ys.hi[y] * w * c;
    const float ty = ys.t[y];
    for (int64_t i = 0; i < w * c; ++i) {
      const float va = a[i];
      row[i] = va + (static_cast<float>(b[i]) - va) * ty;
    }
    uint8_t* out = dst + y * ow * c;
    for (int64_t x = 0; x < ow; ++x) {
      const float* l = row.data() + xs.lo[x] * c;
      const float* r = row.data() + xs.hi[x] * c;
      const float tx = xs.t[x];
      for (int64_t k = 0; k < c; ++k) {
        const float v = l[k] + (r[k] - l[k]) * tx;
        out[x * c + k] = static_cast<uint8_t>(std::clamp(std::nearbyint(v), 0.f, 255.f));
      }
    }
  }
}

}  // namespace lite
