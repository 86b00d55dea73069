// bf16 Winograd F(2x2, 3x3) on pixel-major rows: see bf16_winograd_conv.h.
#include "cpu/conv/winograd/bf16_winograd_conv.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "cpu/gemm/bf16_pairs.h"
#include "cpu/conv/bf16_pixel_conv.h"
#include "cpu/isa_dispatch.h"
#include "cpu/conv/pixel_depth_loop.h"

#ifdef LITE_X86_SIMD
#include <immintrin.h>
#endif

namespace lite {
namespace {

constexpr int kTileRows = 8;                     // tiles per register tile of the products (x 32 channels)
constexpr int64_t kPositions = Bf16WinogradConv::kPositions;
// A chunk's transformed inputs and sums: at least this (in L2 beside the rest), and up to the transformed filters'
// size, which every chunk reads again, within a bound on the scratch.
constexpr int64_t kMinChunkBytes = 384 * 1024;
constexpr int64_t kMaxChunkBytes = 4 * 1024 * 1024;

#ifdef LITE_X86_SIMD
#define LITE_WINO_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

LITE_WINO_TARGET inline void StoreBf16x16(uint16_t* at, __m512 v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(at), (__m256i)_mm512_cvtneps_pbh(v));
}

// R tiles x 32 channels of one position's sums: tile r's transformed row at v + r * ldv (C values), the panel's
// pairs at b; the sums to p + r * ldp. Fetches `lines` lines of the next panel from `next` along the way.
template <int R>
LITE_WINO_TARGET void ProductTile(const uint16_t* v, int64_t ldv, int64_t pairs, const uint16_t* b, float* p,
                                  int64_t ldp, const char* next, int64_t lines) {
  __m512 lo[R], hi[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) lo[r] = _mm512_setzero_ps(), hi[r] = _mm512_setzero_ps();
  int32_t off[R];
  for (int r = 0; r < R; ++r) off[r] = static_cast<int32_t>(r * ldv);
  PixelDepthLoop<R, 2, Bf16Dot>(lo, hi, v, off, 1, -1, 1, pairs, 0, b, next, lines);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    _mm512_storeu_ps(p + r * ldp, lo[r]);
    _mm512_storeu_ps(p + r * ldp + 16, hi[r]);
  }
}

using ProductFn = void (*)(const uint16_t*, int64_t, int64_t, const uint16_t*, float*, int64_t, const char*, int64_t);
const ProductFn kProducts[kTileRows + 1] = {nullptr,        ProductTile<1>, ProductTile<2>, ProductTile<3>,
                                            ProductTile<4>, ProductTile<5>, ProductTile<6>, ProductTile<7>,
                                            ProductTile<8>};

// Tiles [t0, t1) of a chunk of `tiles` tiles from tile row ty0: V = B^T d B of each tile's 4x4 input pixels (the
// row of zeros where one lies in the padding), 16 channels at a time, to row xi * tiles + t of v.
LITE_WINO_TARGET void TransformInput(const ConvGeometry& g, int64_t tiles_w, int64_t ld_in, const uint16_t* x,
                                     int64_t ty0, int64_t tiles, int64_t t0, int64_t t1, uint16_t* v) {
  const uint16_t* zero = x + g.H * g.W * ld_in;
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t ih0 = 2 * (ty0 + t / tiles_w) - g.pad_top, iw0 = 2 * (t % tiles_w) - g.pad_left;
    const uint16_t* row[16];
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) {
        const int64_t ih = ih0 + i, iw = iw0 + j;
        row[i * 4 + j] = ih >= 0 && ih < g.H && iw >= 0 && iw < g.W ? x + (ih * g.W + iw) * ld_in : zero;
      }
    uint16_t* out = v + t * ld_in;
    const int64_t position_stride = tiles * ld_in;
    for (int64_t c = 0; c < g.C; c += 16) {
      __m512 s[4][4];   // B^T d: rows combined
      for (int j = 0; j < 4; ++j) {
        const __m512 d0 = Bf16x16ToFloats(row[j] + c), d1 = Bf16x16ToFloats(row[4 + j] + c);
        const __m512 d2 = Bf16x16ToFloats(row[8 + j] + c), d3 = Bf16x16ToFloats(row[12 + j] + c);
        s[0][j] = _mm512_sub_ps(d0, d2);
        s[1][j] = _mm512_add_ps(d1, d2);
        s[2][j] = _mm512_sub_ps(d2, d1);
        s[3][j] = _mm512_sub_ps(d1, d3);
      }
      for (int i = 0; i < 4; ++i) {   // then columns: (B^T d) B
        uint16_t* at = out + i * 4 * position_stride + c;
        StoreBf16x16(at, _mm512_sub_ps(s[i][0], s[i][2]));
        StoreBf16x16(at + position_stride, _mm512_add_ps(s[i][1], s[i][2]));
        StoreBf16x16(at + 2 * position_stride, _mm512_sub_ps(s[i][2], s[i][1]));
        StoreBf16x16(at + 3 * position_stride, _mm512_sub_ps(s[i][1], s[i][3]));
      }
    }
  }
}

// Jobs [job0, job1) of the chunk's products, job = position * panels + panel: every tile's 32 sums of that position
// and panel, to p (tile t's position xi at p + (t * 16 + xi) * M).
LITE_WINO_TARGET void Products(const uint16_t* u, int64_t panels, int64_t pairs, int64_t M, int64_t ld_in,
                               const uint16_t* v, int64_t tiles, int64_t job0, int64_t job1, float* p) {
  const int64_t panel_values = pairs * 64, groups = (tiles + kTileRows - 1) / kTileRows;
  for (int64_t job = job0; job < job1; ++job) {
    const int64_t xi = job / panels, q = job % panels;
    const uint16_t* b = u + job * panel_values;   // position-major, then panel: u's order is the jobs'
    const char* next = job + 1 < job1 ? reinterpret_cast<const char*>(b + panel_values) : nullptr;
    const int64_t lines = pairs * 2;   // 128 bytes a pair of the panel
    for (int64_t i = 0, pos = 0; i < groups; ++i) {
      const int64_t rows = tiles / groups + (i < tiles % groups ? 1 : 0);
      const int64_t l0 = i * lines / groups, l1 = next ? (i + 1) * lines / groups : l0;
      kProducts[rows](v + (xi * tiles + pos) * ld_in, ld_in, pairs, b, p + (pos * kPositions + xi) * M + q * kBf16NR,
                      kPositions * M, next ? next + l0 * 64 : nullptr, l1 - l0);
      pos += rows;
    }
  }
}

// Tiles [t0, t1) of the chunk: Y = A^T m A of each tile's 16 sums, 16 channels at a time, plus the bias and the
// residual, clamped (1 ReLU, 2 ReLU6), to the tile's output pixels inside the plane.
LITE_WINO_TARGET void TransformOutput(const ConvGeometry& g, int64_t tiles_w, int64_t ld_out, const float* p,
                                      const float* bias, const uint16_t* residual, int clamp, uint16_t* y, int64_t ty0,
                                      int64_t t0, int64_t t1) {
  const int64_t M = g.M;
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t oh0 = 2 * (ty0 + t / tiles_w), ow0 = 2 * (t % tiles_w);
    const bool rows2 = oh0 + 1 < g.OH, cols2 = ow0 + 1 < g.OW;
    const float* m = p + t * kPositions * M;
    for (int64_t c = 0; c < M; c += 16) {
      __m512 s[2][4];   // A^T m
      for (int j = 0; j < 4; ++j) {
        const __m512 m0 = _mm512_loadu_ps(m + j * M + c), m1 = _mm512_loadu_ps(m + (4 + j) * M + c);
        const __m512 m2 = _mm512_loadu_ps(m + (8 + j) * M + c), m3 = _mm512_loadu_ps(m + (12 + j) * M + c);
        s[0][j] = _mm512_add_ps(_mm512_add_ps(m0, m1), m2);
        s[1][j] = _mm512_sub_ps(_mm512_sub_ps(m1, m2), m3);
      }
      const __m512 b = bias ? _mm512_loadu_ps(bias + c) : _mm512_setzero_ps();
      for (int i = 0; i < (rows2 ? 2 : 1); ++i)
        for (int j = 0; j < (cols2 ? 2 : 1); ++j) {
          __m512 out = j == 0 ? _mm512_add_ps(_mm512_add_ps(s[i][0], s[i][1]), s[i][2])
                              : _mm512_sub_ps(_mm512_sub_ps(s[i][1], s[i][2]), s[i][3]);
          out = _mm512_add_ps(out, b);
          const int64_t pixel = (oh0 + i) * g.OW + ow0 + j;
          if (residual) out = _mm512_add_ps(out, Bf16x16ToFloats(residual + pixel * ld_out + c));
          if (clamp) out = _mm512_max_ps(_mm512_setzero_ps(), out);
          if (clamp == 2) out = _mm512_min_ps(_mm512_set1_ps(6.f), out);
          StoreBf16x16(y + pixel * ld_out + c, out);
        }
    }
  }
}
#endif

}  // namespace

bool Bf16WinogradConv::Supports(const ConvGeometry& g) {
  // Not where AMX takes bf16 products: its vdpbf16ps tiles are slower than the AMX pixel-major tiles' direct products.
  return CpuHasAvx512Bf16() && !CpuHasAmxBf16() && g.KH == 3 && g.KW == 3 && g.SH == 1 && g.SW == 1 && g.DH == 1 && g.DW == 1 &&
         g.C % 16 == 0 && g.C >= 32 && g.C <= 1024 && g.M % 32 == 0 && g.OH >= 2 && g.OW >= 2 &&
         (g.H * g.W + 1) * Bf16PixelConv::Bf16RowStride(g.C) < (int64_t{1} << 31);
}

Bf16WinogradConv::Bf16WinogradConv(const ConvGeometry& g, const float* w)
    : g_(g), tiles_h_((g.OH + 1) / 2), tiles_w_((g.OW + 1) / 2) {
  if (!Supports(g)) throw std::logic_error("Bf16WinogradConv: unsupported geometry or CPU without AVX512_BF16");
  const int64_t C = g.C, M = g.M;
  ld_in_ = Bf16PixelConv::Bf16RowStride(C);
  ld_out_ = Bf16PixelConv::Bf16RowStride(M);
  panels_ = M / kBf16NR;
  pairs_ = C / 2;
  // U = G g G^T per (m, c), in double, then each position's M x C as bf16 panels.
  static const double kG[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
  std::vector<float> u(static_cast<size_t>(kPositions * M * C));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t c = 0; c < C; ++c) {
      const float* f = w + (m * C + c) * 9;
      double gf[4][3];   // G g
      for (int a = 0; a < 4; ++a)
        for (int j = 0; j < 3; ++j) gf[a][j] = kG[a][0] * f[j] + kG[a][1] * f[3 + j] + kG[a][2] * f[6 + j];
      for (int a = 0; a < 4; ++a)
        for (int b = 0; b < 4; ++b)
          u[((a * 4 + b) * M + m) * C + c] =
              static_cast<float>(gf[a][0] * kG[b][0] + gf[a][1] * kG[b][1] + gf[a][2] * kG[b][2]);
    }
  for (int64_t xi = 0; xi < kPositions; ++xi) {
    const Bf16PanelsB packed = PackBf16B(true, C, M, u.data() + xi * M * C, C);
    u_.insert(u_.end(), packed.data.begin(), packed.data.end());
  }
  // ResNet-50's 14x14 layers (2 MB of transformed filters) in one chunk: 0.90-0.95x the time of 384 KB chunks; its
  // 56x56 ones (128 KB) 1.03-1.05x in chunks of 1.5 MB.
  const int64_t tile_bytes = kPositions * (ld_in_ * 2 + M * 4);
  const int64_t chunk_bytes =
      std::clamp<int64_t>(static_cast<int64_t>(u_.size() * sizeof(uint16_t)), kMinChunkBytes, kMaxChunkBytes);
  chunk_rows_ = std::clamp<int64_t>(chunk_bytes / (tile_bytes * tiles_w_), 1, tiles_h_);
}

size_t Bf16WinogradConv::ChunkBytes() const {
  const size_t v = static_cast<size_t>(kPositions * ChunkTiles() * ld_in_) * sizeof(uint16_t);
  const size_t p = static_cast<size_t>(ChunkTiles() * kPositions * g_.M) * sizeof(float);
  return (v + 63) / 64 * 64 + (p + 63) / 64 * 64;
}

size_t Bf16WinogradConv::ScratchBytes(int threads) const {
  return ChunkBytes() * static_cast<size_t>(std::max(1, threads));
}

void Bf16WinogradConv::RunChunk(const uint16_t* x, const float* bias, const uint16_t* residual, int clamp, uint16_t* y,
                                int64_t ty0, int64_t rows, char* scratch, ThreadPool* pool) const {
  [[maybe_unused]] const int64_t tiles = rows * tiles_w_;   // (the x86 transforms)
  uint16_t* v = reinterpret_cast<uint16_t*>(scratch);
  const size_t v_bytes = static_cast<size_t>(kPositions * ChunkTiles() * ld_in_) * sizeof(uint16_t);
  float* p = reinterpret_cast<float*>(scratch + (v_bytes + 63) / 64 * 64);
  const int64_t jobs = kPositions * panels_;
#ifdef LITE_X86_SIMD
  auto in = [&](int64_t t0, int64_t t1) { TransformInput(g_, tiles_w_, ld_in_, x, ty0, tiles, t0, t1, v); };
  auto products = [&](int64_t j0, int64_t j1) { Products(u_.data(), panels_, pairs_, g_.M, ld_in_, v, tiles, j0, j1, p); };
  auto out = [&](int64_t t0, int64_t t1) {
    TransformOutput(g_, tiles_w_, ld_out_, p, bias, residual, clamp, y, ty0, t0, t1);
  };
  if (pool && pool->size() > 1) {   // each step split over the threads
    pool->ParallelFor(tiles, 4, in);
    pool->ParallelFor(jobs, 1, products);
    pool->ParallelFor(tiles, 4, out);
    return;
  }
  in(0, tiles);
  products(0, jobs);
  out(0, tiles);
#else
  (void)x, (void)bias, (void)residual, (void)clamp, (void)y, (void)ty0, (void)v, (void)p, (void)jobs, (void)pool;
#endif
}

void Bf16WinogradConv::Run(const uint16_t* x, const float* bias, const uint16_t* residual, EpilogueAct act, uint16_t* y,
                           void* scratch, ThreadPool* pool) const {
  if (act != EpilogueAct::kNone && act != EpilogueAct::kRelu && act != EpilogueAct::kRelu6)
    throw std::logic_error("Bf16WinogradConv: activation other than ReLU/ReLU6");
  const int clamp = act == EpilogueAct::kRelu ? 1 : act == EpilogueAct::kRelu6 ? 2 : 0;
  char* s = static_cast<char*>(scratch);
  const int threads = pool ? pool->size() : 1;
  auto rows = [&](int64_t r0, int64_t r1, char* chunk_scratch, ThreadPool* step_pool) {
    for (int64_t ty = r0; ty < r1; ty += chunk_rows_)
      RunChunk(x, bias, residual, clamp, y, ty, std::min(chunk_rows_, r1 - ty), chunk_scratch, step_pool);
  };
  if (threads > 1 && tiles_h_ >= 4 * threads) {
    // Enough tile rows: each thread takes a band of them through all three steps, in its own chunk scratch.
    pool->ParallelFor(threads, 1, [&](int64_t w0, int64_t w1) {
      for (int64_t w = w0; w < w1; ++w)
        rows(w * tiles_h_ / threads, (w + 1) * tiles_h_ / threads, s + w * ChunkBytes(), nullptr);
    });
  } else {
    rows(0, tiles_h_, s, pool);
  }
  std::memset(y + g_.OH * g_.OW * ld_out_, 0, static_cast<size_t>(ld_out_) * sizeof(uint16_t));   // the zero row
}

}  // namespace lite
