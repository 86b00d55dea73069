#include "cpu/gemm/skinny_gemm.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>

#include "cpu/isa_dispatch.h"
#include "cpu/weight_pages.h"

#ifdef LITE_X86_SIMD
#include <immintrin.h>
#endif
#ifdef LITE_ARM64_SIMD
#include <arm_neon.h>
#endif

namespace lite {
namespace {

typedef float v16sf __attribute__((vector_size(64)));
typedef int32_t v16si __attribute__((vector_size(64)));
typedef uint32_t v16su __attribute__((vector_size(64)));

#define LITE_INLINE __attribute__((always_inline)) inline

// What one row of a panel holds: PanelCodes, plus the float32 of a pre-packed GEMM B.
enum class Row { kF32, kF16, kBF16, kI8, kI4 };


namespace portable {
#define LITE_SKINNY_LEVEL 0
#include "cpu/gemm/skinny_gemm_kernels.inc"
#undef LITE_SKINNY_LEVEL
}  // namespace portable

#ifdef LITE_X86_SIMD
#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace avx2 {
#define LITE_SKINNY_LEVEL 1
#include "cpu/gemm/skinny_gemm_kernels.inc"
#undef LITE_SKINNY_LEVEL
}  // namespace avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,fma")
namespace avx512 {
#define LITE_SKINNY_LEVEL 2
#include "cpu/gemm/skinny_gemm_kernels.inc"
#undef LITE_SKINNY_LEVEL
}  // namespace avx512
#pragma GCC pop_options
#endif

#ifdef LITE_ARM64_SIMD
// ARM64: the few-row products against a pre-packed float32 B with each 16-column panel row as four NEON registers
// (the portable build's 64-byte vectors have no aarch64 register: GCC kept them in memory, 1.0-1.2 stack accesses per
// fmla). Rows in blocks of up to four: 16 accumulators, a register of four depths per row, four B vectors.
namespace neon {

#include "cpu/unroll.h"

// acc += w x A's value (lane l of a, or a), for one row of 16 columns held in four registers.
template <int l>
LITE_INLINE void FmaRow(float32x4_t (&acc)[4], const float32x4_t (&w)[4], float32x4_t a) {
  acc[0] = vfmaq_laneq_f32(acc[0], w[0], a, l), acc[1] = vfmaq_laneq_f32(acc[1], w[1], a, l);
  acc[2] = vfmaq_laneq_f32(acc[2], w[2], a, l), acc[3] = vfmaq_laneq_f32(acc[3], w[3], a, l);
}
LITE_INLINE void FmaRowN(float32x4_t (&acc)[4], const float32x4_t (&w)[4], float a) {
  acc[0] = vfmaq_n_f32(acc[0], w[0], a), acc[1] = vfmaq_n_f32(acc[1], w[1], a);
  acc[2] = vfmaq_n_f32(acc[2], w[2], a), acc[3] = vfmaq_n_f32(acc[3], w[3], a);
}

LITE_INLINE void LoadRow16(const float* p, float32x4_t (&w)[4]) {
  w[0] = vld1q_f32(p), w[1] = vld1q_f32(p + 4), w[2] = vld1q_f32(p + 8), w[3] = vld1q_f32(p + 12);
}

// acc[m][q] += sum over k < kc of A[m * lda + k] * panel[k * 16 + 4q ..], MM <= 4 rows.
template <int MM>
LITE_INLINE void PanelRows(const float* panel, int64_t kc, const float* A, int64_t lda, float32x4_t (&acc)[MM][4]) {
  int64_t k = 0;
  for (; k + 4 <= kc; k += 4) {
    float32x4_t a[MM];
    Unroll<MM>([&](auto m) __attribute__((always_inline)) { a[m] = vld1q_f32(A + m * lda + k); });
    Unroll<4>([&](auto kk) __attribute__((always_inline)) {
      float32x4_t b[4];
      LoadRow16(panel + (k + kk) * 16, b);
      Unroll<MM>([&](auto m) __attribute__((always_inline)) { FmaRow<decltype(kk)::value>(acc[m], b, a[m]); });
    });
  }
  for (; k < kc; ++k) {
    float32x4_t b[4];
    LoadRow16(panel + k * 16, b);
    Unroll<MM>([&](auto m) __attribute__((always_inline)) { FmaRowN(acc[m], b, A[m * lda + k]); });
  }
}

// Rows [m0, m0 + MM) of one panel's K block, the running sums in sums (MM rows of 16 floats, in L1 between blocks).
template <int MM>
void PanelBlock(const float* panel, int64_t kc, const float* A, int64_t lda, float* sums) {
  float32x4_t acc[MM][4];
  Unroll<MM>([&](auto m) __attribute__((always_inline)) {
    for (int q = 0; q < 4; ++q) acc[m][q] = vld1q_f32(sums + m * 16 + 4 * q);
  });
  PanelRows<MM>(panel, kc, A, lda, acc);
  Unroll<MM>([&](auto m) __attribute__((always_inline)) {
    for (int q = 0; q < 4; ++q) vst1q_f32(sums + m * 16 + 4 * q, acc[m][q]);
  });
}

// As the portable PackedRange: K block by K block over groups of 32 panels.
template <int M>
void PackedRange(int64_t N, int64_t K, const float* packed, int64_t p0, int64_t p1, const float* A, int64_t lda,
                 float* C, int64_t ldc, const GemmEpilogue& ep) {
  constexpr int64_t kGroup = 32;
  constexpr int kFirst = M < 4 ? M : 4, kSecond = M - kFirst;   // rows in blocks of at most four
  const int64_t n_padded = (N + 15) / 16 * 16;
  alignas(16) float sums[kGroup][M * 16];
  for (int64_t g0 = p0; g0 < p1; g0 += kGroup) {
    const int64_t g1 = std::min(p1, g0 + kGroup);
    for (int64_t p = g0; p < g1; ++p) std::fill_n(sums[p - g0], M * 16, 0.f);
    for (int64_t k0 = 0; k0 < K; k0 += kGemmKC) {
      const int64_t kc = std::min(kGemmKC, K - k0);
      for (int64_t p = g0; p < g1; ++p) {
        const float* panel = packed + k0 * n_padded + p * kc * 16;
        PanelBlock<kFirst>(panel, kc, A + k0, lda, sums[p - g0]);
        if constexpr (kSecond > 0) PanelBlock<kSecond>(panel, kc, A + kFirst * lda + k0, lda, sums[p - g0] + kFirst * 16);
      }
    }
    for (int64_t p = g0; p < g1; ++p)
      StoreTileWithEpilogue(sums[p - g0], M, p * 16, std::min<int64_t>(16, N - p * 16), C, ldc, ep);
  }
}

// The compressed panels (float16 / bf16 / int8 / int4 codes, PanelMatrix): each row of 16 codes widened into four
// NEON registers of float32, then as above, rows of A in blocks of up to four. The portable build's 64-byte vectors
// spilled here too (0.9-2.7 stack accesses per fmla).
template <Row R>
LITE_INLINE void WidenRow(const uint8_t* p, float32x4_t (&w)[4]) {
  if constexpr (R == Row::kF16) {   // fcvtl is exact for every half (ARMv8.0 AdvSIMD)
    const float16x8_t lo = vreinterpretq_f16_u8(vld1q_u8(p)), hi = vreinterpretq_f16_u8(vld1q_u8(p + 16));
    w[0] = vcvt_f32_f16(vget_low_f16(lo)), w[1] = vcvt_high_f32_f16(lo);
    w[2] = vcvt_f32_f16(vget_low_f16(hi)), w[3] = vcvt_high_f32_f16(hi);
  } else if constexpr (R == Row::kBF16) {
    const uint16x8_t lo = vld1q_u16(reinterpret_cast<const uint16_t*>(p));
    const uint16x8_t hi = vld1q_u16(reinterpret_cast<const uint16_t*>(p + 16));
    w[0] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(lo), 16));
    w[1] = vreinterpretq_f32_u32(vshll_high_n_u16(lo, 16));
    w[2] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(hi), 16));
    w[3] = vreinterpretq_f32_u32(vshll_high_n_u16(hi, 16));
  } else {
    static_assert(R == Row::kI8, "int4 rows are read by OctetRow");
    const int8x16_t c = vld1q_s8(reinterpret_cast<const int8_t*>(p));
    const int16x8_t lo = vmovl_s8(vget_low_s8(c)), hi = vmovl_high_s8(c);
    w[0] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), w[1] = vcvtq_f32_s32(vmovl_high_s16(lo));
    w[2] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), w[3] = vcvtq_f32_s32(vmovl_high_s16(hi));
  }
}

// Row r of an int4 octet (the portable OctetRow: nibble r of each 32-bit lane into the mantissa of 1.0f, 1 + n/16).
template <int r>
LITE_INLINE void OctetRow(const uint32x4_t (&x)[4], float32x4_t (&w)[4]) {
  const uint32x4_t mask = vdupq_n_u32(0x00780000u), one = vdupq_n_u32(0x3f800000u);
  for (int q = 0; q < 4; ++q) {
    uint32x4_t placed;
    if constexpr (4 * r <= 19) {
      placed = vshlq_n_u32(x[q], 19 - 4 * r);
    } else {
      placed = vshrq_n_u32(x[q], 4 * r - 19);
    }
    w[q] = vreinterpretq_f32_u32(vbslq_u32(mask, placed, one));   // mask's bits from placed, 1.0f's elsewhere
  }
}

// acc[m] = sum over `rows` code rows of A[m][k] * row k, MM <= 4 rows of A (lda apart; A at the first row's depth).
template <Row R, int MM>
LITE_INLINE void CodeRows(const uint8_t* codes, int64_t rows, const float* A, int64_t lda, float32x4_t (&acc)[MM][4]) {
  Unroll<MM>([&](auto m) __attribute__((always_inline)) {
    for (int q = 0; q < 4; ++q) acc[m][q] = vdupq_n_f32(0.f);
  });
  if constexpr (R == Row::kI4) {
    const int64_t octets = rows / 8;
    for (int64_t o = 0; o < octets; ++o) {
      uint32x4_t x[4];
      for (int q = 0; q < 4; ++q) x[q] = vld1q_u32(reinterpret_cast<const uint32_t*>(codes + o * 64 + 16 * q));
      // The octet's rows in two halves of four, each with its own four depths of A (the octet's eight depths of four
      // rows at once took 34 registers: four accumulators went to the stack).
      Unroll<2>([&](auto h) __attribute__((always_inline)) {
        float32x4_t a[MM];
        Unroll<MM>([&](auto m) __attribute__((always_inline)) { a[m] = vld1q_f32(A + m * lda + o * 8 + 4 * h); });
        Unroll<4>([&](auto r) __attribute__((always_inline)) {
          constexpr int rr = 4 * decltype(h)::value + decltype(r)::value;
          float32x4_t w[4];
          OctetRow<rr>(x, w);
          Unroll<MM>([&](auto m) __attribute__((always_inline)) { FmaRow<rr % 4>(acc[m], w, a[m]); });
        });
      });
    }
    if (rows % 8) {   // the last, partial octet
      uint32x4_t x[4];
      for (int q = 0; q < 4; ++q) x[q] = vld1q_u32(reinterpret_cast<const uint32_t*>(codes + octets * 64 + 16 * q));
      Unroll<7>([&](auto r) __attribute__((always_inline)) {
        constexpr int rr = decltype(r)::value;
        if (rr < rows % 8) {
          float32x4_t w[4];
          OctetRow<rr>(x, w);
          Unroll<MM>([&](auto m) __attribute__((always_inline)) { FmaRowN(acc[m], w, A[m * lda + octets * 8 + rr]); });
        }
      });
    }
  } else {
    constexpr int64_t B = portable::kRowBytes<R>;
    int64_t k = 0;
    for (; k + 4 <= rows; k += 4) {
      float32x4_t a[MM];
      Unroll<MM>([&](auto m) __attribute__((always_inline)) { a[m] = vld1q_f32(A + m * lda + k); });
      Unroll<4>([&](auto kk) __attribute__((always_inline)) {
        float32x4_t w[4];
        WidenRow<R>(codes + (k + kk) * B, w);
        Unroll<MM>([&](auto m) __attribute__((always_inline)) { FmaRow<decltype(kk)::value>(acc[m], w, a[m]); });
      });
    }
    for (; k < rows; ++k) {
      float32x4_t w[4];
      WidenRow<R>(codes + k * B, w);
      Unroll<MM>([&](auto m) __attribute__((always_inline)) { FmaRowN(acc[m], w, A[m * lda + k]); });
    }
  }
}

// Rows [0, MM) of A (MM <= 4) against one panel, its scales and zero points applied group by group: total[m] (16
// floats each, ld 16) += the panel's product.
template <Row R, int MM>
void CodePanelRows(const PanelMatrix& w, int64_t p, const float* A, int64_t lda, const float* asum, float* total) {
  // The running totals wait in `total` (L1) between groups: in registers beside a group's sums they made 32 live
  // vectors for four rows, and GCC spilled inside the code loop.
  std::fill_n(total, MM * 16, 0.f);
  const uint8_t* codes = w.panel(p);
  for (int64_t g = 0; g < w.groups; ++g) {
    const int64_t k0 = g * w.group, rows = std::min(w.group, w.K - k0);
    float32x4_t part[MM][4];
    CodeRows<R, MM>(codes + (R == Row::kI4 ? k0 / 8 * 64 : k0 * w.row_bytes), rows, A + k0, lda, part);
    if (w.scales.empty()) {   // halves: one group, no scales
      Unroll<MM>([&](auto m) __attribute__((always_inline)) {
        for (int q = 0; q < 4; ++q) vst1q_f32(total + m * 16 + 4 * q, part[m][q]);
      });
      continue;
    }
    const float* s = w.scales.data() + (p * w.groups + g) * 16;
    const float* z = w.zeros.empty() ? nullptr : w.zeros.data() + (p * w.groups + g) * 16;
    Unroll<MM>([&](auto m) __attribute__((always_inline)) {
      const float as = asum ? asum[m * w.groups + g] : 0.f;
      for (int q = 0; q < 4; ++q) {
        const float32x4_t zq = z ? vld1q_f32(z + 4 * q) : vdupq_n_f32(w.zero);
        float* t = total + m * 16 + 4 * q;
        vst1q_f32(t, vfmaq_f32(vld1q_f32(t), vld1q_f32(s + 4 * q), vfmsq_n_f32(part[m][q], zq, as)));
      }
    });
  }
}

// As the portable PanelRange (panels [p0, p1), every row of A), in blocks of up to four rows.
template <Row R, int M>
void PanelRange(const PanelMatrix& w, int64_t p0, int64_t p1, const float* A, int64_t lda, const float* asum,
                float* C, int64_t ldc, const GemmEpilogue& ep) {
  constexpr int kFirst = M < 4 ? M : 4, kSecond = M - kFirst;
  alignas(16) float total[M * 16];
  for (int64_t p = p0; p < p1; ++p) {
    CodePanelRows<R, kFirst>(w, p, A, lda, asum, total);
    if constexpr (kSecond > 0)
      CodePanelRows<R, kSecond>(w, p, A + kFirst * lda, lda, asum ? asum + kFirst * w.groups : nullptr, total + kFirst * 16);
    StoreTileWithEpilogue(total, M, p * 16, std::min<int64_t>(16, w.N - p * 16), C, ldc, ep);
  }
}

}  // namespace neon
#endif

using RangeFn = void (*)(const PanelMatrix&, int64_t, int64_t, const float*, int64_t, const float*, float*, int64_t,
                         const GemmEpilogue&);
using PackedFn = void (*)(int64_t, int64_t, const float*, int64_t, int64_t, const float*, int64_t, float*, int64_t,
                          const GemmEpilogue&);
using DecodeFn = void (*)(const PanelMatrix&, int64_t, int64_t, int64_t, int64_t, float*);


// The kernels of the running CPU, by codes and rows.
struct SkinnyKernels {
  RangeFn panel[4][kSkinnyMaxRows + 1];
  PackedFn packed[kSkinnyMaxRows + 1];
  DecodeFn decode[4];
};

template <Row R, int M>
RangeFn PickRange() {
  return PickArmKernel<RangeFn>(LITE_IF_ARM64_SIMD((neon::PanelRange<R, M>)), portable::PanelRange<R, M>,
                                LITE_IF_X86_SIMD((avx2::PanelRange<R, M>)),
                                LITE_IF_X86_SIMD((avx512::PanelRange<R, M>))).fn;
}
template <int M>
PackedFn PickPacked() {
  return PickArmKernel<PackedFn>(LITE_IF_ARM64_SIMD((neon::PackedRange<M>)), portable::PackedRange<M>,
                                 LITE_IF_X86_SIMD((avx2::PackedRange<M>)), LITE_IF_X86_SIMD((avx512::PackedRange<M>))).fn;
}
template <Row R>
DecodeFn PickDecode() {
  return PickIsaKernel<DecodeFn>(portable::DecodePanels<R>, LITE_IF_X86_SIMD((avx2::DecodePanels<R>)),
                                 LITE_IF_X86_SIMD((avx512::DecodePanels<R>))).fn;
}

template <Row R>
void FillRows(RangeFn (&row)[kSkinnyMaxRows + 1]) {
  row[0] = nullptr;
  row[1] = PickRange<R, 1>();
  row[2] = PickRange<R, 2>();
  row[3] = PickRange<R, 3>();
  row[4] = PickRange<R, 4>();
  row[5] = PickRange<R, 5>();
  row[6] = PickRange<R, 6>();
  row[7] = PickRange<R, 7>();
  row[8] = PickRange<R, 8>();
}

const SkinnyKernels& Kernels() {
  static const SkinnyKernels k = [] {
    SkinnyKernels s{};
    FillRows<Row::kF16>(s.panel[static_cast<int>(PanelCodes::kFloat16)]);
    FillRows<Row::kBF16>(s.panel[static_cast<int>(PanelCodes::kBFloat16)]);
    FillRows<Row::kI8>(s.panel[static_cast<int>(PanelCodes::kInt8)]);
    FillRows<Row::kI4>(s.panel[static_cast<int>(PanelCodes::kInt4)]);
    s.packed[1] = PickPacked<1>();
    s.packed[2] = PickPacked<2>();
    s.packed[3] = PickPacked<3>();
    s.packed[4] = PickPacked<4>();
    s.packed[5] = PickPacked<5>();
    s.packed[6] = PickPacked<6>();
    s.packed[7] = PickPacked<7>();
    s.packed[8] = PickPacked<8>();
    s.decode[static_cast<int>(PanelCodes::kFloat16)] = PickDecode<Row::kF16>();
    s.decode[static_cast<int>(PanelCodes::kBFloat16)] = PickDecode<Row::kBF16>();
    s.decode[static_cast<int>(PanelCodes::kInt8)] = PickDecode<Row::kI8>();
    s.decode[static_cast<int>(PanelCodes::kInt4)] = PickDecode<Row::kI4>();
    return s;
  }();
  return k;
}

// Panels per task: a few tasks per thread, each a run of whole panels (contiguous memory).
int64_t PanelGrain(int64_t panels, ThreadPool* pool) {
  const int64_t threads = pool ? pool->size() : 1;
  return std::max<int64_t>(4, panels / (8 * threads));
}

// A code of a stored record: element e of a row-major tensor, as a signed value (unsigned codes shifted down by
// half their range; the zero points shift with them).
int32_t SignedCode(const StoredWeight& w, int64_t e, int bits) {
  const bool is_signed = w.storage == ms_schema::DataType::INT8;
  if (bits == 8) {
    const uint8_t b = w.bytes[e];
    return is_signed ? static_cast<int8_t>(b) : static_cast<int32_t>(b) - 128;
  }
  const uint8_t nib = (w.bytes[e / 2] >> (e % 2 ? 4 : 0)) & 0xF;
  return is_signed ? (nib ^ 8) - 8 : static_cast<int32_t>(nib) - 8;
}

}  // namespace

std::string PanelMatrixUnsupported(const StoredWeight& w) {
  if (w.shape.size() != 2) return "not a matrix";
  if (w.storage == ms_schema::DataType::FLOAT16 || w.storage == ms_schema::DataType::BFLOAT16) return "";
  if (w.storage != ms_schema::DataType::INT8 && w.storage != ms_schema::DataType::UINT8) return "storage type";
  const ms_schema::QuantParam* q = w.quant;
  if (!q || (q->bits() != 8 && q->bits() != 4)) return "code width";
  const int64_t axis = q->axis(), group = q->group_size();
  const bool per_tensor = axis == -1 && group == 0, per_column = axis == 1 && group == 0;
  const bool row_blocks = axis == 0 && group > 0;
  if (!per_tensor && !per_column && !row_blocks) return "scale layout (only per tensor, per column, blocks of rows)";
  if (row_blocks && q->bits() == 4 && group % 8) return "int4 blocks of rows not a multiple of 8";
  return "";
}

PanelMatrix MakePanelMatrix(const StoredWeight& w) {
  PanelMatrix m;
  m.K = w.shape[0];
  m.N = w.shape[1];
  m.panels = (m.N + 15) / 16;
  const int64_t K = m.K, N = m.N;
  if (w.storage == ms_schema::DataType::FLOAT16 || w.storage == ms_schema::DataType::BFLOAT16) {
    m.codes = w.storage == ms_schema::DataType::FLOAT16 ? PanelCodes::kFloat16 : PanelCodes::kBFloat16;
    m.row_bytes = 32;
    m.panel_bytes = K * 32;
    m.group = K;
    m.groups = 1;
    m.data.assign(static_cast<size_t>(m.panels * K * 32 + 64), 0);
    for (int64_t k = 0; k < K; ++k)
      for (int64_t p = 0; p < m.panels; ++p) {
        const int64_t cols = std::min<int64_t>(16, N - p * 16);
        std::memcpy(m.data.data() + (p * K + k) * 32, w.bytes + (k * N + p * 16) * 2, static_cast<size_t>(cols) * 2);
      }
    return m;
  }
  const ms_schema::QuantParam* q = w.quant;
  const int bits = q->bits();
  const int64_t axis = q->axis();
  m.codes = bits == 4 ? PanelCodes::kInt4 : PanelCodes::kInt8;
  m.row_bytes = 16;
  m.panel_bytes = bits == 4 ? (K + 7) / 8 * 64 : K * 16;
  m.group = axis == 0 ? q->group_size() : K;
  m.groups = (K + m.group - 1) / m.group;
  const int32_t shift = w.storage == ms_schema::DataType::UINT8 ? (bits == 8 ? 128 : 8) : 0;
  PanelScales read = ReadPanelScales(w, m.panels, m.groups, (bits == 4 ? 8 : 0) - shift);
  if (bits == 4) {   // int4 rows widen to 1 + code/16 (OctetRow): scale x 16, zero point 1 + z/16 give the same values
    for (float& s : read.scales) s *= 16.f;
    for (float& z : read.zeros) z = 1.f + z / 16.f;
    read.zero = 1.f + read.zero / 16.f;
  }
  m.scales = std::move(read.scales);
  m.zeros = std::move(read.zeros);
  m.zero = read.zero;
  if (bits == 8) {
    m.data.assign(static_cast<size_t>(m.panels * K * 16 + 64), 0);
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < N; ++n)
        m.data[((n / 16) * K + k) * 16 + n % 16] = static_cast<uint8_t>(static_cast<int8_t>(SignedCode(w, k * N + n, 8)));
  } else {
    // Octets (see Octet in the kernels): unsigned nibbles, code + 8, the zero points raised by 8 with them.
    const int64_t octets = (K + 7) / 8;
    m.data.assign(static_cast<size_t>(m.panels * octets * 64 + 64), 0);
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < N; ++n) {
        const uint32_t nib = static_cast<uint32_t>(SignedCode(w, k * N + n, 4) + 8);
        uint8_t* lane = m.data.data() + ((n / 16) * octets + k / 8) * 64 + (n % 16) * 4;
        const int shift = 4 * static_cast<int>(k % 8);
        lane[shift / 8] |= static_cast<uint8_t>(nib << (shift % 8));
      }
  }
  return m;
}

PanelScales ReadPanelScales(const StoredWeight& w, int64_t panels, int64_t groups, int32_t offset) {
  const ms_schema::QuantParam* q = w.quant;
  const int64_t N = w.shape[1], axis = q->axis();
  // Scale entry of (group g, column n) in the record: per tensor, per column, or [blocks, N].
  auto entry = [&](int64_t g, int64_t n) { return axis == -1 ? 0 : axis == 1 ? n : g * N + n; };
  const float* scale = q->scale()->data();
  const int64_t* zero = q->zero_point() && q->zero_point()->size() > 0 ? q->zero_point()->data() : nullptr;
  PanelScales out;
  out.scales.assign(static_cast<size_t>(panels * groups * 16), 0.f);
  out.zeros.assign(out.scales.size(), 0.f);
  bool uniform = true;
  for (int64_t p = 0; p < panels; ++p)
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t j = 0; j < 16 && p * 16 + j < N; ++j) {
        const int64_t e = entry(g, p * 16 + j), at = (p * groups + g) * 16 + j;
        out.scales[at] = scale[e];
        out.zeros[at] = static_cast<float>((zero ? zero[e] : 0) + offset);
        uniform = uniform && out.zeros[at] == out.zeros[0];
      }
  out.zero = out.zeros.empty() ? 0.f : out.zeros[0];
  if (uniform) out.zeros.clear();
  return out;
}

void SkinnyGemm(int64_t M, const float* A, int64_t lda, const PanelMatrix& w, float* C, int64_t ldc,
                const GemmEpilogue& epilogue, ThreadPool* pool) {
  if (M <= 0 || w.N <= 0) return;
  const RangeFn fn = Kernels().panel[static_cast<int>(w.codes)][M];
  // Zero points need each row's sum of A over each group of rows.
  std::vector<float> asum;
  if (!w.zeros.empty() || w.zero != 0.f) {
    asum.assign(static_cast<size_t>(M * w.groups), 0.f);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t k = 0; k < w.K; ++k) asum[m * w.groups + k / w.group] += A[m * lda + k];
  }
  auto run = [&](int64_t p0, int64_t p1) { fn(w, p0, p1, A, lda, asum.data(), C, ldc, epilogue); };
  if (pool) {
    pool->ParallelFor(w.panels, PanelGrain(w.panels, pool), run);
  } else {
    run(0, w.panels);
  }
}

void SkinnyGemmPackedB(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* packed_b, float* C,
                       int64_t ldc, const GemmEpilogue& epilogue, ThreadPool* pool) {
  if (M <= 0 || N <= 0) return;
  const PackedFn fn = Kernels().packed[M];
  const int64_t panels = (N + 15) / 16;
  auto run = [&](int64_t p0, int64_t p1) { fn(N, K, packed_b, p0, p1, A, lda, C, ldc, epilogue); };
  if (pool) {
    pool->ParallelFor(panels, PanelGrain(panels, pool), run);
  } else {
    run(0, panels);
  }
}

void PanelMatrixPacker::Pack(int64_t k0, int64_t kc, int64_t n0, int64_t nc, float* dst) const {
  Kernels().decode[static_cast<int>(w_->codes)](*w_, k0, kc, n0, nc, dst);
}

}  // namespace lite
