// Float32 results to uint8 activation codes on 16 lanes, as every integer kernel's epilogue stores them: round half
// to even (the default MXCSR mode) after the zero point is added, saturate to [0, 255]; values past 512 are capped
// first so that they saturate high rather than convert to INT_MIN (a NaN stays NaN: code 0). The scalar twin is
// QuantizeValue (cpu/quantized/qgemm.h). (The pixel-major Conv's epilogue folds the scales into one FMA and rounds
// once, with the same clamps: cpu/quantized/u8_pixel_conv.h.)
#pragma once

#ifdef LITE_X86_SIMD
#include <immintrin.h>

namespace lite {

// v x inv_scale + zero_point as 16 uint8 codes.
__attribute__((always_inline, target("avx512f"))) inline __m128i RequantizeToCodes(__m512 v, __m512 inv_scale,
                                                                                  __m512i zero_point) {
  const __m512 scaled = _mm512_min_ps(_mm512_set1_ps(512.f), _mm512_mul_ps(v, inv_scale));
  const __m512i q = _mm512_max_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(scaled), zero_point), _mm512_setzero_si512());
  return _mm512_cvtusepi32_epi8(q);
}

}  // namespace lite
#endif
