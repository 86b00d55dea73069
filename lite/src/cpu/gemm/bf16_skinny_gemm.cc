// Bf16SkinnyGemm (cpu/gemm/bf16_gemm.h): a decode step's few rows times a bf16 weight in the Bf16PanelsB layout. Each
// 64-byte run of a panel (16 columns x a depth pair) meets every row in one vdpbf16ps, so the weight streams through
// once at its memory rate; the rows' activations, rounded to bf16 once, are broadcast a pair at a time.
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

#include "cpu/gemm/bf16_gemm.h"
#include "cpu/gemm/spread_prefetch.h"
#include "cpu/isa_dispatch.h"

#ifdef LITE_X86_SIMD
#include <immintrin.h>
#endif

namespace lite {

#ifdef LITE_X86_SIMD
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16")
namespace {

#include "cpu/simd/unroll.h"

inline __m512bh Pair(const uint16_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return (__m512bh)_mm512_set1_epi32(v);
}

// Panels [q0, q1) (32 columns each) for M rows of bf16 activations (ld values apart).
template <int M>
void PanelRange(const Bf16PanelsB& b, int64_t q0, int64_t q1, const uint16_t* a, int64_t ld, float* C, int64_t ldc,
                const GemmEpilogue& ep) {
  for (int64_t q = q0; q < q1; ++q) {
    const uint16_t* panel = b.data.data() + q * b.pairs * 64;
    // Two chains per 16 columns (even and odd pairs), so vdpbf16ps's latency never holds up the stream.
    __m512 acc[2][2][M];
    Unroll<M>([&](auto m) __attribute__((always_inline)) {
      acc[0][0][m] = acc[0][1][m] = acc[1][0][m] = acc[1][1][m] = _mm512_setzero_ps();
    });
    int64_t kp = 0;
    for (; kp + 2 <= b.pairs; kp += 2) {
      const uint16_t* w = panel + kp * 64;
      Unroll<4>([&](auto i) __attribute__((always_inline)) { FetchAhead(w + 32 * i); });
      const __m512bh w00 = (__m512bh)_mm512_loadu_si512(w), w01 = (__m512bh)_mm512_loadu_si512(w + 32);
      const __m512bh w10 = (__m512bh)_mm512_loadu_si512(w + 64), w11 = (__m512bh)_mm512_loadu_si512(w + 96);
      Unroll<M>([&](auto m) __attribute__((always_inline)) {
        const __m512bh x0 = Pair(a + m * ld + 2 * kp), x1 = Pair(a + m * ld + 2 * kp + 2);
        acc[0][0][m] = _mm512_dpbf16_ps(acc[0][0][m], w00, x0);
        acc[0][1][m] = _mm512_dpbf16_ps(acc[0][1][m], w01, x0);
        acc[1][0][m] = _mm512_dpbf16_ps(acc[1][0][m], w10, x1);
        acc[1][1][m] = _mm512_dpbf16_ps(acc[1][1][m], w11, x1);
      });
    }
    if (kp < b.pairs) {
      const uint16_t* w = panel + kp * 64;
      const __m512bh w00 = (__m512bh)_mm512_loadu_si512(w), w01 = (__m512bh)_mm512_loadu_si512(w + 32);
      Unroll<M>([&](auto m) __attribute__((always_inline)) {
        const __m512bh x0 = Pair(a + m * ld + 2 * kp);
        acc[0][0][m] = _mm512_dpbf16_ps(acc[0][0][m], w00, x0);
        acc[0][1][m] = _mm512_dpbf16_ps(acc[0][1][m], w01, x0);
      });
    }
    for (int half = 0; half < 2; ++half) {
      const int64_t col0 = q * kBf16NR + half * 16;
      if (col0 >= b.N) break;
      alignas(64) float tile[M * 16];
      Unroll<M>([&](auto m) __attribute__((always_inline)) {
        _mm512_store_ps(tile + m * 16, _mm512_add_ps(acc[0][half][m], acc[1][half][m]));
      });
      StoreTileWithEpilogue(tile, M, col0, std::min<int64_t>(16, b.N - col0), C, ldc, ep);
    }
  }
}

using RangeFn = void (*)(const Bf16PanelsB&, int64_t, int64_t, const uint16_t*, int64_t, float*, int64_t,
                         const GemmEpilogue&);

RangeFn PickRange(int64_t rows) {
  switch (rows) {
    case 1: return PanelRange<1>;
    case 2: return PanelRange<2>;
    case 3: return PanelRange<3>;
    case 4: return PanelRange<4>;
    case 5: return PanelRange<5>;
    case 6: return PanelRange<6>;
    case 7: return PanelRange<7>;
    default: return PanelRange<8>;
  }
}

}  // namespace
#pragma GCC pop_options
#endif

void Bf16SkinnyGemm(int64_t M, const float* A, int64_t lda, const Bf16PanelsB& b, float* C, int64_t ldc,
                    const GemmEpilogue& ep, ThreadPool* pool) {
  if (M <= 0 || b.N <= 0) return;
  if (M > kBf16SkinnyMaxRows) throw std::invalid_argument("Bf16SkinnyGemm takes up to 8 rows");
  // float16 panels (ARM64), and ARM64's bf16: the general GEMM's tiles (a row block of up to 8 rows reads each
  // panel once there too).
  if (b.format == HalfFormat::kFp16) return Bf16GemmPackedB(false, M, b.N, b.K, 1.f, A, lda, b, 0.f, C, ldc, ep, pool);
  if (!Bf16GemmAvailable()) throw std::logic_error("Bf16SkinnyGemm needs AVX512_BF16 or ARM BF16");
#ifndef LITE_X86_SIMD
  return Bf16GemmPackedB(false, M, b.N, b.K, 1.f, A, lda, b, 0.f, C, ldc, ep, pool);
#else
  const int64_t ld = b.pairs * 2 + 2;   // one spare pair: the odd-pair loads never read past a row
  thread_local std::vector<uint16_t> rows;
  rows.assign(static_cast<size_t>(M * ld), 0);
  for (int64_t m = 0; m < M; ++m) FloatsToBf16(A + m * lda, b.K, ld, rows.data() + m * ld);
  const RangeFn fn = PickRange(M);
  const int64_t panels = (b.N + kBf16NR - 1) / kBf16NR;
  const uint16_t* activations = rows.data();   // this thread's buffer, read by the pool's threads
  auto run = [&](int64_t q0, int64_t q1) { fn(b, q0, q1, activations, ld, C, ldc, ep); };
  const int64_t threads = pool ? pool->size() : 1;
  const int64_t grain = std::max<int64_t>(2, panels / (8 * threads));
  if (pool) {
    pool->ParallelFor(panels, grain, run);
  } else {
    run(0, panels);
  }
#endif
}

}  // namespace lite
