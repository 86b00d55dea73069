// The depth loop the pixel-major convolution tiles share (cpu/conv/bf16_pixel_conv.cc: bf16 pairs into float32 sums,
// cpu/quantized/u8_pixel_conv.cc: uint8 quads into int32 sums): R output pixels x 32 output channels, over `segments` runs
// of `units` depth units (4 bytes of each pixel's input row: a bf16 pair or a uint8 quad), run s reading pixel r's
// row at xp + (off[r * taps + s] + c0) elements; b holds the panel's units for the whole block, 128 bytes each (two
// 64-byte vectors: channels 0-15, then 16-31). A run whose R rows are all the zero row (a tap in the padding for
// every pixel of the tile) is skipped. Dot::Step(acc, x, w) is the instruction: acc += x . w per 32-bit lane.
#pragma once
#include <cstdint>
#include <cstring>

#include "cpu/gemm/spread_prefetch.h"

#ifdef LITE_X86_SIMD
#include <immintrin.h>

namespace lite {

// One depth unit of the tile: each row's 4 bytes at row[r] + at (ANDed with mask) against the unit's two weight vectors
// (kNarrow: the first only, for a panel of at most 16 channels; hi is left as it was).
template <int R, typename Dot, typename V, bool kNarrow = false>
__attribute__((always_inline, target("avx512f"))) inline void PixelDepthUnit(V (&lo)[R], V (&hi)[R],
                                                                            const uint8_t* const (&row)[R], int64_t at,
                                                                            const uint8_t* b, uint32_t mask) {
  const __m512i b0 = _mm512_loadu_si512(b);
  const __m512i b1 = kNarrow ? b0 : _mm512_loadu_si512(b + 64);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    uint32_t v;
    std::memcpy(&v, row[r] + at, 4);
    const __m512i xv = _mm512_set1_epi32(static_cast<int32_t>(v & mask));
    lo[r] = Dot::Step(lo[r], xv, b0);
    if (!kNarrow) hi[r] = Dot::Step(hi[r], xv, b1);
  }
}

// `prefetch` lines from `next` are fetched into L1 a few at a time over the loop (the next panel's weights: see
// ForEachPixelTile). `last_mask` is ANDed into each run's last unit of input (a run of an odd number of bf16 values:
// the value past its end, whose weight is zero, must not reach the products, where an infinity would make a NaN).
// kNarrow: a panel of at most 16 channels (its upper 16 weights zero): the products of the upper half are skipped.
template <int R, int kElemBytes, typename Dot, typename V, bool kNarrow = false>
__attribute__((always_inline, target("avx512f"))) inline void PixelDepthLoop(
    V (&lo)[R], V (&hi)[R], const void* xp, const int32_t* off, int64_t taps, int32_t zero_row, int64_t segments,
    int64_t units, int64_t c0, const void* weights, const char* next = nullptr, int64_t prefetch = 0,
    uint32_t last_mask = 0xFFFFFFFFu) {
  const uint8_t* x = static_cast<const uint8_t*>(xp);
  const uint8_t* b = static_cast<const uint8_t*>(weights);
  SpreadPrefetch<3> pf(next, prefetch, 8, segments * units);   // a few lines every 8 units
  for (int64_t s = 0; s < segments; ++s) {
    pf.Issue();
    bool padding = true;
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) padding &= off[r * taps + s] == zero_row;
    if (padding) {
      b += units * 128;
      continue;
    }
    const uint8_t* row[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) row[r] = x + (off[r * taps + s] + c0) * kElemBytes;
    const uint8_t* const (&rows)[R] = row;
    const int64_t whole = last_mask == 0xFFFFFFFFu ? units : units - 1;
    for (int64_t u = 0; u < whole; ++u, b += 128) {
      if ((u & 7) == 7) pf.Issue();
      PixelDepthUnit<R, Dot, V, kNarrow>(lo, hi, rows, 4 * u, b, 0xFFFFFFFFu);
    }
    if (whole < units) {
      PixelDepthUnit<R, Dot, V, kNarrow>(lo, hi, rows, 4 * whole, b, last_mask);
      b += 128;
    }
  }
}

// A depth block's sums to its partial-sum scratch and back, in register order (row r's 32 lanes at
// partial + 128 r bytes: two plain loads or stores a row).
template <int R, typename V>
__attribute__((always_inline)) inline void StorePartialSums(const V (&lo)[R], const V (&hi)[R], void* partial) {
  char* at = static_cast<char*>(partial);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    std::memcpy(at + r * 128, &lo[r], 64);
    std::memcpy(at + r * 128 + 64, &hi[r], 64);
  }
}

template <int R, typename V>
__attribute__((always_inline)) inline void LoadPartialSums(V (&lo)[R], V (&hi)[R], const void* partial) {
  const char* at = static_cast<const char*>(partial);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    std::memcpy(&lo[r], at + r * 128, 64);
    std::memcpy(&hi[r], at + r * 128 + 64, 64);
  }
}

}  // namespace lite
#endif
