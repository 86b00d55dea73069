// 8-bit integer GEMM: see qgemm.h. Register tiles of up to 6 rows x 16 columns of int32 sums; on AVX2 each
// 32-bit lane multiplies 4 uint8 by 4 int8 values (vpmaddubsw, then vpmaddwd by ones), with AVX-512 VNNI one
// vpdpbusd does the same for a whole panel row, on ARM64 with the dot-product extension sdot (signed x signed: the
// activation codes shifted by -128, the shift folded into the zero-point correction), elsewhere plain C++; all give
// the same integer result.
#include "cpu/quantized/qgemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>

#include "cpu/amx.h"
#include "cpu/isa_dispatch.h"
#include "cpu/quantized/requantize_avx512.h"
#include "cpu/gemm/spread_prefetch.h"
#include "cpu/simd/vmath.h"

#ifdef LITE_X86_SIMD
#include <immintrin.h>
#endif
#ifdef LITE_ARM64_SIMD
#include <arm_neon.h>

#include "cpu/simd/neon_asm.h"
#include "cpu/simd/neon_mmla.h"
#endif

namespace lite {
namespace {

// The ARM64 dot-product tiles multiply signed by signed (sdot): they read each uint8 activation code a as a - 128
// (its top bit flipped), so their sums are short by 128 x the weights' sum, which the correction absorbs: it uses
// zero_point - 128 in place of zero_point. 0 where other tiles run.
bool UseNeonDot() {
#ifdef LITE_ARM64_SIMD
  static const bool yes = CpuArmFeatures().dotprod;
  return yes;
#else
  return false;
#endif
}
// ARMv8.6 I8MM (smmla: a 2 x 8 by 8 x 2 int8 product, 32 multiply-adds an instruction, issued as often as sdot's 16
// on Neoverse N2 / V1 in llvm-mca's models): the MatMul orientation's weights are packed for it (TileNeonMmla).
bool UseNeonI8mm() {
#ifdef LITE_ARM64_SIMD
  static const bool yes = CpuArmFeatures().dotprod && CpuArmFeatures().i8mm;
  return yes;
#else
  return false;
#endif
}
inline int32_t ActCodeShift() { return UseNeonDot() ? 128 : 0; }

constexpr int kMaxMR = 6;

bool UseAvx2();
constexpr int64_t kConvPanelsPerTask = 4;   // B panels a Conv task multiplies by each row tile it loads
constexpr int64_t kConvRowsPerTask = 48;

void ParallelOrInline(ThreadPool* pool, int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (pool && pool->size() > 1 && n > grain) {
    pool->ParallelFor(n, grain, fn);
  } else if (n > 0) {
    fn(0, n);
  }
}

// Per-output dequantisation: y = (sum - corr) * mul + add, indexed by column (MatMul) or row (Conv); with
// weight blocks, one such set per block (`padded` entries each), the bias added by the first.
struct Dequant {
  std::vector<int32_t> corr;
  std::vector<float> mul, add;
  Dequant(const QWeights& w, ActQuant aq, const float* bias, int64_t padded)
      : corr(w.blocks() * padded, 0), mul(w.blocks() * padded, 0.f), add(w.blocks() * padded, 0.f) {
    for (int64_t b = 0; b < w.blocks(); ++b)
      for (int64_t o = 0; o < w.outputs; ++o) {
        corr[b * padded + o] = (aq.zero_point - ActCodeShift()) * w.sums[b * w.outputs + o];
        mul[b * padded + o] = aq.scale * w.scale[b * w.outputs + o];
        add[b * padded + o] = bias && b == 0 ? bias[o] : 0.f;
      }
  }
};

// One tile: MR rows x 16 columns over `groups` groups of 4 depth values. kActIsA: A holds uint8 activation
// rows and B int8 weight panels (dequantised per column); otherwise A holds int8 weight rows and B uint8
// activation panels (per row). Writes 16 floats per row to c.
template <int MR, bool kActIsA>
void TilePortable(int64_t groups, const uint8_t* a, int64_t lda, const uint8_t* b, const int32_t* corr,
                  const float* mul, const float* add, float* c, int64_t ldc, const float* res, int64_t ldr,
                  int clamp) {
  int32_t acc[MR][kQgemmNR] = {};
  for (int64_t g = 0; g < groups; ++g) {
    const uint8_t* bg = b + g * 4 * kQgemmNR;
    for (int r = 0; r < MR; ++r) {
      const uint8_t* ar = a + r * lda + g * 4;
      for (int j = 0; j < kQgemmNR; ++j) {
        int32_t s = 0;
        for (int i = 0; i < 4; ++i) {
          const int32_t av = kActIsA ? static_cast<int32_t>(ar[i]) : static_cast<int32_t>(static_cast<int8_t>(ar[i]));
          const int32_t bv = kActIsA ? static_cast<int32_t>(static_cast<int8_t>(bg[j * 4 + i]))
                                     : static_cast<int32_t>(bg[j * 4 + i]);
          s += av * bv;
        }
        acc[r][j] += s;
      }
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < kQgemmNR; ++j) {
      const int o = kActIsA ? j : r;
      float y = static_cast<float>(acc[r][j] - corr[o]) * mul[o] + add[o];
      if (res) y += res[r * ldr + j];
      if (clamp) y = std::max(y, 0.f);
      if (clamp == 2) y = std::min(y, 6.f);
      c[r * ldc + j] = y;
    }
}

#ifdef LITE_X86_SIMD
// Named accumulators, not an array: with an array GCC kept some of the 12 sums on the stack.
#define LITE_QSTEP(r, cA, cB)                                                                     \
  if (MR > r) {                                                                                   \
    int32_t v;                                                                                    \
    std::memcpy(&v, a + r * lda + g * 4, 4);                                                      \
    const __m256i av = _mm256_set1_epi32(v);                                                      \
    /* vpmaddubsw takes the unsigned operand first */                                             \
    const __m256i p0 = kActIsA ? _mm256_maddubs_epi16(av, b0) : _mm256_maddubs_epi16(b0, av);     \
    const __m256i p1 = kActIsA ? _mm256_maddubs_epi16(av, b1) : _mm256_maddubs_epi16(b1, av);     \
    cA = _mm256_add_epi32(cA, _mm256_madd_epi16(p0, ones));                                       \
    cB = _mm256_add_epi32(cB, _mm256_madd_epi16(p1, ones));                                       \
  }

// GELU (erf form) of 8 floats: vmath.h's FastErf, the same rational fit, in AVX2 registers.
__attribute__((target("avx2,fma"), always_inline)) inline __m256 GeluAvx2(__m256 x) {
  const __m256 z = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(x, _mm256_set1_ps(0.7071067811865476f)),
                                               _mm256_set1_ps(-4.f)), _mm256_set1_ps(4.f));
  const __m256 z2 = _mm256_mul_ps(z, z);
  __m256 p = _mm256_set1_ps(-2.72614225801306e-10f);
  p = _mm256_fmadd_ps(p, z2, _mm256_set1_ps(2.77068142495902e-08f));
  p = _mm256_fmadd_ps(p, z2, _mm256_set1_ps(-2.10102402082508e-06f));
  p = _mm256_fmadd_ps(p, z2, _mm256_set1_ps(-5.69250639462346e-05f));
  p = _mm256_fmadd_ps(p, z2, _mm256_set1_ps(-7.34990630326855e-04f));
  p = _mm256_fmadd_ps(p, z2, _mm256_set1_ps(-2.95459980854025e-03f));
  p = _mm256_fmadd_ps(p, z2, _mm256_set1_ps(-1.60960333262415e-02f));
  __m256 q = _mm256_set1_ps(-1.45660718464996e-05f);
  q = _mm256_fmadd_ps(q, z2, _mm256_set1_ps(-2.13374055278905e-04f));
  q = _mm256_fmadd_ps(q, z2, _mm256_set1_ps(-1.68282697438203e-03f));
  q = _mm256_fmadd_ps(q, z2, _mm256_set1_ps(-7.37332916720468e-03f));
  q = _mm256_fmadd_ps(q, z2, _mm256_set1_ps(-1.42647390514189e-02f));
  const __m256 erf = _mm256_div_ps(_mm256_mul_ps(z, p), q);
  return _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x), _mm256_add_ps(_mm256_set1_ps(1.f), erf));
}

// Dequantises 8 sums (row r, columns 8h..8h+7 of the tile), adds the residual, applies the activation (clamp: 1
// ReLU, 2 ReLU6, 3 GELU) and stores them.
template <bool kActIsA>
__attribute__((target("avx2,fma"), always_inline)) inline void QStore(int r, int h, __m256i sum, const int32_t* corr,
                                                                      const float* mul, const float* add, float* c,
                                                                      int64_t ldc, const float* res, int64_t ldr,
                                                                      int clamp) {
  __m256 y;
  if (kActIsA) {
    const __m256i s = _mm256_sub_epi32(sum, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(corr + 8 * h)));
    y = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_loadu_ps(mul + 8 * h), _mm256_loadu_ps(add + 8 * h));
  } else {
    const __m256i s = _mm256_sub_epi32(sum, _mm256_set1_epi32(corr[r]));
    y = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(mul[r]), _mm256_set1_ps(add[r]));
  }
  if (res) y = _mm256_add_ps(y, _mm256_loadu_ps(res + r * ldr + 8 * h));
  if (clamp == 3) {
    y = GeluAvx2(y);
  } else if (clamp) {
    y = _mm256_max_ps(y, _mm256_setzero_ps());
    if (clamp == 2) y = _mm256_min_ps(y, _mm256_set1_ps(6.f));
  }
  _mm256_storeu_ps(c + r * ldc + 8 * h, y);
}

// The 6- and 4-row tiles' depth loops in assembly: GCC spilled some of the 12 accumulators to the stack whatever the
// intrinsics' form. ymm0-11 (ymm0-7) hold the sums (row r: ymm 2r, 2r+1), ymm12-13 the B panel's two vectors, ymm14 the
// broadcast A values, ymm15 the products; the int16 ones come from memory.
#define LITE_QROW_ACT_A(addr, lo, hi)                                \
  "vpbroadcastd " addr ", %%ymm14\n\t"                             \
  "vpmaddubsw %%ymm12, %%ymm14, %%ymm15\n\t"                        \
  "vpmaddwd %[ones], %%ymm15, %%ymm15\n\t"                          \
  "vpaddd %%ymm15, %%ymm" #lo ", %%ymm" #lo "\n\t"                  \
  "vpmaddubsw %%ymm13, %%ymm14, %%ymm15\n\t"                        \
  "vpmaddwd %[ones], %%ymm15, %%ymm15\n\t"                          \
  "vpaddd %%ymm15, %%ymm" #hi ", %%ymm" #hi "\n\t"
#define LITE_QROW_ACT_B(addr, lo, hi)                                \
  "vpbroadcastd " addr ", %%ymm14\n\t"                             \
  "vpmaddubsw %%ymm14, %%ymm12, %%ymm15\n\t"                        \
  "vpmaddwd %[ones], %%ymm15, %%ymm15\n\t"                          \
  "vpaddd %%ymm15, %%ymm" #lo ", %%ymm" #lo "\n\t"                  \
  "vpmaddubsw %%ymm14, %%ymm13, %%ymm15\n\t"                        \
  "vpmaddwd %[ones], %%ymm15, %%ymm15\n\t"                          \
  "vpaddd %%ymm15, %%ymm" #hi ", %%ymm" #hi "\n\t"
// Pieces of the depth loop shared by the 6- and 4-row tiles: zero the sums, load the B vectors, step, store.
#define LITE_QZERO_0_7                                                                                        \
  "vpxor %%ymm0, %%ymm0, %%ymm0\n\tvpxor %%ymm1, %%ymm1, %%ymm1\n\tvpxor %%ymm2, %%ymm2, %%ymm2\n\t"         \
  "vpxor %%ymm3, %%ymm3, %%ymm3\n\tvpxor %%ymm4, %%ymm4, %%ymm4\n\tvpxor %%ymm5, %%ymm5, %%ymm5\n\t"         \
  "vpxor %%ymm6, %%ymm6, %%ymm6\n\tvpxor %%ymm7, %%ymm7, %%ymm7\n\t"
#define LITE_QZERO_8_11                                                                                       \
  "vpxor %%ymm8, %%ymm8, %%ymm8\n\tvpxor %%ymm9, %%ymm9, %%ymm9\n\tvpxor %%ymm10, %%ymm10, %%ymm10\n\t"      \
  "vpxor %%ymm11, %%ymm11, %%ymm11\n\t"
#define LITE_QHEAD "test %[g], %[g]\n\tjle 2f\n\t1:\n\tvmovdqu (%[b]), %%ymm12\n\tvmovdqu 32(%[b]), %%ymm13\n\t"
#define LITE_QTAIL "add $64, %[b]\n\tadd $4, %[a]\n\tadd $4, %[a3]\n\tdec %[g]\n\tjnz 1b\n\t2:\n\t"
#define LITE_QROWS_0_3(ROW) ROW("(%[a])", 0, 1) ROW("(%[a],%[lda],1)", 2, 3) ROW("(%[a],%[lda],2)", 4, 5) ROW("(%[a3])", 6, 7)
#define LITE_QSTORE_0_7                                                                                       \
  "vmovdqu %%ymm0, (%[out])\n\tvmovdqu %%ymm1, 32(%[out])\n\tvmovdqu %%ymm2, 64(%[out])\n\t"                 \
  "vmovdqu %%ymm3, 96(%[out])\n\tvmovdqu %%ymm4, 128(%[out])\n\tvmovdqu %%ymm5, 160(%[out])\n\t"             \
  "vmovdqu %%ymm6, 192(%[out])\n\tvmovdqu %%ymm7, 224(%[out])\n\t"
#define LITE_QSTORE_8_11                                                                                      \
  "vmovdqu %%ymm8, 256(%[out])\n\tvmovdqu %%ymm9, 288(%[out])\n\tvmovdqu %%ymm10, 320(%[out])\n\t"           \
  "vmovdqu %%ymm11, 352(%[out])\n\t"
// 6 rows (ymm0-11); 4 rows (ymm0-7), for the last rows of a matrix whose row count leaves 7 or 8 after the 6s.
#define LITE_QLOOP(ROW)                                                                                       \
  LITE_QZERO_0_7 LITE_QZERO_8_11 LITE_QHEAD LITE_QROWS_0_3(ROW)                                               \
  ROW("(%[a3],%[lda],1)", 8, 9) ROW("(%[a3],%[lda],2)", 10, 11) LITE_QTAIL LITE_QSTORE_0_7 LITE_QSTORE_8_11
#define LITE_QLOOP4(ROW) LITE_QZERO_0_7 LITE_QHEAD LITE_QROWS_0_3(ROW) LITE_QTAIL LITE_QSTORE_0_7

// Sums of a 6- or 4-row tile (MR), 16 columns each, into out.
template <int MR, bool kActIsA>
void SumsAsm(int64_t groups, const uint8_t* a, int64_t lda, const uint8_t* b, int32_t* out) {
  static_assert(MR == 6 || MR == 4, "assembly tiles have 6 or 4 rows");
  static const int16_t ones[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  const uint8_t* a3 = a + 3 * lda;
#define LITE_QASM(LOOP, ROW)                                                                                   \
  __asm__ volatile(LOOP(ROW)                                                                                   \
                   : [a] "+r"(a), [a3] "+r"(a3), [b] "+r"(b), [g] "+r"(groups)                                 \
                   : [lda] "r"(lda), [out] "r"(out), [ones] "m"(*reinterpret_cast<const int16_t(*)[16]>(ones)) \
                   : "cc", "memory", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",   \
                     "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15")
  if (MR == 6 && kActIsA) LITE_QASM(LITE_QLOOP, LITE_QROW_ACT_A);
  if (MR == 6 && !kActIsA) LITE_QASM(LITE_QLOOP, LITE_QROW_ACT_B);
  if (MR == 4 && kActIsA) LITE_QASM(LITE_QLOOP4, LITE_QROW_ACT_A);
  if (MR == 4 && !kActIsA) LITE_QASM(LITE_QLOOP4, LITE_QROW_ACT_B);
#undef LITE_QASM
}

// Weights within [-32, 31] (QWeights::narrow): a pair sum of vpmaddubsw is then at most 255 * 32 * 2 = 16320 in
// magnitude, so the int16 sums of two depth groups add without overflow (vpaddw) and one vpmaddwd widens both: three
// multiply-port operations per 64 products instead of four. 4 rows x 16 columns: ymm0-7 the sums (row r: ymm 2r,
// 2r+1), ymm8-11 the B vectors of two groups (group g low/high 8 columns, group g+1 low/high), ymm12-13 the broadcast
// A values of the two groups, ymm14-15 the products; the int16 ones from memory. An odd last group goes alone.
#define LITE_QPAIR_ACT_A(addr, addr4, lo, hi)                                              \
  "vpbroadcastd " addr ", %%ymm12\n\t"                                              \
  "vpbroadcastd " addr4 ", %%ymm13\n\t"                                            \
  "vpmaddubsw %%ymm8, %%ymm12, %%ymm14\n\t"                                         \
  "vpmaddubsw %%ymm10, %%ymm13, %%ymm15\n\t"                                        \
  "vpaddw %%ymm14, %%ymm15, %%ymm15\n\t"                                            \
  "vpmaddwd %[ones], %%ymm15, %%ymm15\n\t"                                          \
  "vpaddd %%ymm15, %%ymm" #lo ", %%ymm" #lo "\n\t"                                  \
  "vpmaddubsw %%ymm9, %%ymm12, %%ymm14\n\t"                                         \
  "vpmaddubsw %%ymm11, %%ymm13, %%ymm15\n\t"                                        \
  "vpaddw %%ymm14, %%ymm15, %%ymm15\n\t"                                            \
  "vpmaddwd %[ones], %%ymm15, %%ymm15\n\t"                                          \
  "vpaddd %%ymm15, %%ymm" #hi ", %%ymm" #hi "\n\t"
#define LITE_QPAIR_ACT_B(addr, addr4, lo, hi)                                              \
  "vpbroadcastd " addr ", %%ymm12\n\t"                                              \
  "vpbroadcastd " addr4 ", %%ymm13\n\t"                                            \
  "vpmaddubsw %%ymm12, %%ymm8, %%ymm14\n\t"                                         \
  "vpmaddubsw %%ymm13, %%ymm10, %%ymm15\n\t"                                        \
  "vpaddw %%ymm14, %%ymm15, %%ymm15\n\t"                                            \
  "vpmaddwd %[ones], %%ymm15, %%ymm15\n\t"                                          \
  "vpaddd %%ymm15, %%ymm" #lo ", %%ymm" #lo "\n\t"                                  \
  "vpmaddubsw %%ymm12, %%ymm9, %%ymm14\n\t"                                         \
  "vpmaddubsw %%ymm13, %%ymm11, %%ymm15\n\t"                                        \
  "vpaddw %%ymm14, %%ymm15, %%ymm15\n\t"                                            \
  "vpmaddwd %[ones], %%ymm15, %%ymm15\n\t"                                          \
  "vpaddd %%ymm15, %%ymm" #hi ", %%ymm" #hi "\n\t"
// The single last group of an odd count, with the 6/4-row loop's row macros on ymm8-9 as B.
#define LITE_QONE_ACT_A(addr, addr4, lo, hi)                                               \
  "vpbroadcastd " addr ", %%ymm12\n\t"                                              \
  "vpmaddubsw %%ymm8, %%ymm12, %%ymm14\n\t"                                         \
  "vpmaddwd %[ones], %%ymm14, %%ymm14\n\t"                                          \
  "vpaddd %%ymm14, %%ymm" #lo ", %%ymm" #lo "\n\t"                                  \
  "vpmaddubsw %%ymm9, %%ymm12, %%ymm15\n\t"                                         \
  "vpmaddwd %[ones], %%ymm15, %%ymm15\n\t"                                          \
  "vpaddd %%ymm15, %%ymm" #hi ", %%ymm" #hi "\n\t"
#define LITE_QONE_ACT_B(addr, addr4, lo, hi)                                               \
  "vpbroadcastd " addr ", %%ymm12\n\t"                                              \
  "vpmaddubsw %%ymm12, %%ymm8, %%ymm14\n\t"                                         \
  "vpmaddwd %[ones], %%ymm14, %%ymm14\n\t"                                          \
  "vpaddd %%ymm14, %%ymm" #lo ", %%ymm" #lo "\n\t"                                  \
  "vpmaddubsw %%ymm12, %%ymm9, %%ymm15\n\t"                                         \
  "vpmaddwd %[ones], %%ymm15, %%ymm15\n\t"                                          \
  "vpaddd %%ymm15, %%ymm" #hi ", %%ymm" #hi "\n\t"
#define LITE_QPAIR_ROWS(ROW)                                                                                  \
  ROW("(%[a])", "4(%[a])", 0, 1) ROW("(%[a],%[lda],1)", "4(%[a],%[lda],1)", 2, 3)                              \
  ROW("(%[a],%[lda],2)", "4(%[a],%[lda],2)", 4, 5) ROW("(%[a3])", "4(%[a3])", 6, 7)
#define LITE_QPAIR_LOOP(PAIR, ONE)                                                                            \
  LITE_QZERO_0_7                                                                                              \
  "test %[pairs], %[pairs]\n\tjle 3f\n\t"                                                                     \
  "1:\n\t"                                                                                                    \
  "vmovdqu (%[b]), %%ymm8\n\tvmovdqu 32(%[b]), %%ymm9\n\tvmovdqu 64(%[b]), %%ymm10\n\tvmovdqu 96(%[b]), %%ymm11\n\t" \
  LITE_QPAIR_ROWS(PAIR)                                                                                       \
  "add $128, %[b]\n\tadd $8, %[a]\n\tadd $8, %[a3]\n\tdec %[pairs]\n\tjnz 1b\n\t"                             \
  "3:\n\t"                                                                                                    \
  "test %[odd], %[odd]\n\tjz 4f\n\t"                                                                          \
  "vmovdqu (%[b]), %%ymm8\n\tvmovdqu 32(%[b]), %%ymm9\n\t"                                                   \
  LITE_QPAIR_ROWS(ONE)                                                                                        \
  "4:\n\t" LITE_QSTORE_0_7

// Sums of a 4-row tile of narrow weights, 16 columns each, into out (two depth groups per step).
template <bool kActIsA>
void SumsAsmPair(int64_t groups, const uint8_t* a, int64_t lda, const uint8_t* b, int32_t* out) {
  static const int16_t ones[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  const uint8_t* a3 = a + 3 * lda;
  int64_t pairs = groups / 2;
  const int64_t odd = groups & 1;
#define LITE_QASM(PAIR, ONE)                                                                                    \
  __asm__ volatile(LITE_QPAIR_LOOP(PAIR, ONE)                                                                   \
                   : [a] "+r"(a), [a3] "+r"(a3), [b] "+r"(b), [pairs] "+r"(pairs)                               \
                   : [lda] "r"(lda), [odd] "r"(odd), [out] "r"(out),                                            \
                     [ones] "m"(*reinterpret_cast<const int16_t(*)[16]>(ones))                                  \
                   : "cc", "memory", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",    \
                     "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15")
  if (kActIsA) LITE_QASM(LITE_QPAIR_ACT_A, LITE_QONE_ACT_A);
  if (!kActIsA) LITE_QASM(LITE_QPAIR_ACT_B, LITE_QONE_ACT_B);
#undef LITE_QASM
}

#undef LITE_QPAIR_ACT_A
#undef LITE_QPAIR_ACT_B
#undef LITE_QONE_ACT_A
#undef LITE_QONE_ACT_B
#undef LITE_QPAIR_ROWS
#undef LITE_QPAIR_LOOP
#undef LITE_QLOOP
#undef LITE_QLOOP4
#undef LITE_QZERO_0_7
#undef LITE_QZERO_8_11
#undef LITE_QHEAD
#undef LITE_QTAIL
#undef LITE_QROWS_0_3
#undef LITE_QSTORE_0_7
#undef LITE_QSTORE_8_11
#undef LITE_QROW_ACT_A
#undef LITE_QROW_ACT_B

// acc += u8 . s8 over 4-byte groups. In assembly: with the intrinsic GCC copied every accumulator to another register
// and back on each step (two extra moves per vpdpbusd).
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"), always_inline)) inline void DotU8S8(__m512i& acc,
                                                                                                    __m512i u8,
                                                                                                    __m512i s8) {
  __asm__("vpdpbusd %[s], %[u], %[acc]" : [acc] "+v"(acc) : [u] "v"(u8), [s] "v"(s8));
}

// Dequantises a 16-lane row of sums (QStore's epilogue on 512-bit registers) and stores it.
template <bool kActIsA>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"), always_inline)) inline void QStoreVnni(
    int r, __m512i sum, const int32_t* corr, const float* mul, const float* add, float* c, int64_t ldc,
    const float* res, int64_t ldr, int clamp) {
  __m512 y;
  if (kActIsA) {
    const __m512i s = _mm512_sub_epi32(sum, _mm512_loadu_si512(corr));
    y = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_loadu_ps(mul), _mm512_loadu_ps(add));
  } else {
    const __m512i s = _mm512_sub_epi32(sum, _mm512_set1_epi32(corr[r]));
    y = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_set1_ps(mul[r]), _mm512_set1_ps(add[r]));
  }
  if (res) y = _mm512_add_ps(y, _mm512_loadu_ps(res + r * ldr));
  if (clamp == 3) {
    y = FastGeluVec(y);
  } else if (clamp) {
    y = _mm512_max_ps(y, _mm512_setzero_ps());
    if (clamp == 2) y = _mm512_min_ps(y, _mm512_set1_ps(6.f));
  }
  _mm512_storeu_ps(c + r * ldc, y);
}

// Named accumulators (e: even depth groups, o: odd), not arrays: an array went to the stack around the assembly.
#define LITE_VNNI_STEP(r)                                                            \
  if (MR > r) {                                                                      \
    int32_t v0, v1;                                                                  \
    std::memcpy(&v0, a + r * lda + g * 4, 4);                                        \
    std::memcpy(&v1, a + r * lda + g * 4 + 4, 4);                                    \
    const __m512i a0 = _mm512_set1_epi32(v0), a1 = _mm512_set1_epi32(v1);            \
    DotU8S8(e##r, kActIsA ? a0 : b0, kActIsA ? b0 : a0);                             \
    DotU8S8(o##r, kActIsA ? a1 : b1, kActIsA ? b1 : a1);                             \
  }
#define LITE_VNNI_LAST(r)                                                            \
  if (MR > r) {                                                                      \
    int32_t v0;                                                                      \
    std::memcpy(&v0, a + r * lda + g * 4, 4);                                        \
    const __m512i a0 = _mm512_set1_epi32(v0);                                        \
    DotU8S8(e##r, kActIsA ? a0 : b0, kActIsA ? b0 : a0);                             \
  }
#define LITE_VNNI_STORE(r) \
  if (MR > r) QStoreVnni<kActIsA>(r, _mm512_add_epi32(e##r, o##r), corr, mul, add, c, ldc, res, ldr, clamp);

// An MR-row tile with AVX-512 VNNI: one vpdpbusd multiplies a whole 16-column panel group (64 bytes) by a row's 4
// broadcast values, no int16 stage, so the sums are the same exact integers as the AVX2 tiles'. Even and odd depth
// groups go to separate accumulators (2 x MR chains) to cover the instruction's latency; the dequantisation epilogue
// (TileAvx2's QStore) runs on the 16-lane sums in registers.
template <int MR, bool kActIsA>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) void TileVnni(int64_t groups, const uint8_t* a,
                                                                              int64_t lda, const uint8_t* b,
                                                                              const int32_t* corr, const float* mul,
                                                                              const float* add, float* c, int64_t ldc,
                                                                              const float* res, int64_t ldr,
                                                                              int clamp) {
  __m512i e0 = _mm512_setzero_si512(), e1 = e0, e2 = e0, e3 = e0, e4 = e0, e5 = e0;
  __m512i o0 = e0, o1 = e0, o2 = e0, o3 = e0, o4 = e0, o5 = e0;
  int64_t g = 0;
  for (; g + 2 <= groups; g += 2) {
    const __m512i b0 = _mm512_loadu_si512(b + g * 64), b1 = _mm512_loadu_si512(b + g * 64 + 64);
    LITE_VNNI_STEP(0) LITE_VNNI_STEP(1) LITE_VNNI_STEP(2) LITE_VNNI_STEP(3) LITE_VNNI_STEP(4) LITE_VNNI_STEP(5)
  }
  if (g < groups) {
    const __m512i b0 = _mm512_loadu_si512(b + g * 64);
    LITE_VNNI_LAST(0) LITE_VNNI_LAST(1) LITE_VNNI_LAST(2) LITE_VNNI_LAST(3) LITE_VNNI_LAST(4) LITE_VNNI_LAST(5)
  }
  LITE_VNNI_STORE(0) LITE_VNNI_STORE(1) LITE_VNNI_STORE(2) LITE_VNNI_STORE(3) LITE_VNNI_STORE(4) LITE_VNNI_STORE(5)
}
#undef LITE_VNNI_STEP
#undef LITE_VNNI_LAST
#undef LITE_VNNI_STORE

// The accumulation of both wide tiles: rows of a (lda apart) broadcast 4 values at a time against two 64-byte panel
// groups, into 16 named accumulators c<row><half> (arrays went to the stack). ACT_IS_A: the rows are uint8
// activations (MatMul) rather than int8 weights (Conv), which swaps vpdpbusd's operands.
#define LITE_WIDE_STEP(r, ACT_IS_A)                                                    \
  if (MR > r) {                                                                        \
    int32_t v;                                                                         \
    std::memcpy(&v, a + r * lda + g * 4, 4);                                           \
    const __m512i w = _mm512_set1_epi32(v);                                            \
    DotU8S8(c##r##0, ACT_IS_A ? w : b0, ACT_IS_A ? b0 : w);                            \
    DotU8S8(c##r##1, ACT_IS_A ? w : b1, ACT_IS_A ? b1 : w);                            \
  }
#define LITE_WIDE_ACCUMULATE(ACT_IS_A)                                                                                \
  __m512i c00 = _mm512_setzero_si512(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00; \
  __m512i c40 = c00, c41 = c00, c50 = c00, c51 = c00, c60 = c00, c61 = c00, c70 = c00, c71 = c00;                  \
  for (int64_t g = 0; g < groups; ++g) {                                                                              \
    if ((g & 3) == 0) pf.Issue();                                                                                     \
    const __m512i b0 = _mm512_loadu_si512(b0p + g * 64), b1 = _mm512_loadu_si512(b1p + g * 64);                      \
    LITE_WIDE_STEP(0, ACT_IS_A) LITE_WIDE_STEP(1, ACT_IS_A) LITE_WIDE_STEP(2, ACT_IS_A)                              \
    LITE_WIDE_STEP(3, ACT_IS_A) LITE_WIDE_STEP(4, ACT_IS_A) LITE_WIDE_STEP(5, ACT_IS_A)                              \
    LITE_WIDE_STEP(6, ACT_IS_A) LITE_WIDE_STEP(7, ACT_IS_A)                                                          \
  }
#define LITE_WIDE_STORE(r)                                                                                      \
  if (MR > r) {                                                                                                 \
    const __m512i z = _mm512_set1_epi32(corr[r]);                                                               \
    const __m512 m = _mm512_set1_ps(mul[r]), d = _mm512_set1_ps(add[r]);                                        \
    _mm512_storeu_ps(tile + r * kQgemmNR, _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(c##r##0, z)), m, d)); \
    _mm512_storeu_ps(tile + (kWideRows + r) * kQgemmNR,                                                         \
                     _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(c##r##1, z)), m, d));                  \
  }

// The Conv orientation on VNNI, MR (<= 8) weight rows x two 16-column activation panels (b0, b1): each weight
// broadcast feeds both, 2 x MR accumulator chains and 2 + MR loads per 2 x MR multiplies (the 6 x 16 tile above
// needs 14 per 12). Writes the dequantised sums (bias included) as two halves of kWideRows rows of 16 floats.
constexpr int kWideRows = 8;
template <int MR>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) void TileVnniWide(int64_t groups, const uint8_t* a,
                                                                                  int64_t lda, const uint8_t* b0p,
                                                                                  const uint8_t* b1p,
                                                                                  const int32_t* corr,
                                                                                  const float* mul, const float* add,
                                                                                  float* tile) {
  SpreadPrefetch<> pf(nullptr, 0, 4, groups);
  LITE_WIDE_ACCUMULATE(false)
  LITE_WIDE_STORE(0) LITE_WIDE_STORE(1) LITE_WIDE_STORE(2) LITE_WIDE_STORE(3)
  LITE_WIDE_STORE(4) LITE_WIDE_STORE(5) LITE_WIDE_STORE(6) LITE_WIDE_STORE(7)
}
#undef LITE_WIDE_STORE

#define LITE_WIDE_ACT_STORE(r)                                                                                  \
  if (MR > r) {                                                                                                 \
    WideActStore(c##r##0, corr, mul, add, c + r * ldc, res ? res + r * ldr : nullptr, clamp, m0);               \
    WideActStore(c##r##1, corr + 16, mul + 16, add + 16, c + r * ldc + 16, res ? res + r * ldr + 16 : nullptr,  \
                 clamp, m1);                                                                                    \
  }

// One 16-column row of the MatMul orientation's wide tile: dequantised per column, then residual and ReLU (1) /
// ReLU6 (2) / GELU (3), stored under mask m.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"), always_inline)) inline void WideActStore(
    __m512i sum, const int32_t* corr, const float* mul, const float* add, float* c, const float* res, int clamp,
    __mmask16 m) {
  const __m512i s = _mm512_sub_epi32(sum, _mm512_maskz_loadu_epi32(m, corr));
  __m512 y = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_maskz_loadu_ps(m, mul), _mm512_maskz_loadu_ps(m, add));
  if (res) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(m, res));
  if (clamp == 3) {
    y = FastGeluVec(y);
  } else if (clamp) {
    y = _mm512_max_ps(y, _mm512_setzero_ps());
    if (clamp == 2) y = _mm512_min_ps(y, _mm512_set1_ps(6.f));
  }
  _mm512_mask_storeu_ps(c, m, y);
}

// The MatMul orientation on VNNI: MR (<= 8) activation rows x two 16-column weight panels, each activation
// broadcast feeding both (TileVnniWide's shape for the other orientation); the epilogue in registers, the first
// `cols` (1-32) columns stored.
template <int MR>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) void TileVnniWideAct(
    int64_t groups, const uint8_t* a, int64_t lda, const uint8_t* b0p, const uint8_t* b1p, const int32_t* corr,
    const float* mul, const float* add, float* c, int64_t ldc, const float* res, int64_t ldr, int clamp, int cols,
    const char* next, int64_t next_lines) {
  SpreadPrefetch<> pf(next, next_lines, 4, groups);   // the next weight panels, a few lines every 4 depth groups
  LITE_WIDE_ACCUMULATE(true)
  const __mmask16 m0 = static_cast<__mmask16>(cols >= 16 ? 0xFFFF : (1u << cols) - 1);
  const __mmask16 m1 = static_cast<__mmask16>(cols >= 32 ? 0xFFFF : cols <= 16 ? 0 : (1u << (cols - 16)) - 1);
  LITE_WIDE_ACT_STORE(0) LITE_WIDE_ACT_STORE(1) LITE_WIDE_ACT_STORE(2) LITE_WIDE_ACT_STORE(3)
  LITE_WIDE_ACT_STORE(4) LITE_WIDE_ACT_STORE(5) LITE_WIDE_ACT_STORE(6) LITE_WIDE_ACT_STORE(7)
}
#undef LITE_WIDE_STEP
#undef LITE_WIDE_ACCUMULATE
#undef LITE_WIDE_ACT_STORE

// The MatMul orientation on AMX (TDPBUSD): up to 32 activation rows x two 16-column weight panels per call, int32
// sums in tmm0-3 over steps of 16 depth quads. The weight panels are B tiles in place (a panel's 16 quads of a step:
// 1 KiB, rows of 16 outputs x 4 codes). Whole 16-row tiles of A are read in place (rows lda bytes apart); a tile of
// other rows, and the last partial step, from zero-padded copies (no read past A's rows or B's panels; the bytes
// past the depth meet zero weights). The sums go through memory once, then WideActStore's epilogue per 16 columns.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) void TileAmxAct(
    int64_t rows, int64_t depth4, const uint8_t* a, int64_t lda, const uint8_t* b0, const uint8_t* b1,
    const int32_t* corr, const float* mul, const float* add, float* c, int64_t ldc, const float* res, int64_t ldr,
    int clamp, int cols) {
  alignas(64) uint8_t a_copy[32 * 64];
  alignas(64) uint8_t b_rest[2][16 * 64];
  alignas(64) int32_t sums[32 * 32];
  const bool two = rows > 16, in_place = rows == 16 || rows == 32;
  AmxZeroSums();
  const int64_t steps = depth4 / 64, left = depth4 % 64;
  for (int64_t s = 0; s <= steps; ++s) {
    const int64_t bytes = s < steps ? 64 : left;
    if (bytes == 0) break;
    const uint8_t* as = a + s * 64;
    int64_t stride = lda;
    if (!in_place || bytes < 64) {
      const __mmask64 m = bytes == 64 ? ~__mmask64{0} : (__mmask64{1} << bytes) - 1;
      for (int64_t r = 0; r < (two ? 32 : 16); ++r)
        _mm512_store_si512(a_copy + r * 64, r < rows ? _mm512_maskz_loadu_epi8(m, as + r * lda) : _mm512_setzero_si512());
      as = a_copy, stride = 64;
    }
    const uint8_t* bs0 = b0 + s * 1024;
    const uint8_t* bs1 = b1 + s * 1024;
    if (bytes < 64) {   // the partial step's quads, then zeros
      for (int h = 0; h < 2; ++h) {
        std::memcpy(b_rest[h], h ? bs1 : bs0, bytes / 4 * 64);
        std::memset(b_rest[h] + bytes / 4 * 64, 0, (16 - bytes / 4) * 64);
      }
      bs0 = b_rest[0], bs1 = b_rest[1];
    }
    AmxStep<AmxDot::kU8S8>(as, as + 16 * stride, stride, bs0, bs1, 64, two);
  }
  AmxStoreSums(sums, two);
  const __mmask16 m0 = static_cast<__mmask16>(cols >= 16 ? 0xFFFF : (1u << cols) - 1);
  const __mmask16 m1 = static_cast<__mmask16>(cols >= 32 ? 0xFFFF : cols <= 16 ? 0 : (1u << (cols - 16)) - 1);
  for (int64_t r = 0; r < rows; ++r) {
    const float* rr = res ? res + r * ldr : nullptr;
    WideActStore(_mm512_load_si512(sums + r * 32), corr, mul, add, c + r * ldc, rr, clamp, m0);
    if (m1)
      WideActStore(_mm512_load_si512(sums + r * 32 + 16), corr + 16, mul + 16, add + 16, c + r * ldc + 16,
                   rr ? rr + 16 : nullptr, clamp, m1);
  }
}

using WideActTileFn = void (*)(int64_t, const uint8_t*, int64_t, const uint8_t*, const uint8_t*, const int32_t*,
                               const float*, const float*, float*, int64_t, const float*, int64_t, int, int,
                               const char*, int64_t);
const WideActTileFn kWideActTiles[kWideRows + 1] = {nullptr,            TileVnniWideAct<1>, TileVnniWideAct<2>,
                                                    TileVnniWideAct<3>, TileVnniWideAct<4>, TileVnniWideAct<5>,
                                                    TileVnniWideAct<6>, TileVnniWideAct<7>, TileVnniWideAct<8>};

using WideTileFn = void (*)(int64_t, const uint8_t*, int64_t, const uint8_t*, const uint8_t*, const int32_t*,
                            const float*, const float*, float*);
const WideTileFn kWideTiles[kWideRows + 1] = {nullptr,         TileVnniWide<1>, TileVnniWide<2>,
                                              TileVnniWide<3>, TileVnniWide<4>, TileVnniWide<5>,
                                              TileVnniWide<6>, TileVnniWide<7>, TileVnniWide<8>};

template <int MR, bool kActIsA, bool kPair = false>
__attribute__((target("avx2,fma"))) void TileAvx2(int64_t groups, const uint8_t* a, int64_t lda, const uint8_t* b,
                                                   const int32_t* corr, const float* mul, const float* add, float* c,
                                                   int64_t ldc, const float* res, int64_t ldr, int clamp) {
  static_assert(!kPair || MR == 4, "the two-group tile has 4 rows");
  __m256i c00 = _mm256_setzero_si256(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m256i c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  const __m256i ones = _mm256_set1_epi16(1);
  if (MR == 6 || MR == 4) {
    alignas(32) int32_t sums[6 * kQgemmNR];
    if (kPair) {
      SumsAsmPair<kActIsA>(groups, a, lda, b, sums);
    } else {
      SumsAsm<MR == 6 ? 6 : 4, kActIsA>(groups, a, lda, b, sums);
    }
    const __m256i* v = reinterpret_cast<const __m256i*>(sums);
    c00 = v[0], c01 = v[1], c10 = v[2], c11 = v[3], c20 = v[4], c21 = v[5], c30 = v[6], c31 = v[7];
    if (MR == 6) c40 = v[8], c41 = v[9], c50 = v[10], c51 = v[11];
    groups = 0;
  }
  for (int64_t g = 0; g < groups; ++g) {
    const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + g * 64));
    const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + g * 64 + 32));
    LITE_QSTEP(0, c00, c01)
    LITE_QSTEP(1, c10, c11)
    LITE_QSTEP(2, c20, c21)
    LITE_QSTEP(3, c30, c31)
    LITE_QSTEP(4, c40, c41)
    LITE_QSTEP(5, c50, c51)
  }
#define LITE_QSTORE(r, cA, cB)                                                         \
  if (MR > r) {                                                                        \
    QStore<kActIsA>(r, 0, cA, corr, mul, add, c, ldc, res, ldr, clamp);                \
    QStore<kActIsA>(r, 1, cB, corr, mul, add, c, ldc, res, ldr, clamp);                \
  }
  LITE_QSTORE(0, c00, c01)
  LITE_QSTORE(1, c10, c11)
  LITE_QSTORE(2, c20, c21)
  LITE_QSTORE(3, c30, c31)
  LITE_QSTORE(4, c40, c41)
  LITE_QSTORE(5, c50, c51)
}
#undef LITE_QSTEP
#undef LITE_QSTORE
#endif

#ifdef LITE_ARM64_SIMD
// ARMv8.2 dot product: MR rows x 16 columns of int32 sums, sdot by element (each 32-bit lane of a B vector, one
// column's 4 depth values, times one row's 4 values). The uint8 activation codes (A in the MatMul orientation, B in
// the Conv one) are flipped to signed (x ^ 0x80 = x - 128); Dequant's correction makes up for it (ActCodeShift).
// Up to 4 rows hold a row's 16 bytes (four depth groups) in a register; 5-6 rows load each group's 4 bytes broadcast
// (24 accumulators leave no room for six 16-byte rows).
// The 4-row tile's sums over `quads` (> 0) steps of four depth groups (16 bytes of each row of A, 256 of B), stored
// to sums (4 rows x 16 int32): per step four row loads, four 64-byte B loads, 64 sdot by element, accumulators in
// v16-v31. In assembly because GCC 12 hoisted all sixteen B loads of a step and spilled accumulators to the stack
// (60 stack accesses per 128 sdot).
#define LITE_SDOT_GROUP(lane, flip_b) \
  "ld1 {v4.16b, v5.16b, v6.16b, v7.16b}, [%[b]], #64\n\t" flip_b LITE_ASM_DOT_4X4("sdot", "16b", "4b", lane)
#define LITE_SDOT_TILE(flip_a, flip_b)                                                                       \
  asm volatile(                                                                                              \
      LITE_ASM_ZERO_V16_V31                                                                                  \
      "movi v8.16b, #0x80\n\t"                                                                               \
      "1:\n\t"                                                                                               \
      "ld1 {v0.16b}, [%[a0]], #16\n\t ld1 {v1.16b}, [%[a1]], #16\n\t"                                         \
      "ld1 {v2.16b}, [%[a2]], #16\n\t ld1 {v3.16b}, [%[a3]], #16\n\t" flip_a                                  \
      LITE_SDOT_GROUP(0, flip_b) LITE_SDOT_GROUP(1, flip_b) LITE_SDOT_GROUP(2, flip_b)                       \
      LITE_SDOT_GROUP(3, flip_b)                                                                             \
      "subs %[n], %[n], #1\n\t"                                                                              \
      "bne 1b\n\t"                                                                                           \
      LITE_ASM_STORE_V16_V31("4s")                                                                           \
      : [a0] "+r"(a0), [a1] "+r"(a1), [a2] "+r"(a2), [a3] "+r"(a3), [b] "+r"(b), [n] "+r"(quads),              \
        [out] "+r"(sums)                                                                                     \
      :                                                                                                      \
      : "v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v16", "v17", "v18", "v19", "v20", "v21", "v22", \
        "v23", "v24", "v25", "v26", "v27", "v28", "v29", "v30", "v31", "cc", "memory")
template <bool kActIsA>
__attribute__((target("arch=armv8.2-a+dotprod"))) void SdotQuads4(int64_t quads, const uint8_t* a, int64_t lda,
                                                                   const uint8_t* b, int32_t* sums) {
  const uint8_t *a0 = a, *a1 = a + lda, *a2 = a + 2 * lda, *a3 = a + 3 * lda;
  if constexpr (kActIsA) {
    LITE_SDOT_TILE("eor v0.16b, v0.16b, v8.16b\n\t eor v1.16b, v1.16b, v8.16b\n\t"
                   "eor v2.16b, v2.16b, v8.16b\n\t eor v3.16b, v3.16b, v8.16b\n\t", "");
  } else {
    LITE_SDOT_TILE("", "eor v4.16b, v4.16b, v8.16b\n\t eor v5.16b, v5.16b, v8.16b\n\t"
                       "eor v6.16b, v6.16b, v8.16b\n\t eor v7.16b, v7.16b, v8.16b\n\t");
  }
}
#undef LITE_SDOT_GROUP
#undef LITE_SDOT_TILE

// acc[r] += one depth group (4 values) of rows [0, MR) of A times B's group at b (64 bytes: 16 columns x 4 values), each
// row's 4 values broadcast; the activation codes flipped to signed (kFlipped: B's codes are already).
template <int MR, bool kActIsA, bool kFlipped = false>
__attribute__((target("arch=armv8.2-a+dotprod"), always_inline)) inline void SdotGroup(
    int32x4_t (&acc)[MR][4], const uint8_t* a, int64_t lda, const uint8_t* b) {
  const uint8x16_t flip = vdupq_n_u8(0x80);
  int8x16_t bv[4];
  for (int q = 0; q < 4; ++q) {
    const uint8x16_t v = vld1q_u8(b + q * 16);
    bv[q] = vreinterpretq_s8_u8(kActIsA || kFlipped ? v : veorq_u8(v, flip));
  }
  for (int r = 0; r < MR; ++r) {
    uint32_t word;
    std::memcpy(&word, a + r * lda, 4);
    const uint8x16_t v = vreinterpretq_u8_u32(vdupq_n_u32(word));
    const int8x16_t ar = vreinterpretq_s8_u8(kActIsA ? veorq_u8(v, flip) : v);
    for (int q = 0; q < 4; ++q) acc[r][q] = vdotq_laneq_s32(acc[r][q], bv[q], ar, 0);
  }
}

// y = (sum - corr) * mul + add per output (a column in the MatMul orientation, a row in the Conv one), then the
// residual and ReLU (1) / ReLU6 (2), for MR rows x 16 columns of int32 sums.
template <int MR, bool kActIsA>
__attribute__((always_inline)) inline void StoreNeonSums(const int32x4_t (&acc)[MR][4], const int32_t* corr,
                                                         const float* mul, const float* add, float* c, int64_t ldc,
                                                         const float* res, int64_t ldr, int clamp) {
  for (int r = 0; r < MR; ++r)
    for (int q = 0; q < 4; ++q) {
      const int64_t o = kActIsA ? q * 4 : r;
      const int32x4_t cr = kActIsA ? vld1q_s32(corr + o) : vdupq_n_s32(corr[o]);
      const float32x4_t m = kActIsA ? vld1q_f32(mul + o) : vdupq_n_f32(mul[o]);
      const float32x4_t ad = kActIsA ? vld1q_f32(add + o) : vdupq_n_f32(add[o]);
      float32x4_t y = vfmaq_f32(ad, vcvtq_f32_s32(vsubq_s32(acc[r][q], cr)), m);
      if (res) y = vaddq_f32(y, vld1q_f32(res + r * ldr + q * 4));
      if (clamp) y = vmaxq_f32(y, vdupq_n_f32(0.f));
      if (clamp == 2) y = vminq_f32(y, vdupq_n_f32(6.f));
      vst1q_f32(c + r * ldc + q * 4, y);
    }
}

template <int MR, bool kActIsA>
__attribute__((target("arch=armv8.2-a+dotprod"))) void TileNeonDot(int64_t groups, const uint8_t* a, int64_t lda,
                                                                    const uint8_t* b, const int32_t* corr,
                                                                    const float* mul, const float* add, float* c,
                                                                    int64_t ldc, const float* res, int64_t ldr,
                                                                    int clamp) {
  const uint8x16_t flip = vdupq_n_u8(0x80);
  int32x4_t acc[MR][4];
  for (int r = 0; r < MR; ++r)
    for (int q = 0; q < 4; ++q) acc[r][q] = vdupq_n_s32(0);
  // B's 4 vectors of group g (columns 4q .. 4q + 3, their 4 values each), activation codes flipped.
  auto load_b = [&](int64_t g, int8x16_t (&bv)[4]) __attribute__((always_inline)) {
    for (int q = 0; q < 4; ++q) {
      const uint8x16_t v = vld1q_u8(b + g * 64 + q * 16);
      bv[q] = vreinterpretq_s8_u8(kActIsA ? v : veorq_u8(v, flip));
    }
  };
  auto load_a = [&](const uint8_t* p) __attribute__((always_inline)) {
    const uint8x16_t v = vld1q_u8(p);
    return vreinterpretq_s8_u8(kActIsA ? veorq_u8(v, flip) : v);
  };
  int64_t g = 0;
  if constexpr (MR == 4) {
    if (groups >= 4) {
      alignas(16) int32_t sums[4 * 16];
      SdotQuads4<kActIsA>(groups / 4, a, lda, b, sums);
      for (int r = 0; r < 4; ++r)
        for (int q = 0; q < 4; ++q) acc[r][q] = vld1q_s32(sums + r * 16 + q * 4);
      g = groups / 4 * 4;
    }
  } else if constexpr (MR < 4) {
    for (; g + 4 <= groups; g += 4) {
      int8x16_t av[MR];
      for (int r = 0; r < MR; ++r) av[r] = load_a(a + r * lda + g * 4);
      int8x16_t bv[4];
      load_b(g, bv);
      for (int q = 0; q < 4; ++q)
        for (int r = 0; r < MR; ++r) acc[r][q] = vdotq_laneq_s32(acc[r][q], bv[q], av[r], 0);
      load_b(g + 1, bv);
      for (int q = 0; q < 4; ++q)
        for (int r = 0; r < MR; ++r) acc[r][q] = vdotq_laneq_s32(acc[r][q], bv[q], av[r], 1);
      load_b(g + 2, bv);
      for (int q = 0; q < 4; ++q)
        for (int r = 0; r < MR; ++r) acc[r][q] = vdotq_laneq_s32(acc[r][q], bv[q], av[r], 2);
      load_b(g + 3, bv);
      for (int q = 0; q < 4; ++q)
        for (int r = 0; r < MR; ++r) acc[r][q] = vdotq_laneq_s32(acc[r][q], bv[q], av[r], 3);
    }
  }
  for (; g < groups; ++g) SdotGroup<MR, kActIsA>(acc, a + g * 4, lda, b + g * 64);
  StoreNeonSums<MR, kActIsA>(acc, corr, mul, add, c, ldc, res, ldr, clamp);
}

// I8MM: MR <= 4 rows x 16 columns of the MatMul orientation (activation codes as A, weights packed with mmla set) on
// smmla. Each pair of depth groups (8 values) of a weight panel holds 8 vectors, one per pair of columns: column 2j's
// 8 values then column 2j + 1's; A gives a pair of rows' 8 values a vector (an odd last row pairs with itself, its
// copy's sums dropped). smmla's 2 x 2 sums [r0c0, r0c1, r1c0, r1c1] are unzipped into rows at the end; a last lone
// group (an odd count) keeps the sdot layout and runs on sdot. The activation codes are flipped to signed as in
// TileNeonDot.
template <int MR>
__attribute__((target("arch=armv8.2-a+dotprod+i8mm"))) void TileNeonMmla(int64_t groups, const uint8_t* a,
                                                                         int64_t lda, const uint8_t* b,
                                                                         const int32_t* corr, const float* mul,
                                                                         const float* add, float* c, int64_t ldc,
                                                                         const float* res, int64_t ldr, int clamp) {
  constexpr int P = (MR + 1) / 2;   // pairs of rows
  const uint8x16_t flip = vdupq_n_u8(0x80);
  const uint8_t* row[2 * P];
  for (int r = 0; r < 2 * P; ++r) row[r] = a + std::min(r, MR - 1) * lda;
  int32x4_t acc[P][8];
  for (int p = 0; p < P; ++p)
    for (int j = 0; j < 8; ++j) acc[p][j] = vdupq_n_s32(0);
  int64_t g = 0;
  for (; g + 2 <= groups; g += 2) {
    int8x16_t bv[8];
    for (int j = 0; j < 8; ++j) bv[j] = vld1q_s8(reinterpret_cast<const int8_t*>(b + g * 64 + 16 * j));
    for (int p = 0; p < P; ++p) {
      const uint8x16_t ab = vcombine_u8(vld1_u8(row[2 * p] + g * 4), vld1_u8(row[2 * p + 1] + g * 4));
      const int8x16_t av = vreinterpretq_s8_u8(veorq_u8(ab, flip));
      for (int j = 0; j < 8; ++j) acc[p][j] = vmmlaq_s32(acc[p][j], av, bv[j]);
    }
  }
  int32x4_t sums[MR][4];
  UnzipMmlaRows<MR, P>(acc, sums);
  if (g < groups) SdotGroup<MR, true>(sums, a + g * 4, lda, b + g * 64);   // the lone last group
  StoreNeonSums<MR, true>(sums, corr, mul, add, c, ldc, res, ldr, clamp);
}

// I8MM, Conv orientation: MR <= 4 rows of weights (signed codes as packed, lda apart) x 16 columns of activation
// panels re-laid by PanelsForMmla (codes already flipped to signed; each pair of depth groups as 8 vectors of two
// columns' 8 values). Each pair of weight rows' 8 values is one A vector (an odd last row pairs with itself, its
// copy's sums dropped); per two groups 16 smmla against 32 sdot and 8 flips in TileNeonDot. A lone last group stays
// in the sdot layout (flipped) and runs on sdot.
template <int MR>
__attribute__((target("arch=armv8.2-a+dotprod+i8mm"))) void TileNeonMmlaConv(int64_t groups, const uint8_t* a,
                                                                             int64_t lda, const uint8_t* b,
                                                                             const int32_t* corr, const float* mul,
                                                                             const float* add, float* c, int64_t ldc,
                                                                             const float* res, int64_t ldr,
                                                                             int clamp) {
  constexpr int P = (MR + 1) / 2;   // pairs of rows
  const int8_t* row[2 * P];
  for (int r = 0; r < 2 * P; ++r) row[r] = reinterpret_cast<const int8_t*>(a + std::min(r, MR - 1) * lda);
  const int8_t* bp = reinterpret_cast<const int8_t*>(b);
  int32x4_t acc[P][8];
  for (int p = 0; p < P; ++p)
    for (int j = 0; j < 8; ++j) acc[p][j] = vdupq_n_s32(0);
  int64_t g = 0;
  for (; g + 2 <= groups; g += 2) {
    int8x16_t bv[8];
    for (int j = 0; j < 8; ++j) bv[j] = vld1q_s8(bp + g * 64 + 16 * j);
    for (int p = 0; p < P; ++p) {
      const int8x16_t av = vcombine_s8(vld1_s8(row[2 * p] + g * 4), vld1_s8(row[2 * p + 1] + g * 4));
      for (int j = 0; j < 8; ++j) acc[p][j] = vmmlaq_s32(acc[p][j], av, bv[j]);
    }
  }
  int32x4_t sums[MR][4];
  UnzipMmlaRows<MR, P>(acc, sums);
  if (g < groups) SdotGroup<MR, false, true>(sums, a + g * 4, lda, b + g * 64);   // the lone last group (flipped)
  StoreNeonSums<MR, false>(sums, corr, mul, add, c, ldc, res, ldr, clamp);
}

// The Conv orientation's activation panels (QPanelBytes layout, `panels` of them) re-laid in place for
// TileNeonMmlaConv: the codes flipped to signed once here instead of in every tile that reads them, and each pair of
// depth groups' two 64-byte rows (16 columns x 4 values each) zipped into 8 vectors of two columns' 8 values.
__attribute__((target("arch=armv8.2-a+dotprod+i8mm"))) void PanelsForMmla(uint8_t* panels, int64_t depth4,
                                                                          int64_t first, int64_t last) {
  const uint8x16_t flip = vdupq_n_u8(0x80);
  const int64_t groups = depth4 / 4;
  for (int64_t p = first; p < last; ++p) {
    uint8_t* panel = panels + p * kQgemmNR * depth4;
    int64_t g = 0;
    for (; g + 2 <= groups; g += 2) {
      uint8_t* at = panel + g * 64;
      uint32x4_t g0[4], g1[4];
      for (int q = 0; q < 4; ++q) {
        g0[q] = vreinterpretq_u32_u8(veorq_u8(vld1q_u8(at + 16 * q), flip));
        g1[q] = vreinterpretq_u32_u8(veorq_u8(vld1q_u8(at + 64 + 16 * q), flip));
      }
      for (int q = 0; q < 4; ++q) {   // columns 4q, 4q + 1 and 4q + 2, 4q + 3: their 4 + 4 values side by side
        vst1q_u8(at + 32 * q, vreinterpretq_u8_u32(vzip1q_u32(g0[q], g1[q])));
        vst1q_u8(at + 32 * q + 16, vreinterpretq_u8_u32(vzip2q_u32(g0[q], g1[q])));
      }
    }
    if (g < groups)
      for (int q = 0; q < 4; ++q) vst1q_u8(panel + g * 64 + 16 * q, veorq_u8(vld1q_u8(panel + g * 64 + 16 * q), flip));
  }
}
#endif

using TileFn = void (*)(int64_t, const uint8_t*, int64_t, const uint8_t*, const int32_t*, const float*, const float*,
                        float*, int64_t, const float*, int64_t, int);

template <bool kActIsA>
struct TileTable {
  TileFn fn[kMaxMR + 1] = {};
  TileFn narrow[kMaxMR + 1] = {};   // for narrow weights: the 4-row tile sums two depth groups per step
  TileFn mmla[kMaxMR + 1] = {};     // for weights packed for smmla (QWeights::mmla; up to 4 rows)
  TileFn mmla_b[kMaxMR + 1] = {};   // Conv orientation, activation panels re-laid by PanelsForMmla (up to 4 rows)
  TileTable() {
#ifdef LITE_X86_SIMD
    if (CpuHasAvx512Vnni()) {
      fn[1] = TileVnni<1, kActIsA>, fn[2] = TileVnni<2, kActIsA>, fn[3] = TileVnni<3, kActIsA>;
      fn[4] = TileVnni<4, kActIsA>, fn[5] = TileVnni<5, kActIsA>, fn[6] = TileVnni<6, kActIsA>;
      std::copy(fn, fn + kMaxMR + 1, narrow);
      return;
    }
    if (DetectSimdIsa() != SimdIsa::kPortable) {
      fn[1] = TileAvx2<1, kActIsA>, fn[2] = TileAvx2<2, kActIsA>, fn[3] = TileAvx2<3, kActIsA>;
      fn[4] = TileAvx2<4, kActIsA>, fn[5] = TileAvx2<5, kActIsA>, fn[6] = TileAvx2<6, kActIsA>;
      std::copy(fn, fn + kMaxMR + 1, narrow);
      narrow[4] = TileAvx2<4, kActIsA, true>;
      return;
    }
#endif
#ifdef LITE_ARM64_SIMD
    if constexpr (kActIsA) {
      if (UseNeonI8mm())
        mmla[1] = TileNeonMmla<1>, mmla[2] = TileNeonMmla<2>, mmla[3] = TileNeonMmla<3>, mmla[4] = TileNeonMmla<4>;
    } else if (UseNeonI8mm()) {
      mmla_b[1] = TileNeonMmlaConv<1>, mmla_b[2] = TileNeonMmlaConv<2>, mmla_b[3] = TileNeonMmlaConv<3>;
      mmla_b[4] = TileNeonMmlaConv<4>;
    }
    if (UseNeonDot()) {
      fn[1] = TileNeonDot<1, kActIsA>, fn[2] = TileNeonDot<2, kActIsA>, fn[3] = TileNeonDot<3, kActIsA>;
      fn[4] = TileNeonDot<4, kActIsA>, fn[5] = TileNeonDot<5, kActIsA>, fn[6] = TileNeonDot<6, kActIsA>;
      std::copy(fn, fn + kMaxMR + 1, narrow);
      return;
    }
#endif
    fn[1] = TilePortable<1, kActIsA>, fn[2] = TilePortable<2, kActIsA>, fn[3] = TilePortable<3, kActIsA>;
    fn[4] = TilePortable<4, kActIsA>, fn[5] = TilePortable<5, kActIsA>, fn[6] = TilePortable<6, kActIsA>;
    std::copy(fn, fn + kMaxMR + 1, narrow);
  }
  // The tile function for `rows` rows of weights w.
  TileFn For(int rows, const QWeights& w, bool b_mmla = false) const {
    return (b_mmla ? mmla_b : w.mmla ? mmla : w.narrow ? narrow : fn)[rows];
  }
};

template <bool kActIsA>
const TileTable<kActIsA>& Tiles() {
  static const TileTable<kActIsA> table;
  return table;
}

// The rest of a Conv tile whose output or residual is uint8 codes: `tile` holds rows x 16 dequantised sums with the
// bias (row r is output channel row0 + r); adds the residual, applies the activation and stores floats or codes.
#ifdef LITE_X86_SIMD
__attribute__((target("avx2,fma"))) void FinishRowAvx2(float* y, const float* res_f, const uint8_t* res_q,
                                                        ActQuant rq, int clamp, uint8_t* out_q, ActQuant oq,
                                                        float* out_f) {
  __m256 v0 = _mm256_load_ps(y), v1 = _mm256_load_ps(y + 8);
  if (res_f) v0 = _mm256_add_ps(v0, _mm256_loadu_ps(res_f)), v1 = _mm256_add_ps(v1, _mm256_loadu_ps(res_f + 8));
  if (res_q) {
    const __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(res_q));
    const __m256i zp = _mm256_set1_epi32(rq.zero_point);
    const __m256 s = _mm256_set1_ps(rq.scale);
    const __m256i c0 = _mm256_sub_epi32(_mm256_cvtepu8_epi32(codes), zp);
    const __m256i c1 = _mm256_sub_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(codes, 8)), zp);
    v0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(c0), s, v0);
    v1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(c1), s, v1);
  }
  if (clamp) v0 = _mm256_max_ps(v0, _mm256_setzero_ps()), v1 = _mm256_max_ps(v1, _mm256_setzero_ps());
  if (clamp == 2) v0 = _mm256_min_ps(v0, _mm256_set1_ps(6.f)), v1 = _mm256_min_ps(v1, _mm256_set1_ps(6.f));
  if (!out_q) {
    _mm256_storeu_ps(out_f, v0);
    _mm256_storeu_ps(out_f + 8, v1);
    return;
  }
  const __m256 inv = _mm256_set1_ps(1.f / oq.scale);
  const __m256i zp = _mm256_set1_epi32(oq.zero_point);
  const __m256i q0 = _mm256_add_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(v0, inv)), zp);   // round half to even
  const __m256i q1 = _mm256_add_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(v1, inv)), zp);
  const __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(q0, q1), 0xD8);   // 16 int16 in order
  const __m128i b = _mm_packus_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out_q), b);
}

// FinishRowAvx2 for the first `cols` (1-16) columns of every row of a tile on 512-bit registers, the constants set
// once per tile (the per-row call was 9% of a full-int8 ResNet-50 run).
__attribute__((target("avx512f,avx512bw,avx512vl"))) void FinishTileAvx512(const float* tile, int rows,
                                                                            const float* res_f, const uint8_t* res_q,
                                                                            int64_t ld_res, ActQuant rq, int clamp,
                                                                            uint8_t* out_q, ActQuant oq, float* out_f,
                                                                            int64_t ldc, int cols) {
  const __mmask16 m = static_cast<__mmask16>((1u << cols) - 1);
  const __m512i rzp = _mm512_set1_epi32(rq.zero_point), ozp = _mm512_set1_epi32(oq.zero_point);
  const __m512 rs = _mm512_set1_ps(rq.scale), inv = _mm512_set1_ps(1.f / oq.scale), six = _mm512_set1_ps(6.f);
  for (int r = 0; r < rows; ++r) {
    __m512 v = _mm512_maskz_loadu_ps(m, tile + r * kQgemmNR);
    if (res_f) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, res_f + r * ld_res));
    if (res_q) {
      const __m128i codes = _mm_maskz_loadu_epi8(m, res_q + r * ld_res);
      v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(codes), rzp)), rs, v);
    }
    if (clamp) v = _mm512_max_ps(v, _mm512_setzero_ps());
    if (clamp == 2) v = _mm512_min_ps(v, six);
    if (!out_q) {
      _mm512_mask_storeu_ps(out_f + r * ldc, m, v);
      continue;
    }
    _mm_mask_storeu_epi8(out_q + r * ldc, m, RequantizeToCodes(v, inv, ozp));
  }
}
#endif

}  // namespace

uint8_t QuantizeValue(float y, ActQuant q) {
  const float v = std::nearbyint(y * (1.f / q.scale)) + static_cast<float>(q.zero_point);
  return static_cast<uint8_t>(std::isnan(v) ? 0.f : std::min(255.f, std::max(0.f, v)));
}

void FinishQuantizedRows(float* tile, int rows, int64_t cols, int64_t row0, int64_t col0, const GemmEpilogue& ep,
                         const QuantizedIO& q, float* C, int64_t ldc) {
  const int clamp = ep.act == EpilogueAct::kRelu ? 1 : ep.act == EpilogueAct::kRelu6 ? 2 : 0;
  [[maybe_unused]] const bool other_act = clamp == 0 && ep.act != EpilogueAct::kNone;   // (x86 tiles only)
  const float* res_f = q.residual ? nullptr : ep.residual;
  const int64_t ld_res = q.residual ? q.ld_residual : ep.ld_residual;
#ifdef LITE_X86_SIMD
  if (!other_act && CpuHasAvx512Vnni()) {
    const int64_t at = row0 * ld_res + col0, out_at = row0 * ldc + col0;
    FinishTileAvx512(tile, rows, res_f ? res_f + at : nullptr, q.residual ? q.residual + at : nullptr, ld_res,
                     q.residual_quant, clamp, q.out ? q.out + out_at : nullptr, q.out_quant, C ? C + out_at : nullptr, ldc, static_cast<int>(cols));
    return;
  }
  if (cols == kQgemmNR && !other_act && UseAvx2()) {
    for (int r = 0; r < rows; ++r) {
      const int64_t at = (row0 + r) * ld_res + col0;
      FinishRowAvx2(tile + r * kQgemmNR, res_f ? res_f + at : nullptr, q.residual ? q.residual + at : nullptr,
                    q.residual_quant, clamp, q.out ? q.out + (row0 + r) * ldc + col0 : nullptr, q.out_quant,
                    C + (row0 + r) * ldc + col0);
    }
    return;
  }
#endif
  for (int r = 0; r < rows; ++r) {
    float* y = tile + r * kQgemmNR;
    const int64_t at = (row0 + r) * ld_res + col0;
    for (int64_t j = 0; j < cols; ++j) {
      if (res_f) y[j] += res_f[at + j];
      if (q.residual) y[j] += static_cast<float>(q.residual[at + j] - q.residual_quant.zero_point) * q.residual_quant.scale;
    }
  }
  GemmEpilogue act;   // the activation on the local tile; residual and biases are done
  act.act = ep.act;
  ApplyEpilogue(tile, kQgemmNR, 0, rows, 0, cols, act);
  for (int r = 0; r < rows; ++r) {
    const float* y = tile + r * kQgemmNR;
    if (q.out) {
      for (int64_t j = 0; j < cols; ++j) q.out[(row0 + r) * ldc + col0 + j] = QuantizeValue(y[j], q.out_quant);
    } else {
      std::memcpy(C + (row0 + r) * ldc + col0, y, cols * sizeof(float));
    }
  }
}

namespace {

// Rows of the next tile with `remaining` rows left: 6, but 4 + 4 rather than 6 + 2 (and 4 + 3 rather than
// 6 + 1): the 6- and 4-row tiles run in assembly, the others do not. Narrow weights take 4-row tiles, whose
// two-group depth loop does more per multiply than the 6-row one.
inline int NextTileRows(int64_t remaining, const QWeights& w) {
  if (CpuHasAvx512Vnni()) return static_cast<int>(std::min<int64_t>(kMaxMR, remaining));   // every height alike
  if (w.narrow && UseAvx2()) return static_cast<int>(std::min<int64_t>(4, remaining));
  // NEON dot product: 4-row tiles keep each row's 16 bytes in a register (TileNeonDot).
  if (UseNeonDot()) return static_cast<int>(std::min<int64_t>(4, remaining));
  return remaining == 7 || remaining == 8 ? 4 : static_cast<int>(std::min<int64_t>(kMaxMR, remaining));
}

// Runs one tile into C (rows x cols valid; an overhanging tile goes through a local block). With weight blocks
// (int4 groups) each block's sums are dequantised with its own scales and summed in float in a local tile, the
// tile function's residual input reading the running sum back; the last block stores. ReLU/ReLU6 and (on a full
// tile of one block) the residual are applied in registers; other epilogues after the store.
template <bool kActIsA>
void Tile(int rows, int64_t cols, const QWeights& w, const uint8_t* a, int64_t lda, const uint8_t* b,
          const Dequant& dq, int64_t padded, int64_t o, float* C, int64_t ldc, int64_t row0, int64_t col0,
          const GemmEpilogue& ep, const QuantizedIO* qio = nullptr, bool b_mmla = false) {
  const TileFn fn = Tiles<kActIsA>().For(rows, w, b_mmla);
  if (qio != nullptr && w.blocks() == 1) {   // uint8 output or residual: dequantise into a local tile first
    alignas(32) float tile[kMaxMR * kQgemmNR];
    fn(w.depth4 / 4, a, lda, b, dq.corr.data() + o, dq.mul.data() + o, dq.add.data() + o, tile, kQgemmNR, nullptr, 0,
       0);
    FinishQuantizedRows(tile, rows, cols, row0, col0, ep, *qio, C, ldc);
    return;
  }
  alignas(32) float acc[kMaxMR * kQgemmNR], local[kMaxMR * kQgemmNR];
  const bool full = cols == kQgemmNR;
  float* dst = full ? C + row0 * ldc + col0 : local;
  const int64_t ld = full ? ldc : kQgemmNR, blocks = w.blocks();
  // ReLU, ReLU6 and (AVX2 tiles only) GELU are applied in registers; other activations after the store.
  const int clamp = ep.act == EpilogueAct::kRelu ? 1 : ep.act == EpilogueAct::kRelu6 ? 2
                    : ep.act == EpilogueAct::kGelu && UseAvx2() ? 3 : 0;
  const bool fused = (clamp != 0 || ep.act == EpilogueAct::kNone) && (!ep.residual || (full && blocks == 1)) &&
                     !ep.multiplier;
  const float* residual = fused && ep.residual ? ep.residual + row0 * ep.ld_residual + col0 : nullptr;
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const bool last = blk + 1 == blocks;
    const int64_t k0 = blk * w.block, groups = ((blocks == 1 ? w.depth4 : std::min(w.depth4, k0 + w.block)) - k0) / 4;
    const int64_t d = blk * padded + o;
    fn(groups, a + k0, lda, b + k0 * kQgemmNR, dq.corr.data() + d, dq.mul.data() + d, dq.add.data() + d,
       last ? dst : acc, last ? ld : kQgemmNR, blk == 0 ? residual : acc, blk == 0 ? ep.ld_residual : kQgemmNR,
       last && fused ? clamp : 0);
  }
  if (!full)
    for (int r = 0; r < rows; ++r) std::memcpy(C + (row0 + r) * ldc + col0, local + r * kQgemmNR, cols * sizeof(float));
  if (!fused) ApplyEpilogue(C, ldc, row0, rows, col0, cols, ep);
}

#ifdef LITE_X86_SIMD
__attribute__((target("avx2,fma"))) void MinMaxAvx2(const float* x, int64_t n, float* lo, float* hi) {
  __m256 vlo = _mm256_set1_ps(INFINITY), vhi = _mm256_set1_ps(-INFINITY);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    vlo = _mm256_min_ps(v, vlo);   // a NaN in v yields the second operand: NaNs are skipped
    vhi = _mm256_max_ps(v, vhi);
  }
  float l[8], h[8];
  _mm256_storeu_ps(l, vlo);
  _mm256_storeu_ps(h, vhi);
  float mn = INFINITY, mx = -INFINITY;
  for (int j = 0; j < 8; ++j) mn = std::min(mn, l[j]), mx = std::max(mx, h[j]);
  for (; i < n; ++i)
    if (!std::isnan(x[i])) mn = std::min(mn, x[i]), mx = std::max(mx, x[i]);
  *lo = mn, *hi = mx;
}

__attribute__((target("avx2,fma"))) void QuantizeRowAvx2(const float* x, int64_t n, float inv_scale, int32_t zp,
                                                          uint8_t* out) {
  const __m256 vs = _mm256_set1_ps(inv_scale), lo = _mm256_set1_ps(-512.f), hi = _mm256_set1_ps(512.f);
  const __m256i vz = _mm256_set1_epi32(zp);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i q[4];
    // Round half to even (the default MXCSR mode), as ONNX QuantizeLinear; capped at +-512 codes first, so that a
    // huge value (inf) saturates as the scalar tail saturates it instead of converting to INT_MIN (code 0). A NaN
    // passes the caps (vminps / vmaxps return their second operand) and converts to INT_MIN: code 0.
    for (int j = 0; j < 4; ++j)
      q[j] = _mm256_add_epi32(
          _mm256_cvtps_epi32(_mm256_max_ps(lo, _mm256_min_ps(hi, _mm256_mul_ps(_mm256_loadu_ps(x + i + 8 * j), vs)))),
          vz);
    const __m256i w01 = _mm256_packs_epi32(q[0], q[1]), w23 = _mm256_packs_epi32(q[2], q[3]);
    const __m256i b = _mm256_packus_epi16(w01, w23);   // lanes interleaved by the 128-bit halves: fix the order
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  }
  for (; i < n; ++i) {
    const float v = std::nearbyint(x[i] * inv_scale) + static_cast<float>(zp);
    out[i] = static_cast<uint8_t>(std::isnan(v) ? 0.f : std::min(255.f, std::max(0.f, v)));
  }
}
#endif

void MinMaxPortable(const float* x, int64_t n, float* lo, float* hi) {
  float mn = INFINITY, mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i)
    if (!std::isnan(x[i])) mn = std::min(mn, x[i]), mx = std::max(mx, x[i]);
  *lo = mn, *hi = mx;
}

void QuantizeRowPortable(const float* x, int64_t n, float inv_scale, int32_t zp, uint8_t* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = std::nearbyint(x[i] * inv_scale) + static_cast<float>(zp);
    out[i] = static_cast<uint8_t>(std::isnan(v) ? 0.f : std::min(255.f, std::max(0.f, v)));
  }
}

bool UseAvx2() {
#ifdef LITE_X86_SIMD
  static const bool yes = DetectSimdIsa() != SimdIsa::kPortable;
  return yes;
#else
  return false;
#endif
}

}  // namespace

ActQuant ChooseActQuant(float lo, float hi) {
  lo = std::min(lo, 0.f), hi = std::max(hi, 0.f);
  ActQuant q;
  if (!(hi - lo > 0.f) || !std::isfinite(hi - lo)) return q;   // all zero (or no finite values): any scale works
  q.scale = (hi - lo) / 255.f;
  q.zero_point = static_cast<int32_t>(std::min(255.f, std::max(0.f, std::nearbyint(-lo / q.scale))));
  return q;
}

void MinMax(const float* x, int64_t n, float* lo, float* hi, ThreadPool* pool) {
  constexpr int64_t kChunk = 1 << 16;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<float> los(chunks), his(chunks);
  ParallelOrInline(pool, chunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) {
      const int64_t len = std::min(kChunk, n - c * kChunk);
#ifdef LITE_X86_SIMD
      if (UseAvx2()) {
        MinMaxAvx2(x + c * kChunk, len, &los[c], &his[c]);
        continue;
      }
#endif
      MinMaxPortable(x + c * kChunk, len, &los[c], &his[c]);
    }
  });
  *lo = INFINITY, *hi = -INFINITY;
  for (int64_t c = 0; c < chunks; ++c) *lo = std::min(*lo, los[c]), *hi = std::max(*hi, his[c]);
}

void QuantizeRowsU8(const float* x, int64_t rows, int64_t cols, int64_t ldx, ActQuant q, uint8_t* out, int64_t ldo,
                    ThreadPool* pool) {
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, cols));
  const float inv_scale = 1.f / q.scale;   // a multiply per value instead of a division
  ParallelOrInline(pool, rows, grain, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
#ifdef LITE_X86_SIMD
      if (UseAvx2()) {
        QuantizeRowAvx2(x + r * ldx, cols, inv_scale, q.zero_point, out + r * ldo);
      } else
#endif
      {
        QuantizeRowPortable(x + r * ldx, cols, inv_scale, q.zero_point, out + r * ldo);
      }
      std::memset(out + r * ldo + cols, q.zero_point, ldo - cols);
    }
  });
}

QWeights PackQWeights(const int8_t* codes, int64_t outputs, int64_t depth, int64_t so, int64_t sk, const float* scales,
                      bool as_b, int64_t block) {
  if (block > 0 && (block % 4 != 0 || !as_b))
    throw std::invalid_argument("weight blocks must span a multiple of 4 depth values, in MatMul's layout");
  QWeights w;
  w.outputs = outputs, w.depth = depth, w.depth4 = QDepth4(depth), w.as_b = as_b;
  w.block = block >= depth ? 0 : block;   // one block holding everything is a scale per channel
  w.scale.assign(scales, scales + w.blocks() * outputs);
  w.sums.assign(w.blocks() * outputs, 0);
  const int64_t bk = w.block > 0 ? w.block : depth;   // depth values per block
  const int64_t panels = (outputs + kQgemmNR - 1) / kQgemmNR;
  w.codes.assign(as_b ? panels * kQgemmNR * w.depth4 : outputs * w.depth4, 0);
  // The range and the per-output sums first, walking the codes in memory order (vectorisable loops), so the
  // packing loops below have no exits.
  int lo = 0, hi = 0;
  if (so == 1) {   // outputs adjacent: a [K, N] weight
    for (int64_t k = 0; k < depth; ++k) {
      const int8_t* row = codes + k * sk;
      int32_t* sums = w.sums.data() + (k / bk) * outputs;
      for (int64_t o = 0; o < outputs; ++o) {
        lo = std::min<int>(lo, row[o]), hi = std::max<int>(hi, row[o]);
        sums[o] += row[o];
      }
    }
  } else {
    for (int64_t o = 0; o < outputs; ++o)
      for (int64_t k = 0; k < depth; ++k) {
        const int8_t v = codes[o * so + k * sk];
        lo = std::min<int>(lo, v), hi = std::max<int>(hi, v);
        w.sums[(k / bk) * outputs + o] += v;
      }
  }
  w.narrow = lo >= kQNarrowMin && hi <= kQNarrowMax;
  if (lo < kQWeightMin || hi > kQWeightMax)
    throw std::invalid_argument("int8 weight code " + std::to_string(lo < kQWeightMin ? lo : hi) + " lies outside [" +
                                std::to_string(kQWeightMin) + ", " + std::to_string(kQWeightMax) +
                                "], the range integer kernels take");
  if (!as_b) {
    for (int64_t o = 0; o < outputs; ++o)
      for (int64_t k = 0; k < depth; ++k) w.codes[o * w.depth4 + k] = codes[o * so + k * sk];
    return w;
  }
  const uint8_t* bytes = reinterpret_cast<const uint8_t*>(codes);
  for (int64_t p = 0; p < panels; ++p) {
    uint8_t* panel = reinterpret_cast<uint8_t*>(w.codes.data()) + p * kQgemmNR * w.depth4;
    const int64_t o0 = p * kQgemmNR, n = std::min(kQgemmNR, outputs - o0);
    int64_t k = 0;
    if (so == 1 && n == kQgemmNR) {   // a [K, N] weight: 4 rows of 16 adjacent codes make one group
      for (; k + 4 <= depth; k += 4) {
        const uint8_t* src = bytes + o0 + k * sk;
        InterleaveK4(src, src + sk, src + 2 * sk, src + 3 * sk, panel + k * kQgemmNR);
      }
    }
    for (; k < depth; ++k) {
      uint8_t* dst = panel + (k / 4) * 4 * kQgemmNR + k % 4;
      for (int64_t j = 0; j < n; ++j) dst[j * 4] = bytes[(o0 + j) * so + k * sk];
    }
  }
  // ARM I8MM: each pair of depth groups (g, g + 1; g even) of a panel re-laid for smmla (TileNeonMmla): for each pair
  // of columns (2j, 2j + 1), column 2j's 4 + 4 values then column 2j + 1's. Blocks (int4 groups) must start on a
  // pair; a last lone group keeps its layout.
  if (UseNeonI8mm() && (w.block == 0 || w.block % 8 == 0)) {
    const int64_t pairs = w.depth4 / 8;
    uint8_t tmp[2 * 4 * kQgemmNR];
    for (int64_t p = 0; p < panels; ++p) {
      uint8_t* panel = reinterpret_cast<uint8_t*>(w.codes.data()) + p * kQgemmNR * w.depth4;
      for (int64_t i = 0; i < pairs; ++i) {
        uint8_t* at = panel + i * 2 * 4 * kQgemmNR;
        std::memcpy(tmp, at, sizeof tmp);
        for (int64_t col = 0; col < kQgemmNR; ++col) {
          uint8_t* dst = at + (col / 2) * 16 + (col % 2) * 8;
          std::memcpy(dst, tmp + col * 4, 4);                       // depth values 0-3 (group 2i)
          std::memcpy(dst + 4, tmp + 4 * kQgemmNR + col * 4, 4);    // 4-7 (group 2i + 1)
        }
      }
    }
    w.mmla = true;
  }
  return w;
}

void InterleaveK4(const uint8_t* r0, const uint8_t* r1, const uint8_t* r2, const uint8_t* r3, uint8_t* dst) {
#ifdef LITE_X86_SIMD   // SSE2: part of every x86-64
  const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r0));
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r1));
  const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r2));
  const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(r3));
  const __m128i ab_lo = _mm_unpacklo_epi8(a, b), ab_hi = _mm_unpackhi_epi8(a, b);
  const __m128i cd_lo = _mm_unpacklo_epi8(c, d), cd_hi = _mm_unpackhi_epi8(c, d);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm_unpacklo_epi16(ab_lo, cd_lo));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 16), _mm_unpackhi_epi16(ab_lo, cd_lo));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 32), _mm_unpacklo_epi16(ab_hi, cd_hi));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 48), _mm_unpackhi_epi16(ab_hi, cd_hi));
#else
  for (int j = 0; j < 16; ++j) {
    dst[4 * j] = r0[j], dst[4 * j + 1] = r1[j], dst[4 * j + 2] = r2[j], dst[4 * j + 3] = r3[j];
  }
#endif
}

#ifdef LITE_X86_SIMD
namespace {

// QgemmActByWeights' activation for its fused epilogue (1 ReLU, 2 ReLU6, 3 GELU; 0 none or another).
int FusedClamp(const GemmEpilogue& ep) {
  return ep.act == EpilogueAct::kRelu ? 1 : ep.act == EpilogueAct::kRelu6 ? 2 : ep.act == EpilogueAct::kGelu ? 3 : 0;
}

// Whether QgemmActByWeights takes its AVX-512 VNNI / AMX tiles with the epilogue in registers.
bool FusedActByWeights(const QWeights& w, const GemmEpilogue& ep) {
  return CpuHasAvx512Vnni() && w.blocks() == 1 && !ep.multiplier && !ep.row_bias && !ep.col_bias &&
         (FusedClamp(ep) != 0 || ep.act == EpilogueAct::kNone);
}

}  // namespace
#endif

const char* QgemmActByWeightsName(const QWeights& w, const GemmEpilogue& ep) {
#ifdef LITE_X86_SIMD
  if (FusedActByWeights(w, ep)) return CpuHasAmxInt8() && !w.mmla ? "qgemm_amx" : "qgemm_vnni";
#endif
  (void)w, (void)ep;
  return "qgemm";
}

void QgemmActByWeights(int64_t M, const uint8_t* a, int64_t lda, ActQuant aq, const QWeights& w, const float* bias,
                       float* C, int64_t ldc, const GemmEpilogue& ep, ThreadPool* pool) {
  const int64_t N = w.outputs, panels = (N + kQgemmNR - 1) / kQgemmNR;
  const Dequant dq(w, aq, bias, panels * kQgemmNR);
#ifdef LITE_X86_SIMD
  const int clamp = FusedClamp(ep);
  if (FusedActByWeights(w, ep)) {
    // Pairs of weight panels (32 outputs) by 8-row tiles, the epilogue in registers; on AMX by 32-row tile calls.
    const int64_t pairs = (panels + 1) / 2, panel_bytes = kQgemmNR * w.depth4;
    const uint8_t* codes = reinterpret_cast<const uint8_t*>(w.codes.data());
    if (CpuHasAmxInt8() && !w.mmla) {
      ParallelOrInline(pool, pairs, 1, [&](int64_t pb, int64_t pe) {
        const AmxTileScope tiles(true);
        for (int64_t q = pb; q < pe; ++q) {
          const int64_t p = 2 * q, col0 = p * kQgemmNR, cols = std::min<int64_t>(2 * kQgemmNR, N - col0);
          const uint8_t* b0 = codes + p * panel_bytes;
          const uint8_t* b1 = p + 1 < panels ? b0 + panel_bytes : b0;   // a lone last panel: its copy is masked off
          for (int64_t m = 0, rows = 0; m < M; m += rows) {
            rows = std::min<int64_t>(32, M - m);
            TileAmxAct(rows, w.depth4, a + m * lda, lda, b0, b1, dq.corr.data() + col0, dq.mul.data() + col0,
                       dq.add.data() + col0, C + m * ldc + col0, ldc,
                       ep.residual ? ep.residual + m * ep.ld_residual + col0 : nullptr, ep.ld_residual, clamp,
                       static_cast<int>(cols));
          }
        }
      });
      return;
    }
    ParallelOrInline(pool, pairs, 1, [&](int64_t pb, int64_t pe) {
      for (int64_t q = pb; q < pe; ++q) {
        const int64_t p = 2 * q, col0 = p * kQgemmNR, cols = std::min<int64_t>(2 * kQgemmNR, N - col0);
        const uint8_t* b0 = codes + p * panel_bytes;
        const uint8_t* b1 = p + 1 < panels ? b0 + panel_bytes : b0;   // a lone last panel: its copy is masked off
        // The next pair of weight panels comes from memory: each row tile prefetches its share into L2.
        const char* next = q + 1 < pe ? reinterpret_cast<const char*>(b0 + 2 * panel_bytes) : nullptr;
        const int64_t next_bytes = std::min<int64_t>(2, panels - p - 2) * panel_bytes;
        const int64_t lines = next ? next_bytes / 64 : 0, per = (lines * kWideRows + M - 1) / std::max<int64_t>(1, M) + 1;
        int64_t line = 0;
        for (int64_t m = 0, rows = 0; m < M; m += rows) {
          rows = std::min<int64_t>(kWideRows, M - m);
          const int64_t end = std::min(lines, line + per);
          kWideActTiles[rows](w.depth4 / 4, a + m * lda, lda, b0, b1, dq.corr.data() + col0, dq.mul.data() + col0,
                              dq.add.data() + col0, C + m * ldc + col0, ldc,
                              ep.residual ? ep.residual + m * ep.ld_residual + col0 : nullptr, ep.ld_residual, clamp,
                              static_cast<int>(cols), next ? next + line * 64 : nullptr, end - line);
          line = end;
        }
      }
    });
    return;
  }
#endif
  ParallelOrInline(pool, panels, 1, [&](int64_t pb, int64_t pe) {
    for (int64_t p = pb; p < pe; ++p) {
      const uint8_t* b = reinterpret_cast<const uint8_t*>(w.codes.data()) + p * kQgemmNR * w.depth4;
      const int64_t cols = std::min(kQgemmNR, N - p * kQgemmNR);
      // The next weight panel comes from memory: each row tile prefetches its share of it into L2, so that
      // panel's first tile does not wait (BERT-base and the decoder DYNAMIC_QUANT 0.87-1.0x the time, A/B).
      const char* next = p + 1 < pe ? reinterpret_cast<const char*>(b + kQgemmNR * w.depth4) : nullptr;
      const int64_t lines = kQgemmNR * w.depth4 / 64, per = (lines * kMaxMR + M - 1) / std::max<int64_t>(1, M) + 1;
      int64_t line = 0;
      for (int64_t m = 0, rows = 0; m < M; m += rows) {
        rows = NextTileRows(M - m, w);
        if (next)
          for (const int64_t end = std::min(lines, line + per); line < end; ++line) __builtin_prefetch(next + line * 64, 0, 2);
        Tile<true>(static_cast<int>(rows), cols, w, a + m * lda, lda, b, dq, panels * kQgemmNR, p * kQgemmNR, C, ldc,
                   m, p * kQgemmNR, ep);
      }
    }
  });
}

void QgemmWeightsByActPacking(const QWeights& w, int64_t N, const std::function<void(int64_t, int64_t, uint8_t*)>& pack,
                              uint8_t* panels, ActQuant aq, const float* bias, float* C, int64_t ldc,
                              const GemmEpilogue& ep, ThreadPool* pool, const QuantizedIO& q) {
  const int64_t n_panels = (N + kQgemmNR - 1) / kQgemmNR, threads = pool ? pool->size() : 1;
  [[maybe_unused]] const int64_t col_tasks = (n_panels + kConvPanelsPerTask - 1) / kConvPanelsPerTask;   // (x86 only)
#ifdef LITE_X86_SIMD
  // Only where the panels outweigh the outputs (depth >= outputs): with more outputs than depth, every task
  // storing all output rows of its columns (and reading their residual) ran 1.05-1.2x slower than row blocks.
  if (CpuHasAvx512Vnni() && w.blocks() == 1 && !ep.multiplier && col_tasks >= 2 * threads && w.depth >= w.outputs) {
    const Dequant dq(w, aq, bias, w.outputs);
    const QuantizedIO none;
    const QuantizedIO& qio = q.active() ? q : none;
    const int64_t M = w.outputs, panel_bytes = kQgemmNR * w.depth4;
    const uint8_t* a = reinterpret_cast<const uint8_t*>(w.codes.data());
    ParallelOrInline(pool, col_tasks, 1, [&](int64_t tb, int64_t te) {
      thread_local std::vector<uint8_t> block;
      alignas(64) float tile[2 * kWideRows * kQgemmNR];
      if (block.size() < static_cast<size_t>(kConvPanelsPerTask * panel_bytes))
        block.resize(kConvPanelsPerTask * panel_bytes);
      for (int64_t t = tb; t < te; ++t) {
        const int64_t p0 = t * kConvPanelsPerTask, p1 = std::min(n_panels, p0 + kConvPanelsPerTask);
        pack(p0, p1, block.data());
        for (int64_t m = 0, rows = 0; m < M; m += rows) {
          rows = std::min<int64_t>(kWideRows, M - m);
          for (int64_t p = p0; p < p1; p += 2) {
            const uint8_t* b0 = block.data() + (p - p0) * panel_bytes;
            const bool pair = p + 1 < p1;
            kWideTiles[rows](w.depth4 / 4, a + m * w.depth4, w.depth4, b0, pair ? b0 + panel_bytes : b0,
                             dq.corr.data() + m, dq.mul.data() + m, dq.add.data() + m, tile);
            for (int64_t h = 0; h < (pair ? 2 : 1); ++h) {
              const int64_t col0 = (p + h) * kQgemmNR;
              FinishQuantizedRows(tile + h * kWideRows * kQgemmNR, static_cast<int>(rows),
                                  std::min(kQgemmNR, N - col0), m, col0, ep, qio, C, ldc);
            }
          }
        }
      }
    });
    return;
  }
#endif
  ParallelOrInline(pool, n_panels, std::max<int64_t>(1, n_panels / std::max<int64_t>(1, threads)),
                   [&](int64_t p0, int64_t p1) { pack(p0, p1, panels + p0 * kQgemmNR * w.depth4); });
  QgemmWeightsByAct(w, N, panels, aq, bias, C, ldc, ep, pool, q);
}

void QgemmWeightsByAct(const QWeights& w, int64_t N, uint8_t* b_panels, ActQuant aq, const float* bias, float* C,
                       int64_t ldc, const GemmEpilogue& ep, ThreadPool* pool, const QuantizedIO& q) {
  if (q.active() && (w.blocks() != 1 || ep.multiplier))
    throw std::invalid_argument("uint8 outputs and residuals need weights with one scale per output channel and no "
                                "multiplier");
  const QuantizedIO* qio = q.active() ? &q : nullptr;
  const int64_t M = w.outputs, panels = (N + kQgemmNR - 1) / kQgemmNR;
  const Dequant dq(w, aq, bias, M);
  const int64_t col_tasks = (panels + kConvPanelsPerTask - 1) / kConvPanelsPerTask;
  const int64_t row_tasks = (M + kConvRowsPerTask - 1) / kConvRowsPerTask;
  const uint8_t* a = reinterpret_cast<const uint8_t*>(w.codes.data());
#ifdef LITE_X86_SIMD
  if (CpuHasAvx512Vnni() && w.blocks() == 1 && !ep.multiplier) {
    // Two panels per tile, then the shared epilogue per 16-column half (full-int8 ResNet-50 0.87x the time).
    const QuantizedIO none;
    const int64_t panel_bytes = kQgemmNR * w.depth4;
    ParallelOrInline(pool, col_tasks * row_tasks, 1, [&](int64_t tb, int64_t te) {
      alignas(64) float tile[2 * kWideRows * kQgemmNR];
      for (int64_t t = tb; t < te; ++t) {
        const int64_t m0 = (t % row_tasks) * kConvRowsPerTask, m1 = std::min(M, m0 + kConvRowsPerTask);
        const int64_t p0 = (t / row_tasks) * kConvPanelsPerTask, p1 = std::min(panels, p0 + kConvPanelsPerTask);
        for (int64_t m = m0, rows = 0; m < m1; m += rows) {
          rows = std::min<int64_t>(kWideRows, m1 - m);
          for (int64_t p = p0; p < p1; p += 2) {
            const uint8_t* b0 = b_panels + p * panel_bytes;
            const bool pair = p + 1 < p1;   // a lone last panel is multiplied twice, its copy dropped
            kWideTiles[rows](w.depth4 / 4, a + m * w.depth4, w.depth4, b0, pair ? b0 + panel_bytes : b0,
                             dq.corr.data() + m, dq.mul.data() + m, dq.add.data() + m, tile);
            for (int64_t h = 0; h < (pair ? 2 : 1); ++h) {
              const int64_t col0 = (p + h) * kQgemmNR;
              FinishQuantizedRows(tile + h * kWideRows * kQgemmNR, static_cast<int>(rows),
                                  std::min(kQgemmNR, N - col0), m, col0, ep, qio ? *qio : none, C, ldc);
            }
          }
        }
      }
    });
    return;
  }
#endif
  // ARM I8MM: the panels re-laid for smmla once (each is read by every row tile of the outputs; one scale per output
  // channel only: a weight block's sums would start inside a pair of groups).
  bool b_mmla = false;
#ifdef LITE_ARM64_SIMD
  if (UseNeonI8mm() && w.blocks() == 1 && M >= 8) {
    ParallelOrInline(pool, panels, 8, [&](int64_t p0, int64_t p1) { PanelsForMmla(b_panels, w.depth4, p0, p1); });
    b_mmla = true;
  }
#endif
  ParallelOrInline(pool, col_tasks * row_tasks, 1, [&](int64_t tb, int64_t te) {
    for (int64_t t = tb; t < te; ++t) {
      const int64_t m0 = (t % row_tasks) * kConvRowsPerTask, m1 = std::min(M, m0 + kConvRowsPerTask);
      const int64_t p0 = (t / row_tasks) * kConvPanelsPerTask, p1 = std::min(panels, p0 + kConvPanelsPerTask);
      for (int64_t m = m0, rows = 0; m < m1; m += rows) {
        rows = NextTileRows(m1 - m, w);
        for (int64_t p = p0; p < p1; ++p) {
          const int64_t cols = std::min(kQgemmNR, N - p * kQgemmNR);
          Tile<false>(static_cast<int>(rows), cols, w, a + m * w.depth4, w.depth4, b_panels + p * kQgemmNR * w.depth4,
                      dq, M, m, C, ldc, m, p * kQgemmNR, ep, qio, b_mmla);
        }
      }
    }
  });
}

}  // namespace lite
