#include "cpu/conv/pixel_tile_conv.h"

#include "cpu/aligned.h"
#include "cpu/isa_dispatch.h"
#include "cpu/gemm/spread_prefetch.h"
#include "cpu/simd/vmath.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace lite {
namespace {

typedef float v4sf __attribute__((vector_size(16)));
typedef float v8sf __attribute__((vector_size(32)));
typedef float v16sf __attribute__((vector_size(64)));

constexpr int64_t kP = PixelTileConv2D::kMaxPixels;
constexpr int64_t kChunkTiles = 8;   // tiles per task: their input lines stay in L1 across channel blocks

struct TileArgs {
  int64_t taps;
  const int64_t* off;        // tap offsets from each pixel's input origin
  const float* const* px;    // the tile's pixel origins (R of them)
  const float* w;            // [taps][NV L], 64-byte aligned
  const float* bias;         // [NV L] or null, added in registers
  EpilogueAct act;           // kNone, kRelu, kRelu6 or kSilu, applied in registers
  float* out;                // [R][NV L] results (or null: `blocked` below)
  // Where out is null: the tile's pixels stored straight into a channel-blocked output ([M/8][P][8]): `blocked` at the
  // tile's first pixel and channel block, `groups` 8-channel groups (of 2L / 8), `plane` floats between groups,
  // `count` pixels (a short tile's repeats not stored); a residual laid out alike is added first, then act.
  float* blocked = nullptr;
  const float* residual = nullptr;
  int64_t plane = 0, groups = 0, count = 0;
  const char* prefetch = nullptr;   // lines to fetch (non-temporal) during the tile: the next channel block's weights
  int64_t prefetch_lines = 0;       // how many, one every prefetch_every taps
  int64_t prefetch_every = 1;
  bool prefetch_once = false;       // the lines are read by this task only (cpu/gemm/spread_prefetch.h)
};

// One vector's 8-channel group(s) of a pixel added from / stored to a channel-blocked layout (groups `plane` floats
// apart): whole vectors and halves only (no partial access of a vector local, which would keep the tile's sums in
// memory).
template <typename V, int L>
__attribute__((always_inline)) inline void AddGroups(const float* at, int64_t plane, V& a) {
  V r;
  if constexpr (L == 16) {
    v8sf lo, hi;
    std::memcpy(&lo, at, sizeof(lo));
    std::memcpy(&hi, at + plane, sizeof(hi));
    r = __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  } else {
    (void)plane;
    std::memcpy(&r, at, sizeof(V));   // L = 8: one group; L = 4: half of one
  }
  a += r;
}
template <typename V, int L>
__attribute__((always_inline)) inline void StoreGroups(float* at, int64_t plane, const V& a, bool second) {
  if constexpr (L == 16) {
    const v8sf lo = __builtin_shufflevector(a, a, 0, 1, 2, 3, 4, 5, 6, 7);
    const v8sf hi = __builtin_shufflevector(a, a, 8, 9, 10, 11, 12, 13, 14, 15);
    std::memcpy(at, &lo, sizeof(lo));
    if (second) std::memcpy(at + plane, &hi, sizeof(hi));
  } else {
    (void)plane, (void)second;
    std::memcpy(at, &a, sizeof(V));
  }
}

// The tile's activation in registers: ReLU, ReLU6 or SiLU (YOLO's Convs; FastSiluVec, so the layer's output is not
// read and written once more by a separate pass).
template <typename V>
__attribute__((always_inline)) inline V Activate(V a, EpilogueAct act) {
  if (act == EpilogueAct::kSilu) return FastSiluVec(a);
  a = a < V{} ? V{} : a;
  return act == EpilogueAct::kRelu6 ? (a > V{} + 6.f ? V{} + 6.f : a) : a;
}

// The tile's sums into a channel-blocked output (TileArgs::blocked), from registers: each vector's lanes are 8-channel
// groups (L = 16: two, 8: one, 4: half of one), stored 32 bytes at a time per pixel; the residual (laid out alike)
// added and the activation applied on the way (the copy-out through memory had taken ~1% of ResNet-50).
template <typename V, int L, int R, int NV>
__attribute__((always_inline)) inline void StoreBlocked(const TileArgs& t, V (&acc)[R][NV]) {
#pragma GCC unroll 12
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      const int c = v * L;   // the vector's first channel: group c / 8, lane c % 8
      const int64_t at = (c / 8) * t.plane + i * 8 + c % 8;
      const bool whole = (c + L + 7) / 8 <= t.groups;   // every group the vector spans is an output's
      if (c / 8 >= t.groups) continue;
      V a = acc[i][v];
      if (t.residual) AddGroups<V, L>(t.residual + at, whole ? t.plane : 0, a);
      if (t.act != EpilogueAct::kNone) a = Activate(a, t.act);
      if (i < t.count) StoreGroups<V, L>(t.blocked + at, t.plane, a, whole);
    }
  }
}

// acc[i][v]: pixel i, output channels [v*L, v*L + L). Per tap: NV weight vectors (two; one for layers of at most L
// output channels, whose second vector would be all padding), R broadcasts, NV R FMAs.
template <typename V, int L, int R, int NV = 2>
__attribute__((always_inline)) inline void TileBody(const TileArgs& t) {
  V acc[R][NV] = {};
  const float* ps[R];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) ps[i] = t.px[i];
  const float* w = t.w;
  const char* pf = t.prefetch;
  const char* const pf_end = pf + t.prefetch_lines * 64;
  int64_t countdown = t.prefetch_every;
#pragma GCC unroll 2
  for (int64_t k = 0; k < t.taps; ++k, w += NV * L) {
    if (--countdown == 0) {
      countdown = t.prefetch_every;
      if (pf < pf_end) PrefetchWeightLine(pf, t.prefetch_once);
      pf += 64;
    }
    const int64_t o = t.off[k];
    V wv[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) std::memcpy(&wv[v], w + v * L, sizeof(V));
#pragma GCC unroll 12
    for (int i = 0; i < R; ++i) {
      const float b = ps[i][o];   // scalar x vector: a broadcast, not an add to zero
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) acc[i][v] += b * wv[v];
    }
  }
  if (t.bias) {
    V bv[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) std::memcpy(&bv[v], t.bias + v * L, sizeof(V));
#pragma GCC unroll 12
    for (int i = 0; i < R; ++i)
      for (int v = 0; v < NV; ++v) acc[i][v] += bv[v];
  }
  if (!t.out) return StoreBlocked<V, L, R, NV>(t, acc);
  if (t.act != EpilogueAct::kNone) {
#pragma GCC unroll 12
    for (int i = 0; i < R; ++i)
      for (int v = 0; v < NV; ++v) acc[i][v] = Activate(acc[i][v], t.act);
  }
#pragma GCC unroll 12
  for (int i = 0; i < R; ++i)
    for (int v = 0; v < NV; ++v) std::memcpy(t.out + (i * NV + v) * L, &acc[i][v], sizeof(V));
}

using TileFn = void (*)(const TileArgs&);
template <int R>
void TilePortable(const TileArgs& t) { TileBody<v4sf, 4, R>(t); }
#ifdef LITE_X86_SIMD
template <int R>
__attribute__((target("avx2,fma"))) void TileAvx2(const TileArgs& t) { TileBody<v8sf, 8, R>(t); }
template <int R>
__attribute__((target("avx512f,fma"))) void TileAvx512(const TileArgs& t) { TileBody<v16sf, 16, R>(t); }
template <int R>
__attribute__((target("avx512f,fma"))) void NarrowTileAvx512(const TileArgs& t) { TileBody<v16sf, 16, R, 1>(t); }
#endif

// The kernels for tiles of 6, 7 and 8 pixels. AVX2 and the portable path have 16 vector registers: their tiles
// stay at 6 pixels (12 accumulators, 2 weights, a broadcast), so every height maps to the 6-pixel kernel there.
// On AVX-512, layers of at most 16 output channels (YOLO's and the small CNNs' first layers) take one-vector tiles
// of 6-12 pixels (`narrow`): the two-vector tile would spend half its FMAs on padding channels.
struct TileKernels {
  TileFn fn[kP + 1] = {};
  TileFn narrow[kP + 1] = {};
  int64_t lanes = 4;
  int64_t max_rows = 6;
  int64_t narrow_rows = 0;   // 0: no narrow tiles on this CPU
};

const TileKernels& Kernels() {
  static const TileKernels k = [] {
    TileKernels t;
    const auto k6 = PickIsaKernel<TileFn>(TilePortable<6>, LITE_IF_X86_SIMD(TileAvx2<6>), LITE_IF_X86_SIMD(TileAvx512<6>));
    t.lanes = k6.lanes;
    for (int64_t r = 6; r <= kP; ++r) t.fn[r] = k6.fn;
    if (k6.isa == SimdIsa::kAvx512) {
#ifdef LITE_X86_SIMD
      t.fn[7] = TileAvx512<7>;
      t.fn[8] = TileAvx512<8>;
      t.max_rows = 8;
      const TileFn narrow[] = {NarrowTileAvx512<6>, NarrowTileAvx512<7>, NarrowTileAvx512<8>, NarrowTileAvx512<9>,
                               NarrowTileAvx512<10>, NarrowTileAvx512<11>, NarrowTileAvx512<12>};
      for (int64_t r = 6; r <= kP; ++r) t.narrow[r] = narrow[r - 6];
      t.narrow_rows = kP;
#endif
    }
    return t;
  }();
  return k;
}

// Whether a layer of M output channels takes the one-vector tiles (LITE_CONV_NARROW_TILES=0 keeps two vectors).
bool NarrowTiles(int64_t M) {
  static const bool enabled = [] {
    const char* v = std::getenv("LITE_CONV_NARROW_TILES");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return enabled && Kernels().narrow_rows > 0 && M <= Kernels().lanes;
}

// Tile height for a plane of P output pixels: the one of 6..max_rows that computes the fewest repeated pixels
// (49 pixels: 7 tiles of 7, where 6-pixel tiles compute 54), the taller on a tie (fewer loads per FMA).
int64_t TileRows(int64_t P, int64_t max_rows) {
  int64_t best = 6;
  for (int64_t r = 6; r <= max_rows; ++r)
    if ((P + r - 1) / r * r <= (P + best - 1) / best * best) best = r;
  return best;
}

// ---- Wide tiles: up to 6 pixels x 64 output channels (4 AVX-512 vectors: 24 accumulators) ----
// Per input channel: 6 broadcasts and 4 weight vectors for 24 FMAs (the two-vector tile: 8 + 2 for 16). The depth is
// walked one 8-channel input block (KH x KW x 8 taps) at a time with the channel offsets as immediates, and a call
// covers `blocks` input blocks: between calls the sums go through a small buffer, so a chunk of blocks' weights
// (18 KB a 3x3 block) serves every tile of the task from L1 or L2 instead of the whole depth's (147 KB for 128 input
// channels) streaming from L2 per tile.
constexpr int64_t kWideChannels = 64;
constexpr int kWidePixels = 6;
constexpr int64_t kWideRunTiles = 192;   // ResNet-50's largest wide layer (28x28) has 131 tiles

struct WideArgs {
  const float* const* px;   // the tile's pixel origins (input block 0, tap (0, 0))
  int64_t blocks;           // input blocks in this call
  int64_t plane;            // floats between input blocks
  int64_t KH, KW, row_step, col_step;   // taps, floats between filter rows / columns in the input
  const float* w;           // [blocks][KH][KW][8][64]
  float* partial;           // [R][64]: sums carried between calls (read unless first, written unless last)
  bool first, last;
  const float* bias;        // [64] or null: the first call starts from it
  // The last call stores into the channel-blocked output ([M/8][P][8]): `out` at the tile's first pixel of its first
  // 8-channel group, `out_plane` floats between groups; a residual laid out alike is added first, then act.
  float* out;
  const float* residual;
  int64_t out_plane;
  EpilogueAct act;
  // The next chunk's weights, fetched into L2 a few lines per filter tap while this one computes (they come from
  // memory the first time: ResNet-50's 100 MB of weights pass through the L3).
  const char* prefetch = nullptr;
  int64_t prefetch_per_tap = 0;
  const char* prefetch_end = nullptr;
};

#ifdef LITE_X86_SIMD
template <int R>
__attribute__((target("avx512f,fma"))) void WideTile(const WideArgs& t) {
  v16sf acc[R][4];
  const float* ps[R];
#pragma GCC unroll 6
  for (int i = 0; i < R; ++i) ps[i] = t.px[i];
  if (t.first) {
    v16sf b[4] = {};
    if (t.bias)
      for (int v = 0; v < 4; ++v) std::memcpy(&b[v], t.bias + 16 * v, sizeof(v16sf));
#pragma GCC unroll 6
    for (int i = 0; i < R; ++i)
      for (int v = 0; v < 4; ++v) acc[i][v] = b[v];
  } else {
#pragma GCC unroll 6
    for (int i = 0; i < R; ++i)
      for (int v = 0; v < 4; ++v) std::memcpy(&acc[i][v], t.partial + i * 64 + 16 * v, sizeof(v16sf));
  }
  const float* w = t.w;
  const char* pf = t.prefetch;
  for (int64_t b = 0; b < t.blocks; ++b)
    for (int64_t kh = 0; kh < t.KH; ++kh)
      for (int64_t kw = 0; kw < t.KW; ++kw) {
        const int64_t off = b * t.plane + kh * t.row_step + kw * t.col_step;
        for (int64_t q = 0; q < t.prefetch_per_tap && pf < t.prefetch_end; ++q, pf += 64) PrefetchWeightLine(pf, false);
#pragma GCC unroll 8
        for (int c = 0; c < 8; ++c, w += 64) {
          float x[R];
#pragma GCC unroll 6
          for (int i = 0; i < R; ++i) x[i] = ps[i][off + c];
#pragma GCC unroll 4
          for (int v = 0; v < 4; ++v) {
            v16sf wv;
            std::memcpy(&wv, w + 16 * v, sizeof(wv));
#pragma GCC unroll 6
            for (int i = 0; i < R; ++i) acc[i][v] += x[i] * wv;
          }
        }
      }
  if (!t.last) {
#pragma GCC unroll 6
    for (int i = 0; i < R; ++i)
      for (int v = 0; v < 4; ++v) std::memcpy(t.partial + i * 64 + 16 * v, &acc[i][v], sizeof(v16sf));
    return;
  }
#pragma GCC unroll 6
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      const int64_t at = 2 * v * t.out_plane + i * 8;   // vector v: 8-channel groups 2v and 2v + 1
      v16sf a = acc[i][v];
      if (t.residual) AddGroups<v16sf, 16>(t.residual + at, t.out_plane, a);
      if (t.act != EpilogueAct::kNone) a = Activate(a, t.act);
      StoreGroups<v16sf, 16>(t.out + at, t.out_plane, a, true);
    }
}
#endif

using WideFn = void (*)(const WideArgs&);
const WideFn* WideKernels() {
#ifdef LITE_X86_SIMD
  static const WideFn k[kWidePixels + 1] = {nullptr, WideTile<1>, WideTile<2>, WideTile<3>,
                                            WideTile<4>, WideTile<5>, WideTile<6>};
  return k;
#else
  return nullptr;
#endif
}

// Whether the wide tiles take channel-blocked layers: on Intel cores (measured on a Sapphire Rapids Xeon), where the
// two-vector tiles ran ResNet-50's stride-2 3x3 layers at 1.1-1.3x ONNX Runtime's time, and on AMD Zen 4 (ResNet-50
// 0.95x the time at one thread: CpuTakesXeonConvRules). LITE_CONV_WIDE_TILES=0 / 1 decides on any CPU.
bool WideTilesWanted() {
  static const bool wanted = [] {
    const char* v = std::getenv("LITE_CONV_WIDE_TILES");
    if (v) return std::strcmp(v, "0") != 0;
    return CpuTakesXeonConvRules();
  }();
  return wanted;
}

}  // namespace

PixelTileConv2D::PixelTileConv2D(const ConvGeometry& g, const float* w, ConvLayouts layouts)
    : g_(g), layouts_(layouts), lanes_(Kernels().lanes), block_((NarrowTiles(g.M) ? 1 : 2) * Kernels().lanes),
      rows_(TileRows(g.OH * g.OW, NarrowTiles(g.M) ? Kernels().narrow_rows : Kernels().max_rows)) {
  // The padded plane covers every tap of every output pixel; without padding the input is read in place.
  Hp_ = std::max(g.H + g.pad_top, (g.OH - 1) * g.SH + (g.KH - 1) * g.DH + 1);
  Wp_ = std::max(g.W + g.pad_left, (g.OW - 1) * g.SW + (g.KW - 1) * g.DW + 1);
  padded_ = g.pad_top != 0 || g.pad_left != 0 || Hp_ != g.H || Wp_ != g.W;
  if (!padded_) Hp_ = g.H, Wp_ = g.W;
  K_ = g.C * g.KH * g.KW;
  // A blocked input ([C/8][Hp][Wp][8]) has its pixels 8 floats apart and channel c at c % 8 of its block's pixel.
  const int64_t px = PixelStride();
  for (int64_t c = 0; c < g.C; ++c) {
    const int64_t base = layouts.in_blocked ? (c / 8 * Hp_ * Wp_) * 8 + c % 8 : c * Hp_ * Wp_;
    for (int64_t kh = 0; kh < g.KH; ++kh)
      for (int64_t kw = 0; kw < g.KW; ++kw) tap_offset_.push_back(base + (kh * g.DH * Wp_ + kw * g.DW) * px);
  }
  wide_ = WideTilesAvailable() && layouts.in_blocked && layouts.out_blocked && g.C % 8 == 0 &&
          g.M % kWideChannels == 0;
  if (wide_) {
    const int64_t in_blocks = g.C / 8, taps = g.KH * g.KW;
    wide_w_.assign(static_cast<size_t>(g.M * K_), 0.f);
    for (int64_t m = 0; m < g.M; ++m)
      for (int64_t c = 0; c < g.C; ++c)
        for (int64_t k = 0; k < taps; ++k)
          wide_w_[(((m / kWideChannels * in_blocks + c / 8) * taps + k) * 8 + c % 8) * kWideChannels +
                  m % kWideChannels] = w[(m * g.C + c) * taps + k];
    for (int64_t oh = 0; oh < g.OH; ++oh)
      for (int64_t ow = 0; ow < g.OW; ++ow) pixel_origin_.push_back((oh * g.SH * Wp_ + ow * g.SW) * 8);
    return;
  }
  const int64_t blocks = (g.M + block_ - 1) / block_;
  packed_w_.assign(static_cast<size_t>(blocks * K_ * block_ + 16), 0.f);
  float* dst = AlignTo64(packed_w_.data());
  for (int64_t m = 0; m < g.M; ++m)
    for (int64_t k = 0; k < K_; ++k) dst[((m / block_) * K_ + k) * block_ + m % block_] = w[m * K_ + k];
}

bool PixelTileConv2D::WideTilesAvailable() {
  return WideKernels() != nullptr && Kernels().max_rows == 8 && WideTilesWanted();
}

size_t PixelTileConv2D::ScratchBytes() const {
  return padded_ ? static_cast<size_t>(g_.C * Hp_ * Wp_) * sizeof(float) : 0;   // either layout: same size
}

const float* PixelTileConv2D::PaddedInput(const float* x, float* scratch, ThreadPool* pool) const {
  const ConvGeometry& g = g_;
  if (padded_) {
    // By rows, all channels (blocks) each: a thread copies the rows around the output pixels its tiles below compute.
    const int64_t px = PixelStride(), planes = g.C / px;
    pool->ParallelFor(Hp_, 1, [&](int64_t hb, int64_t he) {
      for (int64_t c = 0; c < planes; ++c) {
        float* plane = scratch + c * Hp_ * Wp_ * px;
        for (int64_t h = hb; h < he; ++h) {
          float* row = plane + h * Wp_ * px;
          const int64_t ih = h - g.pad_top;
          if (ih < 0 || ih >= g.H) {
            std::fill(row, row + Wp_ * px, 0.f);
            continue;
          }
          const int64_t copy = std::min(g.W, Wp_ - g.pad_left);
          std::fill(row, row + g.pad_left * px, 0.f);
          std::memcpy(row + g.pad_left * px, x + (c * g.H + ih) * g.W * px, copy * px * sizeof(float));
          std::fill(row + (g.pad_left + copy) * px, row + Wp_ * px, 0.f);
        }
      }
    });
    return scratch;
  }
  return x;
}

void PixelTileConv2D::Run(const float* x, const float* bias, const float* residual, EpilogueAct act, float* y,
                          float* scratch, ThreadPool* pool) const {
  const ConvGeometry& g = g_;
  const float* src = PaddedInput(x, scratch, pool);
  if (wide_) return RunWide(src, bias, residual, act, y, pool);
  const TileFn kernel = (block_ == lanes_ ? Kernels().narrow : Kernels().fn)[rows_];
  const int64_t in_px = PixelStride();
  const bool out_blocked = layouts_.out_blocked;
  const int64_t kR = rows_;
  const float* weights = AlignTo64(packed_w_.data());
  const int64_t P = g.OH * g.OW, tiles = (P + kR - 1) / kR;
  const int64_t blocks = (g.M + block_ - 1) / block_, B = block_;
  // Memory traffic decides the loop order. Small chunks of pixels, each run against every channel block,
  // read the weights once per chunk; one chunk of all pixels reads them once but the input once per
  // block. Early layers (large planes, small filters) want the first; late ones (7x7 planes, megabytes
  // of weights) the second. Bytes that fit in half the L2 cost a quarter of those that come from L3/DRAM.
  const auto cost = [](int64_t bytes) { return bytes <= (512 << 10) ? bytes : 4 * bytes; };
  const int64_t input_bytes = g.C * Hp_ * Wp_ * 4, weight_bytes = K_ * g.M * 4;
  const int64_t small_chunks = (tiles + kChunkTiles - 1) / kChunkTiles;
  const bool one_chunk = small_chunks * cost(weight_bytes) + cost(input_bytes) >
                         cost(weight_bytes) + blocks * cost(input_bytes);
  // With threads, one chunk each rather than one in all where the input outweighs the weights: each thread then
  // computes its own part of the plane, whose input rows it copied above and the layer before wrote (its threads
  // split pixels too), and reads all the weights. Where the weights are the larger (7x7 layers: megabytes), the
  // threads split the channel blocks and each reads half of them.
  const int64_t threads = pool ? pool->size() : 1;
  const int64_t parts = one_chunk && weight_bytes <= input_bytes ? threads : 1;
  const int64_t chunk_tiles = one_chunk ? (tiles + parts - 1) / parts : kChunkTiles;
  const int64_t chunks = (tiles + chunk_tiles - 1) / chunk_tiles;
  // The residual comes before the activation, so with one the activation runs at the copy-out instead.
  const bool act_in_tile = !residual && (act == EpilogueAct::kRelu || act == EpilogueAct::kRelu6 ||
                                         act == EpilogueAct::kSilu);
  const bool act_at_copy = residual && (act == EpilogueAct::kRelu || act == EpilogueAct::kRelu6);
  const bool act_after = !act_in_tile && !act_at_copy && act != EpilogueAct::kNone;
  // Tasks: (pixel chunk, channel block), chunk-major so a thread reuses a chunk's input for every block.
  pool->ParallelFor(chunks * blocks, 1, [&](int64_t tb, int64_t te) {
    alignas(64) float sums[kP * 64];   // up to kP pixels
    alignas(64) float block_bias[64];
    for (int64_t t = tb; t < te; ++t) {
      const int64_t chunk = t / blocks, blk = t % blocks;
      const int64_t m0 = blk * B, mcount = std::min(B, g.M - m0);
      const int64_t p_begin = chunk * chunk_tiles * kR, p_end = std::min(P, p_begin + chunk_tiles * kR);
      TileArgs a;
      a.taps = K_;
      a.off = tap_offset_.data();
      a.w = weights + blk * K_ * B;
      a.out = sums;
      a.act = act_in_tile ? act : EpilogueAct::kNone;
      a.bias = nullptr;
      if (bias) {
        std::fill(block_bias, block_bias + B, 0.f);
        std::copy(bias + m0, bias + m0 + mcount, block_bias);
        a.bias = block_bias;
      }
      // The next channel block's weights come from L3 or memory the first time (ResNet-50's 7x7 layers stream
      // 9.4 MB): the tiles of this task fetch them while they compute, one line every few taps, instead of the next
      // block's first tile waiting on every line.
      const int64_t task_tiles = (p_end - p_begin + kR - 1) / kR;
      int64_t next_lines = 0;
      if (chunk == 0 && blk + 1 < blocks) next_lines = std::min(B, g.M - m0 - B) * K_ * int64_t{sizeof(float)} / 64;
      const int64_t lines_per_tile = (next_lines + task_tiles - 1) / task_tiles;
      a.prefetch_lines = lines_per_tile;
      a.prefetch_every = std::max<int64_t>(1, lines_per_tile ? K_ / lines_per_tile : K_ + 1);
      a.prefetch = reinterpret_cast<const char*>(weights + (blk + 1) * K_ * B);
      a.prefetch_once = WeightPrefetchNonTemporal() && chunks == 1;   // no later pixel chunk reads the block again
      // The tiles' pixels walk the output rows: (oh, ow) carried from tile to tile, not divided out per pixel
      // (ResNet-50's float32 stem, 147 taps a tile: 0.97-0.98x the time).
      int64_t oh = p_begin / g.OW, ow = p_begin % g.OW;
      for (int64_t p0 = p_begin; p0 < p_end; p0 += kR) {
        a.prefetch_lines = std::min(lines_per_tile, next_lines - (p0 - p_begin) / kR * lines_per_tile);
        const int64_t count = std::min(kR, p_end - p0);
        const float* origins[kP];
        for (int64_t i = 0; i < count; ++i) {
          origins[i] = src + (oh * g.SH * Wp_ + ow * g.SW) * in_px;
          if (++ow == g.OW) ow = 0, ++oh;
        }
        for (int64_t i = count; i < kR; ++i) origins[i] = origins[count - 1];   // a short tile repeats its last pixel
        a.px = origins;
        if (out_blocked) {   // stored from the tile's registers, residual and activation there too
          a.out = nullptr;
          a.blocked = y + m0 * P + p0 * 8;
          a.residual = residual ? residual + m0 * P + p0 * 8 : nullptr;
          a.plane = P * 8;
          a.groups = mcount / 8;
          a.count = count;
          a.act = act_in_tile || act_at_copy ? act : EpilogueAct::kNone;
        }
        kernel(a);
        a.prefetch += lines_per_tile * 64;
        if (out_blocked) continue;
        // Transposed copy-out: the tile holds pixels x channels, the output is channels x pixels.
        float* out = y + m0 * P + p0;
        if (residual) {
          const float* res = residual + m0 * P + p0;
          for (int64_t j = 0; j < mcount; ++j)
            for (int64_t i = 0; i < count; ++i) {
              float v = sums[i * B + j] + res[j * P + i];
              if (act_at_copy) {
                v = v < 0.f ? 0.f : v;
                if (act == EpilogueAct::kRelu6) v = v < 6.f ? v : 6.f;
              }
              out[j * P + i] = v;
            }
        } else {
          for (int64_t j = 0; j < mcount; ++j)
            for (int64_t i = 0; i < count; ++i) out[j * P + i] = sums[i * B + j];
        }
      }
      if (act_after) {
        GemmEpilogue ep;
        ep.act = act;
        if (out_blocked) {   // the task's pixels in each of its blocks
          for (int64_t j = 0; j < mcount; j += 8)
            ApplyEpilogue(y + (m0 + j) * P, 0, 0, 1, p_begin * 8, (p_end - p_begin) * 8, ep);
        } else {
          ApplyEpilogue(y, P, m0, mcount, p_begin, p_end - p_begin, ep);
        }
      }
    }
  });
}

void PixelTileConv2D::RunWide(const float* src, const float* bias, const float* residual, EpilogueAct act, float* y,
                              ThreadPool* pool) const {
  const ConvGeometry& g = g_;
  const int64_t P = g.OH * g.OW, groups = g.M / kWideChannels, in_blocks = g.C / 8;
  const int64_t tiles = (P + kWidePixels - 1) / kWidePixels;   // tile t: pixels [P t / tiles, P (t + 1) / tiles)
  if (tiles == 0) return;
  const int64_t taps = g.KH * g.KW, block_w = taps * 8 * kWideChannels, group_w = in_blocks * block_w;
  // Two input blocks a chunk (36 KB of a 3x3 layer's weights, the sums of every tile of the task carried between
  // chunks): 1, 4 and 8 blocks, and tiles in chunks of 12-24 (sums in L1, weights re-read), measured level with it
  // on ResNet-50's layers (stand-alone, 128 -> 128 at stride 2: one block 1.26 ms, two 1.21, four to eight
  // 1.16-1.20, warm weights).
  const int64_t chunk_blocks = std::min<int64_t>(in_blocks, 2);
  // Threads split the pixels where the input outweighs the weights (each reads all the weights and its part of the
  // plane), else the 64-channel groups.
  const int64_t threads = pool ? pool->size() : 1;
  const int64_t input_bytes = g.C * Hp_ * Wp_ * 4, weight_bytes = g.M * K_ * 4;
  const int64_t parts = input_bytes >= weight_bytes ? std::min(threads, tiles) : 1;
  const bool act_in_tile = act == EpilogueAct::kRelu || act == EpilogueAct::kRelu6 || act == EpilogueAct::kSilu;
  const WideFn* kernels = WideKernels();
  const float* weights = wide_w_.data();
  const int64_t weights_bytes = static_cast<int64_t>(wide_w_.size() * sizeof(float));
  pool->ParallelFor(parts * groups, 1, [&](int64_t tb, int64_t te) {
    thread_local CacheLineVector<float> partial;
    for (int64_t task = tb; task < te; ++task) {
      const int64_t part = task / groups, grp = task % groups;
      const int64_t t_begin = tiles * part / parts, t_end = tiles * (part + 1) / parts;
      WideArgs a;
      a.plane = Hp_ * Wp_ * 8;
      a.KH = g.KH, a.KW = g.KW, a.row_step = g.DH * Wp_ * 8, a.col_step = g.DW * 8;
      a.bias = bias ? bias + grp * kWideChannels : nullptr;
      a.out_plane = P * 8;
      a.act = act_in_tile ? act : EpilogueAct::kNone;
      // Tiles in runs of at most kWideRunTiles (the carried sums' buffer stays under 300 KB on any plane).
      for (int64_t r0 = t_begin; r0 < t_end; r0 += kWideRunTiles) {
        const int64_t r1 = std::min(t_end, r0 + kWideRunTiles), run_tiles = r1 - r0;
        if (partial.size() < static_cast<size_t>(run_tiles * kWidePixels * kWideChannels))
          partial.resize(static_cast<size_t>(run_tiles * kWidePixels * kWideChannels));
        for (int64_t b0 = 0; b0 < in_blocks; b0 += chunk_blocks) {
          a.blocks = std::min(chunk_blocks, in_blocks - b0);
          a.first = b0 == 0, a.last = b0 + a.blocks == in_blocks;
          a.w = weights + grp * group_w + b0 * block_w;
          // The next chunk's weights (the next blocks, or the next group's first: contiguous), a share per tile.
          const int64_t next_begin = std::min((grp * group_w + (b0 + a.blocks) * block_w) * 4, weights_bytes);
          const int64_t share = (a.blocks * block_w * 4 / 64 + run_tiles - 1) / run_tiles;
          a.prefetch_per_tap = (share + a.blocks * taps - 1) / (a.blocks * taps);
          for (int64_t t = r0; t < r1; ++t) {
            const int64_t p0 = P * t / tiles, count = P * (t + 1) / tiles - p0;
            const int64_t pf_begin = std::min(next_begin + (t - r0) * share * 64, weights_bytes);
            a.prefetch = reinterpret_cast<const char*>(weights) + pf_begin;
            a.prefetch_end = reinterpret_cast<const char*>(weights) + std::min(pf_begin + share * 64, weights_bytes);
            const float* origins[kWidePixels];
            for (int64_t i = 0; i < count; ++i) origins[i] = src + b0 * a.plane + pixel_origin_[p0 + i];
            a.px = origins;
            a.partial = partial.data() + (t - r0) * kWidePixels * kWideChannels;
            a.out = y + grp * kWideChannels * P + p0 * 8;
            a.residual = residual ? residual + grp * kWideChannels * P + p0 * 8 : nullptr;
            kernels[count](a);
          }
        }
      }
      if (!act_in_tile && act != EpilogueAct::kNone) {
        GemmEpilogue ep;
        ep.act = act;
        const int64_t p_begin = P * t_begin / tiles, p_end = P * t_end / tiles;
        for (int64_t j = 0; j < kWideChannels; j += 8)
          ApplyEpilogue(y + (grp * kWideChannels + j) * P, 0, 0, 1, p_begin * 8, (p_end - p_begin) * 8, ep);
      }
    }
  });
}

}  // namespace lite
