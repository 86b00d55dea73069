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

// Float32 sums of 16 columns from the pair layout's interleaved float32 lanes (x0: columns 0-7's even / odd depths,
// x1: 8-15's): the float16 tiles' last step (cpu/gemm/bf16_gemm.cc's GEMM, cpu/conv/blocked_pointwise.cc's 1x1 Convs).
__attribute__((target("avx512f"), always_inline)) inline __m512 AddDepthLanes(__m512 x0, __m512 x1) {
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  return _mm512_add_ps(_mm512_permutex2var_ps(x0, even, x1), _mm512_permutex2var_ps(x0, odd, x1));
}

// Two consecutive float16 values (a row's depth pair) broadcast to the 32 lanes of the pair layout (vpbroadcastd).
__attribute__((target("avx512f,avx512bw,avx512vl,avx512fp16"), always_inline)) inline __m512h BroadcastHalfPair(
    const uint16_t* pair) {
  int32_t v;
  __builtin_memcpy(&v, pair, 4);
  return _mm512_castsi512_ph(_mm512_set1_epi32(v));
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
