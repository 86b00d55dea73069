#include "cpu/gemm/skinny_gemm.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>

#include "cpu/gemm/spread_prefetch.h"
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
// How far ahead the one-to-eight-row float32 products fetch their packed weight by software (0: not at all). On
// an Intel Xeon (Sapphire Rapids class) 3 KB ahead drew 16.8 GB/s from memory at one thread where its hardware
// prefetchers alone drew 14.0-14.4 (a 896 x 151936 LM head; 2 KB: 16.3, 4 KB: 16.0, 6 KB: 15.1), and a float32
// Qwen2.5-0.5B decode step ran 7.8-7.9 tok/s against 6.3-7.1 (two threads: 14.5-14.8 against 13.4-13.7). On the CPU
// these kernels were first tuned on (not an Intel one) software prefetching measured slower: other vendors' CPUs keep
// the hardware prefetchers alone until measured again.
const int64_t kFloatStreamAhead = CpuIsIntel() ? 3072 : 0;
}  // namespace
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
#pragma GCC target("avx512f,fma")
namespace avx512 {   // the portable kernels: their 64-byte vectors are AVX-512's registers
#define LITE_SKINNY_LEVEL 2
#include "cpu/gemm/skinny_gemm_kernels.inc"
#undef LITE_SKINNY_LEVEL
}  // namespace avx512
#pragma GCC pop_options

// AVX2: a panel row in two 8-float registers (skinny_gemm_native.inc). The portable kernels' 64-byte vectors, built
// for AVX2, went through the stack and general registers (3-4 moves per FMA): a one-row float32 product read its
// weights at 60% of one core's bandwidth on a Zen 1 VM, four rows at 25%, eight at 11%.
#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace avx2 {

#include "cpu/simd/unroll.h"

using Vec = __m256;
constexpr int kRegs = 2;
LITE_INLINE Vec VZero() { return _mm256_setzero_ps(); }
LITE_INLINE Vec VLoad(const float* p) { return _mm256_loadu_ps(p); }
LITE_INLINE void VStore(float* p, Vec v) { _mm256_storeu_ps(p, v); }
LITE_INLINE Vec VSet(float x) { return _mm256_set1_ps(x); }
LITE_INLINE Vec VAdd(Vec a, Vec b) { return _mm256_add_ps(a, b); }
using Depths = const float*;   // broadcast from memory: a load port, no shuffle
LITE_INLINE Depths LoadDepths(const float* p) { return p; }
template <int l>
LITE_INLINE Vec FmaDepth(Vec acc, Vec w, Depths a) { return _mm256_fmadd_ps(w, _mm256_broadcast_ss(a + l), acc); }
LITE_INLINE Vec FmaScalar(Vec acc, Vec w, float x) { return _mm256_fmadd_ps(w, _mm256_set1_ps(x), acc); }
LITE_INLINE Vec ScaleGroup(Vec total, Vec s, Vec part, Vec z, float x) {
  return _mm256_fmadd_ps(s, _mm256_fnmadd_ps(z, _mm256_set1_ps(x), part), total);
}

// The halves in the low 16 bits of each 32-bit lane as floats, exact for every half without F16C (not part of what
// the AVX2 dispatch checks): the magnitude's bits moved into a float's place, times 2^112 to re-bias the exponent
// (subnormals land right too); infinities and NaNs keep an all-ones exponent.
LITE_INLINE Vec HalfLanes(__m256i u) {
  const __m256i mag = _mm256_slli_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fff)), 13);
  const __m256i scaled = _mm256_castps_si256(_mm256_mul_ps(_mm256_castsi256_ps(mag), _mm256_set1_ps(0x1p112f)));
  const __m256i special = _mm256_cmpeq_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7c00)), _mm256_set1_epi32(0x7c00));
  const __m256i bits = _mm256_blendv_epi8(scaled, _mm256_or_si256(mag, _mm256_set1_epi32(0x7f800000)), special);
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x8000)), 16);
  return _mm256_castsi256_ps(_mm256_or_si256(bits, sign));
}

// A row of codes for the products. Halves: the row's 32 bytes as 32-bit lanes, each holding two halves, w[0] the even
// columns (0, 2, .., 14) and w[1] the odd ones, by a shift or a mask: no zero-extension (a shuffle, two halves on a
// Zen 1 core's one shuffle pipe: bf16 one-row products 17% faster); ToColumns re-orders them, or their sums.
template <Row R>
LITE_INLINE void DotRow(const uint8_t* p, Vec (&w)[kRegs]) {
  if constexpr (R == Row::kBF16 || R == Row::kF16) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    if constexpr (R == Row::kBF16) {
      w[0] = _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
      w[1] = _mm256_castsi256_ps(_mm256_and_si256(x, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
    } else {
      w[0] = HalfLanes(_mm256_and_si256(x, _mm256_set1_epi32(0xffff)));
      w[1] = HalfLanes(_mm256_srli_epi32(x, 16));
    }
  } else {
    static_assert(R == Row::kI8, "int4 rows are read by OctetRow");
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    w[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(c));
    w[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(c, 8)));
  }
}
template <Row R>
LITE_INLINE void ToColumns(Vec (&v)[kRegs]) {
  if constexpr (R == Row::kBF16 || R == Row::kF16) {
    // v[0] = columns 0 2 4 6 | 8 10 12 14, v[1] = 1 3 5 7 | 9 11 13 15
    const __m256 lo = _mm256_unpacklo_ps(v[0], v[1]), hi = _mm256_unpackhi_ps(v[0], v[1]);   // 0-3 | 8-11, 4-7 | 12-15
    v[0] = _mm256_permute2f128_ps(lo, hi, 0x20);
    v[1] = _mm256_permute2f128_ps(lo, hi, 0x31);
  }
}

// An int4 octet's 16 columns as two registers of 32-bit lanes; row r: nibble r into the mantissa of 1.0f (1 + n/16).
using Octet = __m256i[2];
LITE_INLINE void LoadOctet(const uint8_t* p, Octet& x) {
  x[0] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  x[1] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32));
}
template <int r>
LITE_INLINE void OctetRow(const Octet& x, Vec (&w)[kRegs]) {
  for (int q = 0; q < 2; ++q) {
    __m256i placed;
    if constexpr (4 * r <= 19) {
      placed = _mm256_slli_epi32(x[q], 19 - 4 * r);
    } else {
      placed = _mm256_srli_epi32(x[q], 4 * r - 19);
    }
    w[q] = _mm256_castsi256_ps(_mm256_or_si256(_mm256_and_si256(placed, _mm256_set1_epi32(0x00780000)),
                                               _mm256_set1_epi32(0x3f800000)));
  }
}

#include "cpu/gemm/skinny_gemm_native.inc"

}  // namespace avx2
#pragma GCC pop_options
#endif

#ifdef LITE_ARM64_SIMD
// ARM64: a panel row in four NEON registers (skinny_gemm_native.inc); the depths of A four at a time in one register,
// multiplied by lane (fmla by element).
namespace neon {

#include "cpu/simd/unroll.h"

using Vec = float32x4_t;
constexpr int kRegs = 4;
LITE_INLINE Vec VZero() { return vdupq_n_f32(0.f); }
LITE_INLINE Vec VLoad(const float* p) { return vld1q_f32(p); }
LITE_INLINE void VStore(float* p, Vec v) { vst1q_f32(p, v); }
LITE_INLINE Vec VSet(float x) { return vdupq_n_f32(x); }
LITE_INLINE Vec VAdd(Vec a, Vec b) { return vaddq_f32(a, b); }
using Depths = float32x4_t;
LITE_INLINE Depths LoadDepths(const float* p) { return vld1q_f32(p); }
template <int l>
LITE_INLINE Vec FmaDepth(Vec acc, Vec w, Depths a) { return vfmaq_laneq_f32(acc, w, a, l); }
LITE_INLINE Vec FmaScalar(Vec acc, Vec w, float x) { return vfmaq_n_f32(acc, w, x); }
LITE_INLINE Vec ScaleGroup(Vec total, Vec s, Vec part, Vec z, float x) {
  return vfmaq_f32(total, s, vfmsq_n_f32(part, z, x));
}

// A row of codes, in column order (NEON's widening instructions keep it at no cost).
template <Row R>
LITE_INLINE void DotRow(const uint8_t* p, Vec (&w)[kRegs]) {
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

template <Row R>
LITE_INLINE void ToColumns(Vec (&)[kRegs]) {}

using Octet = uint32x4_t[4];
LITE_INLINE void LoadOctet(const uint8_t* p, Octet& x) {
  for (int q = 0; q < 4; ++q) x[q] = vld1q_u32(reinterpret_cast<const uint32_t*>(p + 16 * q));
}
// Row r of an int4 octet: nibble r of each 32-bit lane into the mantissa of 1.0f (1 + n/16).
template <int r>
LITE_INLINE void OctetRow(const Octet& x, Vec (&w)[kRegs]) {
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

#include "cpu/gemm/skinny_gemm_native.inc"

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
  return PickArmKernel<DecodeFn>(LITE_IF_ARM64_SIMD((neon::DecodePanels<R>)), portable::DecodePanels<R>,
                                 LITE_IF_X86_SIMD((avx2::DecodePanels<R>)), LITE_IF_X86_SIMD((avx512::DecodePanels<R>))).fn;
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
