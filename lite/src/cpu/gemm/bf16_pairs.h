// The bf16 kernels' pair layout (Bf16PanelsB, cpu/gemm/bf16_gemm.h): two rows of 16 floats (depth k and k + 1) as 16
// interleaved bf16 pairs, each value rounded to nearest even (always inline, so it compiles in the caller's ISA);
// 16 bf16 values as float32; and the pairs' dot product step.
#pragma once
#include <cstdint>

#include "cpu/isa_dispatch.h"

#ifdef LITE_X86_SIMD
#include <immintrin.h>

namespace lite {

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"), always_inline)) inline __m512i Bf16Pairs(__m512 r0,
                                                                                                     __m512 r1) {
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21, 5,
                                       20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(idx, (__m512i)_mm512_cvtne2ps_pbh(r1, r0));
}

// 16 bf16 values at `at` as float32 (exact: a bf16 is the high half of a float32).
__attribute__((target("avx512f,avx512bw,avx512vl"), always_inline)) inline __m512 Bf16x16ToFloats(const uint16_t* at) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
}

// vdpbf16ps as the step of the pixel-major depth loop (cpu/conv/pixel_depth_loop.h): 16 float32 sums += 16 pairs of bf16
// products.
struct Bf16Dot {
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) static inline __m512 Step(__m512 acc, __m512i x,
                                                                                           __m512i w) {
    return _mm512_dpbf16_ps(acc, (__m512bh)x, (__m512bh)w);
  }
};

}  // namespace lite
#endif
