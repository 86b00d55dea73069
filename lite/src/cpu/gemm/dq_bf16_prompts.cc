#include "cpu/gemm/dq_bf16_prompts.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>

#include "cpu/isa_dispatch.h"

#ifdef LITE_X86_SIMD
#include <immintrin.h>

#include "cpu/gemm/bf16_pairs.h"
#endif

namespace lite {

namespace {

bool Bf16TilesHere() {
  static const bool here = CpuHasAmxBf16() && DqTallProductsOverride() != "integer";
  return here;
}

#ifdef LITE_X86_SIMD
#define LITE_DQ_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"), always_inline)) inline

// One 16-column half panel's scales and zero points for a block of depth.
struct BlockScales {
  __m512 s, z, minus_zs;
};

// The 64-byte step v (kStep depth rows of 16 columns: int8 4 rows, a byte each; int4 8, rows 0-3 in the low nibbles,
// 4-7 in the high ones; column j's at bytes 4j..) as kStep rows of floats, rows from `valid` on zero. Row r is one
// byte shuffle away from 16 int32 lanes. One rounding, as the weight-only path's scale * (code - zero): (u - zero) is
// exact (integers below 2^9); with a zero point of 0 or a power of two (symmetric codes: 8, 128) -zero * scale is
// exact too, and one FMA rounds u * scale - zero * scale once.
template <int kStep, bool kFused>
LITE_DQ_BF16_TARGET void DecodeStep(__m512i v, const BlockScales& b, const __m512i* pick, int valid, __m512* f) {
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  const __m512i lo = kStep == 4 ? v : _mm512_and_si512(v, nibble);
  const __m512i hi = _mm512_and_si512(_mm512_srli_epi32(v, 4), nibble);
#pragma GCC unroll 8
  for (int r = 0; r < kStep; ++r) {
    const __m512 u = _mm512_cvtepi32_ps(_mm512_shuffle_epi8(r < 4 ? lo : hi, pick[r % 4]));
    const __m512 value = kFused ? _mm512_fmadd_ps(u, b.s, b.minus_zs) : _mm512_mul_ps(b.s, _mm512_sub_ps(u, b.z));
    f[r] = r < valid ? value : _mm512_setzero_ps();
  }
}

// Rows [k0, k0 + kc) x columns [n0, n0 + nc) of w as bf16 panels. A DqWeights panel (16 columns) is one half of a
// 32-column bf16 panel: per step both halves are decoded, so each 128-byte pair row is written whole, in order (half
// by half, the second pass found the first's lines gone from L1 at a prompt's depths). Two rows' floats make a depth
// pair's 32 bf16 values (Bf16Pairs).
template <int kStep, bool kFused>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void DecodePanelsAs(const DqWeights& w, int64_t k0,
                                                                                      int64_t kc, int64_t n0,
                                                                                      int64_t nc, uint16_t* dst) {
  const int64_t pairs = (kc + 1) / 2, panels32 = (nc + 31) / 32;
  const int64_t k_end = std::min(w.K, k0 + kc);
  __m512i pick[4];   // byte r of each 32-bit lane to its byte 0, the others zero
  for (int r = 0; r < 4; ++r) {
    const uint64_t b = (0x80808000u | r) | static_cast<uint64_t>(0x80808004u | r) << 32;
    const uint64_t c = (0x80808008u | r) | static_cast<uint64_t>(0x8080800Cu | r) << 32;
    const auto lo = static_cast<long long>(b), hi = static_cast<long long>(c);
    pick[r] = _mm512_set_epi64(hi, lo, hi, lo, hi, lo, hi, lo);
  }
  for (int64_t q = 0; q < panels32; ++q) {
    uint16_t* out = dst + q * pairs * 64;
    const uint8_t* codes[2];
    __mmask16 lanes[2];
    for (int h = 0; h < 2; ++h) {
      const int64_t first_col = n0 + q * 32 + h * 16;
      const int64_t valid = std::min<int64_t>(16, std::min(n0 + nc, w.N) - first_col);
      lanes[h] = valid <= 0 ? 0 : static_cast<__mmask16>((1u << valid) - 1);
      codes[h] = valid <= 0 ? nullptr : w.panel(first_col / 16);   // none: a second half past the block (zeros)
    }
    BlockScales scales[2];
    const int64_t group_stride = w.scale_groups > 1 ? 16 : 0, zero_stride = w.zeros.empty() ? 0 : group_stride;
    int64_t next_group = k0;   // the depth where the next block's scales start
    for (int64_t k = k0; k < k0 + kc; k += kStep) {
      if (k >= next_group) {
        const int64_t g = w.scale_groups > 1 ? k / w.block : 0;
        next_group = w.scale_groups > 1 ? (g + 1) * w.block : INT64_MAX;
        for (int h = 0; h < 2; ++h) {
          if (!codes[h]) continue;
          const int64_t p = (n0 + q * 32 + h * 16) / 16;
          scales[h].s = _mm512_maskz_loadu_ps(lanes[h], w.scales.data() + p * w.scale_groups * 16 + g * group_stride);
          scales[h].z = w.zeros.empty() ? _mm512_set1_ps(w.zero)
                                        : _mm512_loadu_ps(w.zeros.data() + p * w.scale_groups * 16 + g * zero_stride);
          scales[h].minus_zs = _mm512_mul_ps(scales[h].s, _mm512_sub_ps(_mm512_setzero_ps(), scales[h].z));
        }
      }
      const int valid = static_cast<int>(std::min<int64_t>(kStep, k_end - k));
      const int64_t kp0 = (k - k0) / 2, step_pairs = std::min<int64_t>(kStep / 2, pairs - kp0);
      __m512 f[2][kStep];
      for (int h = 0; h < 2; ++h) {
        if (!codes[h]) continue;
        const __m512i v = _mm512_loadu_si512(codes[h] + k / kStep * 64);
        if (valid == kStep) {
          DecodeStep<kStep, kFused>(v, scales[h], pick, kStep, f[h]);
        } else {
          DecodeStep<kStep, kFused>(v, scales[h], pick, valid, f[h]);
        }
      }
#pragma GCC unroll 4
      for (int i = 0; i < kStep / 2; ++i) {
        if (i >= step_pairs) break;
        for (int h = 0; h < 2; ++h)
          _mm512_storeu_si512(out + (kp0 + i) * 64 + h * 32,
                              codes[h] ? Bf16Pairs(f[h][2 * i], f[h][2 * i + 1]) : _mm512_setzero_si512());
      }
    }
  }
}

void DecodePanels(const DqWeights& w, int64_t k0, int64_t kc, int64_t n0, int64_t nc, uint16_t* dst) {
  int exponent = 0;
  const bool fused = w.zeros.empty() && (w.zero == 0.f || std::frexp(w.zero, &exponent) == 0.5f);
  if (w.bits == 8) {
    fused ? DecodePanelsAs<4, true>(w, k0, kc, n0, nc, dst) : DecodePanelsAs<4, false>(w, k0, kc, n0, nc, dst);
  } else {
    fused ? DecodePanelsAs<8, true>(w, k0, kc, n0, nc, dst) : DecodePanelsAs<8, false>(w, k0, kc, n0, nc, dst);
  }
}
#endif

}  // namespace

bool DqTallProductInBf16(const DqWeights& w, int64_t rows) {
  if (rows < kDqBf16MinRows || !Bf16TilesHere()) return false;
  return w.bits == 4 || (w.bits == 8 && DqTallProductsOverride() == "bf16");
}

const char* DqTallInt4Path() { return Bf16TilesHere() ? "bf16" : "integer"; }

void DqWeightsBf16Packer::Pack(int64_t k0, int64_t kc, int64_t n0, int64_t nc, uint16_t* dst) const {
  if (k0 % 8 || n0 % 32) throw std::logic_error("DqWeightsBf16Packer: blocks start on 8 rows and 32 columns");
#ifdef LITE_X86_SIMD
  if (!CpuHasAvx512Bf16()) throw std::logic_error("DqWeightsBf16Packer needs AVX512_BF16");
  DecodePanels(w_, k0, kc, n0, nc, dst);
#else
  (void)kc, (void)nc, (void)dst;
  throw std::logic_error("DqWeightsBf16Packer needs AVX512_BF16");
#endif
}

}  // namespace lite
