#include "cpu/gemm/dynamic_quant_gemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "cpu/gemm/skinny_gemm.h"
#include "cpu/isa_dispatch.h"
#include "cpu/weight_pages.h"

#ifdef LITE_X86_SIMD
#include <immintrin.h>
#endif

namespace lite {

bool DqGemmAvailable() { return CpuHasAvx512Vnni(); }

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

#ifdef LITE_X86_SIMD
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512vnni,fma")
namespace {

#include "cpu/unroll.h"

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

// Panels [p0, p1) for M rows of activation codes (rows m0.. of `a`) into C's rows 0..M-1. The loops walk pointers
// (codes 64 bytes a step, activations 4 or 8 values a step) with every per-block operand's address hoisted: the
// index form, k / 4 * 64 on a signed k, cost more instructions than the products themselves in the one-row case.
template <int M, int BITS>
void PanelRange(const DqWeights& w, int64_t p0, int64_t p1, const DqActivations& a, int64_t m0, float* C,
                int64_t ldc, const GemmEpilogue& ep) {
  constexpr int64_t kRowsPerStep = BITS == 8 ? 4 : 8;   // depth rows in 64 bytes of a panel
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  const int8_t* rows[M];
  const float* row_scale[M];
  const int32_t* row_sum[M];
  Unroll<M>([&](auto m) __attribute__((always_inline)) {
    rows[m] = a.codes.data() + (m0 + m) * a.ld;
    row_scale[m] = a.scale.data() + (m0 + m) * a.blocks;
    row_sum[m] = a.sum.data() + (m0 + m) * a.blocks;
  });
  alignas(64) float same_zero[16];
  std::fill_n(same_zero, 16, w.zero);
  const int64_t group_stride = w.scale_groups > 1 ? 16 : 0;
  const int64_t zero_stride = w.zeros.empty() ? 0 : group_stride;
  for (int64_t p = p0; p < p1; ++p) {
    const uint8_t* codes = w.panel(p);
    const float* sw = w.scales.data() + p * w.scale_groups * 16;
    const float* zw = w.zeros.empty() ? same_zero : w.zeros.data() + p * w.scale_groups * 16;
    __m512 acc[M];
    Unroll<M>([&](auto m) __attribute__((always_inline)) { acc[m] = _mm512_setzero_ps(); });
    for (int64_t b = 0; b < w.blocks; ++b, sw += group_stride, zw += zero_stride) {
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
          const __m512i v = _mm512_loadu_si512(c);
          const __m512i lo = _mm512_and_si512(v, nibble), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble);
          Unroll<M>([&](auto m) __attribute__((always_inline)) {
            const int8_t* r = rows[m] + k0 + 8 * i;
            s0[m] = _mm512_dpbusd_epi32(s0[m], lo, Broadcast4(r));
            s1[m] = _mm512_dpbusd_epi32(s1[m], hi, Broadcast4(r + 4));
          });
        }
      }
      const __m512 scales = _mm512_loadu_ps(sw), zeros = _mm512_loadu_ps(zw);
      Unroll<M>([&](auto m) __attribute__((always_inline)) {
        // Exact in float32: |sums| stay below 2^24 for blocks of up to 512 values (beyond, a rounding of 2^-24).
        __m512 f = _mm512_cvtepi32_ps(_mm512_add_epi32(s0[m], s1[m]));
        f = _mm512_fnmadd_ps(zeros, _mm512_set1_ps(static_cast<float>(row_sum[m][b])), f);
        acc[m] = _mm512_fmadd_ps(f, _mm512_mul_ps(scales, _mm512_set1_ps(row_scale[m][b])), acc[m]);
      });
    }
    alignas(64) float tile[M * 16];
    Unroll<M>([&](auto m) __attribute__((always_inline)) { _mm512_store_ps(tile + m * 16, acc[m]); });
    StoreTileWithEpilogue(tile, M, p * 16, std::min<int64_t>(16, w.N - p * 16), C, ldc, ep);
  }
}

using RangeFn = void (*)(const DqWeights&, int64_t, int64_t, const DqActivations&, int64_t, float*, int64_t,
                         const GemmEpilogue&);

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

}  // namespace

void QuantizeActivations(int64_t M, int64_t K, const float* A, int64_t lda, int64_t block, DqActivations* out) {
  if (!DqGemmAvailable()) throw std::logic_error("QuantizeActivations needs AVX512-VNNI");
  out->rows = M;
  out->ld = (K + 7) / 8 * 8;
  out->blocks = std::max<int64_t>(1, (K + block - 1) / block);
  out->codes.assign(static_cast<size_t>(M * out->ld), 0);
  out->scale.assign(static_cast<size_t>(M * out->blocks), 0.f);
  out->sum.assign(out->scale.size(), 0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t b = 0; b < out->blocks; ++b) {
      const int64_t k0 = b * block, n = std::min(block, K - k0);
      if (n > 0)
        QuantizeBlock(A + m * lda + k0, n, out->codes.data() + m * out->ld + k0, &out->scale[m * out->blocks + b],
                      &out->sum[m * out->blocks + b]);
    }
}

void DqGemm(int64_t M, const float* A, int64_t lda, const DqWeights& w, float* C, int64_t ldc,
            const GemmEpilogue& epilogue, ThreadPool* pool) {
  if (M <= 0 || w.N <= 0) return;
  if (!DqGemmAvailable()) throw std::logic_error("DqGemm needs AVX512-VNNI");
  // The codes of this call's rows, in a buffer kept per calling thread (a decode step makes ~170 of these calls);
  // the pool's threads read it through the reference.
  thread_local DqActivations buffer;
  DqActivations& a = buffer;
  QuantizeActivations(M, w.K, A, lda, w.block, &a);
  // Rows in chunks of up to 8 (the register tile); a task holds a run of panels small enough to stay in L2 while
  // every chunk of rows passes over it.
  const int64_t chunk_rows = std::min<int64_t>(M, 8), tail = M % 8;
  const RangeFn full = w.bits == 8 ? PickRange<8>(chunk_rows) : PickRange<4>(chunk_rows);
  const RangeFn last = tail == 0 || M < 8 ? full : (w.bits == 8 ? PickRange<8>(tail) : PickRange<4>(tail));
  auto run = [&](int64_t p0, int64_t p1) {
    for (int64_t m0 = 0; m0 < M; m0 += 8) {
      GemmEpilogue e = epilogue;
      if (e.row_bias) e.row_bias += m0;
      if (e.residual) e.residual += m0 * e.ld_residual;
      if (e.multiplier) e.multiplier += m0 * e.ld_multiplier;
      (M - m0 >= 8 || M < 8 ? full : last)(w, p0, p1, a, m0, C + m0 * ldc, ldc, e);
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

#pragma GCC pop_options
#else
void QuantizeActivations(int64_t, int64_t, const float*, int64_t, int64_t, DqActivations*) {
  throw std::logic_error("QuantizeActivations needs AVX512-VNNI");
}
void DqGemm(int64_t, const float*, int64_t, const DqWeights&, float*, int64_t, const GemmEpilogue&, ThreadPool*) {
  throw std::logic_error("DqGemm needs AVX512-VNNI");
}
#endif

}  // namespace lite
