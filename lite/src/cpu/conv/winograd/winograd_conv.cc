#include "cpu/conv/winograd/winograd_conv.h"
#include "cpu/isa_dispatch.h"

#include "cpu/conv/blocked_rows.h"
#include "cpu/conv/winograd/filter_transform.h"
#include "cpu/simd/simd.h"

#include <algorithm>
#include <cstring>
#include <functional>

namespace lite {
namespace {

constexpr int64_t kT = WinogradConv3x3::kTile;
constexpr int64_t kP = WinogradConv3x3::kPositions;
constexpr int64_t kVector = 8;                 // transform widths are whole multiples of this many floats
constexpr int64_t kChunkBytes = 2 << 20;       // transformed inputs of one chunk of tile rows (and products)
constexpr int64_t kMinTilesPerThread = 16;     // see SplitsByRows
constexpr int64_t kChannelBlockFloats = 8;     // channels of a block in the channel-blocked layout (NCHW8c)

typedef float v8f __attribute__((vector_size(32)));

// p_j[t] = src[4t + j] for t < n: a row's four column phases, eight tiles per step (register shuffles).
LITE_VECTOR_CLONES void Deinterleave4(const float* __restrict src, int64_t n, float* __restrict p0,
                                      float* __restrict p1, float* __restrict p2, float* __restrict p3) {
  int64_t t = 0;
  for (; t + 8 <= n; t += 8) {
    v8f v0, v1, v2, v3;   // named registers: an array of them went through the stack in 16-byte pieces
    std::memcpy(&v0, src + 4 * t, sizeof(v8f));
    std::memcpy(&v1, src + 4 * t + 8, sizeof(v8f));
    std::memcpy(&v2, src + 4 * t + 16, sizeof(v8f));
    std::memcpy(&v3, src + 4 * t + 24, sizeof(v8f));
    const v8f a = __builtin_shufflevector(v0, v1, 0, 4, 8, 12, 1, 5, 9, 13);   // p0, p1 of tiles 0-3
    const v8f b = __builtin_shufflevector(v0, v1, 2, 6, 10, 14, 3, 7, 11, 15);  // p2, p3 of tiles 0-3
    const v8f c = __builtin_shufflevector(v2, v3, 0, 4, 8, 12, 1, 5, 9, 13);    // tiles 4-7
    const v8f d = __builtin_shufflevector(v2, v3, 2, 6, 10, 14, 3, 7, 11, 15);
    const v8f o0 = __builtin_shufflevector(a, c, 0, 1, 2, 3, 8, 9, 10, 11);
    const v8f o1 = __builtin_shufflevector(a, c, 4, 5, 6, 7, 12, 13, 14, 15);
    const v8f o2 = __builtin_shufflevector(b, d, 0, 1, 2, 3, 8, 9, 10, 11);
    const v8f o3 = __builtin_shufflevector(b, d, 4, 5, 6, 7, 12, 13, 14, 15);
    std::memcpy(p0 + t, &o0, sizeof(v8f));
    std::memcpy(p1 + t, &o1, sizeof(v8f));
    std::memcpy(p2 + t, &o2, sizeof(v8f));
    std::memcpy(p3 + t, &o3, sizeof(v8f));
  }
  for (; t < n; ++t) {
    p0[t] = src[4 * t];
    p1[t] = src[4 * t + 1];
    p2[t] = src[4 * t + 2];
    p3[t] = src[4 * t + 3];
  }
}

// out[4t + c] = c_c[t] for t < n: four output columns of a row of tiles back into pixel order.
LITE_VECTOR_CLONES void Interleave4(const float* __restrict c0, const float* __restrict c1,
                                    const float* __restrict c2, const float* __restrict c3, int64_t n,
                                    float* __restrict out) {
  int64_t t = 0;
  for (; t + 8 <= n; t += 8) {
    v8f a0, a1, a2, a3;
    std::memcpy(&a0, c0 + t, sizeof(v8f));
    std::memcpy(&a1, c1 + t, sizeof(v8f));
    std::memcpy(&a2, c2 + t, sizeof(v8f));
    std::memcpy(&a3, c3 + t, sizeof(v8f));
    const v8f lo01 = __builtin_shufflevector(a0, a1, 0, 8, 1, 9, 2, 10, 3, 11);
    const v8f hi01 = __builtin_shufflevector(a0, a1, 4, 12, 5, 13, 6, 14, 7, 15);
    const v8f lo23 = __builtin_shufflevector(a2, a3, 0, 8, 1, 9, 2, 10, 3, 11);
    const v8f hi23 = __builtin_shufflevector(a2, a3, 4, 12, 5, 13, 6, 14, 7, 15);
    const v8f o0 = __builtin_shufflevector(lo01, lo23, 0, 1, 8, 9, 2, 3, 10, 11);
    const v8f o1 = __builtin_shufflevector(lo01, lo23, 4, 5, 12, 13, 6, 7, 14, 15);
    const v8f o2 = __builtin_shufflevector(hi01, hi23, 0, 1, 8, 9, 2, 3, 10, 11);
    const v8f o3 = __builtin_shufflevector(hi01, hi23, 4, 5, 12, 13, 6, 7, 14, 15);
    std::memcpy(out + 4 * t, &o0, sizeof(v8f));
    std::memcpy(out + 4 * t + 8, &o1, sizeof(v8f));
    std::memcpy(out + 4 * t + 16, &o2, sizeof(v8f));
    std::memcpy(out + 4 * t + 24, &o3, sizeof(v8f));
  }
  for (; t < n; ++t) {
    out[4 * t] = c0[t];
    out[4 * t + 1] = c1[t];
    out[4 * t + 2] = c2[t];
    out[4 * t + 3] = c3[t];
  }
}

// Splits input rows [y0, y0 + rows) of one channel plane (H x W, zero outside) into four column phases:
// dst[r][j][t] = x[y0 + r][4t + j - pad_left], so the transforms read contiguous runs over tiles t. Each row is
// first laid out with its zero padding in `line` (4 x phase_len floats), then split by register shuffles.
void SplitRows(const float* plane, const ConvGeometry& g, int64_t y0, int64_t rows, int64_t phase_len, float* line,
               float* dst) {
  const int64_t n = kT * phase_len;
  const int64_t lo = std::min(n, g.pad_left), hi = std::min(n, g.pad_left + g.W);
  std::fill(line, line + lo, 0.f);   // the padding is the same for every row
  std::fill(line + hi, line + n, 0.f);
  for (int64_t r = 0; r < rows; ++r) {
    float* row = dst + r * n;
    const int64_t iy = y0 + r;
    if (iy < 0 || iy >= g.H) {
      std::fill(row, row + n, 0.f);
      continue;
    }
    std::memcpy(line + lo, plane + iy * g.W, (hi - lo) * sizeof(float));
    Deinterleave4(line, phase_len, row, row + phase_len, row + 2 * phase_len, row + 3 * phase_len);
  }
}

// SplitRows for the eight channels of a channel-blocked plane ([H][W][8]): each input row is transposed into eight
// padded lines (`lines`: 8 x 4 phase_len floats, the padding zero) and each line split as above; channel c's rows
// go to dst + c * rows * 4 phase_len.
LITE_VECTOR_CLONES void SplitBlockedRows(const float* block, const ConvGeometry& g, int64_t y0, int64_t rows,
                                         int64_t phase_len, float* lines, float* dst) {
  const int64_t n = kT * phase_len;
  const int64_t lo = std::min(n, g.pad_left), hi = std::min(n, g.pad_left + g.W);
  for (int64_t c = 0; c < kChannelBlockFloats; ++c) {
    std::fill(lines + c * n, lines + c * n + lo, 0.f);
    std::fill(lines + c * n + hi, lines + (c + 1) * n, 0.f);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t iy = y0 + r;
    if (iy < 0 || iy >= g.H) {
      for (int64_t c = 0; c < kChannelBlockFloats; ++c)
        std::fill(dst + (c * rows + r) * n, dst + (c * rows + r + 1) * n, 0.f);
      continue;
    }
    BlockedRowToLines(block + iy * g.W * kChannelBlockFloats, hi - lo, lines + lo, n);
    for (int64_t c = 0; c < kChannelBlockFloats; ++c) {
      float* row = dst + (c * rows + r) * n;
      Deinterleave4(lines + c * n, phase_len, row, row + phase_len, row + 2 * phase_len, row + 3 * phase_len);
    }
  }
}

// The input transform's six combinations of d0..d5 (B^T's rows), over n floats. Every operand is its own
// restrict pointer: with one base pointer and run-time offsets the compiler cannot prove the rows apart and
// leaves the loop scalar.
LITE_VECTOR_CLONES void InputTransform6(const float* __restrict d0, const float* __restrict d1,
                                        const float* __restrict d2, const float* __restrict d3,
                                        const float* __restrict d4, const float* __restrict d5, int64_t n,
                                        float* __restrict o0, float* __restrict o1, float* __restrict o2,
                                        float* __restrict o3, float* __restrict o4, float* __restrict o5) {
  for (int64_t x = 0; x < n; ++x) {
    const float a = d4[x] - 4.f * d2[x], b = d3[x] - 4.f * d1[x];
    const float c = d4[x] - d2[x], e = 2.f * (d3[x] - d1[x]);
    o0[x] = 4.f * d0[x] - 5.f * d2[x] + d4[x];
    o1[x] = a + b;
    o2[x] = a - b;
    o3[x] = c + e;
    o4[x] = c - e;
    o5[x] = 4.f * d1[x] - 5.f * d3[x] + d5[x];
  }
}

// out_i = (B^T d)_i for six input rows d_0..d_5 of n floats each (row stride n).
void InputColumns(const float* d, int64_t n, float* out) {
  InputTransform6(d, d + n, d + 2 * n, d + 3 * n, d + 4 * n, d + 5 * n, n, out, out + n, out + 2 * n, out + 3 * n,
                  out + 4 * n, out + 5 * n);
}

// out_k[t] = (d B)_k (k-th output ld apart) for the tile starting at column 4t of one row split into phases
// p_0..p_3 (phase_len apart): its six columns are p_0[t], p_1[t], p_2[t], p_3[t], p_0[t + 1], p_1[t + 1].
void InputRows(const float* p, int64_t phase_len, int64_t lanes, float* out, int64_t ld) {
  const float *p0 = p, *p1 = p + phase_len, *p2 = p + 2 * phase_len, *p3 = p + 3 * phase_len;
  InputTransform6(p0, p1, p2, p3, p0 + 1, p1 + 1, lanes, out, out + ld, out + 2 * ld, out + 3 * ld, out + 4 * ld,
                  out + 5 * ld);
}

// The output transform's four combinations of m0..m5 (A^T's rows), over n floats.
LITE_VECTOR_CLONES void OutputTransform4(const float* __restrict m0, const float* __restrict m1,
                                         const float* __restrict m2, const float* __restrict m3,
                                         const float* __restrict m4, const float* __restrict m5, int64_t n,
                                         float* __restrict o0, float* __restrict o1, float* __restrict o2,
                                         float* __restrict o3) {
  for (int64_t t = 0; t < n; ++t) {
    const float a = m1[t] + m2[t], b = m1[t] - m2[t], c = m3[t] + m4[t], d = m3[t] - m4[t];
    o0[t] = m0[t] + a + c;
    o1[t] = b + 2.f * d;
    o2[t] = a + 4.f * c;
    o3[t] = b + 8.f * d + m5[t];
  }
}

// y[r][c][t] = (A^T m A)[r][c] for 36 products m[(i * 6 + k) * ld + t] of a row of tiles; s: 24 x lanes.
void OutputTiles(const float* m, int64_t ld, int64_t lanes, float* s, float* y) {
  // s[i][c] = (m A)[i][c]: per product row i, its six columns to four.
  for (int64_t i = 0; i < 6; ++i) {
    const float* mi = m + i * 6 * ld;
    float* si = s + i * kT * lanes;
    OutputTransform4(mi, mi + ld, mi + 2 * ld, mi + 3 * ld, mi + 4 * ld, mi + 5 * ld, lanes, si, si + lanes,
                     si + 2 * lanes, si + 3 * lanes);
  }
  // y[r][c] = (A^T s)[r][c]: the six rows to four, per column c.
  for (int64_t c = 0; c < kT; ++c) {
    const float* sc = s + c * lanes;
    const int64_t st = kT * lanes;
    OutputTransform4(sc, sc + st, sc + 2 * st, sc + 3 * st, sc + 4 * st, sc + 5 * st, lanes, y + c * lanes,
                     y + (kT + c) * lanes, y + (2 * kT + c) * lanes, y + (3 * kT + c) * lanes);
  }
}

// Per-thread transform buffers, grown on demand and reused across runs and layers.
struct Buffers {
  std::vector<float> split, columns, line, work;   // work: a chunk's transforms and products (rows split)
  static float* Get(std::vector<float>& v, int64_t n) {
    if (v.size() < static_cast<size_t>(n)) v.assign(static_cast<size_t>(n), 0.f);
    return v.data();
  }
};
thread_local Buffers tls;

}  // namespace

bool WinogradConv3x3::Supports(const ConvGeometry& g) {
  return g.KH == 3 && g.KW == 3 && g.SH == 1 && g.SW == 1 && g.DH == 1 && g.DW == 1 && g.OH > 0 && g.OW > 0;
}

WinogradConv3x3::WinogradConv3x3(const ConvGeometry& g, const float* w, ConvLayouts layouts, bool half,
                                 HalfFormat format)
    : g_(g), layouts_(layouts) {
  tiles_h_ = (g.OH + kT - 1) / kT;
  tiles_w_ = (g.OW + kT - 1) / kT;
  lanes_ = (tiles_w_ + kVector - 1) / kVector * kVector;
  phase_len_ = lanes_ + kVector;   // room for the t + 1 reads of the last lanes
  const int64_t row_bytes = kP * std::max(g.C, g.M) * tiles_w_ * static_cast<int64_t>(sizeof(float));
  chunk_rows_ = std::max<int64_t>(1, std::min(tiles_h_, kChunkBytes / row_bytes));
  // U = G g G^T per (output, input) channel pair (cpu/conv/winograd/filter_transform.h).
  const std::vector<std::array<float, 9>> coef = WinogradFilterCoefficients(kT);
  // The filters tap-major per output channel ([M][9][C]), then one position at a time (so the temporary is
  // one M x C matrix, not 36), packed as that position's GEMM operand.
  std::vector<float> taps(static_cast<size_t>(9 * g.M * g.C)), u(static_cast<size_t>(g.M * g.C));
  for (int64_t m = 0; m < g.M; ++m)
    for (int64_t c = 0; c < g.C; ++c)
      for (int t = 0; t < 9; ++t) taps[(m * 9 + t) * g.C + c] = w[(m * g.C + c) * 9 + t];
  for (int64_t p = 0; p < kP; ++p) {
    for (int64_t m = 0; m < g.M; ++m)
      WinogradFilterPosition(coef[p].data(), taps.data() + m * 9 * g.C, g.C, u.data() + m * g.C);
    if (half)
      half_u_.push_back(ToBf16Rows(g.M, g.C, u.data(), g.C, format));
    else
      packed_u_.push_back(PackAOnce(false, g.M, g.C, 1.f, u.data(), g.C));
  }
}

bool WinogradConv3x3::HalfProductsAvailable(HalfFormat format) {   // (CpuArmFeatures: all false off ARM64)
  return format == HalfFormat::kFp16 ? CpuArmFeatures().fp16 : CpuArmFeatures().bf16;
}

size_t WinogradConv3x3::ScratchBytes() const {
  const int64_t ld = chunk_rows_ * tiles_w_ + lanes_;
  return static_cast<size_t>(kP * (g_.C + g_.M) * ld) * sizeof(float);
}

void WinogradConv3x3::Run(const float* x, const float* bias, const float* residual, EpilogueAct act, float* y,
                          float* scratch, ThreadPool* pool) const {
  const int64_t threads = pool ? pool->size() : 1;
  if (threads > 1 && SplitsByRows(threads)) {
    // Each thread runs whole tile rows through all three steps: it reads the input rows and writes the output
    // rows of its own part of the plane, as the 1x1 layers around it do, instead of every step splitting another
    // dimension (input channels, positions, output channels) and each thread reading what the other wrote.
    pool->ParallelFor(threads, 1, [&](int64_t pb, int64_t pe) {
      for (int64_t part = pb; part < pe; ++part) {
        const int64_t r0 = part * tiles_h_ / threads, r1 = (part + 1) * tiles_h_ / threads;
        for (int64_t ty0 = r0; ty0 < r1; ty0 += chunk_rows_) {
          const int64_t rows = std::min(chunk_rows_, r1 - ty0);
          float* work = Buffers::Get(tls.work, static_cast<int64_t>(ScratchBytes() / sizeof(float)));
          RunChunk(x, bias, residual, act, y, ty0, rows, work, nullptr);
        }
      }
    });
    return;
  }
  for (int64_t ty0 = 0; ty0 < tiles_h_; ty0 += chunk_rows_)
    RunChunk(x, bias, residual, act, y, ty0, std::min(chunk_rows_, tiles_h_ - ty0), scratch, pool);
}

// 16 tiles per thread and up. ResNet-50 at two threads, vCPUs on separate L3 caches, against the split steps: its
// 56x56 layers (98 tiles each) 0.69-0.92x the time, 28x28 (21-28 each) 0.90-0.94x; the 14x14 ones (8 each) 1.45x,
// both threads reading all 9.4 MB of transformed filters.
bool WinogradConv3x3::SplitsByRows(int64_t threads) const {
  return tiles_h_ >= threads && tiles_h_ / threads * tiles_w_ >= kMinTilesPerThread;
}

void WinogradConv3x3::RunChunk(const float* x, const float* bias, const float* residual, EpilogueAct act, float* y,
                               int64_t ty0, int64_t rows, float* scratch, ThreadPool* pool) const {
  const ConvGeometry& g = g_;
  const int64_t plane = g.OH * g.OW;
  auto parallel = [&](int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
    if (pool) pool->ParallelFor(n, 1, fn); else fn(0, n);
  };
  // Rows of n tiles, ld apart: the transforms write and read whole vectors, past n into the padding.
  const int64_t n = rows * tiles_w_, ld = n + lanes_;
  float* v = scratch;                 // [36][C][ld] transformed inputs
  float* prod = v + kP * g.C * ld;    // [36][M][ld] their channel sums
  const int64_t in_rows = kT * rows + 2, split_len = kT * phase_len_;
  // Channel c's transforms from its split rows.
  auto transform = [&](int64_t c, const float* split, float* cols) {
    // In increasing r: each row's vectors run past its tiles_w_ tiles into the next row's, rewritten next.
    for (int64_t r = 0; r < rows; ++r) {
      InputColumns(split + kT * r * split_len, split_len, cols);
      for (int64_t i = 0; i < 6; ++i)
        InputRows(cols + i * split_len, phase_len_, lanes_, v + (i * 6 * g.C + c) * ld + r * tiles_w_, g.C * ld);
    }
  };
  if (layouts_.in_blocked) {
    parallel(g.C / kChannelBlockFloats, [&](int64_t bb, int64_t be) {
      const int64_t per_channel = in_rows * split_len;
      float* split = Buffers::Get(tls.split, kChannelBlockFloats * per_channel);
      float* cols = Buffers::Get(tls.columns, 6 * split_len);
      float* lines = Buffers::Get(tls.line, kChannelBlockFloats * split_len);
      for (int64_t b = bb; b < be; ++b) {
        SplitBlockedRows(x + b * kChannelBlockFloats * g.H * g.W, g, kT * ty0 - g.pad_top, in_rows, phase_len_, lines,
                         split);
        for (int64_t i = 0; i < kChannelBlockFloats; ++i)
          transform(b * kChannelBlockFloats + i, split + i * per_channel, cols);
      }
    });
  } else {
    parallel(g.C, [&](int64_t cb, int64_t ce) {
      float* split = Buffers::Get(tls.split, in_rows * split_len);
      float* cols = Buffers::Get(tls.columns, 6 * split_len);
      float* line = Buffers::Get(tls.line, split_len);
      for (int64_t c = cb; c < ce; ++c) {
        SplitRows(x + c * g.H * g.W, g, kT * ty0 - g.pad_top, in_rows, phase_len_, line, split);
        transform(c, split, cols);
      }
    });
  }
  parallel(kP, [&](int64_t pb, int64_t pe) {
    for (int64_t p = pb; p < pe; ++p) {
      if (!half_u_.empty()) {
        Bf16GemmRowsA(half_u_[p], n, v + p * g.C * ld, ld, prod + p * g.M * ld, ld, GemmEpilogue{}, nullptr);
        continue;
      }
      SgemmPackedA(packed_u_[p].data(), g.M, n, g.C, false, v + p * g.C * ld, ld, 0.f, prod + p * g.M * ld, ld,
                   GemmEpilogue{}, nullptr);
    }
  });
  const int64_t full = g.OW / kT;   // tiles with all four columns inside the output
  const int64_t oy0 = kT * ty0, oy1 = std::min(g.OH, kT * (ty0 + rows));
  // Output row i of tile row r of channel m (its transformed tile ti) into pixel order.
  auto row_out = [&](const float* ti, float* yrow) {
    Interleave4(ti, ti + lanes_, ti + 2 * lanes_, ti + 3 * lanes_, full, yrow);
    for (int64_t c = 0; c < g.OW - kT * full; ++c) yrow[kT * full + c] = ti[c * lanes_ + full];
  };
  if (layouts_.out_blocked) {
    // Eight channels' tiles, then each output row's eight lines transposed into the blocked row, epilogue applied.
    parallel(g.M / kChannelBlockFloats, [&](int64_t bb, int64_t be) {
      constexpr int64_t B = kChannelBlockFloats;
      const int64_t tile_floats = kT * kT * lanes_, line_len = kT * lanes_;
      float* s = Buffers::Get(tls.split, 6 * kT * lanes_);
      float* tiles = Buffers::Get(tls.columns, B * tile_floats);
      float* lines = Buffers::Get(tls.line, B * line_len);
      for (int64_t b = bb; b < be; ++b) {
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t i = 0; i < B; ++i)
            OutputTiles(prod + (b * B + i) * ld + r * tiles_w_, g.M * ld, lanes_, s, tiles + i * tile_floats);
          for (int64_t k = 0; k < kT; ++k) {
            const int64_t oy = kT * (ty0 + r) + k;
            if (oy >= g.OH) break;
            for (int64_t i = 0; i < B; ++i) row_out(tiles + i * tile_floats + k * kT * lanes_, lines + i * line_len);
            const int64_t at = (b * plane + oy * g.OW) * B;
            StoreLinesAsBlockedRow(lines, line_len, g.OW, bias ? bias + b * B : nullptr,
                                   residual ? residual + at : nullptr, act, y + at);
          }
        }
      }
    });
    return;
  }
  parallel(g.M, [&](int64_t mb, int64_t me) {
    float* s = Buffers::Get(tls.split, 6 * kT * lanes_);
    float* tile = Buffers::Get(tls.columns, kT * kT * lanes_);
    for (int64_t m = mb; m < me; ++m) {
      float* ym = y + m * plane;
      for (int64_t r = 0; r < rows; ++r) {
        OutputTiles(prod + m * ld + r * tiles_w_, g.M * ld, lanes_, s, tile);
        for (int64_t i = 0; i < kT; ++i) {
          const int64_t oy = kT * (ty0 + r) + i;
          if (oy >= g.OH) break;
          row_out(tile + i * kT * lanes_, ym + oy * g.OW);
        }
      }
      // Bias, residual and activation over the chunk's rows of this channel while they are in cache.
      GemmEpilogue ep;
      ep.row_bias = bias ? bias + m : nullptr;
      ep.residual = residual ? residual + m * plane + oy0 * g.OW : nullptr;
      ep.act = act;
      ApplyEpilogue(ym + oy0 * g.OW, 0, 0, 1, 0, (oy1 - oy0) * g.OW, ep);
    }
  });
}

}  // namespace lite
