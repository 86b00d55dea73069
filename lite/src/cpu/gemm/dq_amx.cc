#include "cpu/gemm/dq_amx.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "cpu/aligned.h"
#include "cpu/isa_dispatch.h"

#if defined(__x86_64__) && defined(LITE_X86_SIMD)
#include <immintrin.h>

#include "cpu/amx.h"
#include "cpu/gemm/epilogue_row_avx512.h"
#define LITE_DQ_AMX 1
#endif

namespace lite {

namespace {
constexpr int64_t kVectorRows = 8;   // the AVX512-VNNI kernels' register tile: fewer rows stay there

// Depth values per tile step: 64 where every block is whole 64-value steps, else 32 (half-depth tiles).
int64_t StepDepth(const DqWeights& w) { return w.block % 64 == 0 ? 64 : 32; }
// The depth the steps cover: every block's steps, the last block's too.
int64_t PaddedDepth(const DqWeights& w) {
  const int64_t s = StepDepth(w);
  return (w.K + s - 1) / s * s;
}
}  // namespace

bool DqAmxTakes(const DqWeights& w, int64_t rows) {
#ifdef LITE_DQ_AMX
  return rows > kVectorRows && w.block % 32 == 0 && (w.bits == 8 || w.bits == 4) && CpuHasAmxInt8();
#else
  (void)w, (void)rows;
  return false;
#endif
}

int64_t DqAmxCodesStride(const DqWeights& w) { return (PaddedDepth(w) + 63) / 64 * 64; }

#ifdef LITE_DQ_AMX
namespace {
// A panel's codes as signed bytes in the int8 layout (rows of 64 bytes: 4 depth rows x 16 columns), `depth` rows,
// zero past the panel's: int8 codes less 128 (u ^ 0x80); int4 nibbles less 8, step i's 64 bytes (rows 8i..8i+7)
// becoming rows 8i..8i+3 (low nibbles) and 8i+4..8i+7 (high ones). Signed codes need no correction for the
// symmetric weights' zero point (128 / 8), and TDPBSSD then takes both operands as they are.
__attribute__((target("avx512f,avx512bw"))) void StagePanel(const uint8_t* panel, int bits, int64_t K, int64_t depth,
                                                             int8_t* out) {
  int64_t written = 0;   // bytes
  if (bits == 8) {
    const __m512i flip = _mm512_set1_epi8(-128);
    for (const int64_t bytes = (K + 3) / 4 * 64; written < bytes; written += 64)
      _mm512_store_si512(out + written, _mm512_xor_si512(_mm512_loadu_si512(panel + written), flip));
  } else {
    const __m512i nibble = _mm512_set1_epi8(0x0F), eight = _mm512_set1_epi8(8);
    for (int64_t i = 0, steps = (K + 7) / 8; i < steps; ++i, written += 128) {
      const __m512i v = _mm512_loadu_si512(panel + 64 * i);
      _mm512_store_si512(out + written, _mm512_sub_epi8(_mm512_and_si512(v, nibble), eight));
      _mm512_store_si512(out + written + 64, _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(v, 4), nibble), eight));
    }
  }
  std::memset(out + written, 0, static_cast<size_t>(depth * 16 - written));
}

// Block b's int32 sums (32 rows x 32 columns, 128 bytes a row) into the float sums acc[half][row][16], as the VNNI
// kernels do: f = sums - (zero - offset) * (row's sum of codes), acc += f * (weight scale * row scale) (kFirst: acc
// starts at zero). kShift: zero points other than the offset (a symmetric weight's are all equal to it). Exact int32
// sums, and f exact in float32 (|values| < 2^24 for blocks of up to 512 values), so acc is the VNNI kernels' to the
// bit.
template <bool kShift, bool kFirst>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma"))) void AddBlock(
    const int32_t* sums, int rows, const float* const (&scales)[2], const float* const (&zeros)[2], float offset,
    const float* row_scale, const int32_t* row_sum, int64_t ld_rows, float* acc) {
  const __m512 sc[2] = {_mm512_loadu_ps(scales[0]), _mm512_loadu_ps(scales[1])};
  __m512 z[2] = {};
  if constexpr (kShift)
    for (int h = 0; h < 2; ++h) z[h] = _mm512_sub_ps(_mm512_loadu_ps(zeros[h]), _mm512_set1_ps(offset));
  for (int r = 0; r < rows; ++r) {
    const __m512 ra = _mm512_set1_ps(row_scale[r * ld_rows]);
    for (int h = 0; h < 2; ++h) {
      __m512 f = _mm512_cvtepi32_ps(_mm512_load_si512(sums + r * 32 + 16 * h));
      if constexpr (kShift) f = _mm512_fnmadd_ps(z[h], _mm512_set1_ps(static_cast<float>(row_sum[r * ld_rows])), f);
      float* at = acc + h * 32 * kGemmNR + r * kGemmNR;
      _mm512_store_ps(at, _mm512_fmadd_ps(f, _mm512_mul_ps(sc[h], ra), kFirst ? _mm512_setzero_ps() : _mm512_load_ps(at)));
    }
  }
}

// The float sums (acc[half][row][16]) into C's rows 0..rows-1 at columns col0.. (up to 32, N in all) after the
// epilogue (its row 0 is C's): in registers for the activations the VNNI kernels apply there, with their operations
// in their order (bias, residual, activation, multiplier); any other through StoreTileWithEpilogue. Each row's
// operands are read before its store: a residual that is C itself reads its old values.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma"))) void Finish(float* acc, int rows, int64_t col0,
                                                                             int64_t N, float* C, int64_t ldc,
                                                                             const GemmEpilogue& ep) {
  for (int h = 0; h < 2 && col0 + 16 * h < N; ++h) {
    const int64_t c0 = col0 + 16 * h, cols = std::min<int64_t>(16, N - c0);
    float* tile = acc + h * 32 * kGemmNR;
    if (!ActivationInRegisters(ep.act)) {
      StoreTileWithEpilogue(tile, rows, c0, cols, C, ldc, ep);
      continue;
    }
    const __mmask16 live = static_cast<__mmask16>(cols >= 16 ? 0xFFFF : (1u << cols) - 1);
    const __m512 col_bias = ep.col_bias ? _mm512_maskz_loadu_ps(live, ep.col_bias + c0) : _mm512_setzero_ps();
    for (int r = 0; r < rows; ++r)
      EpilogueRowAvx512(_mm512_load_ps(tile + r * kGemmNR), r, c0, live, col_bias, C, ldc, ep);
  }
}

struct Operands {
  const DqActivations& a;
  const DqWeights& w;
  int64_t step;                   // depth values per tile step
  int64_t depth;                  // PaddedDepth
  float offset;                   // what StagePanel took off the codes: 128 (int8) or 8 (int4)
  bool shift;                     // zero points other than `offset`
  std::vector<float> same_zero;   // 16 copies of w.zero where there is no vector of zero points
};

// One 32 x 32 block: rows m0.. (up to 32), panels p (staged at b0) and p + 1 (b1; b0 again past the last panel, its
// columns unused) over every depth block, then the epilogue into C (row m0's columns from col0).
template <bool kShift>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma"))) void Block(
    const Operands& in, int64_t m0, int64_t p, const int8_t* b0, const int8_t* b1, float* C, int64_t ldc,
    const GemmEpilogue& ep) {
  const DqWeights& w = in.w;
  const DqActivations& a = in.a;
  const int rows = static_cast<int>(std::min<int64_t>(32, a.rows - m0));
  const bool two = rows > 16;
  alignas(64) int32_t sums[2][32 * 32];
  alignas(64) float acc[2 * 32 * kGemmNR];
  const int64_t p1 = std::min(p + 1, w.panels - 1);
  const int64_t group_stride = w.scale_groups > 1 ? 16 : 0;
  const int64_t zero_stride = w.zeros.empty() ? 0 : group_stride;
  const float* scale_at[2] = {w.scales.data() + p * w.scale_groups * 16, w.scales.data() + p1 * w.scale_groups * 16};
  const float* zero_at[2] = {w.zeros.empty() ? in.same_zero.data() : w.zeros.data() + p * w.scale_groups * 16,
                             w.zeros.empty() ? in.same_zero.data() : w.zeros.data() + p1 * w.scale_groups * 16};
  const int8_t* arow = a.row(m0);
  // The epilogue's operands for these 32 x 32 outputs come in while the products run: rows of a residual or a
  // multiplier (a SwiGLU's up product) are ld apart, no stream the hardware prefetcher follows, and their loads were
  // most of Finish's time.
  const int64_t col0 = p * 16, lines = std::min<int64_t>(32, w.N - col0) > 16 ? 2 : 1;
  for (int r = 0; r < rows; ++r)
    for (int64_t l = 0; l < lines; ++l) {
      if (ep.residual)
        _mm_prefetch(reinterpret_cast<const char*>(ep.residual + (m0 + r) * ep.ld_residual + col0 + 16 * l),
                     _MM_HINT_T0);
      if (ep.multiplier)
        _mm_prefetch(reinterpret_cast<const char*>(ep.multiplier + (m0 + r) * ep.ld_multiplier + col0 + 16 * l),
                     _MM_HINT_T0);
    }
  // Block b - 1's sums become float32 while block b's products run (its tile stores wait on them): two buffers.
  auto add_block = [&](int64_t b) {
    const float* sc[2] = {scale_at[0] + b * group_stride, scale_at[1] + b * group_stride};
    const float* zc[2] = {zero_at[0] + b * zero_stride, zero_at[1] + b * zero_stride};
    const float* rs = a.scale.data() + m0 * a.blocks + b;
    const int32_t* sum = a.sum.data() + m0 * a.blocks + b;
    b == 0 ? AddBlock<kShift, true>(sums[b & 1], rows, sc, zc, in.offset, rs, sum, a.blocks, acc)
           : AddBlock<kShift, false>(sums[b & 1], rows, sc, zc, in.offset, rs, sum, a.blocks, acc);
  };
  for (int64_t b = 0; b < w.blocks; ++b) {
    const int64_t k0 = b * w.block, k1 = std::min(k0 + w.block, in.depth);
    AmxZeroSums();
    for (int64_t k = k0; k < k1; k += in.step)
      AmxStep<AmxDot::kS8S8>(arow + k, arow + k + 16 * a.ld, a.ld, b0 + k * 16, b1 + k * 16, 64, two);
    if (k1 < in.depth) {   // the next block's B lines into L1 while this block's sums are converted (its A: no gain)
      for (int64_t l = k1 * 16, end = std::min(k1 + w.block, in.depth) * 16; l < end; l += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(b0 + l), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(b1 + l), _MM_HINT_T0);
      }
    }
    if (b > 0) add_block(b - 1);
    AmxStoreSums(sums[b & 1], two);
  }
  add_block(w.blocks - 1);
  GemmEpilogue e = ep;
  if (e.row_bias) e.row_bias += m0;
  if (e.residual) e.residual += m0 * e.ld_residual;
  if (e.multiplier) e.multiplier += m0 * e.ld_multiplier;
  Finish(acc, rows, col0, w.N, C + m0 * ldc, ldc, e);
}
}  // namespace

void DqAmxGemm(const DqActivations& a, const DqWeights& w, float* C, int64_t ldc, const GemmEpilogue& ep,
               ThreadPool* pool) {
  if (!DqAmxTakes(w, a.rows)) throw std::logic_error("DqAmxGemm: not an AMX-INT8 product");
  if (a.ld != DqAmxCodesStride(w) || reinterpret_cast<uintptr_t>(a.row(0)) % 64 ||
      static_cast<int64_t>(a.codes.size()) - a.first <
          (a.rows + kDqAmxRowAlign - 1) / kDqAmxRowAlign * kDqAmxRowAlign * a.ld)
    throw std::logic_error("DqAmxGemm: activation codes not padded for the tiles");
  const float offset = w.bits == 8 ? 128.f : 8.f;
  Operands in{a, w, StepDepth(w), PaddedDepth(w), offset, !w.zeros.empty() || w.zero != offset,
              std::vector<float>(16, w.zero)};
  const int64_t pairs = (w.panels + 1) / 2;
  const int64_t panel_bytes = in.depth * 16;   // staged
  // A task's staged panels stay in L2 while every 32-row block of the activations passes over them.
  const int64_t threads = pool ? pool->size() : 1;
  const int64_t grain = std::max<int64_t>(
      1, std::min((int64_t{768} << 10) / (2 * panel_bytes), (pairs + 2 * threads - 1) / (2 * threads)));
  auto run = [&](int64_t q0, int64_t q1) {
    thread_local std::vector<int8_t> staged;   // kept between calls
    staged.resize(static_cast<size_t>(2 * (q1 - q0) * panel_bytes + 64));
    int8_t* base = AlignTo64(staged.data());
    const int64_t p_end = std::min(2 * q1, w.panels);
    for (int64_t p = 2 * q0; p < p_end; ++p)
      StagePanel(w.panel(p), w.bits, w.K, in.depth, base + (p - 2 * q0) * panel_bytes);
    auto panel = [&](int64_t p) { return base + (std::min(p, w.panels - 1) - 2 * q0) * panel_bytes; };
    AmxConfigureTiles(static_cast<int>(in.step));
    for (int64_t m0 = 0; m0 < a.rows; m0 += 32)
      for (int64_t q = q0; q < q1; ++q) {
        const int64_t p = 2 * q;
        in.shift ? Block<true>(in, m0, p, panel(p), panel(p + 1), C, ldc, ep)
                 : Block<false>(in, m0, p, panel(p), panel(p + 1), C, ldc, ep);
      }
    AmxRelease();
  };
  if (pool && threads > 1) {
    pool->ParallelFor(pairs, grain, run);
  } else {
    run(0, pairs);
  }
}
#else
void DqAmxGemm(const DqActivations&, const DqWeights&, float*, int64_t, const GemmEpilogue&, ThreadPool*) {
  throw std::logic_error("DqAmxGemm needs AMX-INT8 (an x86-64 build)");
}
#endif

}  // namespace lite
