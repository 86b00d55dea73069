#include "cpu/gemm/dynamic_quant_gemm.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "cpu/aligned.h"
#include "cpu/gemm/dq_amx.h"
#include "cpu/gemm/dq_bf16_prompts.h"
#include "cpu/gemm/dq_float_prompts.h"
#include "cpu/gemm/epilogue_row_avx512.h"
#include "cpu/gemm/skinny_gemm.h"
#include "cpu/gemm/spread_prefetch.h"
#include "cpu/isa_dispatch.h"
#include "cpu/simd/vmath.h"
#include "cpu/weight_pages.h"

#ifdef LITE_X86_SIMD
#include <immintrin.h>
#endif
#ifdef LITE_ARM64_SIMD
#include <arm_neon.h>
#endif

namespace lite {

namespace {
// The kernels' build: vpdpbusd on 512-bit registers (AVX512-VNNI), vpmaddubsw + vpmaddwd on 256-bit ones (AVX2), or
// sdot on ARM64 with the dot-product extension.
enum class DqIsa { kNone, kAvx2, kVnni512, kNeonDot };
DqIsa PickDqIsa() {
#if defined(LITE_X86_SIMD)
  static const DqIsa isa = CpuHasAvx512Vnni() ? DqIsa::kVnni512
                           : DetectSimdIsa() != SimdIsa::kPortable ? DqIsa::kAvx2 : DqIsa::kNone;
  return isa;
#elif defined(LITE_ARM64_SIMD)
  static const DqIsa isa = CpuArmFeatures().dotprod ? DqIsa::kNeonDot : DqIsa::kNone;
  return isa;
#else
  return DqIsa::kNone;
#endif
}
}  // namespace

bool DqGemmAvailable() { return PickDqIsa() != DqIsa::kNone; }

const std::string& DqTallProductsOverride() {
  static const std::string forced = [] {
    const char* v = std::getenv("LITE_DQ_TALL_PRODUCTS");
    return std::string(v ? v : "");
  }();
  return forced;
}

std::string DqWeightsUnsupported(const StoredWeight& w) {
  if (w.storage != ms_schema::DataType::INT8 && w.storage != ms_schema::DataType::UINT8) return "not integer codes";
  const std::string layout = PanelMatrixUnsupported(w);   // a matrix, 8 or 4 bits, a scale layout the panels take
  if (!layout.empty()) return layout;
  // Blocks start on a whole 64-byte step of codes; an int32 sum of a block stays below 2^31 (127 * 255 * 65536).
  const int64_t group = w.quant->axis() == 0 ? w.quant->group_size() : 0;
  if (group % 8 || group > 65536) return "blocks of rows not a multiple of 8 up to 65536";
  return "";
}

DqWeights MakeDqWeights(const StoredWeight& w) {
  const std::string why = DqWeightsUnsupported(w);
  if (!why.empty()) throw std::invalid_argument("dynamic-quant weights: " + why);
  const ms_schema::QuantParam* q = w.quant;
  DqWeights m;
  m.bits = q->bits();
  m.K = w.shape[0];
  m.N = w.shape[1];
  m.panels = (m.N + 15) / 16;
  const int64_t K = m.K, N = m.N, axis = q->axis();
  const bool blocked = axis == 0;
  m.block = blocked ? q->group_size() : kDqColumnBlock;
  m.blocks = std::max<int64_t>(1, (K + m.block - 1) / m.block);
  m.scale_groups = blocked ? m.blocks : 1;
  const int64_t step = m.bits == 8 ? 4 : 8;   // rows per 64 bytes of a panel
  m.panel_bytes = (K + step - 1) / step * 64;
  // Stored codes to unsigned ones: signed codes move up by half their range, and their zero points with them.
  const int32_t offset = w.storage == ms_schema::DataType::INT8 ? (m.bits == 8 ? 128 : 8) : 0;
  m.data.assign(static_cast<size_t>(m.panels * m.panel_bytes + 64), 0);
  for (int64_t k = 0; k < K; ++k) {
    const int64_t row_at = k / step * 64 + k % 4;
    for (int64_t n = 0; n < N; ++n) {
      const auto u = static_cast<uint8_t>(StoredCode(w, k * N + n) + offset);
      uint8_t& b = m.data[static_cast<size_t>((n / 16) * m.panel_bytes + row_at + 4 * (n % 16))];
      if (m.bits == 8) {
        b = u;
      } else {
        b |= static_cast<uint8_t>(k % 8 < 4 ? u : u << 4);
      }
    }
  }
  PanelScales read = ReadPanelScales(w, m.panels, m.scale_groups, offset);
  m.scales = std::move(read.scales);
  m.zeros = std::move(read.zeros);
  m.zero = read.zero;
  return m;
}

#if defined(LITE_X86_SIMD) || defined(LITE_ARM64_SIMD)
namespace {
// A build's kernels: one row block's activation codes, and panels [p0, p1) for a chunk of rows.
using QuantizeFn = void (*)(const float* x, int64_t n, int8_t* codes, float* scale, int32_t* sum);
using RangeFn = void (*)(const DqWeights&, int64_t, int64_t, const DqActivations&, int64_t, float*, int64_t,
                         const GemmEpilogue&);

// What both builds' PanelRange read besides the codes, for a chunk of M rows from m0: each row's codes and its blocks'
// scales and sums; a panel's first block's weight scales and zero points, and the step to the next block's (0 when
// one serves every block).
template <int M>
struct ChunkOperands {
  const int8_t* rows[M];
  const float* row_scale[M];
  const int32_t* row_sum[M];
  alignas(64) float same_zero[16];
  int64_t group_stride, zero_stride;
  const DqWeights& w;

  ChunkOperands(const DqWeights& weights, const DqActivations& a, int64_t m0) : w(weights) {
    for (int m = 0; m < M; ++m) {
      rows[m] = a.row(m0 + m);
      row_scale[m] = a.scale.data() + (m0 + m) * a.blocks;
      row_sum[m] = a.sum.data() + (m0 + m) * a.blocks;
    }
    std::fill_n(same_zero, 16, w.zero);
    group_stride = w.scale_groups > 1 ? 16 : 0;
    zero_stride = w.zeros.empty() ? 0 : group_stride;
  }
  const float* scales(int64_t p) const { return w.scales.data() + p * w.scale_groups * 16; }
  const float* zeros(int64_t p) const { return w.zeros.empty() ? same_zero : w.zeros.data() + p * w.scale_groups * 16; }
};

// Bytes of scales ahead for as many bytes of codes ahead (0: one scale group for the whole depth, nothing streams).
inline int64_t ScalesAhead(const DqWeights& w, int64_t rows_per_step) {
  return w.scale_groups > 1 ? kStreamAhead * rows_per_step / w.block : 0;
}
}  // namespace

#ifdef LITE_X86_SIMD
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,fma")
namespace {
namespace vnni512 {

#include "cpu/simd/unroll.h"

// Row m's codes: the int8 codes of x / scale, rounded half to even (the CPU's default rounding); its block's sum.
void QuantizeBlock(const float* x, int64_t n, int8_t* codes, float* scale, int32_t* sum) {
  const __m512 inf = _mm512_set1_ps(std::numeric_limits<float>::infinity());
  __m512 amax = _mm512_setzero_ps();
  __mmask16 bad = 0;
  for (int64_t k = 0; k < n; k += 16) {
    const __mmask16 live = n - k >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (n - k)) - 1);
    const __m512 a = _mm512_abs_ps(_mm512_maskz_loadu_ps(live, x + k));
    bad |= _mm512_cmp_ps_mask(a, inf, _CMP_NLT_UQ);   // an infinity or a NaN
    amax = _mm512_max_ps(amax, a);
  }
  const float top = _mm512_reduce_max_ps(amax);
  if (bad || top == 0.f) {
    std::memset(codes, 0, static_cast<size_t>(n));
    *scale = bad ? std::numeric_limits<float>::quiet_NaN() : 0.f;
    *sum = 0;
    return;
  }
  const __m512 inv = _mm512_set1_ps(127.f / top);
  __m512i total = _mm512_setzero_si512();
  for (int64_t k = 0; k < n; k += 16) {
    const __mmask16 live = n - k >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (n - k)) - 1);
    const __m512i c = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(live, x + k), inv));
    total = _mm512_add_epi32(total, c);
    _mm_mask_storeu_epi8(codes + k, live, _mm512_cvtepi32_epi8(c));
  }
  *scale = top / 127.f;
  *sum = _mm512_reduce_add_epi32(total);
}

inline __m512i Broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return _mm512_set1_epi32(v);
}

// Rows 0..M-1 of a panel's 16 columns from col0 (cols of them real) with the epilogue, from registers into C. The
// additions in ApplyEpilogue's order: bias (row + column), residual, activation, multiplier. For the activations
// ActivationInRegisters names; any other goes through StoreTileWithEpilogue's loops, per 8 x 16 tile (with the SwiGLU
// multiplier folded into the up product, an int8 512-token prompt ran 0.92x as fast that way as in registers).
// Each row's operands are read before its store: a residual that is C itself reads its old values.
template <int M>
__attribute__((always_inline)) inline void StoreRows(__m512 (&acc)[M], int64_t col0, int64_t cols, float* C,
                                                     int64_t ldc, const GemmEpilogue& ep) {
  const __mmask16 live = cols >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << cols) - 1);
  const __m512 col_bias = ep.col_bias ? _mm512_maskz_loadu_ps(live, ep.col_bias + col0) : _mm512_setzero_ps();
  Unroll<M>([&](auto m) __attribute__((always_inline)) {
    EpilogueRowAvx512(acc[m], m, col0, live, col_bias, C, ldc, ep);
  });
}

// Panels [p0, p1) for M rows of activation codes (rows m0.. of `a`) into C's rows 0..M-1. The loops walk pointers
// (codes 64 bytes a step, activations 4 or 8 values a step) with every per-block operand's address hoisted: the
// index form, k / 4 * 64 on a signed k, cost more instructions than the products themselves in the one-row case.
template <int M, int BITS>
void PanelRange(const DqWeights& w, int64_t p0, int64_t p1, const DqActivations& a, int64_t m0, float* C,
                int64_t ldc, const GemmEpilogue& ep) {
  constexpr int64_t kRowsPerStep = BITS == 8 ? 4 : 8;   // depth rows in 64 bytes of a panel
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  const ChunkOperands<M> in(w, a, m0);
  const auto& rows = in.rows;
  const auto& row_scale = in.row_scale;
  const auto& row_sum = in.row_sum;
  const int64_t scales_ahead = ScalesAhead(w, kRowsPerStep);
  const bool in_registers = ActivationInRegisters(ep.act);
  for (int64_t p = p0; p < p1; ++p) {
    const uint8_t* codes = w.panel(p);
    const float* sw = in.scales(p);
    const float* zw = in.zeros(p);
    __m512 acc[M];
    Unroll<M>([&](auto m) __attribute__((always_inline)) { acc[m] = _mm512_setzero_ps(); });
    for (int64_t b = 0; b < w.blocks; ++b, sw += in.group_stride, zw += in.zero_stride) {
      const int64_t k0 = b * w.block, k1 = std::min(w.K, k0 + w.block);
      // Two chains of sums per row (even and odd steps), so vpdpbusd's latency never holds the stream up.
      __m512i s0[M], s1[M];
      Unroll<M>([&](auto m) __attribute__((always_inline)) {
        s0[m] = _mm512_setzero_si512();
        s1[m] = _mm512_setzero_si512();
      });
      const uint8_t* c = codes + k0 / kRowsPerStep * 64;
      const int64_t steps = (k1 - k0 + kRowsPerStep - 1) / kRowsPerStep;   // rows past K are zero in both operands
      int64_t i = 0;
      if constexpr (BITS == 8) {
        for (; i + 2 <= steps; i += 2, c += 128) {
          FetchAhead(c);
          FetchAhead(c + 64);
          const __m512i wa = _mm512_loadu_si512(c), wb = _mm512_loadu_si512(c + 64);
          Unroll<M>([&](auto m) __attribute__((always_inline)) {
            const int8_t* r = rows[m] + k0 + 4 * i;
            s0[m] = _mm512_dpbusd_epi32(s0[m], wa, Broadcast4(r));
            s1[m] = _mm512_dpbusd_epi32(s1[m], wb, Broadcast4(r + 4));
          });
        }
        if (i < steps) {
          const __m512i wa = _mm512_loadu_si512(c);
          Unroll<M>([&](auto m) __attribute__((always_inline)) {
            s0[m] = _mm512_dpbusd_epi32(s0[m], wa, Broadcast4(rows[m] + k0 + 4 * i));
          });
        }
      } else {
        for (; i < steps; ++i, c += 64) {
          FetchAhead(c);
          const __m512i v = _mm512_loadu_si512(c);
          const __m512i lo = _mm512_and_si512(v, nibble), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble);
          Unroll<M>([&](auto m) __attribute__((always_inline)) {
            const int8_t* r = rows[m] + k0 + 8 * i;
            s0[m] = _mm512_dpbusd_epi32(s0[m], lo, Broadcast4(r));
            s1[m] = _mm512_dpbusd_epi32(s1[m], hi, Broadcast4(r + 4));
          });
        }
      }
      if (scales_ahead) FetchAhead(sw, scales_ahead);
      const __m512 scales = _mm512_loadu_ps(sw), zeros = _mm512_loadu_ps(zw);
      Unroll<M>([&](auto m) __attribute__((always_inline)) {
        // Exact in float32: |sums| stay below 2^24 for blocks of up to 512 values (beyond, a rounding of 2^-24).
        __m512 f = _mm512_cvtepi32_ps(_mm512_add_epi32(s0[m], s1[m]));
        f = _mm512_fnmadd_ps(zeros, _mm512_set1_ps(static_cast<float>(row_sum[m][b])), f);
        acc[m] = _mm512_fmadd_ps(f, _mm512_mul_ps(scales, _mm512_set1_ps(row_scale[m][b])), acc[m]);
      });
    }
    if (in_registers) {
      StoreRows<M>(acc, p * 16, std::min<int64_t>(16, w.N - p * 16), C, ldc, ep);
      continue;
    }
    alignas(64) float tile[M * 16];
    Unroll<M>([&](auto m) __attribute__((always_inline)) { _mm512_store_ps(tile + m * 16, acc[m]); });
    StoreTileWithEpilogue(tile, M, p * 16, std::min<int64_t>(16, w.N - p * 16), C, ldc, ep);
  }
}

template <int BITS>
RangeFn PickRange(int64_t rows) {
  switch (rows) {
    case 1: return PanelRange<1, BITS>;
    case 2: return PanelRange<2, BITS>;
    case 3: return PanelRange<3, BITS>;
    case 4: return PanelRange<4, BITS>;
    case 5: return PanelRange<5, BITS>;
    case 6: return PanelRange<6, BITS>;
    case 7: return PanelRange<7, BITS>;
    default: return PanelRange<8, BITS>;
  }
}

}  // namespace vnni512
}  // namespace
#pragma GCC pop_options

// The same products on AVX2 CPUs without AVX512-VNNI: vpmaddubsw multiplies unsigned weight bytes by signed
// activation codes into pairs of int16 sums, vpmaddwd adds the pairs into int32. The int32 sums are the VNNI
// build's to the bit (and so every output): int4 codes (at most 15 * 127 * 2 a pair) are summed over up to four
// 64-byte steps in int16 first; int8 codes would overflow a pair as unsigned bytes (255 * 127 * 2), so they are
// multiplied as signed ones, |w| times a carrying w's sign, and the 128 * (sum of codes) their offset holds added
// back once per block.
#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace {
namespace avx2 {

#include "cpu/simd/unroll.h"

void QuantizeBlock(const float* x, int64_t n, int8_t* codes, float* scale, int32_t* sum) {
  const float inf = std::numeric_limits<float>::infinity();
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 amax = _mm256_setzero_ps();
  int bad = 0;
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    const __m256 a = _mm256_and_ps(_mm256_loadu_ps(x + k), abs_mask);
    bad |= _mm256_movemask_ps(_mm256_cmp_ps(a, _mm256_set1_ps(inf), _CMP_NLT_UQ));   // an infinity or a NaN
    amax = _mm256_max_ps(amax, a);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, amax);
  float top = 0.f;
  for (float v : lanes) top = std::max(top, v);
  for (; k < n; ++k) {
    const float a = std::fabs(x[k]);
    if (!(a < inf)) bad = 1;
    top = std::max(top, a);
  }
  if (bad || top == 0.f) {
    std::memset(codes, 0, static_cast<size_t>(n));
    *scale = bad ? std::numeric_limits<float>::quiet_NaN() : 0.f;
    *sum = 0;
    return;
  }
  // x * (127 / top) rounded half to even, as the AVX-512 build (cvtps rounds by MXCSR; nearbyint by the same mode)
  const float inv = 127.f / top;
  int32_t total = 0;
  alignas(32) int32_t c[8];
  k = 0;
  for (; k + 8 <= n; k += 8) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(c), _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + k), _mm256_set1_ps(inv))));
    for (int i = 0; i < 8; ++i) {
      codes[k + i] = static_cast<int8_t>(c[i]);
      total += c[i];
    }
  }
  for (; k < n; ++k) {
    const auto v = static_cast<int32_t>(std::nearbyint(x[k] * inv));
    codes[k] = static_cast<int8_t>(v);
    total += v;
  }
  *scale = top / 127.f;
  *sum = total;
}

inline __m256i Broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return _mm256_set1_epi32(v);
}

// As the VNNI build's PanelRange, with a panel's 16 columns in two 8-column halves (bytes 0-31 and 32-63 of each
// 64-byte step) and the float sums in a tile in L1 (16 ymm registers hold M <= 2 rows' integer sums and operands).
template <int M, int BITS>
void PanelRange(const DqWeights& w, int64_t p0, int64_t p1, const DqActivations& a, int64_t m0, float* C,
                int64_t ldc, const GemmEpilogue& ep) {
  constexpr int64_t kRowsPerStep = BITS == 8 ? 4 : 8;
  const __m256i ones = _mm256_set1_epi16(1), nibble = _mm256_set1_epi8(0x0F), flip = _mm256_set1_epi8(-128);
  const ChunkOperands<M> in(w, a, m0);
  const auto& rows = in.rows;
  const auto& row_scale = in.row_scale;
  const auto& row_sum = in.row_sum;
  const int64_t scales_ahead = ScalesAhead(w, kRowsPerStep);
  for (int64_t p = p0; p < p1; ++p) {
    const uint8_t* codes = w.panel(p);
    const float* sw = in.scales(p);
    const float* zw = in.zeros(p);
    alignas(32) float tile[M * 16] = {};
    for (int64_t b = 0; b < w.blocks; ++b, sw += in.group_stride, zw += in.zero_stride) {
      const int64_t k0 = b * w.block, k1 = std::min(w.K, k0 + w.block);
      __m256i s[M][2];
      Unroll<M>([&](auto m) __attribute__((always_inline)) { s[m][0] = s[m][1] = _mm256_setzero_si256(); });
      const uint8_t* c = codes + k0 / kRowsPerStep * 64;
      const int64_t steps = (k1 - k0 + kRowsPerStep - 1) / kRowsPerStep;   // rows past K are zero in both operands
      if constexpr (BITS == 8) {
        for (int64_t i = 0; i < steps; ++i, c += 64) {
          FetchAhead(c);
          Unroll<2>([&](auto h) __attribute__((always_inline)) {
            const __m256i signed_w = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + 32 * h)), flip);
            const __m256i magnitude = _mm256_abs_epi8(signed_w);
            Unroll<M>([&](auto m) __attribute__((always_inline)) {
              const __m256i pairs = _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(Broadcast4(rows[m] + k0 + 4 * i), signed_w));
              s[m][h] = _mm256_add_epi32(s[m][h], _mm256_madd_epi16(pairs, ones));
            });
          });
        }
        Unroll<M>([&](auto m) __attribute__((always_inline)) {
          const __m256i offset = _mm256_set1_epi32(128 * row_sum[m][b]);
          s[m][0] = _mm256_add_epi32(s[m][0], offset);
          s[m][1] = _mm256_add_epi32(s[m][1], offset);
        });
      } else {
        for (int64_t i = 0; i < steps;) {
          const int64_t group_end = std::min(steps, i + 4);
          __m256i pairs[M][2];
          Unroll<M>([&](auto m) __attribute__((always_inline)) { pairs[m][0] = pairs[m][1] = _mm256_setzero_si256(); });
          for (; i < group_end; ++i, c += 64) {
            FetchAhead(c);
            Unroll<2>([&](auto h) __attribute__((always_inline)) {
              const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + 32 * h));
              const __m256i lo = _mm256_and_si256(v, nibble), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble);
              Unroll<M>([&](auto m) __attribute__((always_inline)) {
                const int8_t* r = rows[m] + k0 + 8 * i;
                pairs[m][h] = _mm256_add_epi16(pairs[m][h], _mm256_add_epi16(_mm256_maddubs_epi16(lo, Broadcast4(r)),
                                                                             _mm256_maddubs_epi16(hi, Broadcast4(r + 4))));
              });
            });
          }
          Unroll<M>([&](auto m) __attribute__((always_inline)) {
            s[m][0] = _mm256_add_epi32(s[m][0], _mm256_madd_epi16(pairs[m][0], ones));
            s[m][1] = _mm256_add_epi32(s[m][1], _mm256_madd_epi16(pairs[m][1], ones));
          });
        }
      }
      if (scales_ahead) FetchAhead(sw, scales_ahead);
      Unroll<2>([&](auto h) __attribute__((always_inline)) {
        const __m256 scales = _mm256_loadu_ps(sw + 8 * h), zeros = _mm256_loadu_ps(zw + 8 * h);
        Unroll<M>([&](auto m) __attribute__((always_inline)) {
          __m256 f = _mm256_cvtepi32_ps(s[m][h]);
          f = _mm256_fnmadd_ps(zeros, _mm256_set1_ps(static_cast<float>(row_sum[m][b])), f);
          float* t = tile + m * 16 + 8 * h;
          _mm256_store_ps(t, _mm256_fmadd_ps(f, _mm256_mul_ps(scales, _mm256_set1_ps(row_scale[m][b])), _mm256_load_ps(t)));
        });
      });
    }
    StoreTileWithEpilogue(tile, M, p * 16, std::min<int64_t>(16, w.N - p * 16), C, ldc, ep);
  }
}

// What the one- and two-row kernels below share: a run of P panels (their codes, scales and zero points) and its
// float sums in registers, M rows x P panels x two 8-column halves.
template <int M, int P>
struct PanelRun {
  const uint8_t* codes[P];
  const float* scales[P];
  const float* zeros[P];
  __m256 acc[M][P][2];

  __attribute__((always_inline)) PanelRun(const DqWeights& w, int64_t p, const ChunkOperands<M>& in) {
    Unroll<P>([&](auto q) __attribute__((always_inline)) {
      codes[q] = w.panel(p + q);
      scales[q] = in.scales(p + q);
      zeros[q] = in.zeros(p + q);
    });
    Unroll<M * P * 2>([&](auto i) __attribute__((always_inline)) { acc[i / (2 * P)][i / 2 % P][i % 2] = _mm256_setzero_ps(); });
  }

  // Block b's int32 sums into the float sums: sums + k * (the row's sum of codes) (a single zero point, or int8's
  // offset, in integers), less each column's zero point times that sum after the conversion where kZeroVector.
  template <bool kZeroVector>
  __attribute__((always_inline)) void AddBlock(const __m256i (&sums)[M][P][2], int32_t k, int64_t b,
                                               const ChunkOperands<M>& in, int64_t scales_ahead) {
    Unroll<P>([&](auto q) __attribute__((always_inline)) {
      const float* scale_row = scales[q] + b * in.group_stride;
      if (scales_ahead) FetchAhead(scale_row, scales_ahead);
      Unroll<2>([&](auto h) __attribute__((always_inline)) {
        const __m256 sc = _mm256_loadu_ps(scale_row + 8 * h);
        Unroll<M>([&](auto m) __attribute__((always_inline)) {
          const int32_t row_sum = in.row_sum[m][b];
          __m256 f = _mm256_cvtepi32_ps(_mm256_add_epi32(sums[m][q][h], _mm256_set1_epi32(k * row_sum)));
          if constexpr (kZeroVector)
            f = _mm256_fnmadd_ps(_mm256_loadu_ps(zeros[q] + b * in.zero_stride + 8 * h),
                                 _mm256_set1_ps(static_cast<float>(row_sum)), f);
          acc[m][q][h] = _mm256_fmadd_ps(f, _mm256_mul_ps(sc, _mm256_set1_ps(in.row_scale[m][b])), acc[m][q][h]);
        });
      });
    });
  }

  __attribute__((always_inline)) void Store(const DqWeights& w, int64_t p, float* C, int64_t ldc,
                                            const GemmEpilogue& ep) {
    Unroll<P>([&](auto q) __attribute__((always_inline)) {
      alignas(32) float tile[M * 16];
      Unroll<M * 2>([&](auto i) __attribute__((always_inline)) { _mm256_store_ps(tile + 8 * i, acc[i / 2][q][i % 2]); });
      StoreTileWithEpilogue(tile, M, (p + q) * 16, std::min<int64_t>(16, w.N - (p + q) * 16), C, ldc, ep);
    });
  }
};

// The decode step's int4 products (one row, or two of a batch) where the weight's blocks are whole groups of four
// 8-row steps (32k rows: llama.cpp's Q4_0 block, the ONNX Runtime GenAI builder's): PanelRange's loops with each
// group's four steps unrolled, one row's two panels at a time (sharing its activation broadcasts), the float sums in
// registers, and a single zero point of 0-15 subtracted from the int32 sums (z * sum, exact, as the VNNI build's
// fnmadd is for blocks up to 512). On a Zen 1 core PanelRange's one-row loop, its block loop's index and tile
// arithmetic as long as its products, ran 7.2 multiply-adds a cycle in L2: below the memory's rate.
template <int M, int P, bool kZeroVector, bool kOneGroup>
__attribute__((always_inline)) inline void Int4Panels(const DqWeights& w, int64_t p, const ChunkOperands<M>& in,
                                                      int32_t zero, float* C, int64_t ldc, const GemmEpilogue& ep) {
  const __m256i nibble = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  PanelRun<M, P> run(w, p, in);
  const int64_t scales_ahead = ScalesAhead(w, 8), steps = (w.K + 7) / 8, block_steps = w.block / 8;
  __m256i pairs[M][P][2];
  // One 8-row step i of every panel: both nibbles of each 32-byte half times the row's codes i*8 .. i*8+7.
  auto step = [&](int64_t i) __attribute__((always_inline)) {
    __m256i lo_a[M], hi_a[M];
    Unroll<M>([&](auto m) __attribute__((always_inline)) {
      lo_a[m] = Broadcast4(in.rows[m] + 8 * i);
      hi_a[m] = Broadcast4(in.rows[m] + 8 * i + 4);
    });
    Unroll<P>([&](auto q) __attribute__((always_inline)) {
      const uint8_t* cc = run.codes[q] + 64 * i;
      FetchAhead(cc);
      Unroll<2>([&](auto h) __attribute__((always_inline)) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(cc + 32 * h));
        const __m256i lo = _mm256_and_si256(v, nibble), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble);
        Unroll<M>([&](auto m) __attribute__((always_inline)) {
          pairs[m][q][h] = _mm256_add_epi16(pairs[m][q][h], _mm256_add_epi16(_mm256_maddubs_epi16(lo, lo_a[m]),
                                                                             _mm256_maddubs_epi16(hi, hi_a[m])));
          // (a register here each step: else GCC sums the unrolled steps' products as a tree, every product spilled)
          asm("" : "+x"(pairs[m][q][h]));
        });
      });
    });
  };
  for (int64_t b = 0, s0 = 0; b < w.blocks; ++b, s0 += block_steps) {
    const int64_t s1 = std::min(steps, s0 + block_steps);
    __m256i sums[M][P][2];
    for (int64_t g = s0; g < s1; g += 4) {
      Unroll<M * P * 2>([&](auto i) __attribute__((always_inline)) {
        pairs[i / (2 * P)][i / 2 % P][i % 2] = _mm256_setzero_si256();
      });
      if (g + 4 <= s1) {
        step(g);
        step(g + 1);
        step(g + 2);
        step(g + 3);
      } else {   // the last block's last steps, past K's last multiple of 32 rows
        for (int64_t i = g; i < s1; ++i) step(i);
      }
      Unroll<M * P * 2>([&](auto i) __attribute__((always_inline)) {
        constexpr int m = i / (2 * P), q = i / 2 % P, h = i % 2;
        const __m256i t = _mm256_madd_epi16(pairs[m][q][h], ones);
        sums[m][q][h] = kOneGroup || g == s0 ? t : _mm256_add_epi32(sums[m][q][h], t);
      });
      if (kOneGroup) break;
    }
    run.template AddBlock<kZeroVector>(sums, kZeroVector ? 0 : -zero, b, in, scales_ahead);
  }
  run.Store(w, p, C, ldc, ep);
}

// Panels [p0, p1) as fn(P, p) for runs of P panels from p: pairs for one row (its activation broadcasts shared; two
// rows' sums fill the registers with one panel), then single panels.
template <int M, typename Fn>
__attribute__((always_inline)) inline void ForPanelRuns(int64_t p0, int64_t p1, Fn&& fn) {
  int64_t p = p0;
  if constexpr (M == 1)
    for (; p + 2 <= p1; p += 2) fn(std::integral_constant<int, 2>{}, p);
  for (; p < p1; ++p) fn(std::integral_constant<int, 1>{}, p);
}

template <int M>
void Int4Range(const DqWeights& w, int64_t p0, int64_t p1, const DqActivations& a, int64_t m0, float* C, int64_t ldc,
               const GemmEpilogue& ep) {
  const bool small_zero = w.zero >= 0.f && w.zero <= 15.f && w.zero == std::nearbyint(w.zero);
  if (w.block % 32 != 0 || w.block > 512 || (w.zeros.empty() && !small_zero))
    return PanelRange<M, 4>(w, p0, p1, a, m0, C, ldc, ep);
  const ChunkOperands<M> in(w, a, m0);
  const auto zero = static_cast<int32_t>(w.zero);
  const bool one_group = w.block == 32, zero_vector = !w.zeros.empty();
  ForPanelRuns<M>(p0, p1, [&](auto P, int64_t p) {
    if (zero_vector) {
      one_group ? Int4Panels<M, P, true, true>(w, p, in, zero, C, ldc, ep)
                : Int4Panels<M, P, true, false>(w, p, in, zero, C, ldc, ep);
    } else {
      one_group ? Int4Panels<M, P, false, true>(w, p, in, zero, C, ldc, ep)
                : Int4Panels<M, P, false, false>(w, p, in, zero, C, ldc, ep);
    }
  });
}

// The same for int8 codes (4-row steps; each step's pairs go to int32 at once, its int16 sums would overflow): one
// row's two panels at a time, float sums in registers, and where every zero point is one integer z the offset the
// signed products leave, (128 - z) * sum, added in int32 (exact for blocks up to 512 rows, as the VNNI build's
// fnmadd). On a Zen 1 core the generic loop ran one row's int8 products at about the memory's rate (13 GB/s in L2),
// so the stream and the arithmetic did not overlap: a 24-layer decode step drew ~8 GB/s.
template <int M, int P, bool kZeroVector>
__attribute__((always_inline)) inline void Int8Panels(const DqWeights& w, int64_t p, const ChunkOperands<M>& in,
                                                      int32_t offset, float* C, int64_t ldc, const GemmEpilogue& ep) {
  const __m256i ones = _mm256_set1_epi16(1), flip = _mm256_set1_epi8(-128);
  PanelRun<M, P> run(w, p, in);
  const int64_t scales_ahead = ScalesAhead(w, 4), steps = (w.K + 3) / 4, block_steps = w.block / 4;
  __m256i sums[M][P][2];
  auto step = [&](int64_t i) __attribute__((always_inline)) {
    __m256i a[M];
    Unroll<M>([&](auto m) __attribute__((always_inline)) { a[m] = Broadcast4(in.rows[m] + 4 * i); });
    Unroll<P>([&](auto q) __attribute__((always_inline)) {
      const uint8_t* cc = run.codes[q] + 64 * i;
      FetchAhead(cc);
      Unroll<2>([&](auto h) __attribute__((always_inline)) {
        const __m256i signed_w = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(cc + 32 * h)), flip);
        const __m256i magnitude = _mm256_abs_epi8(signed_w);
        Unroll<M>([&](auto m) __attribute__((always_inline)) {
          const __m256i pairs = _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(a[m], signed_w));
          sums[m][q][h] = _mm256_add_epi32(sums[m][q][h], _mm256_madd_epi16(pairs, ones));
          asm("" : "+x"(sums[m][q][h]));   // (one chain a sum: else GCC re-associates the unrolled steps, spilling)
        });
      });
    });
  };
  for (int64_t b = 0, s0 = 0; b < w.blocks; ++b, s0 += block_steps) {
    const int64_t s1 = std::min(steps, s0 + block_steps);
    Unroll<M * P * 2>([&](auto i) __attribute__((always_inline)) { sums[i / (2 * P)][i / 2 % P][i % 2] = _mm256_setzero_si256(); });
    int64_t i = s0;
    for (; i + 4 <= s1; i += 4) {
      step(i);
      step(i + 1);
      step(i + 2);
      step(i + 3);
    }
    for (; i < s1; ++i) step(i);
    // the signed products' sums less the unsigned codes' by 128 * sum: added back, or with the single zero point z
    // folded in, (128 - z) * sum
    run.template AddBlock<kZeroVector>(sums, kZeroVector ? 128 : offset, b, in, scales_ahead);
  }
  run.Store(w, p, C, ldc, ep);
}

template <int M>
void Int8Range(const DqWeights& w, int64_t p0, int64_t p1, const DqActivations& a, int64_t m0, float* C, int64_t ldc,
               const GemmEpilogue& ep) {
  const bool one_zero = w.zero >= 0.f && w.zero <= 255.f && w.zero == std::nearbyint(w.zero);
  if (w.block % 4 != 0 || w.block > 512 || (w.zeros.empty() && !one_zero))
    return PanelRange<M, 8>(w, p0, p1, a, m0, C, ldc, ep);
  const ChunkOperands<M> in(w, a, m0);
  const auto offset = 128 - static_cast<int32_t>(w.zero);
  const bool zero_vector = !w.zeros.empty();
  ForPanelRuns<M>(p0, p1, [&](auto P, int64_t p) {
    zero_vector ? Int8Panels<M, P, true>(w, p, in, offset, C, ldc, ep)
                : Int8Panels<M, P, false>(w, p, in, offset, C, ldc, ep);
  });
}

template <int BITS>
RangeFn PickRange(int64_t rows) {
  if constexpr (BITS == 4) return rows == 1 ? Int4Range<1> : Int4Range<2>;
  return rows == 1 ? Int8Range<1> : Int8Range<2>;
}

}  // namespace avx2
}  // namespace
#pragma GCC pop_options
#endif

#ifdef LITE_ARM64_SIMD
// ARM64 with the dot-product extension: sdot multiplies signed by signed bytes, so the int8 weights' unsigned codes
// (code + 128) are flipped back to signed ones (u ^ 0x80) and their offset moves into the zero point (z - 128: the
// sum of a * u is the sum of a * (u - 128) plus 128 times the sum of a); int4's unsigned nibbles (0-15) are valid
// signed bytes as they are. The sums are the x86 builds' to the bit.
#pragma GCC push_options
#pragma GCC target("arch=armv8.2-a+dotprod")
namespace {
namespace neon_dot {

#include "cpu/simd/unroll.h"

// Row m's codes: the int8 codes of x / scale, rounded half to even; its block's sum (as the x86 builds).
void QuantizeBlock(const float* x, int64_t n, int8_t* codes, float* scale, int32_t* sum) {
  float top = 0.f;
  bool bad = false;
  int64_t k = 0;
  float32x4_t amax = vdupq_n_f32(0.f);
  uint32x4_t nonfinite = vdupq_n_u32(0);
  const float32x4_t inf = vdupq_n_f32(std::numeric_limits<float>::infinity());
  for (; k + 4 <= n; k += 4) {
    const float32x4_t a = vabsq_f32(vld1q_f32(x + k));
    nonfinite = vorrq_u32(nonfinite, vmvnq_u32(vcltq_f32(a, inf)));   // an infinity or a NaN
    amax = vmaxq_f32(amax, a);
  }
  top = vmaxvq_f32(amax);
  bad = vmaxvq_u32(nonfinite) != 0;
  for (; k < n; ++k) {
    const float a = std::fabs(x[k]);
    if (!(a < std::numeric_limits<float>::infinity())) bad = true;
    top = std::max(top, a);
  }
  if (bad || top == 0.f) {
    std::memset(codes, 0, static_cast<size_t>(n));
    *scale = bad ? std::numeric_limits<float>::quiet_NaN() : 0.f;
    *sum = 0;
    return;
  }
  const float inv = 127.f / top;
  int32x4_t total = vdupq_n_s32(0);
  for (k = 0; k + 8 <= n; k += 8) {
    const int32x4_t c0 = vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + k), inv));   // nearest, ties to even
    const int32x4_t c1 = vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + k + 4), inv));
    total = vaddq_s32(total, vaddq_s32(c0, c1));
    const int16x8_t h = vcombine_s16(vmovn_s32(c0), vmovn_s32(c1));
    vst1_s8(codes + k, vmovn_s16(h));
  }
  int32_t s = vaddvq_s32(total);
  for (; k < n; ++k) {
    const auto c = static_cast<int32_t>(std::nearbyint(x[k] * inv));
    codes[k] = static_cast<int8_t>(c);
    s += c;
  }
  *scale = top / 127.f;
  *sum = s;
}

// A row's four codes at p, in every 32-bit lane.
inline int8x16_t Broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return vreinterpretq_s8_s32(vdupq_n_s32(v));
}

// Panels [p0, p1) for M (1 or 2) rows of activation codes into C's rows 0..M-1, as the x86 builds' PanelRange: a
// panel's 16 columns as four 4-column vectors.
template <int M, int BITS>
void PanelRange(const DqWeights& w, int64_t p0, int64_t p1, const DqActivations& a, int64_t m0, float* C,
                int64_t ldc, const GemmEpilogue& ep) {
  constexpr int64_t kRowsPerStep = BITS == 8 ? 4 : 8;
  const uint8x16_t flip = vdupq_n_u8(0x80), nibble = vdupq_n_u8(0x0F);
  const ChunkOperands<M> in(w, a, m0);
  const int64_t scales_ahead = ScalesAhead(w, kRowsPerStep);
  // int8: the flipped codes' offset, moved into the zero point
  const float32x4_t zero_shift = vdupq_n_f32(BITS == 8 ? 128.f : 0.f);
  for (int64_t p = p0; p < p1; ++p) {
    const uint8_t* codes = w.panel(p);
    const float* sw = in.scales(p);
    const float* zw = in.zeros(p);
    float32x4_t acc[M][4];
    Unroll<M>([&](auto m) __attribute__((always_inline)) {
      for (int q = 0; q < 4; ++q) acc[m][q] = vdupq_n_f32(0.f);
    });
    for (int64_t b = 0; b < w.blocks; ++b, sw += in.group_stride, zw += in.zero_stride) {
      const int64_t k0 = b * w.block, k1 = std::min(w.K, k0 + w.block);
      int32x4_t s[M][4];
      Unroll<M>([&](auto m) __attribute__((always_inline)) {
        for (int q = 0; q < 4; ++q) s[m][q] = vdupq_n_s32(0);
      });
      const uint8_t* c = codes + k0 / kRowsPerStep * 64;
      const int64_t steps = (k1 - k0 + kRowsPerStep - 1) / kRowsPerStep;   // rows past K are zero in both operands
      for (int64_t i = 0; i < steps; ++i, c += 64) {
        FetchAhead(c);
        int8x16_t lo[4], hi[4];
        for (int q = 0; q < 4; ++q) {
          const uint8x16_t v = vld1q_u8(c + 16 * q);
          if constexpr (BITS == 8) {
            lo[q] = vreinterpretq_s8_u8(veorq_u8(v, flip));
          } else {
            lo[q] = vreinterpretq_s8_u8(vandq_u8(v, nibble));
            hi[q] = vreinterpretq_s8_u8(vshrq_n_u8(v, 4));
          }
        }
        Unroll<M>([&](auto m) __attribute__((always_inline)) {
          const int8_t* r = in.rows[m] + k0 + kRowsPerStep * i;
          const int8x16_t r0 = Broadcast4(r);
          for (int q = 0; q < 4; ++q) s[m][q] = vdotq_s32(s[m][q], lo[q], r0);
          if constexpr (BITS == 4) {
            const int8x16_t r1 = Broadcast4(r + 4);
            for (int q = 0; q < 4; ++q) s[m][q] = vdotq_s32(s[m][q], hi[q], r1);
          }
        });
      }
      if (scales_ahead) FetchAhead(sw, scales_ahead);
      Unroll<M>([&](auto m) __attribute__((always_inline)) {
        const float rs = static_cast<float>(in.row_sum[m][b]), sc = in.row_scale[m][b];
        for (int q = 0; q < 4; ++q) {
          // (sum - (z - shift) * row_sum) * scale_w * scale_a, exact in float32 as in the x86 builds
          const float32x4_t z = vsubq_f32(vld1q_f32(zw + 4 * q), zero_shift);
          const float32x4_t f = vfmsq_n_f32(vcvtq_f32_s32(s[m][q]), z, rs);
          acc[m][q] = vfmaq_f32(acc[m][q], f, vmulq_n_f32(vld1q_f32(sw + 4 * q), sc));
        }
      });
    }
    alignas(16) float tile[M * 16];
    Unroll<M>([&](auto m) __attribute__((always_inline)) {
      for (int q = 0; q < 4; ++q) vst1q_f32(tile + m * 16 + 4 * q, acc[m][q]);
    });
    StoreTileWithEpilogue(tile, M, p * 16, std::min<int64_t>(16, w.N - p * 16), C, ldc, ep);
  }
}

template <int BITS>
RangeFn PickRange(int64_t rows) { return rows == 1 ? PanelRange<1, BITS> : PanelRange<2, BITS>; }

}  // namespace neon_dot
}  // namespace
#pragma GCC pop_options
#endif

namespace {
struct DqKernels {
  QuantizeFn quantize;
  RangeFn (*range8)(int64_t rows);
  RangeFn (*range4)(int64_t rows);
  int64_t max_rows;   // rows a register tile takes
};
const DqKernels& Kernels() {
#ifdef LITE_X86_SIMD
  static const DqKernels k = PickDqIsa() == DqIsa::kVnni512
                                 ? DqKernels{vnni512::QuantizeBlock, vnni512::PickRange<8>, vnni512::PickRange<4>, 8}
                                 : DqKernels{avx2::QuantizeBlock, avx2::PickRange<8>, avx2::PickRange<4>, 2};
#else
  static const DqKernels k{neon_dot::QuantizeBlock, neon_dot::PickRange<8>, neon_dot::PickRange<4>, 2};
#endif
  return k;
}
}  // namespace

void QuantizeActivations(int64_t M, int64_t K, const float* A, int64_t lda, int64_t block, DqActivations* out,
                         ThreadPool* pool, int64_t ld, int64_t row_align) {
  if (!DqGemmAvailable()) throw std::logic_error("QuantizeActivations needs AVX512-VNNI, AVX2 or ARM's dot product");
  if (ld != 0 && ld < (K + 7) / 8 * 8) throw std::invalid_argument("QuantizeActivations: row stride below the depth");
  out->rows = M;
  out->ld = ld > 0 ? ld : (K + 7) / 8 * 8;
  out->blocks = std::max<int64_t>(1, (K + block - 1) / block);
  const int64_t stored_rows = (M + std::max<int64_t>(1, row_align) - 1) / std::max<int64_t>(1, row_align) *
                              std::max<int64_t>(1, row_align);
  // Codes from a 64-byte boundary; only the padding is cleared here (the rows' depth values are all written below).
  out->codes.resize(static_cast<size_t>(stored_rows * out->ld + 64));
  out->first = AlignTo64(out->codes.data()) - out->codes.data();
  if (out->ld > K)
    for (int64_t m = 0; m < M; ++m) std::memset(out->row(m) + K, 0, static_cast<size_t>(out->ld - K));
  std::memset(out->row(M), 0, static_cast<size_t>((stored_rows - M) * out->ld));
  out->scale.assign(static_cast<size_t>(M * out->blocks), 0.f);
  out->sum.assign(out->scale.size(), 0);
  const QuantizeFn quantize = Kernels().quantize;
  auto rows = [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m)
      for (int64_t b = 0; b < out->blocks; ++b) {
        const int64_t k0 = b * block, n = std::min(block, K - k0);
        if (n > 0)
          quantize(A + m * lda + k0, n, out->row(m) + k0, &out->scale[m * out->blocks + b],
                   &out->sum[m * out->blocks + b]);
      }
  };
  // A prompt's rows on every thread: on one, an int4 512-token prompt's quantisation (blocks of 32) was ~5% of its
  // time at one thread and the other thread waited through it at two.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(1, K));
  if (pool && pool->size() > 1 && M > grain) {
    pool->ParallelFor(M, grain, rows);
  } else {
    rows(0, M);
  }
}

void DqGemm(int64_t M, const float* A, int64_t lda, const DqWeights& w, float* C, int64_t ldc,
            const GemmEpilogue& epilogue, ThreadPool* pool) {
  if (M <= 0 || w.N <= 0) return;
  if (!DqGemmAvailable()) throw std::logic_error("DqGemm needs AVX512-VNNI, AVX2 or ARM's dot product");
  if (DqTallProductInFloat(w, M))   // int8 prompts where integer multiplies are no faster (dq_float_prompts.h)
    return SgemmWithBPacker(false, M, w.N, w.K, 1.f, A, lda, DqWeightsPacker(w), 0.f, C, ldc, epilogue, pool);
  if (DqTallProductInBf16(w, M))   // int4 prompts on AMX-BF16 tiles (dq_bf16_prompts.h)
    return Bf16GemmPackerB(M, w.N, w.K, A, lda, DqWeightsBf16Packer(w), C, ldc, epilogue, pool);
  // The codes of this call's rows, in a buffer kept per calling thread (a decode step makes ~170 of these calls);
  // the pool's threads read it through the reference.
  thread_local DqActivations buffer;
  DqActivations& a = buffer;
  if (DqAmxTakes(w, M)) {   // prompts on AMX tiles (dq_amx.h)
    QuantizeActivations(M, w.K, A, lda, w.block, &a, pool, DqAmxCodesStride(w), kDqAmxRowAlign);
    return DqAmxGemm(a, w, C, ldc, epilogue, pool);
  }
  QuantizeActivations(M, w.K, A, lda, w.block, &a, pool);
  // Rows in chunks of the register tile's height; a task holds a run of panels small enough to stay in L2 while
  // every chunk of rows passes over it.
  const DqKernels& kern = Kernels();
  const int64_t R = kern.max_rows, chunk_rows = std::min(M, R), tail = M % R;
  auto pick = [&](int64_t rows) { return w.bits == 8 ? kern.range8(rows) : kern.range4(rows); };
  const RangeFn full = pick(chunk_rows);
  const RangeFn last = tail == 0 || M < R ? full : pick(tail);
  auto run = [&](int64_t p0, int64_t p1) {
    for (int64_t m0 = 0; m0 < M; m0 += R) {
      GemmEpilogue e = epilogue;
      if (e.row_bias) e.row_bias += m0;
      if (e.residual) e.residual += m0 * e.ld_residual;
      if (e.multiplier) e.multiplier += m0 * e.ld_multiplier;
      (M - m0 >= R || M < R ? full : last)(w, p0, p1, a, m0, C + m0 * ldc, ldc, e);
    }
  };
  const int64_t threads = pool ? pool->size() : 1;
  const int64_t l2_panels = std::max<int64_t>(1, (256 << 10) / std::max<int64_t>(1, w.panel_bytes));
  const int64_t grain = std::max<int64_t>(1, std::min(l2_panels, std::max<int64_t>(4, w.panels / (8 * threads))));
  if (pool) {
    pool->ParallelFor(w.panels, grain, run);
  } else {
    run(0, w.panels);
  }
}

#else
void QuantizeActivations(int64_t, int64_t, const float*, int64_t, int64_t, DqActivations*, ThreadPool*, int64_t,
                         int64_t) {
  throw std::logic_error("QuantizeActivations needs AVX512-VNNI, AVX2 or ARM's dot product");
}
void DqGemm(int64_t, const float*, int64_t, const DqWeights&, float*, int64_t, const GemmEpilogue&, ThreadPool*) {
  throw std::logic_error("DqGemm needs AVX512-VNNI, AVX2 or ARM's dot product");
}
#endif

}  // namespace lite
