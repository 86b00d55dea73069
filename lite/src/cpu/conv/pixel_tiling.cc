#include "cpu/conv/pixel_tiling.h"

#include <algorithm>
#include <utility>

namespace lite {

void SplitIntoTiles(int64_t begin, int64_t end, int64_t max_rows, std::vector<PixelTileSpan>* tiles) {
  const int64_t len = end - begin, n = (len + max_rows - 1) / max_rows;
  for (int64_t i = 0, pos = begin; i < n; ++i) {
    const int64_t rows = len / n + (i < len % n ? 1 : 0);
    tiles->push_back({pos, rows});
    pos += rows;
  }
}

PixelTiling TileOutputPixels(const ConvGeometry& g, int64_t ld, int64_t max_rows, bool by_padding) {
  PixelTiling t;
  const int64_t P = g.OH * g.OW, taps = g.KH * g.KW;
  if (!by_padding) {
    for (int64_t p = 0; p < P; ++p) t.pixel_of.push_back(static_cast<int32_t>(p));
    SplitIntoTiles(0, P, max_rows, &t.tiles);
  } else if (g.OW == 7) {
    for (int64_t p = 0; p < P; ++p) t.pixel_of.push_back(static_cast<int32_t>(p));
    for (int64_t p = 0; p < P; p += g.OW) SplitIntoTiles(p, p + g.OW, 7, &t.tiles);
  } else {
    auto lost = [](int64_t o, int64_t stride, int64_t pad, int64_t dil, int64_t k, int64_t size) {
      uint64_t mask = 0;   // filter taps along one axis that fall outside the input
      for (int64_t i = 0; i < k && i < 64; ++i) {
        const int64_t at = o * stride - pad + i * dil;
        if (at < 0 || at >= size) mask |= uint64_t{1} << i;
      }
      return mask;
    };
    std::vector<std::pair<uint64_t, uint64_t>> keys;   // (lost filter rows, lost filter columns), first-seen order
    std::vector<std::vector<int32_t>> members;
    for (int64_t oh = 0; oh < g.OH; ++oh) {
      const uint64_t rows = lost(oh, g.SH, g.pad_top, g.DH, g.KH, g.H);
      for (int64_t ow = 0; ow < g.OW; ++ow) {
        const std::pair<uint64_t, uint64_t> key{rows, rows ? 0 : lost(ow, g.SW, g.pad_left, g.DW, g.KW, g.W)};
        const size_t k = std::find(keys.begin(), keys.end(), key) - keys.begin();
        if (k == keys.size()) keys.push_back(key), members.emplace_back();
        members[k].push_back(static_cast<int32_t>(oh * g.OW + ow));
      }
    }
    for (const auto& m : members) {
      const int64_t begin = static_cast<int64_t>(t.pixel_of.size());
      t.pixel_of.insert(t.pixel_of.end(), m.begin(), m.end());
      SplitIntoTiles(begin, static_cast<int64_t>(t.pixel_of.size()), max_rows, &t.tiles);
    }
  }
  t.zero_row = static_cast<int32_t>(g.H * g.W * ld);
  t.offsets.resize(static_cast<size_t>(P * taps));
  for (int64_t pos = 0; pos < P; ++pos) {
    const int64_t oh = t.pixel_of[pos] / g.OW, ow = t.pixel_of[pos] % g.OW;
    for (int64_t kh = 0; kh < g.KH; ++kh)
      for (int64_t kw = 0; kw < g.KW; ++kw) {
        const int64_t ih = oh * g.SH - g.pad_top + kh * g.DH, iw = ow * g.SW - g.pad_left + kw * g.DW;
        const bool inside = ih >= 0 && ih < g.H && iw >= 0 && iw < g.W;
        t.offsets[pos * taps + kh * g.KW + kw] = static_cast<int32_t>(inside ? (ih * g.W + iw) * ld : t.zero_row);
      }
  }
  return t;
}

std::vector<PixelDepthBlock> SplitPixelDepth(int64_t taps, int64_t tap_units, int64_t unit_channels,
                                             int64_t block_units) {
  std::vector<PixelDepthBlock> blocks;
  if (tap_units <= block_units) {
    const int64_t per_block = std::max<int64_t>(1, block_units / tap_units);
    const int64_t n = (taps + per_block - 1) / per_block, per = (taps + n - 1) / n;
    for (int64_t t = 0; t < taps; t += per) blocks.push_back({t, std::min(per, taps - t), 0, tap_units, t * tap_units});
  } else {
    const int64_t parts = (tap_units + block_units - 1) / block_units, per = (tap_units + parts - 1) / parts;
    for (int64_t t = 0; t < taps; ++t)
      for (int64_t q = 0; q < tap_units; q += per)
        blocks.push_back({t, 1, unit_channels * q, std::min(per, tap_units - q), t * tap_units + q});
  }
  return blocks;
}

std::vector<AmxTapRows> AmxTapRowsOf(const std::vector<PixelTileSpan>& tiles, const int32_t* offsets, int64_t stride,
                                     int32_t zero_row, int64_t elem_bytes) {
  std::vector<AmxTapRows> out(tiles.size() * static_cast<size_t>(stride));
  for (size_t t = 0; t < tiles.size(); ++t) {
    const int32_t* off = offsets + tiles[t].pos * stride;
    const int64_t rows = tiles[t].rows;
    for (int64_t s = 0; s < stride; ++s) {
      AmxTapRows& info = out[t * stride + s];
      bool padding = true;
      for (int64_t r = 0; r < rows; ++r) padding &= off[r * stride + s] == zero_row;
      info.padding = padding;
      for (int h = 0; h < 2; ++h) {
        const int64_t r0 = 16 * h;
        if (r0 + 16 > rows) break;
        const int64_t first = off[r0 * stride + s], d = off[(r0 + 1) * stride + s] - first;
        bool uniform = d > 0;
        for (int64_t r = 2; r < 16 && uniform; ++r) uniform = off[(r0 + r) * stride + s] == first + r * d;
        if (uniform) info.even[h] = static_cast<int32_t>(d * elem_bytes);
      }
    }
  }
  return out;
}

}  // namespace lite
