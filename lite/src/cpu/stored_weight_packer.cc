#include "cpu/stored_weight_packer.h"

#include <algorithm>
#include <vector>

#ifdef LITE_X86_SIMD
#include <immintrin.h>
#endif

namespace lite {

#ifdef LITE_X86_SIMD
namespace {

// One row of a block: `panels` runs of 16 codes, each scaled and stored into its panel (kc x 16 floats apart).
__attribute__((target("avx2,fma"))) void DecodeRowAvx2(const int8_t* row, const float* scale, int64_t panels,
                                                        int64_t kc, float* dst) {
  for (int64_t p = 0; p < panels; ++p, row += kGemmNR, scale += kGemmNR, dst += kc * kGemmNR) {
    const __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row));
    const __m256 lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(codes));
    const __m256 hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(codes, 8)));
    _mm256_storeu_ps(dst, _mm256_mul_ps(lo, _mm256_loadu_ps(scale)));
    _mm256_storeu_ps(dst + 8, _mm256_mul_ps(hi, _mm256_loadu_ps(scale + 8)));
  }
}

}  // namespace
#endif

void StoredWeightPacker::Pack(int64_t k0, int64_t kc, int64_t n0, int64_t nc, float* dst) const {
  constexpr int64_t NR = kGemmNR;
  const int64_t panels = (nc + NR - 1) / NR;
  thread_local std::vector<float> run;
  const ms_schema::QuantParam* q = w_.quant;
  if (w_.storage == ms_schema::DataType::INT8 && q->bits() == 8 && q->group_size() == 0 &&
      q->axis() == 1 && (!q->zero_point() || q->zero_point()->size() == 0)) {
    // Symmetric codes with a scale per column (WEIGHT_QUANT's default): code x scale straight into the panels,
    // reading each row of the block in order (sequential, so the prefetchers keep ahead of the decode).
    const int8_t* codes = reinterpret_cast<const int8_t*>(w_.bytes);
    const float* scale = q->scale()->data() + n0;
    const int64_t full = nc / NR;
    for (int64_t k = 0; k < kc; ++k) {
      const int8_t* row = codes + (k0 + k) * N_ + n0;
#ifdef LITE_X86_SIMD
      if (avx2_) {
        DecodeRowAvx2(row, scale, full, kc, dst + k * NR);
      } else
#endif
      {
        for (int64_t p = 0; p < full; ++p)
          for (int64_t j = 0; j < NR; ++j) dst[(p * kc + k) * NR + j] = static_cast<float>(row[p * NR + j]) * scale[p * NR + j];
      }
      if (full < panels)   // the last, partial panel
        for (int64_t j = 0; j < NR; ++j) {
          const int64_t c = full * NR + j;
          dst[(full * kc + k) * NR + j] = c < nc ? static_cast<float>(row[c]) * scale[c] : 0.f;
        }
    }
    return;
  }
  // Other storage (float16): row k of the block decoded as nc values, then spread over the panels.
  run.resize(static_cast<size_t>(panels * NR));
  std::fill(run.begin() + nc, run.end(), 0.f);   // columns past nc in the last panel are zero
  for (int64_t k = 0; k < kc; ++k) {
    DecodeStoredRange(w_, (k0 + k) * N_ + n0, nc, run.data());
    for (int64_t p = 0; p < panels; ++p) std::copy_n(run.data() + p * NR, NR, dst + (p * kc + k) * NR);
  }
}

}  // namespace lite
