#include "cpu/gemm/gemm.h"
#include "cpu/aligned.h"
#include "cpu/isa_dispatch.h"
#include "cpu/simd/simd.h"
#include "cpu/simd/transpose_block.h"
#include "cpu/gemm/spread_prefetch.h"

#include "cpu/simd/vmath.h"
#include "cpu/weight_pages.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#ifdef LITE_ARM64_SIMD
#include <arm_neon.h>

#include "cpu/simd/neon_asm.h"
#endif

namespace lite {

#include "cpu/simd/unroll.h"

namespace {

constexpr int64_t kMR = 6;     // rows of the register tile
constexpr int64_t kNR = kGemmNR;   // columns of the register tile (one AVX-512 vector, two AVX2 vectors)
constexpr int64_t kKC = kGemmKC;   // depth of a packed block (A and B panels stay in L1/L2)
constexpr int64_t kMC = 96;    // rows of A packed per task
constexpr int64_t kNC = 256;   // columns of B per block: a kKC x kNC block (384 KiB on x86-64, 256 KiB on ARM64) stays in L2
constexpr int64_t kShallowKC = 128;   // K blocks up to this deep run row panel by row panel (SgemmPackedTiles)
constexpr int64_t kRowPanelOrderKC = 48;   // the same in GemmDriver (see there)
// Activations times a pre-packed weight wider than one column block: the whole A (up to this many floats) is
// packed once per product and cut into row blocks of up to kMCWhole rows, so a transformer's 128-200 token rows
// share every B panel. A larger A, or one a single column block reads, is packed block by block while it is in L2
// (packed whole: 512 x 4608 x 49 1.15-1.3x the time, ConvNeXt's 3136 x 96 x 384 MLP 1.05-1.28x; A/B).
constexpr int64_t kWholeAMaxFloats = int64_t{2} << 20;
constexpr int64_t kMCWhole = 192;

typedef float v16sf __attribute__((vector_size(64)));

// The epilogue of one full register tile, applied in registers before the store. Pointers are at the
// tile's origin; act is kNone, kRelu, kRelu6 or kGelu (the others run after the store).
struct TileEpilogue {
  const float* row_bias;
  const float* col_bias;
  const float* residual;
  int64_t ld_residual;
  EpilogueAct act;
  const float* multiplier;
  int64_t ld_multiplier;
};

// acc(R x NR) = sum_k a[k*kMR + i] * b[k*NR + j] for the first R rows of an A panel; then C = acc (store) or
// C += acc. V holds W floats; the tile is R rows x (NR / W) vectors. R = kMR is the main kernel; R = 1..5
// take the last rows of a matrix whose row count is not a multiple of six (64, 128, 256 output channels,
// 197 tokens), in registers like a full tile instead of through the spill path. Compiled once per ISA below;
// the best one for the running CPU is picked on first use.
// acc[i][j] += (or *=, kMultiply) the tile-shaped block of an R-row matrix at m (ld floats per row).
template <typename V, int W, int R, int NV, bool kMultiply>
__attribute__((always_inline)) inline void CombineTile(V (&acc)[R][NV], const float* m, int64_t ld) {
#pragma GCC unroll 12
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) {
      V v;
      std::memcpy(&v, m + i * ld + j * W, sizeof(V));
      acc[i][j] = kMultiply ? acc[i][j] * v : acc[i][j] + v;
    }
}

// Lines of the next weight panel (a pre-packed B's, or a packed A's) that a tile fetches (non-temporal) while it runs,
// spread over its depth.
struct TilePrefetch {
  const char* next = nullptr;
  int64_t lines = 0;
  bool once = false;   // no later tile of the product reads these lines again: fetched non-temporal
};

#ifdef LITE_ARM64_SIMD
// The NEON 6 x 16 tile's product over `steps` (> 0) steps of depth of a packed A panel (6 floats a step) and a B
// panel (16 floats a step), stored to out (6 rows of 16 floats): per step three loads and 24 fmla by element, the
// accumulators in v8-v31. In assembly because GCC 12, given the same product as intrinsics, kept three of the
// accumulators on the stack (67 stack accesses per 192 FMAs); docs/performance.md has its cycle model.
#define LITE_NEON_ROW(c0, c1, c2, c3, areg, lane)                 \
  "fmla " c0 ".4s, v2.4s, " areg ".s[" #lane "]\n\t"              \
  "fmla " c1 ".4s, v3.4s, " areg ".s[" #lane "]\n\t"              \
  "fmla " c2 ".4s, v4.4s, " areg ".s[" #lane "]\n\t"              \
  "fmla " c3 ".4s, v5.4s, " areg ".s[" #lane "]\n\t"
// a_step: bytes from one step's six A values to the next's (24 for a packed panel; lda * 4 for A stored transposed,
// each step's six values consecutive in a row of it).
__attribute__((always_inline)) inline void NeonTile6x16(float* out, const float* a, int64_t a_step, const float* b,
                                                        int64_t steps) {
  // Row r's four accumulators: v(8 + 4r) .. v(11 + 4r).
  asm volatile(
      LITE_ASM_ZERO_V8_V31
      "1:\n\t"
      "ldr q0, [%[a]]\n\t"
      "ldr d1, [%[a], #16]\n\t"
      "add %[a], %[a], %[as]\n\t"
      "ld1 {v2.4s, v3.4s, v4.4s, v5.4s}, [%[b]], #64\n\t"
      LITE_NEON_ROW("v8", "v9", "v10", "v11", "v0", 0) LITE_NEON_ROW("v12", "v13", "v14", "v15", "v0", 1)
      LITE_NEON_ROW("v16", "v17", "v18", "v19", "v0", 2) LITE_NEON_ROW("v20", "v21", "v22", "v23", "v0", 3)
      LITE_NEON_ROW("v24", "v25", "v26", "v27", "v1", 0) LITE_NEON_ROW("v28", "v29", "v30", "v31", "v1", 1)
      "subs %[n], %[n], #1\n\t"
      "bne 1b\n\t"
      LITE_ASM_STORE_V8_V31("4s")
      : [a] "+r"(a), [b] "+r"(b), [n] "+r"(steps), [out] "+r"(out)
      : [as] "r"(a_step)
      : "v0", "v1", "v2", "v3", "v4", "v5", "v8", "v9", "v10", "v11", "v12", "v13", "v14", "v15", "v16", "v17",
        "v18", "v19", "v20", "v21", "v22", "v23", "v24", "v25", "v26", "v27", "v28", "v29", "v30", "v31", "cc",
        "memory");
}
// The same tile with A's six rows read in place (row-major, lda floats apart: a MatMul's activations against a
// pre-packed weight): `quads` (> 0) steps of four depths, each row's four values one register (v26-v31 would be the
// accumulators', so the rows take v0-v5 and the B vectors come one at a time through v6 / v7, each feeding six
// fmla before it is reloaded). Accumulators in v8-v31 as above.
#define LITE_NEON_COL(b, c0, c1, c2, c3, c4, c5, lane)                                                         \
  "fmla " c0 ".4s, " b ".4s, v0.s[" #lane "]\n\t fmla " c1 ".4s, " b ".4s, v1.s[" #lane "]\n\t"              \
  "fmla " c2 ".4s, " b ".4s, v2.s[" #lane "]\n\t fmla " c3 ".4s, " b ".4s, v3.s[" #lane "]\n\t"              \
  "fmla " c4 ".4s, " b ".4s, v4.s[" #lane "]\n\t fmla " c5 ".4s, " b ".4s, v5.s[" #lane "]\n\t"
#define LITE_NEON_DEPTH(lane)                                                                                  \
  "ldr q6, [%[b]]\n\t ldr q7, [%[b], #16]\n\t"                                                               \
  LITE_NEON_COL("v6", "v8", "v12", "v16", "v20", "v24", "v28", lane)                                         \
  "ldr q6, [%[b], #32]\n\t"                                                                                   \
  LITE_NEON_COL("v7", "v9", "v13", "v17", "v21", "v25", "v29", lane)                                         \
  "ldr q7, [%[b], #48]\n\t add %[b], %[b], #64\n\t"                                                          \
  LITE_NEON_COL("v6", "v10", "v14", "v18", "v22", "v26", "v30", lane)                                        \
  LITE_NEON_COL("v7", "v11", "v15", "v19", "v23", "v27", "v31", lane)
__attribute__((always_inline)) inline void NeonTile6x16Rows(float* out, const float* a, int64_t lda, const float* b,
                                                            int64_t quads) {
  const float *a0 = a, *a1 = a + lda, *a2 = a + 2 * lda, *a3 = a + 3 * lda, *a4 = a + 4 * lda, *a5 = a + 5 * lda;
  asm volatile(
      LITE_ASM_ZERO_V8_V31
      "1:\n\t"
      "ldr q0, [%[a0]], #16\n\t ldr q1, [%[a1]], #16\n\t ldr q2, [%[a2]], #16\n\t"
      "ldr q3, [%[a3]], #16\n\t ldr q4, [%[a4]], #16\n\t ldr q5, [%[a5]], #16\n\t"
      LITE_NEON_DEPTH(0) LITE_NEON_DEPTH(1) LITE_NEON_DEPTH(2) LITE_NEON_DEPTH(3)
      "subs %[n], %[n], #1\n\t"
      "bne 1b\n\t"
      LITE_ASM_STORE_V8_V31("4s")
      : [a0] "+r"(a0), [a1] "+r"(a1), [a2] "+r"(a2), [a3] "+r"(a3), [a4] "+r"(a4), [a5] "+r"(a5), [b] "+r"(b),
        [n] "+r"(quads), [out] "+r"(out)
      :
      : "v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9", "v10", "v11", "v12", "v13", "v14", "v15", "v16",
        "v17", "v18", "v19", "v20", "v21", "v22", "v23", "v24", "v25", "v26", "v27", "v28", "v29", "v30", "v31", "cc",
        "memory");
}
#undef LITE_NEON_COL
#undef LITE_NEON_DEPTH
#undef LITE_NEON_ROW
#endif

template <typename V, int W, int R = kMR, int NC = kNR, int kDirectA = 0>
__attribute__((always_inline)) inline void MicroKernelBody(int64_t kc, const float* a, int64_t lda, const float* b,
                                                           float* c, int64_t ldc, int64_t mr, int64_t nr,
                                                           bool accumulate, const TileEpilogue* ep,
                                                           const TilePrefetch* prefetch) {
  // NC < kNR: the first NC columns of a panel (a half-width tile); NC = 2 kNR: two consecutive panels (b, then
  // b + kc * kNR), 32 columns of C.
  constexpr int NV = NC / W;
#ifdef LITE_ARM64_SIMD
  constexpr bool kNeonTile = W == 4 && R == kMR && NC == kNR;   // NeonTile6x16's (Rows') tile
#else
  constexpr bool kNeonTile = false;
#endif
  // The tile's rows of C are written (or read) at the end: start fetching their lines now, so the stores
  // do not wait on memory.
  // With a packed A (the weight of an NCHW convolution) the residual's rows are planes apart (ResNet-50's
  // expansions: 6 rows 12 KB apart on 56x56 planes), which the hardware prefetchers do not cover: fetch the
  // tile's residual lines into L2 now as well (ResNet-50 0.976-0.991x the time at one thread, level at two; into L1
  // 0.997x; A/B over four runs).
  const bool fetch_residual = kDirectA == 0 && ep && ep->residual;
  for (int64_t i = 0; i < mr; ++i) {
    __builtin_prefetch(c + i * ldc, 1);
    __builtin_prefetch(c + i * ldc + NC - 1, 1);
    if (fetch_residual)
      for (int j = 0; j < NC; j += 16) __builtin_prefetch(ep->residual + i * ep->ld_residual + j, 0, 2);
  }
  V acc[R][NV];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) acc[i][j] = V{};
  // kDirectA 1: A's rows read in place (row-major, lda apart); 2: A stored transposed, read in place (element
  // (i, k) at a[k * lda + i]: a pixel-major product over an NCHW input); 0: a packed panel (k-major, kMR floats
  // per k). Direct tiles are as tall as the rows they have (Pick chooses R = mr), so every read is inside A.
  const float* rows[R];
#pragma GCC unroll 12
  for (int i = 0; i < R; ++i) rows[i] = a + i * lda;
  // The next weight panel's lines, a few every 8 steps of depth (cpu/gemm/spread_prefetch.h), into L2 or, where the product
  // reads them only once, non-temporal: a model's weights (ResNet-50: 100 MB) streaming through the L3 pushed the
  // activations out of it (ResNet-50 0.989x / 0.987x the time at one / two threads, BERT-base 0.989x, ConvNeXt-Tiny
  // 0.982x against into-L2; non-temporal for panels that later row blocks read again: GEMM 1024 1.05x).
  SpreadPrefetch<2> pf(prefetch ? prefetch->next : nullptr, prefetch ? prefetch->lines : 0, 8, kc,
                       prefetch && prefetch->once);
  auto step = [&](int64_t k) __attribute__((always_inline)) {
    V bv[NV];
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j)
      std::memcpy(&bv[j], b + (j * W / kNR) * kc * kNR + k * kNR + j * W % kNR, sizeof(V));
    const float* ak = kDirectA == 2 ? a + k * lda : a + k * kMR;
    // A stored transposed (a pixel-major product over an NCHW input): each step reads 6 floats of one channel plane,
    // a line the tiles two and three on share; fetch that next line now (a line per step: ResNet-50 0.987x the
    // time at one thread, its 56x56 reductions 0.97x; two lines ahead 1.01x).
    if (kDirectA == 2) __builtin_prefetch(ak + 16, 0, 3);
#ifdef LITE_ARM64_SIMD
    if constexpr (W == 4 && kDirectA == 0 && R <= kMR) {
      // NEON: the step's six A values in two registers, each row's product a multiply-add by lane (fmla .4s by
      // element): 24 accumulators, 4 B vectors and 2 A vectors in NEON's 32 registers. The generic code below loads
      // each A value into a register of its own, and the 6 x 16 tile spilled to the stack (GCC 12: two stack
      // accesses per FMA).
      const float32x4_t a03 = vld1q_f32(ak);
      const float32x2_t a45 = vld1_f32(ak + 4);
      // B vector by B vector: one live at a time (the six rows' products use it, then it is dead), so the tile
      // needs 24 + 2 + 2 registers.
      const float* bk = b + k * kNR;
      Unroll<NV>([&](auto jc) __attribute__((always_inline)) {
        constexpr int j = decltype(jc)::value;
        const float32x4_t bj = vld1q_f32(bk + (j * W / kNR) * kc * kNR + j * W % kNR);
        Unroll<R>([&](auto ic) __attribute__((always_inline)) {
          constexpr int i = decltype(ic)::value;
          if constexpr (i < 4)
            acc[i][j] = (V)vfmaq_laneq_f32((float32x4_t)acc[i][j], bj, a03, i);
          else
            acc[i][j] = (V)vfmaq_lane_f32((float32x4_t)acc[i][j], bj, a45, i - 4);
        });
      });
      return;
    }
#endif
#pragma GCC unroll 12
    for (int i = 0; i < R; ++i) {
      // R = 2 kMR over packed A: rows kMR.. are the next panel's, kc * kMR floats on
      const float av = kDirectA == 1 ? rows[i][k] : kDirectA == 0 && i >= kMR ? ak[kc * kMR + i - kMR] : ak[i];
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) acc[i][j] += av * bv[j];
    }
  };
  int64_t k = 0;
#ifdef LITE_ARM64_SIMD
  if constexpr (kNeonTile) {
    // Packed A (step 6 floats) or A transposed (a step's six values consecutive, lda apart): every step here; rows
    // read in place: whole quads of depth here, the last 1-3 by the steps below.
    const int64_t done = kDirectA == 1 ? kc / 4 * 4 : kc;
    if (done > 0) {
      alignas(16) float sums[kMR][kNR];
      if constexpr (kDirectA == 1) {
        NeonTile6x16Rows(&sums[0][0], a, lda, b, done / 4);
      } else {
        NeonTile6x16(&sums[0][0], a, kDirectA == 2 ? lda * 4 : kMR * 4, b, done);
      }
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
        for (int j = 0; j < NV; ++j) std::memcpy(&acc[i][j], &sums[i][j * W], sizeof(V));
    }
    k = done;
  }
#endif
  // The tile's C lines (all of them, not only the first and last of a row) and its epilogue's residual and multiplier
  // rows, fetched 128 steps of depth before the stores: fetched at the tile's start they were evicted again by the
  // B panels streaming through L1 before the stores came (a decoder's 512-token products 0.93-0.95x the time at
  // one and two threads, 2048-token ones alike; in-process A/B).
  const int64_t late = std::max<int64_t>(0, (kc - 128) & ~int64_t{7});
  for (; !kNeonTile && k + 8 <= kc; k += 8) {   // (the NEON tile leaves at most 3 steps)
    if (k == late) {
      for (int64_t i = 0; i < mr; ++i) {
#pragma GCC unroll 4
        for (int j = 0; j < NC; j += 16) __builtin_prefetch(c + i * ldc + j, 1);
        if (ep && ep->residual)
          for (int j = 0; j < NC; j += 16) __builtin_prefetch(ep->residual + i * ep->ld_residual + j, 0, 3);
        if (ep && ep->multiplier)
          for (int j = 0; j < NC; j += 16) __builtin_prefetch(ep->multiplier + i * ep->ld_multiplier + j, 0, 3);
      }
    }
    pf.Issue();
#pragma GCC unroll 8
    for (int u = 0; u < 8; ++u) step(k + u);
  }
  for (; k < kc; ++k) step(k);
  if (mr == R && nr == NC) {
    // The epilogue's fields in locals: read through ep, each would be reloaded after every store to C (which
    // the compiler cannot prove apart from *ep), a dozen loads per tile that shallow products notice.
    const TileEpilogue e = ep ? *ep : TileEpilogue{nullptr, nullptr, nullptr, 0, EpilogueAct::kNone, nullptr, 0};
    // One test per epilogue step for the whole tile, not one per vector: with 16-channel products (K = 16)
    // the per-vector tests were a fifth of the tile's instructions. Every operand is read before the first
    // store, so a residual that aliases C still reads its old values.
    if (accumulate) CombineTile<V, W, R, NV, false>(acc, c, ldc);
    if (e.row_bias) {
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        const float rb = e.row_bias[i];
#pragma GCC unroll 4
        for (int j = 0; j < NV; ++j) acc[i][j] += rb;
      }
    }
    if (e.col_bias) {
      V cb[NV];
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) std::memcpy(&cb[j], e.col_bias + j * W, sizeof(V));
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
        for (int j = 0; j < NV; ++j) acc[i][j] += cb[j];
    }
    if (e.residual) CombineTile<V, W, R, NV, false>(acc, e.residual, e.ld_residual);
    if (e.act == EpilogueAct::kGelu) {
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
        for (int j = 0; j < NV; ++j) acc[i][j] = FastGeluVec(acc[i][j]);
    } else if (e.act == EpilogueAct::kSilu) {
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
        for (int j = 0; j < NV; ++j) acc[i][j] = FastSiluVec(acc[i][j]);
    } else if (e.act != EpilogueAct::kNone) {
      const V zero = V{};
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
        for (int j = 0; j < NV; ++j) acc[i][j] = acc[i][j] < zero ? zero : acc[i][j];
      if (e.act == EpilogueAct::kRelu6) {
        const V six = V{} + 6.f;
#pragma GCC unroll 8
        for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
          for (int j = 0; j < NV; ++j) acc[i][j] = acc[i][j] > six ? six : acc[i][j];
      }
    }
    if (e.multiplier) CombineTile<V, W, R, NV, true>(acc, e.multiplier, e.ld_multiplier);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) std::memcpy(c + i * ldc + j * W, &acc[i][j], sizeof(V));
    return;
  }
  // Partial tile: spill with compile-time indices only, so acc can stay in registers everywhere else.
  float tile[R][NC];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) std::memcpy(&tile[i][j * W], &acc[i][j], sizeof(V));
  for (int64_t i = 0; i < mr; ++i) {
    float* ci = c + i * ldc;
    for (int64_t j = 0; j < nr; ++j) ci[j] = accumulate ? ci[j] + tile[i][j] : tile[i][j];
  }
}

typedef float v4sf __attribute__((vector_size(16)));
typedef float v8sf __attribute__((vector_size(32)));

using MicroKernelFn = void (*)(int64_t, const float*, int64_t, const float*, float*, int64_t, int64_t, int64_t,
                               bool, const TileEpilogue*, const TilePrefetch*);

// D: how A is read (MicroKernelBody's kDirectA); lda is ignored for packed A.
#define LITE_KERNEL_PARAMS                                                                                     \
  int64_t kc, const float *a, int64_t lda, const float *b, float *c, int64_t ldc, int64_t mr, int64_t nr, bool acc, \
      const TileEpilogue *ep, const TilePrefetch *pf
template <int R, int D>
void MicroKernelPortable(LITE_KERNEL_PARAMS) {
  MicroKernelBody<v4sf, 4, R, kNR, D>(kc, a, lda, b, c, ldc, mr, nr, acc, ep, pf);
}
template <int R, int D>
void HalfKernelPortable(LITE_KERNEL_PARAMS) {
  MicroKernelBody<v4sf, 4, R, kNR / 2, D>(kc, a, lda, b, c, ldc, mr, nr, acc, ep, pf);
}

#ifdef LITE_X86_SIMD
template <int R, int D>
__attribute__((target("avx2,fma"))) void MicroKernelAvx2(LITE_KERNEL_PARAMS) {
  MicroKernelBody<v8sf, 8, R, kNR, D>(kc, a, lda, b, c, ldc, mr, nr, acc, ep, pf);
}
template <int R, int D>
__attribute__((target("avx2,fma"))) void HalfKernelAvx2(LITE_KERNEL_PARAMS) {
  MicroKernelBody<v8sf, 8, R, kNR / 2, D>(kc, a, lda, b, c, ldc, mr, nr, acc, ep, pf);
}
template <int R, int D>
__attribute__((target("avx512f,fma"))) void MicroKernelAvx512(LITE_KERNEL_PARAMS) {
  MicroKernelBody<v16sf, 16, R, kNR, D>(kc, a, lda, b, c, ldc, mr, nr, acc, ep, pf);
}
// Two panels at once (R x 32): 12 accumulators for a full tile, enough independent FMA chains to keep both
// 512-bit FMA pipes busy (the 6 x 16 tile's six chains left them half idle at 4-cycle latency).
// Four panels (R x 64, 24 accumulators): per step of k four B vectors and six broadcasts feed 24 FMAs instead of
// two and six feeding 12, so streaming B from L2 (per-run packed activations) keeps up with the FMAs: ResNet-50's
// 1x1 layers 0.9-0.97x the time of the two-panel tile, GEMM 1024 0.99x, 197 x 768 x 768 0.97x.
template <int R, int D>
__attribute__((target("avx512f,fma"))) void WideKernelAvx512(LITE_KERNEL_PARAMS) {
  MicroKernelBody<v16sf, 16, R, 2 * kNR, D>(kc, a, lda, b, c, ldc, mr, nr, acc, ep, pf);
}
template <int R, int D>
__attribute__((target("avx512f,fma"))) void QuadKernelAvx512(LITE_KERNEL_PARAMS) {
  MicroKernelBody<v16sf, 16, R, 4 * kNR, D>(kc, a, lda, b, c, ldc, mr, nr, acc, ep, pf);
}
// One panel for two row panels at once (12 x 16): a block's last column tile of 1-16 columns (196 pixels: three
// four-panel tiles and 4 columns; 208: three and 16) has 12 accumulator chains instead of 6, which at 4-cycle FMA
// latency left the two FMA pipes half idle for a tenth of such a block's products.
template <int D>
__attribute__((target("avx512f,fma"))) void PairKernelAvx512(LITE_KERNEL_PARAMS) {
  MicroKernelBody<v16sf, 16, 2 * kMR, kNR, D>(kc, a, lda, b, c, ldc, mr, nr, acc, ep, pf);
}
#endif
#undef LITE_KERNEL_PARAMS

// The kernels of one ISA for 1 to 6 rows: a tile of any height runs in registers with its epilogue.
// A tile of at most kNR / 2 columns (49 output pixels: three panels and one column) runs a half-width kernel,
// half the FMAs of a full tile for the same result.
// With AVX-512, tiles with 64+ columns left take four panels at once (quad), with 17-63 two (wide).
struct MicroKernels {
  MicroKernelFn rows[kMR + 1];
  MicroKernelFn half[kMR + 1];
  MicroKernelFn wide[kMR + 1];   // null where the ISA has none
  MicroKernelFn quad[kMR + 1];   // null where the ISA has none
  MicroKernelFn pair = nullptr;  // 2 kMR rows x up to kNR columns; null where the ISA has none
  SimdIsa isa;
  MicroKernelFn Pick(int64_t mr, int64_t nr) const {
    return nr <= kNR / 2 ? half[mr] : nr > 2 * kNR ? quad[mr] : nr > kNR ? wide[mr] : rows[mr];
  }
  // Columns the next tile covers with `left` columns of the block remaining (the loop's step).
  int64_t Step(int64_t left) const {
    if (quad[kMR] && left >= 4 * kNR) return 4 * kNR;
    return wide[kMR] && left > kNR ? 2 * kNR : kNR;
  }
  static int64_t Width(int64_t nr) {
    return nr <= kNR / 2 ? kNR / 2 : nr > 2 * kNR ? 4 * kNR : nr > kNR ? 2 * kNR : kNR;
  }   // its columns
};

// D: the kernels that read A in place (GemmDriver's direct_a: 1 rows, 2 transposed), 0 packed A panels.
template <int D>
const MicroKernels& IsaOf() {
  static const MicroKernels k = [] {
#define LITE_ROWS(R)                                                                                  \
  PickIsaKernel<MicroKernelFn>(MicroKernelPortable<R, D>, LITE_IF_X86_SIMD((MicroKernelAvx2<R, D>)), \
                               LITE_IF_X86_SIMD((MicroKernelAvx512<R, D>)))
#define LITE_HALF(R) \
  PickIsaKernel<MicroKernelFn>(HalfKernelPortable<R, D>, LITE_IF_X86_SIMD((HalfKernelAvx2<R, D>)), nullptr).fn
#define LITE_WIDE(R) PickIsaKernel<MicroKernelFn>(nullptr, nullptr, LITE_IF_X86_SIMD((WideKernelAvx512<R, D>))).fn
#define LITE_QUAD(R) PickIsaKernel<MicroKernelFn>(nullptr, nullptr, LITE_IF_X86_SIMD((QuadKernelAvx512<R, D>))).fn
    const auto k6 = LITE_ROWS(6);
    return MicroKernels{{nullptr, LITE_ROWS(1).fn, LITE_ROWS(2).fn, LITE_ROWS(3).fn, LITE_ROWS(4).fn, LITE_ROWS(5).fn,
                         k6.fn},
                        {nullptr, LITE_HALF(1), LITE_HALF(2), LITE_HALF(3), LITE_HALF(4), LITE_HALF(5), LITE_HALF(6)},
                        {nullptr, LITE_WIDE(1), LITE_WIDE(2), LITE_WIDE(3), LITE_WIDE(4), LITE_WIDE(5), LITE_WIDE(6)},
                        {nullptr, LITE_QUAD(1), LITE_QUAD(2), LITE_QUAD(3), LITE_QUAD(4), LITE_QUAD(5), LITE_QUAD(6)},
                        PickIsaKernel<MicroKernelFn>(nullptr, nullptr, LITE_IF_X86_SIMD((PairKernelAvx512<D>))).fn,
                        k6.isa};
#undef LITE_ROWS
#undef LITE_HALF
#undef LITE_WIDE
#undef LITE_QUAD
  }();
  return k;
}
const MicroKernels& Isa() { return IsaOf<0>(); }

// Packs op(A)[m0:m0+mc, k0:k0+kc] into MR-row panels, k-major inside a panel, scaled by alpha.
void PackA(bool trans, const float* A, int64_t lda, int64_t m0, int64_t mc, int64_t k0, int64_t kc, float alpha,
           float* dst) {
  for (int64_t p = 0; p < mc; p += kMR) {
    const int64_t rows = std::min(kMR, mc - p);
    if (!trans && rows == kMR) {   // the common case: six full rows, no bounds tests
      const float* r[kMR];
      for (int64_t i = 0; i < kMR; ++i) r[i] = A + (m0 + p + i) * lda + k0;
      if (alpha == 1.f) {
        for (int64_t k = 0; k < kc; ++k)
          for (int64_t i = 0; i < kMR; ++i) dst[k * kMR + i] = r[i][k];
      } else {
        for (int64_t k = 0; k < kc; ++k)
          for (int64_t i = 0; i < kMR; ++i) dst[k * kMR + i] = alpha * r[i][k];
      }
      dst += kc * kMR;
      continue;
    }
    if (trans && rows == kMR) {   // op(A) = A^T: each k is six consecutive floats of a row of A
      const float* col = A + k0 * lda + m0 + p;
      for (int64_t k = 0; k < kc; ++k)
        for (int64_t i = 0; i < kMR; ++i) dst[k * kMR + i] = alpha * col[k * lda + i];
      dst += kc * kMR;
      continue;
    }
    for (int64_t k = 0; k < kc; ++k) {
      for (int64_t i = 0; i < kMR; ++i) {
        float v = 0.f;
        if (i < rows) {
          const int64_t r = m0 + p + i, c = k0 + k;
          v = trans ? A[c * lda + r] : A[r * lda + c];
        }
        dst[k * kMR + i] = alpha * v;
      }
    }
    dst += kc * kMR;
  }
}

// Packs op(B)[k0:k0+kc, n0:n0+nc] into NR-column panels, k-major inside a panel.
void PackB(bool trans, const float* B, int64_t ldb, int64_t k0, int64_t kc, int64_t n0, int64_t nc, float* dst) {
  for (int64_t p = 0; p < nc; p += kNR) {
    const int64_t cols = std::min(kNR, nc - p);
    if (trans && cols == kNR) {   // op(B) = B^T: column j of the panel is row n0 + p + j of B (8x8 register
      // transposes: the per-element copy was 8% of a causal prompt's attention, which packs its queries so)
      TransposeBlock(B + (n0 + p) * ldb + k0, ldb, kNR, kc, dst, kNR);
      dst += kc * kNR;
      continue;
    }
    for (int64_t k = 0; k < kc; ++k) {
      float* d = dst + k * kNR;
      if (!trans && cols == kNR) {
        std::memcpy(d, B + (k0 + k) * ldb + n0 + p, kNR * sizeof(float));
        continue;
      }
      for (int64_t j = 0; j < kNR; ++j) {
        float v = 0.f;
        if (j < cols) {
          const int64_t r = k0 + k, c = n0 + p + j;
          v = trans ? B[c * ldb + r] : B[r * ldb + c];
        }
        d[j] = v;
      }
    }
    dst += kc * kNR;
  }
}

}  // namespace

const char* GemmIsa() { return SimdIsaName(Isa().isa); }

void StoreTileWithEpilogue(float* tile, int rows, int64_t col0, int64_t cols, float* C, int64_t ldc,
                           const GemmEpilogue& ep) {
  if (ep.row_bias || ep.col_bias || ep.residual || ep.multiplier || ep.act != EpilogueAct::kNone) {
    GemmEpilogue e = ep;
    if (e.col_bias) e.col_bias += col0;
    if (e.residual) e.residual += col0;
    if (e.multiplier) e.multiplier += col0;
    ApplyEpilogue(tile, kGemmNR, 0, rows, 0, cols, e);
  }
  for (int r = 0; r < rows; ++r)
    std::memcpy(C + r * ldc + col0, tile + r * kGemmNR, static_cast<size_t>(cols) * sizeof(float));
}

LITE_VECTOR_CLONES void ApplyEpilogue(float* C, int64_t ldc, int64_t row0, int64_t rows, int64_t col0, int64_t cols,
                                      const GemmEpilogue& e) {
  if (!e.row_bias && !e.col_bias && !e.residual && e.act == EpilogueAct::kNone && !e.multiplier) return;
  for (int64_t i = row0; i < row0 + rows; ++i) {
    float* ci = C + i * ldc + col0;
    const float rb = e.row_bias ? e.row_bias[i] : 0.f;
    if (e.col_bias) {
      const float* cb = e.col_bias + col0;
      for (int64_t j = 0; j < cols; ++j) ci[j] += rb + cb[j];
    } else if (e.row_bias) {
      for (int64_t j = 0; j < cols; ++j) ci[j] += rb;
    }
    if (e.residual) {
      const float* r = e.residual + i * e.ld_residual + col0;
      for (int64_t j = 0; j < cols; ++j) ci[j] += r[j];
    }
    // One loop per activation (not a switch per element), so each one vectorises.
    switch (e.act) {
      case EpilogueAct::kNone: break;
      case EpilogueAct::kRelu:
        for (int64_t j = 0; j < cols; ++j) ci[j] = ci[j] < 0.f ? 0.f : ci[j];
        break;
      case EpilogueAct::kRelu6:
        for (int64_t j = 0; j < cols; ++j) ci[j] = std::min(std::max(ci[j], 0.f), 6.f);
        break;
      case EpilogueAct::kSigmoid:
        for (int64_t j = 0; j < cols; ++j) ci[j] = FastSigmoid(ci[j]);
        break;
      case EpilogueAct::kTanh:
        for (int64_t j = 0; j < cols; ++j) ci[j] = FastTanh(ci[j]);
        break;
      case EpilogueAct::kHardSwish:
        for (int64_t j = 0; j < cols; ++j) ci[j] = ci[j] * std::min(std::max(ci[j] + 3.f, 0.f), 6.f) * (1.f / 6.f);
        break;
      case EpilogueAct::kGelu:
        for (int64_t j = 0; j < cols; ++j) ci[j] = 0.5f * ci[j] * (1.f + FastErf(ci[j] * 0.7071067811865476f));
        break;
      case EpilogueAct::kSilu: {   // 8 lanes at a time on FastSiluVec (the scalar loop did not vectorise: ~3 ns a value)
        typedef float V8 __attribute__((vector_size(32)));
        for (int64_t j = 0; j < cols; j += 8) {
          const int64_t n = std::min<int64_t>(8, cols - j);
          V8 v = {};
          std::memcpy(&v, ci + j, static_cast<size_t>(n) * sizeof(float));
          v = FastSiluVec(v);
          std::memcpy(ci + j, &v, static_cast<size_t>(n) * sizeof(float));
        }
        break;
      }
      case EpilogueAct::kGeluTanh:   // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        for (int64_t j = 0; j < cols; ++j) {
          const float x = ci[j];
          ci[j] = 0.5f * x * (1.f + FastTanh(0.7978845608028654f * (x + 0.044715f * x * x * x)));
        }
        break;
      case EpilogueAct::kQuickGelu:
        for (int64_t j = 0; j < cols; ++j) ci[j] = ci[j] * FastSigmoid(1.702f * ci[j]);
        break;
    }
    if (e.multiplier) {
      const float* g = e.multiplier + i * e.ld_multiplier + col0;
      for (int64_t j = 0; j < cols; ++j) ci[j] *= g[j];
    }
  }
}

namespace {

// B taken from a matrix (op(B)), packed block by block.
class MatrixBPacker : public BPacker {
 public:
  MatrixBPacker(bool trans, const float* B, int64_t ldb) : trans_(trans), B_(B), ldb_(ldb) {}
  void Pack(int64_t k0, int64_t kc, int64_t n0, int64_t nc, float* dst) const override {
    PackB(trans_, B_, ldb_, k0, kc, n0, nc, dst);
  }
  void Prefetch(int64_t k0, int64_t kc, int64_t n0, int64_t nc, int64_t part, int64_t parts) const override {
    // The block is `rows` runs of `width` floats (rows of B, or its columns when transposed), per_row lines
    // each; this part's share of those lines, walked without a division per line.
    const int64_t rows = trans_ ? nc : kc, first = trans_ ? n0 : k0, offset = trans_ ? k0 : n0;
    const int64_t width = trans_ ? kc : nc, per_row = (width + 15) / 16 + 1;
    const int64_t lines = rows * per_row, l0 = part * lines / parts, l1 = (part + 1) * lines / parts;
    int64_t in_row = l0 % per_row;
    const float* row = B_ + (first + l0 / per_row) * ldb_ + offset;
    for (int64_t l = l0; l < l1; ++l) {
      __builtin_prefetch(row + std::min(in_row * 16, width - 1), 0, 2);
      if (++in_row == per_row) {
        in_row = 0;
        row += ldb_;
      }
    }
  }

 private:
  bool trans_;
  const float* B_;
  int64_t ldb_;
};

// Where A comes from: packed once (PackAOnce layout) or packed per block from op(A) * alpha.
struct ASource {
  const float* packed = nullptr;
  bool trans = false;
  const float* A = nullptr;
  int64_t lda = 0;
  float alpha = 1.f;
  bool per_run = false;   // `packed` holds this product's activations (all rows), not a constant weight
};

// Where B comes from: packed once (PackBOnce layout) or by a packer, block by block.
struct BSource {
  const float* packed = nullptr;
  const BPacker* packer = nullptr;
};

// GotoBLAS-style blocking. C is split into tasks of (column block) x (group of row blocks); each task
// runs the whole K loop over its tile, so C is written once per K block while still in cache and the
// epilogue is applied to each register tile right after its last product. Inside a K block a B panel
// (kc x 16) stays in L1 while the row panels of the A block (mc x kc, in L2) stream past it.
bool DirectAEnabled() {
  static const bool on = [] {
    const char* v = std::getenv("LITE_GEMM_DIRECT_A");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return on;
}

void GemmDriver(const ASource& a, const BSource& b, int64_t M, int64_t N, int64_t K, float beta, float* C,
                int64_t ldc, const GemmEpilogue& epilogue, ThreadPool* pool) {
  if (M <= 0 || N <= 0) return;
  if (beta != 0.f && beta != 1.f) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] *= beta;
  }
  if (K <= 0 || (!a.packed && a.alpha == 0.f)) {
    if (beta == 0.f)
      for (int64_t i = 0; i < M; ++i) std::fill(C + i * ldc, C + i * ldc + N, 0.f);
    ApplyEpilogue(C, ldc, 0, M, 0, N, epilogue);
    return;
  }
  const int threads = pool ? pool->size() : 1;
  // Activations times a pre-packed weight (MatMul, Gemm) read A's rows in place: each tile broadcasts from its six
  // rows what a packed panel would give it, and the pass that packed A every run is gone (A/B, one / two threads:
  // GEMM 1024 0.99x / 0.96x the time, 256 0.92x / 0.89x, 512 x 4608 x 49 0.78x, ConvNeXt-Tiny 0.96x / 0.97x,
  // BERT-base 0.98x / 0.98x; 1500 x 384 x 1536 1.02x / 1.01x). LITE_GEMM_DIRECT_A=0 packs A as before.
  const int direct_a = b.packed && !a.packed && a.alpha == 1.f && DirectAEnabled() ? (a.trans ? 2 : 1) : 0;
  if (b.packed && !a.packed && !direct_a && N > 2 * kNC && M * K <= kWholeAMaxFloats) {
    // A weight times activations that are transposed or scaled (Gemm's transA, alpha; plain ones are read in
    // place above): pack all of A first, in parallel, instead of once per column
    // block and row block. Every task then reads its rows from one packed copy, and the column blocks can
    // be narrow enough (kNC) for a B block and the A rows to share L2 (1-3% off 128-row products; the B panel
    // prefetch below is most of their gain).
    const int64_t m_tiles = (M + kMR - 1) / kMR, m_padded = m_tiles * kMR, k_blocks = (K + kKC - 1) / kKC;
    thread_local CacheLineVector<float> whole_a;
    if (whole_a.size() < static_cast<size_t>(m_padded * K)) whole_a.resize(m_padded * K);
    float* dst = whole_a.data();
    auto pack = [&](int64_t ub, int64_t ue) {   // unit u: one row panel of one K block
      for (int64_t u = ub; u < ue; ++u) {
        const int64_t k0 = u / m_tiles * kKC, kc = std::min(kKC, K - k0), p = u % m_tiles * kMR;
        PackA(a.trans, a.A, a.lda, p, std::min(kMR, M - p), k0, kc, a.alpha, dst + k0 * m_padded + p * kc);
      }
    };
    if (pool && threads > 1) pool->ParallelFor(k_blocks * m_tiles, 4, pack); else pack(0, k_blocks * m_tiles);
    ASource whole;
    whole.packed = dst;
    whole.per_run = true;
    GemmDriver(whole, b, M, N, K, beta == 0.f ? 0.f : 1.f, C, ldc, epilogue, pool);   // C already scaled
    return;
  }
  const MicroKernels& micro = direct_a == 2 ? IsaOf<2>() : direct_a == 1 ? IsaOf<1>() : Isa();
  // Work split: the task count is a multiple of the thread count, so no thread idles at the end.
  // Columns first (each task packs its own B block); when there are too few columns, rows are split
  // into equal ranges too (each range's task then packs the same B block: no slower than one thread
  // packing it, and no synchronisation).
  const int64_t n_tiles = (N + kNR - 1) / kNR, m_tiles = (M + kMR - 1) / kMR;
  // Products over fewer than 32 channels (MobileNetV2's 16/24-channel expansions) get 8x wider column
  // blocks (the packed block stays under kKC x kNC floats): each C row is written in longer runs, 0.88-0.92x
  // the time on the 16-channel one; from 32 channels on it measured even or slower.
  const int64_t block_cols = K < 32 ? 8 * kNC : kNC;
  int64_t n_blocks = (N + block_cols - 1) / block_cols, m_groups = 1;
  auto columns_per_thread = [&] {   // at least one column block per thread, a multiple of the thread count
    n_blocks = std::min(n_tiles, (std::max<int64_t>(n_blocks, threads) + threads - 1) / threads * threads);
  };
  if (b.packed && !a.packed && !direct_a) {
    // B is a pre-packed weight and A (activations) is packed per block: wide column blocks, so each A
    // block is packed few times; threads split the rows, so no A row is packed by two threads.
    n_blocks = (N + 2 * kNC - 1) / (2 * kNC);
    if (threads > 1) {
      if (m_tiles >= 4 * threads) {
        m_groups = threads;
      } else {
        columns_per_thread();
      }
    }
  } else if (threads > 1) {
    if (n_blocks >= threads || n_tiles >= 2 * threads * 4) {
      columns_per_thread();
    } else {
      m_groups = std::min<int64_t>(m_tiles, threads);
    }
  }
  if (micro.quad[kMR] && b.packed && N % (4 * kNR) == 0) {
    // Blocks of whole four-panel tiles where a count near the chosen one allows: 896 columns in 4 blocks of 224 ended
    // every block on a two-panel tile (2.5x the time per product of a four-panel one in a profile); 7 blocks of 128
    // run four-panel tiles only (the 896-column products of a 512-token prompt 0.94-0.97x the time at two threads).
    const int64_t quads = N / (4 * kNR);
    for (int64_t nb = n_blocks; nb <= 2 * n_blocks && nb <= quads; ++nb)
      if (quads % nb == 0) {
        n_blocks = nb;
        break;
      }
  }
  const int64_t nc = (n_tiles + n_blocks - 1) / n_blocks * kNR;
  n_blocks = (N + nc - 1) / nc;
  // Whole tasks per thread: 19 column blocks of a pre-packed weight (N = 4864) on two threads ran 10 + 9; with the
  // rows cut in as many groups as threads the tasks split evenly, each thread reading every block for its rows (a
  // decoder's 512-token products 0.98-0.99x the time at two threads; 64-2048 rows 0.98-1.0x).
  if (threads > 1 && b.packed && m_groups == 1 && n_blocks % threads && n_blocks < 4 * threads * threads &&
      m_tiles >= 8 * threads)
    m_groups = threads;
  const int64_t m_padded = (M + kMR - 1) / kMR * kMR;
  const int64_t n_padded_total = (N + kNR - 1) / kNR * kNR;
  // Bias, residual and ReLU/ReLU6/GELU are applied in registers; other activations after the store. GELU's
  // polynomial in the tile: ConvNeXt-Tiny 0.95x the time of a pass over each block on AVX-512, even with AVX2
  // (LITE_CPU_ISA=avx2).
  // SiLU (a SwiGLU gate's) likewise: a decoder's 512-token gate products 0.9x the time of a pass over each block.
  const bool in_register = ActivationInRegisters(epilogue.act);
  GemmEpilogue linear = epilogue, act_only;   // bias + residual (+ ReLU/ReLU6) per tile; the rest per block
  if (!in_register) {   // the multiplier comes after the activation
    linear.act = EpilogueAct::kNone;
    linear.multiplier = nullptr;
    act_only.act = epilogue.act;
    act_only.multiplier = epilogue.multiplier;
    act_only.ld_multiplier = epilogue.ld_multiplier;
  }

  // One K block of C[r_begin:r_end, n0:n0+ncur] from a packed B block.
  struct NextBlock {
    int64_t k0 = 0, kc = 0, n0 = 0, nc = 0;
    bool valid = false;
  };
  auto compute_block = [&](int64_t k0, int64_t kc, int64_t r_begin, int64_t r_end, int64_t n0, int64_t ncur,
                           const float* b_block, const NextBlock& next_b) {
    // The packer's next block is fetched into L2 a share per tile, overlapping its reads with this block's
    // products instead of stalling the packing that follows.
    const int64_t block_tiles = (r_end - r_begin + kMR - 1) / kMR * ((ncur + kNR - 1) / kNR);
    int64_t tile_no = 0;
    thread_local CacheLineVector<float> local_a;
    if (!a.packed && local_a.size() < static_cast<size_t>(kMC * kKC)) local_a.resize(kMC * kKC);
    const bool accumulate = k0 > 0 || beta != 0.f;
    const bool last = k0 + kc >= K;
    int64_t mc_max = kMC;
    if (a.per_run || direct_a) {   // equal row blocks of up to kMCWhole rows (197 tokens: two of 102, not 192 + 5)
      const int64_t blocks = (r_end - r_begin + kMCWhole - 1) / kMCWhole;
      mc_max = ((r_end - r_begin + blocks - 1) / blocks + kMR - 1) / kMR * kMR;
    }
    for (int64_t m0 = r_begin; m0 < r_end; m0 += mc_max) {
      const int64_t mc = std::min(mc_max, r_end - m0);
      const float* a_block;
      if (direct_a) {
        a_block = direct_a == 1 ? a.A + m0 * a.lda + k0 : a.A + k0 * a.lda + m0;
      } else if (a.packed) {
        a_block = a.packed + k0 * m_padded + (m0 / kMR) * kc * kMR;
      } else {
        PackA(a.trans, a.A, a.lda, m0, mc, k0, kc, a.alpha, local_a.data());
        a_block = local_a.data();
      }
      // A constant weight's next A block (the next row block, or the first one of the next K block) comes
      // from memory: every tile of this block prefetches its share of it (ResNet-50 and MobileNetV2
      // 0.97-1.0x, A/B in one process). With at most one tile of columns (Winograd's products on 14x14 and 28x28
      // planes: 16-49 tiles) each weight serves few columns and the share is spread over the tile's depth as B's
      // is (those layers 0.93x in the model, 0.96-0.98x alone); with more, before the tile (spread: 1.0-1.02x).
      const char* next_a = nullptr;
      int64_t next_a_lines = 0, a_lines_per_tile = 0;
      if (a.packed && !a.per_run) {
        if (m0 + mc < r_end) {
          next_a = reinterpret_cast<const char*>(a.packed + k0 * m_padded + ((m0 + mc) / kMR) * kc * kMR);
          next_a_lines = (std::min(mc_max, r_end - m0 - mc) + kMR - 1) / kMR * kMR * kc * static_cast<int64_t>(sizeof(float)) / 64;
        } else if (k0 + kc < K) {
          const int64_t kc_next = std::min(kKC, K - k0 - kc);
          next_a = reinterpret_cast<const char*>(a.packed + (k0 + kc) * m_padded + (r_begin / kMR) * kc_next * kMR);
          next_a_lines = (std::min(mc_max, r_end - r_begin) + kMR - 1) / kMR * kMR * kc_next * static_cast<int64_t>(sizeof(float)) / 64;
        }
        const int64_t tiles = (mc + kMR - 1) / kMR * ((ncur + kNR - 1) / kNR);
        a_lines_per_tile = (next_a_lines + tiles - 1) / tiles;
      }
      int64_t a_line = 0;
      const int64_t a_step = direct_a == 1 ? a.lda : direct_a == 2 ? 1 : kc;   // from one row of the block to the next
      // Weights that no later block reads again are fetched non-temporal (see MicroKernelBody): a packed A block when
      // there is one column block, a pre-packed B panel when one row block reads it.
      const bool nta = WeightPrefetchNonTemporal();
      const bool a_once = nta && n_blocks == 1;
      const bool b_once = nta && m_groups == 1 && r_end - r_begin <= mc_max;
      TilePrefetch next_panel;   // set per tile by the column-outer order below
      // panels 2: the row panels at i and i + kMR in one tile (the pair kernel, up to kNR columns).
      auto tile = [&](int64_t i, int64_t j, int64_t panels = 1) {
        const TilePrefetch* pf = next_panel.lines > 0 ? &next_panel : nullptr;
        for (int64_t p = 0; p < panels && next_b.valid; ++p)
          b.packer->Prefetch(next_b.k0, next_b.kc, next_b.n0, next_b.nc, tile_no++, block_tiles);
        TilePrefetch a_share;
        if (next_a) {
          const int64_t l1 = std::min(next_a_lines, a_line + panels * a_lines_per_tile);
          if (ncur <= 4 * kNR && !pf) {   // one tile of columns: spread (see above)
            a_share = {next_a + a_line * 64, l1 - a_line, a_once};
            if (a_share.lines > 0) pf = &a_share;
            a_line = l1;
          }
          for (; a_line < l1; ++a_line) PrefetchWeightLine(next_a + a_line * 64, a_once);
        }
        const float* bp = b_block + (j / kNR) * kc * kNR;
        const int64_t nr = std::min(micro.Step(ncur - j), ncur - j), mr = panels * std::min(kMR, mc - i);
        float* c = C + (m0 + i) * ldc + n0 + j;
        const MicroKernelFn kernel = panels == 2 ? micro.pair : micro.Pick(mr, nr);
        const int64_t width = panels == 2 ? kNR : MicroKernels::Width(nr);
        if (last && nr == width) {   // a full-width tile: its kernel covers it exactly
          const TileEpilogue ep{linear.row_bias ? linear.row_bias + m0 + i : nullptr,
                                linear.col_bias ? linear.col_bias + n0 + j : nullptr,
                                linear.residual ? linear.residual + (m0 + i) * linear.ld_residual + n0 + j : nullptr,
                                linear.ld_residual, linear.act,
                                linear.multiplier ? linear.multiplier + (m0 + i) * linear.ld_multiplier + n0 + j
                                                  : nullptr,
                                linear.ld_multiplier};
          kernel(kc, a_block + i * a_step, a.lda, bp, c, ldc, mr, nr, accumulate, &ep, pf);
          return;
        }
        kernel(kc, a_block + i * a_step, a.lda, bp, c, ldc, mr, nr, accumulate, nullptr, pf);
        if (last) ApplyEpilogue(C, ldc, m0 + i, mr, n0 + j, nr, linear);
      };
      if (kc <= kRowPanelOrderKC) {
        // Shallow products (1x1 convolutions over 16-48 channels): C and the residual, not A and B, are
        // most of the traffic. A row panel stays in L1 while the B block streams from L2 panel after panel,
        // so C is written (and the residual read) along its rows, in sequences the hardware prefetchers
        // follow. MobileNetV2's 16-channel expansion: 0.47-0.62x the time of the order below (A/B, cold
        // and warm caches). From 64 channels on, with the four-panel tile, the order below is faster
        // (ResNet-50's 64-channel 1x1 layers 0.97x).
        for (int64_t i = 0; i < mc; i += kMR)
          for (int64_t j = 0; j < ncur; j += micro.Step(ncur - j)) tile(i, j);
      } else {
        // A B panel stays in L1 while the row panels of the A block stream past it from L2. A pre-packed
        // weight's next panel is still in L3 or memory: each tile prefetches its share of that panel
        // (non-temporal), spread over its depth, so the panel's first tile does not wait on it (0.85-0.9x the time of BERT's
        // and the decoder's projections at 128 rows; convolutions that pack B per run into L2 skip this).
        const int64_t a_panels = (mc + kMR - 1) / kMR;
        for (int64_t j = 0, step = 0; j < ncur; j += step) {
          step = micro.Step(ncur - j);   // the next tile's panels follow this tile's
          const char* next = j + step < ncur ? reinterpret_cast<const char*>(b_block + (j + step) / kNR * kc * kNR)
                                             : nullptr;
          int64_t next_kc = kc;
          if (!next && b.packed && m0 + mc >= r_end && k0 + kc < K) {
            // The block's last tile: the next K block's first panels (a 7x7 layer's 2048 x 512 weights stream
            // from memory block after block: 0.9x the time of waiting for each block's first panel)
            next_kc = std::min(kKC, K - k0 - kc);
            next = reinterpret_cast<const char*>(b.packed + (k0 + kc) * n_padded_total + (n0 / kNR) * next_kc * kNR);
          }
          // the next tile's panels, as many as this tile's (the block's last tile may take fewer)
          const int64_t panel_lines = next_kc * step * static_cast<int64_t>(sizeof(float)) / 64;
          const int64_t lines_per_tile = b.packed ? (panel_lines + a_panels - 1) / a_panels : 0;
          for (int64_t i = 0, panels = 1; i < mc; i += panels * kMR) {
            panels = micro.pair && step == kNR && i + 2 * kMR <= mc ? 2 : 1;   // the narrow last tile: pairs
            if (next && lines_per_tile) {
              const int64_t l0 = i / kMR * lines_per_tile, l1 = std::min(panel_lines, l0 + panels * lines_per_tile);
              next_panel = {next + l0 * 64, std::max<int64_t>(0, l1 - l0), b_once};
            }
            tile(i, j, panels);
            next_panel.lines = 0;
          }
        }
      }
      // Activations that are not a compare (GELU, SiLU, sigmoid, ...) run once over the block while it
      // is in L2, in long vectorised rows rather than per 6 x 16 tile.
      if (last && !in_register) ApplyEpilogue(C, ldc, m0, mc, n0, ncur, act_only);
    }
  };
  auto rows_of = [&](int64_t g, int64_t& r_begin, int64_t& r_end) {   // on register-tile boundaries
    r_begin = g * m_tiles / m_groups * kMR;
    r_end = std::min(M, (g + 1) * m_tiles / m_groups * kMR);
  };
  const int64_t tasks = n_blocks * m_groups;

  if (!b.packed && m_groups > 1 && pool) {
    // Few columns, rows split across threads: the B block is packed once per K block by all threads
    // together (panels split between them), then every row range multiplies with it.
    thread_local CacheLineVector<float> shared_b;
    if (shared_b.size() < static_cast<size_t>(kKC * n_padded_total)) shared_b.resize(kKC * n_padded_total);
    float* sb = shared_b.data();
    for (int64_t k0 = 0; k0 < K; k0 += kKC) {
      const int64_t kc = std::min(kKC, K - k0);
      pool->ParallelFor(n_tiles, 1, [&](int64_t pb, int64_t pe) {
        b.packer->Pack(k0, kc, pb * kNR, std::min(N, pe * kNR) - pb * kNR, sb + pb * kc * kNR);
      });
      pool->ParallelFor(tasks, 1, [&](int64_t tb, int64_t te) {
        for (int64_t t = tb; t < te; ++t) {
          const int64_t nb = t / m_groups, n0 = nb * nc, ncur = std::min(nc, N - n0);
          int64_t r_begin, r_end;
          rows_of(t % m_groups, r_begin, r_end);
          compute_block(k0, kc, r_begin, r_end, n0, ncur, sb + (n0 / kNR) * kc * kNR, NextBlock{});
        }
      });
    }
    return;
  }

  auto task = [&](int64_t tb, int64_t te) {
    thread_local CacheLineVector<float> local_b;
    if (!b.packed && local_b.size() < static_cast<size_t>(kKC * nc)) local_b.resize(kKC * nc);
    for (int64_t t = tb; t < te; ++t) {
      const int64_t nb = t / m_groups, n0 = nb * nc, ncur = std::min(nc, N - n0);
      int64_t r_begin, r_end;
      rows_of(t % m_groups, r_begin, r_end);
      for (int64_t k0 = 0; k0 < K; k0 += kKC) {
        const int64_t kc = std::min(kKC, K - k0);
        const float* b_block;
        if (b.packed) {
          b_block = b.packed + k0 * n_padded_total + (n0 / kNR) * kc * kNR;
        } else {
          b.packer->Pack(k0, kc, n0, ncur, local_b.data());
          b_block = local_b.data();
        }
        NextBlock next;
        if (!b.packed) {
          if (k0 + kc < K) {
            next = {k0 + kc, std::min(kKC, K - k0 - kc), n0, ncur, true};
          } else if (t + 1 < te && m_groups == 1) {
            const int64_t n0n = (t + 1) * nc;
            next = {0, std::min(kKC, K), n0n, std::min(nc, N - n0n), true};
          }
        }
        compute_block(k0, kc, r_begin, r_end, n0, ncur, b_block, next);
      }
    }
  };
  if (pool && tasks > 1) pool->ParallelFor(tasks, 1, task); else task(0, tasks);
}

void GemmFromMatrices(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                      int64_t lda, const float* packed_a, const float* B, int64_t ldb, const float* packed_b, float beta,
                      float* C, int64_t ldc, const GemmEpilogue& epilogue, ThreadPool* pool) {
  ASource as;
  as.packed = packed_a;
  as.trans = trans_a;
  as.A = A;
  as.lda = lda;
  as.alpha = alpha;
  MatrixBPacker packer(trans_b, B, ldb);
  BSource bs;
  bs.packed = packed_b;
  bs.packer = &packer;
  GemmDriver(as, bs, M, N, K, beta, C, ldc, epilogue, pool);
}

}  // namespace

void Sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc, const GemmEpilogue& epilogue,
           ThreadPool* pool) {
  GemmFromMatrices(trans_a, trans_b, M, N, K, alpha, A, lda, nullptr, B, ldb, nullptr, beta, C, ldc, epilogue, pool);
}

int64_t PackedAFloats(int64_t M, int64_t K) { return std::max<int64_t>(1, (M + kMR - 1) / kMR * kMR * K); }

void PackAInto(bool trans_a, int64_t M, int64_t K, float alpha, const float* A, int64_t lda, float* dst) {
  // Layout: per k block of kKC, every MR-row panel of all M rows, as PackA writes them.
  const int64_t m_padded = (M + kMR - 1) / kMR * kMR;
  for (int64_t k0 = 0; k0 < K; k0 += kKC) {
    const int64_t kc = std::min(kKC, K - k0);
    PackA(trans_a, A, lda, 0, M, k0, kc, alpha, dst + k0 * m_padded);
  }
}

std::vector<float> PackAOnce(bool trans_a, int64_t M, int64_t K, float alpha, const float* A, int64_t lda) {
  std::vector<float> packed(static_cast<size_t>(PackedAFloats(M, K)));
  PackAInto(trans_a, M, K, alpha, A, lda, packed.data());
  return packed;
}

void SgemmPackedTiles(const float* packed_a, const float* packed_b, int64_t M, int64_t N, int64_t K, bool accumulate,
                      float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    if (!accumulate)
      for (int64_t i = 0; i < M; ++i) std::fill(C + i * ldc, C + i * ldc + N, 0.f);
    return;
  }
  const MicroKernels& micro = Isa();
  const int64_t m_padded = (M + kMR - 1) / kMR * kMR, n_padded = (N + kNR - 1) / kNR * kNR;
  for (int64_t k0 = 0; k0 < K; k0 += kKC) {
    const int64_t kc = std::min(kKC, K - k0);
    const float* a_block = packed_a + k0 * m_padded;
    const float* b_block = packed_b + k0 * n_padded;
    const bool acc = accumulate || k0 > 0;
    auto tile = [&](int64_t i, int64_t j) {
      const int64_t mr = std::min(kMR, M - i), nr = std::min(micro.Step(N - j), N - j);
      micro.Pick(mr, nr)(kc, a_block + i * kc, 0, b_block + j * kc, C + i * ldc + j, ldc, mr, nr, acc, nullptr,
                         nullptr);
    };
    if (kc <= kShallowKC) {   // an A panel stays in L1 while the B panels pass (the driver's shallow order)
      for (int64_t i = 0; i < M; i += kMR)
        for (int64_t j = 0; j < N; j += micro.Step(N - j)) tile(i, j);
    } else {   // a B panel stays in L1 while the A panels pass
      for (int64_t j = 0; j < N; j += micro.Step(N - j))
        for (int64_t i = 0; i < M; i += kMR) tile(i, j);
    }
  }
}

void SgemmPackedA(const float* packed_a, int64_t M, int64_t N, int64_t K, bool trans_b, const float* B, int64_t ldb,
                  float beta, float* C, int64_t ldc, const GemmEpilogue& epilogue, ThreadPool* pool) {
  GemmFromMatrices(false, trans_b, M, N, K, 1.f, nullptr, 0, packed_a, B, ldb, nullptr, beta, C, ldc, epilogue, pool);
}

void SgemmPackedAWithPacker(const float* packed_a, int64_t M, int64_t N, int64_t K, const BPacker& b, float* C,
                            int64_t ldc, const GemmEpilogue& epilogue, ThreadPool* pool) {
  ASource as;
  as.packed = packed_a;
  BSource bs;
  bs.packer = &b;
  GemmDriver(as, bs, M, N, K, 0.f, C, ldc, epilogue, pool);
}

void SgemmWithBPacker(bool trans_a, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                      const BPacker& b, float beta, float* C, int64_t ldc, const GemmEpilogue& epilogue,
                      ThreadPool* pool) {
  ASource as;
  as.trans = trans_a;
  as.A = A;
  as.lda = lda;
  as.alpha = alpha;
  BSource bs;
  bs.packer = &b;
  GemmDriver(as, bs, M, N, K, beta, C, ldc, epilogue, pool);
}

int64_t PackedBFloats(int64_t K, int64_t N) { return std::max<int64_t>(1, (N + kNR - 1) / kNR * kNR * K); }

void PackBInto(bool trans_b, int64_t K, int64_t N, const float* B, int64_t ldb, float* dst) {
  // Layout: per k block of kKC, every NR-column panel of all N columns, as PackB writes them.
  const int64_t n_padded = (N + kNR - 1) / kNR * kNR;
  for (int64_t k0 = 0; k0 < K; k0 += kKC) {
    const int64_t kc = std::min(kKC, K - k0);
    PackB(trans_b, B, ldb, k0, kc, 0, N, dst + k0 * n_padded);
  }
}

WeightVector<float> PackBOnce(bool trans_b, int64_t K, int64_t N, const float* B, int64_t ldb) {
  WeightVector<float> packed(static_cast<size_t>(PackedBFloats(K, N)));
  PackBInto(trans_b, K, N, B, ldb, packed.data());
  return packed;
}

void SgemmPackedB(bool trans_a, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                  const float* packed_b, float beta, float* C, int64_t ldc, const GemmEpilogue& epilogue,
                  ThreadPool* pool) {
  GemmFromMatrices(trans_a, false, M, N, K, alpha, A, lda, nullptr, nullptr, 0, packed_b, beta, C, ldc, epilogue, pool);
}

}  // namespace lite
