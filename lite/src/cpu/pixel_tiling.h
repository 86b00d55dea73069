// The output-pixel tiling and depth blocking shared by the pixel-major convolutions (cpu/bf16_pixel_conv.h,
// cpu/u8_pixel_conv.h): which output pixels a register tile computes together, which input row each (pixel, tap)
// reads, and how the depth (taps x channels) is cut into blocks whose weights stay in L1.
#pragma once
#include <cstdint>
#include <vector>

#include "cpu/conv_geometry.h"

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
PixelTiling TileOutputPixels(const ConvGeometry& g, int64_t ld, int64_t max_rows);

// Positions [begin, end) as tiles of at most max_rows, balanced (25 pixels: 7 + 6 + 6 + 6, not 8 + 8 + 8 + 1: a
// tile of under 6 rows has too few accumulator chains to cover the dot product's latency).
void SplitIntoTiles(int64_t begin, int64_t end, int64_t max_rows, std::vector<PixelTileSpan>* tiles);

// One depth block: `segments` runs of `units` depth units (pairs of bf16, quads of uint8), run s the channels
// [c0, c0 + units * unit_channels) of tap tap0 + s; its weights are the panel's units [unit0, unit0 + segments * units).
struct PixelDepthBlock {
  int64_t tap0 = 0, segments = 0, c0 = 0, units = 0, unit0 = 0;
};

// Whole taps per block while a tap has at most block_units units (split evenly), else parts of one tap.
std::vector<PixelDepthBlock> SplitPixelDepth(int64_t taps, int64_t tap_units, int64_t unit_channels,
                                             int64_t block_units);

}  // namespace lite
