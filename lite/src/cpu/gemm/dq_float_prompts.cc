#include "cpu/gemm/dq_float_prompts.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "cpu/gemm/fma_peak.h"
#include "cpu/gemm/skinny_gemm.h"
#include "cpu/isa_dispatch.h"

#ifdef LITE_X86_SIMD
#include <immintrin.h>
#endif

namespace lite {

#ifdef LITE_X86_SIMD
namespace {

// Multiply-adds a nanosecond in independent chains, throughput-bound: the int8 pair (vpmaddubsw, vpmaddwd, vpaddd)
// the AVX2 kernels issue per 32 multiply-adds. The asm statement makes each step's operand look new, so the compiler
// neither hoists the multiplies out of the loop nor adds instructions.
__attribute__((target("avx2,fma"))) double Int8MacsPerNs(int64_t iters) {
  constexpr int kChains = 8;
  __m256i s[kChains], b[kChains];
  const __m256i a = _mm256_set1_epi8(3), ones = _mm256_set1_epi16(1);
  for (int i = 0; i < kChains; ++i) s[i] = _mm256_setzero_si256(), b[i] = _mm256_set1_epi8(static_cast<char>(i + 1));
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 8
    for (int i = 0; i < kChains; ++i) {
      asm volatile("" : "+x"(b[i]));
      s[i] = _mm256_add_epi32(s[i], _mm256_madd_epi16(_mm256_maddubs_epi16(a, b[i]), ones));
    }
  }
  const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  __m256i t = s[0];
  for (int i = 1; i < kChains; ++i) t = _mm256_add_epi32(t, s[i]);
  asm volatile("" : : "x"(t));
  return static_cast<double>(iters) * kChains * 32 / std::max(ns, 1.0);
}

// The AVX2 build's int8 multiply-add rate (the best of five short runs) against the float32 FMA rate of the GEMM's
// widest registers (MeasureFmaPeakGflops: ~5-10 ms in all): the ratio is ~1 or ~2 on the cores above, far from the
// 1.5 that decides.
bool Int8NoFasterThanFloat() {
  double int8 = 0.0;
  Int8MacsPerNs(2000);   // clocks up, code in cache
  for (int round = 0; round < 5; ++round) int8 = std::max(int8, Int8MacsPerNs(8000));
  const double fma = MeasureFmaPeakGflops(0.01) / 2;   // multiply-adds a nanosecond
  return int8 < 1.5 * fma;
}

bool Int8TallInFloat() {
  static const bool in_float = [] {
    if (!DqGemmAvailable() || CpuHasAvx512Vnni()) return false;   // no integer kernels, or vpdpbusd's 4x rate
    const std::string& forced = DqTallProductsOverride();
    if (forced == "float") return true;
    if (forced == "integer") return false;
    return Int8NoFasterThanFloat();
  }();
  return in_float;
}

#pragma GCC push_options
#pragma GCC target("avx2,fma")
// Rows [k0, k0 + kc) of panels n0 / 16 .. as kc x 16 floats each. A 64-byte step of a panel holds 4 rows x 16 columns,
// each 32-bit lane one column's 4 rows (byte r: row r): row r of 8 columns is a shift and a mask of 32 bytes.
void DecodeInt8Panels(const DqWeights& w, int64_t k0, int64_t kc, int64_t n0, int64_t nc, float* dst) {
  const int64_t first = n0 / 16, count = (nc + 15) / 16;
  const __m256i byte = _mm256_set1_epi32(0xFF);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t p = first + i;
    const uint8_t* codes = w.panel(p);
    float* out = dst + i * kc * 16;
    for (int64_t k = k0; k < k0 + kc; ++k) {
      const int64_t g = w.scale_groups > 1 ? k / w.block : 0;
      const float* s = w.scales.data() + (p * w.scale_groups + g) * 16;
      const float* z = w.zeros.empty() ? nullptr : w.zeros.data() + (p * w.scale_groups + g) * 16;
      const uint8_t* step = codes + k / 4 * 64;
      const __m128i shift = _mm_cvtsi32_si128(static_cast<int>(8 * (k % 4)));
      for (int h = 0; h < 2; ++h) {
        const __m256i lanes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(step + 32 * h));
        const __m256 u = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srl_epi32(lanes, shift), byte));
        const __m256 zero = z ? _mm256_loadu_ps(z + 8 * h) : _mm256_set1_ps(w.zero);
        // (u - zero) is exact (integers below 2^9): one rounding, as the weight-only path's scale * (code - zero)
        _mm256_storeu_ps(out + (k - k0) * 16 + 8 * h, _mm256_mul_ps(_mm256_loadu_ps(s + 8 * h), _mm256_sub_ps(u, zero)));
      }
    }
    const int64_t valid = std::min<int64_t>(16, n0 + nc - p * 16);   // a block that ends inside a panel
    if (valid < 16)
      for (int64_t k = 0; k < kc; ++k) std::fill(out + k * 16 + valid, out + k * 16 + 16, 0.f);
  }
}
#pragma GCC pop_options

}  // namespace

bool DqTallProductInFloat(const DqWeights& w, int64_t rows) {
  return w.bits == 8 && rows > kSkinnyMaxRows && Int8TallInFloat();
}

const char* DqTallInt8Path() { return Int8TallInFloat() ? "float" : "integer"; }

void DqWeightsPacker::Pack(int64_t k0, int64_t kc, int64_t n0, int64_t nc, float* dst) const {
  if (w_.bits != 8 || !Int8TallInFloat()) throw std::logic_error("DqWeightsPacker takes int8 codes on the AVX2 build");
  DecodeInt8Panels(w_, k0, kc, n0, nc, dst);
}

#else

bool DqTallProductInFloat(const DqWeights&, int64_t) { return false; }
const char* DqTallInt8Path() { return "integer"; }
void DqWeightsPacker::Pack(int64_t, int64_t, int64_t, int64_t, float*) const {
  throw std::logic_error("DqWeightsPacker takes int8 codes on the AVX2 build");
}

#endif

}  // namespace lite
