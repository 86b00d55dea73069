// What one AMX step of a bf16 pixel-major 3x3 Conv costs, part by part (issue 36): ResNet-50's 3x3 Conv of 256 channels
// on a 14x14 plane (7 tiles of 28 pixels, 8 panels of 32 channels, 9 taps x 8 steps of 16 depth pairs: 4032 steps
// of four TDPBF16PS), in the loop order and data placement of cpu/conv/bf16_pixel_conv.cc's AmxPixelTile, one part
// at a time, and the alternatives tried:
//   0: A and B tiles from fixed 2 KB buffers (L1): the tile products alone
//   1: B from the real weight panels (147 KB a panel: L2), A fixed in L1
//   2: A gathered per step from the input's pixel rows (28 rows x 64 bytes) into L1, B fixed
//   3: both (what the kernel does, less its padding-tap skipping and epilogue)
//   4-7: tile-major: per tile, mode - 3 taps' A gathered once into L1, then every panel, its sums kept in memory
//        between depth blocks by tile loads / stores
//   8: A read in place from a zero-padded 16x16 copy of the input (halves = output rows, 14 of 16 rows used), B from
//      the panels; 9: the same with B fixed in L1
//   10: per tile, the whole depth's A gathered once into a contiguous buffer (L2), then every panel: A and B both
//       streaming from L2
//   11 / 12: the padded copy's A in place, loops panel > tap (1 / 3 taps) > tile so that B stays in L1 across the
//       tiles, each tile's sums stored and reloaded between taps
// On the 2-vCPU Sapphire Rapids VM, 2026-12-05 (ns a step): 0: 22-24, 1: 37-42, 2: 42, 3: 59-64, 4: 50-56,
// 5-7: 57-65, 8: 71-72, 9: 30, 10: 88-95, 11: 117, 12: 89. Tile loads want L1: one operand from L2 costs ~13-18 ns
// a step, both from L2 40-70; gathering A into L1 right before its step (3) beats reading it in place from L2 (8)
// (9 is fast because one tile's taps reread ~32 KB of the copy: L1); swapping a tile's sums through memory every few
// steps costs more than it saves (11, 12). The kernel in
// the model: ~330 us a layer; oneDNN's primitive 157 us alone, 185-233 in the model's order
// (benchmarks/onednn_convs.py).
// Build (after ./build.sh): g++ -O2 -std=c++17 -Ilite/src -Ilite/include -Ibuild/cp311-cp311-linux_x86_64/generated
//   benchmarks/amx/pixel_step_costs.cc build/cp311-cp311-linux_x86_64/liblite_core.a -lpthread -o /tmp/step_costs
// Run: /tmp/step_costs MODE (needs AMX-BF16).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <vector>
#include <algorithm>
#include <immintrin.h>
#include "cpu/amx.h"
#include "cpu/isa_dispatch.h"
using namespace lite;
// 3x3 conv, C=M=256 on 14x14 (pad 1): 7 tiles of 28 px, 8 panels of 32 ch, 9 taps x 8 steps.
// mode bit0: B walks the real panels (else one fixed 2 KB B); bit1: A gathered per step from the input (else fixed A in L1)
__attribute__((target("avx512f,avx512bw"))) int main(int argc, char** argv) {
  CpuHasAmxBf16();
  const int mode = atoi(argv[1]);
  const int C = 256, HW = 14, P = 196, taps = 9, panels = 8, tiles = 7, rows = 28;
  const long K = taps * C, pairs = K / 2;
  std::vector<uint16_t> in((P + 1) * C, 0x3f80), w(panels * pairs * 64, 0x3f80);
  std::vector<int32_t> off(P * taps);
  for (int p = 0; p < P; ++p) for (int t = 0; t < taps; ++t) {
    int oh = p / HW, ow = p % HW, ih = oh + t / 3 - 1, iw = ow + t % 3 - 1;
    off[p * taps + t] = (ih >= 0 && ih < HW && iw >= 0 && iw < HW) ? (ih * HW + iw) * C : P * C;
  }
  alignas(64) static uint16_t abuf[2][1024]; alignas(64) static uint16_t bfix[1024]; alignas(64) static float sums[1024];
  double best = 1e9;
  long steps_total = 0;
  for (int rep = 0; rep < 200; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    AmxConfigureTiles();
    steps_total = 0;
    for (int q = 0; q < (mode >= 4 ? 0 : panels); ++q)
      for (int ti = 0; ti < tiles; ++ti) {
        AmxZeroSums();
        int buf = 0;
        for (int t = 0; t < taps; ++t)
          for (int s8 = 0; s8 < 8; ++s8) {
            const uint16_t* a = abuf[0];
            if (mode & 2) {
              for (int r = 0; r < rows; ++r)
                _mm512_store_si512(abuf[buf] + r * 32, _mm512_loadu_si512(in.data() + off[(ti * rows + r) * taps + t] + s8 * 32));
              a = abuf[buf]; buf ^= 1;
            }
            const uint16_t* bs = (mode & 1) ? w.data() + q * pairs * 64 + (t * 128 + s8 * 16) * 64 : bfix;
            AmxStep<AmxDot::kBf16>(a, a + 512, 64, bs, bs + 32, 128, true);
            ++steps_total;
          }
        AmxStoreSums(sums, true);
      }
    if (mode == 8 || mode == 9) {   // padded 16x16 input, halves = output rows (14 valid), A in place
      static std::vector<uint16_t> pin(18 * 16 * 256, 0x3f80);
      steps_total = 0;
      for (int q = 0; q < panels; ++q)
        for (int ti = 0; ti < tiles; ++ti) {
          AmxZeroSums();
          for (int t = 0; t < taps; ++t)
            for (int s8 = 0; s8 < 8; ++s8) {
              const int kh = t / 3, kw = t % 3, oh0 = 2 * ti;
              const uint16_t* a0 = pin.data() + ((oh0 + kh) * 16 + kw) * 256 + s8 * 32;
              const uint16_t* a1 = a0 + 16 * 256;
              const uint16_t* bs = mode == 8 ? w.data() + q * pairs * 64 + (t * 128 + s8 * 16) * 64 : bfix;
              AmxStep<AmxDot::kBf16>(a0, a1, 512, bs, bs + 32, 128, true, 512);
              ++steps_total;
            }
          AmxStoreSums(sums, true);
        }
    }
    if (mode == 11 || mode == 12) {   // padded input, A in place; per (panel, tap) B in L1 across the tiles; sums swapped
      static std::vector<uint16_t> pin(18 * 16 * 256, 0x3f80);
      alignas(64) static float cpart[7][1024];
      steps_total = 0;
      const int TB = mode == 11 ? 1 : 3;
      for (int q = 0; q < panels; ++q)
        for (int t0 = 0; t0 < taps; t0 += TB)
          for (int ti = 0; ti < tiles; ++ti) {
            if (t0 == 0) { AmxZeroSums(); } else {
              LITE_TILE_LOAD(0, cpart[ti], 128); LITE_TILE_LOAD(1, cpart[ti] + 16, 128);
              LITE_TILE_LOAD(2, cpart[ti] + 512, 128); LITE_TILE_LOAD(3, cpart[ti] + 528, 128);
            }
            for (int t = t0; t < t0 + TB; ++t)
            for (int s8 = 0; s8 < 8; ++s8) {
              const int kh = t / 3, kw = t % 3, oh0 = 2 * ti;
              const uint16_t* a0 = pin.data() + ((oh0 + kh) * 16 + kw) * 256 + s8 * 32;
              const uint16_t* bs = w.data() + q * pairs * 64 + (t * 128 + s8 * 16) * 64;
              AmxStep<AmxDot::kBf16>(a0, a0 + 16 * 256, 512, bs, bs + 32, 128, true, 512);
              ++steps_total;
            }
            AmxStoreSums(cpart[ti], true);
          }
    }
    if (mode == 10) {   // per tile: A pre-gathered once into a contiguous buffer (72 steps x 2 KB), then every panel
      static std::vector<uint16_t> ag(72 * 1024);
      steps_total = 0;
      for (int ti = 0; ti < tiles; ++ti) {
        for (int t = 0; t < taps; ++t)
          for (int s8 = 0; s8 < 8; ++s8)
            for (int r = 0; r < rows; ++r)
              _mm512_storeu_si512(ag.data() + (t * 8 + s8) * 1024 + r * 32,
                                 _mm512_loadu_si512(in.data() + off[(ti * rows + r) * taps + t] + s8 * 32));
        for (int q = 0; q < panels; ++q) {
          AmxZeroSums();
          for (int st = 0; st < 72; ++st) {
            const uint16_t* bs = w.data() + q * pairs * 64 + st * 16 * 64;
            const uint16_t* a = ag.data() + st * 1024;
            AmxStep<AmxDot::kBf16>(a, a + 512, 64, bs, bs + 32, 128, true);
            ++steps_total;
          }
          AmxStoreSums(sums, true);
        }
      }
    }
    if (mode >= 4 && mode < 8) {   // tile-major: per (tile, tap) gather once, then every panel with C partials in tile loads/stores
      steps_total = 0;
      alignas(64) static uint16_t ablk[32][1024];
      alignas(64) static float cpart[8][1024];
      const int TB = mode - 3;   // taps per depth block
      for (int ti = 0; ti < tiles; ++ti)
        for (int t0 = 0; t0 < taps; t0 += TB) {
          const int t1 = std::min(taps, t0 + TB);
          for (int t = t0; t < t1; ++t)
            for (int s8 = 0; s8 < 8; ++s8)
              for (int r = 0; r < rows; ++r)
                _mm512_store_si512(ablk[(t - t0) * 8 + s8] + r * 32, _mm512_loadu_si512(in.data() + off[(ti * rows + r) * taps + t] + s8 * 32));
          for (int q = 0; q < panels; ++q) {
            if (t0 == 0) { AmxZeroSums(); } else {
              LITE_TILE_LOAD(0, cpart[q], 128); LITE_TILE_LOAD(1, cpart[q] + 16, 128);
              LITE_TILE_LOAD(2, cpart[q] + 512, 128); LITE_TILE_LOAD(3, cpart[q] + 528, 128);
            }
            for (int t = t0; t < t1; ++t)
            for (int s8 = 0; s8 < 8; ++s8) {
              const uint16_t* bs = w.data() + q * pairs * 64 + (t * 128 + s8 * 16) * 64;
              const uint16_t* a = ablk[(t - t0) * 8 + s8];
              AmxStep<AmxDot::kBf16>(a, a + 512, 64, bs, bs + 32, 128, true);
              ++steps_total;
            }
            AmxStoreSums(cpart[q], true);
          }
        }
    }
    AmxRelease();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s < best) best = s;
  }
  std::printf("mode %d: %.1f us per layer, %.1f ns per step (%ld steps)\n", mode, best * 1e6, best * 1e9 / steps_total, steps_total);
}
