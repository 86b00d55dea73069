// One row of 16 GEMM outputs through the fused epilogue in AVX-512 registers, shared by the integer kernels that apply
// it there (the AVX512-VNNI dynamic-quant kernels, the AMX ones): bias (row + column), residual, activation, multiplier
// in ApplyEpilogue's order, then a masked store. Only for the activations ActivationInRegisters names.
#pragma once
#include <cstdint>

#include "cpu/gemm/gemm.h"
#include "cpu/isa_dispatch.h"
#include "cpu/simd/vmath.h"

#ifdef LITE_X86_SIMD
#include <immintrin.h>

namespace lite {

// Row r of the epilogue's rows (C's row r: C, the residual and the multiplier start at its row 0), columns col0.. in
// the `live` lanes; col_bias holds their column bias (zero without one). The row's operands are read before its store:
// a residual that is C itself reads its old values.
__attribute__((target("avx512f,avx512bw,avx512vl,fma"), always_inline)) inline void EpilogueRowAvx512(
    __m512 v, int64_t r, int64_t col0, __mmask16 live, __m512 col_bias, float* C, int64_t ldc,
    const GemmEpilogue& ep) {
  const __m512 row_bias = _mm512_set1_ps(ep.row_bias ? ep.row_bias[r] : 0.f);
  if (ep.col_bias) {
    v = _mm512_add_ps(v, _mm512_add_ps(row_bias, col_bias));
  } else if (ep.row_bias) {
    v = _mm512_add_ps(v, row_bias);
  }
  if (ep.residual) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(live, ep.residual + r * ep.ld_residual + col0));
  switch (ep.act) {
    case EpilogueAct::kRelu: v = _mm512_max_ps(_mm512_setzero_ps(), v); break;
    case EpilogueAct::kRelu6: v = _mm512_min_ps(_mm512_set1_ps(6.f), _mm512_max_ps(_mm512_setzero_ps(), v)); break;
    case EpilogueAct::kSilu: v = FastSiluVec(v); break;
    case EpilogueAct::kGelu: v = FastGeluVec(v); break;
    default: break;
  }
  if (ep.multiplier) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(live, ep.multiplier + r * ep.ld_multiplier + col0));
  _mm512_mask_storeu_ps(C + r * ldc + col0, live, v);
}

}  // namespace lite
#endif
