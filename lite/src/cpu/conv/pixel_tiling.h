// The output-pixel tiling and depth blocking shared by the pixel-major convolutions (cpu/conv/bf16_pixel_conv.h,
// cpu/quantized/u8_pixel_conv.h): which output pixels a register tile computes together, which input row each (pixel, tap)
// reads, and how the depth (taps x channels) is cut into blocks whose weights stay in L1.
#pragma once
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "core/thread_pool.h"
#include "cpu/amx.h"
#include "cpu/conv/conv_geometry.h"
#include "cpu/isa_dispatch.h"

#ifdef LITE_X86_SIMD
#include <immintrin.h>
#endif

namespace lite {

// A run of consecutive positions computed by one register tile.
struct PixelTileSpan {
  int64_t pos = 0, rows = 0;
};

struct PixelTiling {
  std::vector<int32_t> pixel_of;     // [position]: the output pixel computed there
  std::vector<PixelTileSpan> tiles;
  std::vector<int32_t> offsets;      // [position][tap]: the element offset of the input row it reads
  int32_t zero_row = 0;              // the offset of the padding row after the input's H x W rows
};

// Tiles of at most max_rows output pixels that never mix pixels whose padding taps differ, so that a tile's taps
// in the padding are padding for all its rows and can be skipped: the rows whose filter reaches into the top or
// bottom padding are grouped by the filter rows they lose (whole plane rows), the others by the filter columns they
// lose (left and right strips, interior). A 14x14 plane's 3x3 taps are 8.8% padding, a 28x28 one's 4.5%. On a plane
// 7 wide the strips would be 5-pixel tiles (0.76 of 8 rows' rate) and cost what they skip, so there the tiles are
// its rows. `ld`: elements between the input's pixel rows.
// by_padding false: the pixels in raster order, cut evenly into tiles of at most max_rows (AMX's 32-pixel tiles: a
// padding class of a few pixels, or a 7-pixel row, would leave most of a 16-row tile empty).
PixelTiling TileOutputPixels(const ConvGeometry& g, int64_t ld, int64_t max_rows, bool by_padding = true);

// Positions [begin, end) as tiles of at most max_rows, balanced (25 pixels: 7 + 6 + 6 + 6, not 8 + 8 + 8 + 1: a
// tile of under 6 rows has too few accumulator chains to cover the dot product's latency).
void SplitIntoTiles(int64_t begin, int64_t end, int64_t max_rows, std::vector<PixelTileSpan>* tiles);

// What an AMX tile (up to 32 rows: two 16-row halves) needs to know of one offset column (a tap): whether every row
// reads the zero row (the tap is skipped) and, per half, the bytes between its rows' inputs where they lie evenly
// apart (the half's A tile is then loaded straight from the input; 0: gathered). Fixed by the geometry, so the Convs
// make them once, not per tile and depth block (scanning 64 offsets per tap held ResNet-50 bf16's 64-channel 3x3
// Convs: 14.3-15.1 -> 13.5-13.7 ms at one thread).
struct AmxTapRows {
  int32_t padding = 0;
  int32_t even[2] = {0, 0};
};

// [tile][column] for tiles over `offsets` ([position][column], `stride` columns), elements of elem_bytes.
std::vector<AmxTapRows> AmxTapRowsOf(const std::vector<PixelTileSpan>& tiles, const int32_t* offsets, int64_t stride,
                                     int32_t zero_row, int64_t elem_bytes);

#ifdef LITE_X86_SIMD
// The A tiles of one step of an AMX pixel tile (up to 32 output pixels: two 16-row tiles of 64 bytes a row), for the
// bf16 and the uint8 pixel-major Convs. A half whose rows' inputs lie evenly apart (`even[h]` bytes: AmxTapRows above)
// is read in place when `in_place` (a whole step); the others are gathered into `buf` (64 bytes a row): each row's
// elements under value_mask from its input at off[r * taps + s] + start (T elements), the rest zero. Sets the halves'
// tile bases and strides (bytes); returns whether `buf` was written.
template <typename T>
__attribute__((target("avx512f,avx512bw"))) inline bool AmxStepRows(const T* xp, const int32_t* off, int64_t taps,
                                                                    int64_t s, int64_t start, int64_t rows, bool two,
                                                                    bool in_place, const int32_t* even,
                                                                    __mmask64 value_mask, T* buf, const T* a_at[2],
                                                                    int64_t a_stride[2]) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2, "uint8 codes or bf16 values");
  constexpr int64_t kRow = 64 / sizeof(T);
  bool gathered = false;
  for (int h = 0; h < (two ? 2 : 1); ++h) {
    if (in_place && even[h]) {
      a_at[h] = xp + off[16 * h * taps + s] + start;
      a_stride[h] = even[h];
      continue;
    }
    for (int64_t r = 16 * h; r < std::min<int64_t>(rows, 16 * h + 16); ++r) {
      const T* src = xp + off[r * taps + s] + start;
      if constexpr (sizeof(T) == 1) {
        _mm512_store_si512(buf + r * kRow, _mm512_maskz_loadu_epi8(value_mask, src));
      } else {
        _mm512_store_si512(buf + r * kRow, _mm512_maskz_loadu_epi16(static_cast<__mmask32>(value_mask), src));
      }
    }
    a_at[h] = buf + 16 * h * kRow;
    a_stride[h] = 64;
    gathered = true;
  }
  return gathered;
}

#endif

// One depth block: `segments` runs of `units` depth units (pairs of bf16, quads of uint8), run s the channels
// [c0, c0 + units * unit_channels) of tap tap0 + s; its weights are the panel's units [unit0, unit0 + segments * units).
struct PixelDepthBlock {
  int64_t tap0 = 0, segments = 0, c0 = 0, units = 0, unit0 = 0;
};

// Whole taps per block while a tap has at most block_units units (split evenly), else parts of one tap.
std::vector<PixelDepthBlock> SplitPixelDepth(int64_t taps, int64_t tap_units, int64_t unit_channels,
                                             int64_t block_units);

}  // namespace lite

namespace lite {

constexpr int64_t kPixelPanelsPerTask = 4;   // 32-channel panels a task computes: 128 output channels
constexpr int64_t kPixelChunkRows = 256;     // output pixels per task: a 14x14 plane is one run, every weight block
                                             // read once for it (ResNet-50 bf16 0.977x / 0.966x the time of 192 at
                                             // one / two threads; 512 even)

// The task loop of the pixel-major Convs. Tasks are runs of whole tiles (about kPixelChunkRows pixels, more runs
// when there are too few for the threads) by groups of kPixelPanelsPerTask panels; each runs every depth block
// over its panels in turn, and each panel's block over its run of tiles. setup(d, q) makes what the tiles of depth
// block d and panel q share; tile(shared, d, q, t, weights, next, lines) runs tile t, whose panel-q weights of block
// d start at `weights` (the panels are panel_bytes apart, a block's units 128 bytes each). The next panel's block (or
// the next depth block's first) comes from L2 or beyond: each tile fetches its share of it (`lines` lines from
// `next`) into L1, spread over its depth loop, so that the first tile of the next does not stall (without: ResNet-50
// bf16 1.12x the time; into L2: 1.01x). In a burst before each tile the prefetches stalled the loop (a profile put
// 2.5% of ResNet-50 bf16's time on them): spread, ResNet-50 bf16 0.99x the time at one and two threads, its full
// int8 0.99x.
// `amx`: each thread's run of tasks holds the AMX tile registers (configured 16 x 64 bytes, released after).
// Lane: what one thread's run of tiles keeps from tile to tile (NoPixelLane: nothing), made at the run's start; with
// one, tile is called as tile(lane, shared, ...).
struct NoPixelLane {};
template <typename Lane = NoPixelLane, typename Setup, typename Tile>
void ForEachPixelTile(int64_t P, int64_t tile_count, const std::vector<PixelDepthBlock>& blocks, int64_t panels,
                      const void* weights, int64_t panel_bytes, ThreadPool* pool, const Setup& setup,
                      const Tile& tile, bool amx = false) {
  constexpr bool kLane = !std::is_same_v<Lane, NoPixelLane>;
  const char* w = static_cast<const char*>(weights);
  const int threads = pool ? pool->size() : 1;
  const int64_t col_blocks = (panels + kPixelPanelsPerTask - 1) / kPixelPanelsPerTask;
  int64_t chunks = (P + kPixelChunkRows - 1) / kPixelChunkRows;
  if (col_blocks * chunks < 2 * threads) chunks = (2 * threads + col_blocks - 1) / col_blocks;
  // As many tasks for every thread: a 56x56 plane's 13 runs of 256 pixels over 64 channels made 7 tasks for one
  // thread and 6 for the other; 14 runs of 224 share evenly.
  if ((col_blocks * chunks) % threads != 0) chunks = (chunks + threads - 1) / threads * threads;
  chunks = std::max<int64_t>(1, std::min(chunks, tile_count));
  auto task = [&](Lane& lane, int64_t t) {
    const int64_t q_begin = (t % col_blocks) * kPixelPanelsPerTask;
    const int64_t q_end = std::min(panels, q_begin + kPixelPanelsPerTask);
    const int64_t chunk = t / col_blocks, tile_begin = chunk * tile_count / chunks;
    const int64_t row_tiles = (chunk + 1) * tile_count / chunks - tile_begin;
    for (size_t d = 0; d < blocks.size(); ++d) {
      const PixelDepthBlock& db = blocks[d];
      const bool last = d + 1 == blocks.size();
      const int64_t block_lines = db.segments * db.units * 128 / 64;
      for (int64_t q = q_begin; q < q_end; ++q) {
        const char* bq = w + q * panel_bytes + db.unit0 * 128;
        const char* next = q + 1 < q_end ? bq + panel_bytes
                           : !last       ? w + q_begin * panel_bytes + blocks[d + 1].unit0 * 128
                                         : nullptr;
        auto shared = setup(static_cast<int64_t>(d), q);
        for (int64_t i = 0; i < row_tiles; ++i) {
          const int64_t l0 = i * block_lines / row_tiles, l1 = next ? (i + 1) * block_lines / row_tiles : l0;
          const char* fetch = next ? next + l0 * 64 : nullptr;
          if constexpr (kLane) {
            tile(lane, shared, static_cast<int64_t>(d), q, tile_begin + i, bq, fetch, l1 - l0);
          } else {
            (void)lane;
            tile(shared, static_cast<int64_t>(d), q, tile_begin + i, bq, fetch, l1 - l0);
          }
        }
      }
    }
  };
  const int64_t tasks = col_blocks * chunks;
  auto run = [&](int64_t t0, int64_t t1) {
#ifdef LITE_X86_SIMD
    const AmxTileScope tiles(amx);
#else
    (void)amx;
#endif
    Lane lane;
    for (int64_t t = t0; t < t1; ++t) task(lane, t);
  };
  if (pool && threads > 1 && tasks > 1) {
    pool->ParallelFor(tasks, 1, run);
  } else {
    run(0, tasks);
  }
}

}  // namespace lite
