// exp(x) for x <= 0 on 8 AVX2 lanes and on 16 AVX-512 lanes: a softmax's weights, score minus maximum (the tiled attention's and the decode
// path's), on x86 builds (LITE_X86_SIMD).
#pragma once
#include "cpu/isa_dispatch.h"

#ifdef LITE_X86_SIMD
#include <immintrin.h>

namespace lite {

// The polynomial both widths evaluate (FastExp's): the clamp below which exp underflows to 0, log2(e), ln 2 split in
// two parts for the reduction, and the coefficients of exp(r) - 1 - r over r^2, highest first.
namespace exp_non_positive {
constexpr float kLow = -87.3365f, kLog2e = 1.44269504088896341f, kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
constexpr float kPoly[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f,
                            5.0000001201e-1f};
// 2^f on [-1/2, 1/2], highest degree first (a weighted least-squares fit, relative error 2e-9 in exact arithmetic),
// and the exponent below which ExpNonPositive512 returns 0.
constexpr float kExp2Poly[7] = {1.5345810970757157e-4f, 1.3399930903688073e-3f, 9.618489071726799e-3f,
                                5.550328642129898e-2f, 2.4022646248340607e-1f, 6.931471824645996e-1f, 1.f};
constexpr float kExp2Low = -125.f;
}  // namespace exp_non_positive

// exp(x) for x <= 0 (x is a score minus its column's maximum) or -inf, and a little above 0 (the attention's lazy
// rescaling reads scores up to 8 above a stale maximum; valid to x = 88): no overflow handling, 2^n built
// directly (n >= -126 after the clamp), one rounding instruction. Same polynomial as FastExp (~2 ulp).
__attribute__((target("avx2,fma"))) inline __m256 ExpNonPositive(__m256 x) {
  using namespace exp_non_positive;
  const __m256 lo = _mm256_set1_ps(kLow);
  const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_max_ps(x, lo);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), r);
  __m256 p = _mm256_set1_ps(kPoly[0]);
  for (int i = 1; i < 6; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kPoly[i]));
  p = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

// ExpNonPositive on 16 AVX-512 lanes (the tiled attention's exp pass), in fewer operations: exp(x) = 2^t with
// t = x log2(e) = n + f, n = round(t), |f| <= 1/2; a degree-6 polynomial for 2^f (relative error under 1e-7 in
// float32), then vscalefps multiplies it by 2^n. 10 vector operations, the AVX2 form's 17: a 1500-token attention's
// exp pass 10% -> 6% of its time. Results under 2^-125 (and exp(-inf)) are 0, never a denormal for the products
// that follow; a NaN stays NaN. Rounding t first costs up to |t| x 6e-8 of relative error, so far only where the
// weight is below e^-14 of its row's largest.
__attribute__((target("avx512f"), always_inline)) inline __m512 ExpNonPositive512(__m512 x) {
  using namespace exp_non_positive;
  const __m512 t = _mm512_mul_ps(x, _mm512_set1_ps(kLog2e));
  const __mmask16 keep = _mm512_cmp_ps_mask(t, _mm512_set1_ps(kExp2Low), _CMP_NLT_UQ);   // NaN: kept
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(t, n);
  __m512 p = _mm512_set1_ps(kExp2Poly[0]);
  for (int i = 1; i < 7; ++i) p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(kExp2Poly[i]));
  return _mm512_maskz_scalef_ps(keep, p, n);
}

}  // namespace lite
#endif
