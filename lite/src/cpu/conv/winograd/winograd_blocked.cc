#include "cpu/conv/winograd/winograd_blocked.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>

#include "cpu/aligned.h"
#include "cpu/conv/blocked_rows.h"
#include "cpu/conv/winograd/filter_transform.h"
#include "cpu/isa_dispatch.h"
#include "cpu/simd/simd.h"

namespace lite {
namespace {

constexpr int64_t kB = 8;                    // channels of a block (NCHW8c)
constexpr int64_t kChunkBytes = 2 << 20;     // a chunk's transformed inputs and sums
constexpr int64_t kOneChunkMaxBytes = 16 << 20;   // see the constructor
constexpr int64_t kMinTilesPerThread = 16;   // see SplitsByTiles
constexpr int64_t kMaxFilterBytesPerBandTile = 64 << 10;

typedef float v8f __attribute__((vector_size(32)));
typedef float v16f __attribute__((vector_size(64)));

// A vector of L = 8 or 16 channels: one block, or two blocks side by side (their planes `plane` floats apart), as
// they lie in a position's row of transformed inputs or sums. The helpers are inlined into their ISA's callers only:
// a vector argument of a function outside a clone would change its calling convention.
__attribute__((always_inline)) inline void LoadBlocks(const float* p, int64_t, v8f& v) { std::memcpy(&v, p, 32); }
__attribute__((always_inline)) inline void StoreBlocks(float* p, int64_t, const v8f& v) { std::memcpy(p, &v, 32); }
// Two halves joined in registers (written to memory as halves and read back whole, they would stall store
// forwarding).
__attribute__((always_inline)) inline void LoadBlocks(const float* p, int64_t plane, v16f& v) {
  v8f lo, hi;
  std::memcpy(&lo, p, 32);
  std::memcpy(&hi, p + plane, 32);
  v = __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}
__attribute__((always_inline)) inline void StoreBlocks(float* p, int64_t plane, const v16f& v) {
  const v8f lo = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7);
  const v8f hi = __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
  std::memcpy(p, &lo, 32);
  std::memcpy(p + plane, &hi, 32);
}

// F(4x4, 3x3): the input transform's six combinations of a0..a5 (B^T's rows).
template <typename V>
__attribute__((always_inline)) inline void InputCombine6(const V* a, int64_t s, V* o, int64_t os) {
  const V p = a[4 * s] - 4.f * a[2 * s], q = a[3 * s] - 4.f * a[s];
  const V c = a[4 * s] - a[2 * s], e = 2.f * (a[3 * s] - a[s]);
  o[0] = 4.f * a[0] - 5.f * a[2 * s] + a[4 * s];
  o[os] = p + q;
  o[2 * os] = p - q;
  o[3 * os] = c + e;
  o[4 * os] = c - e;
  o[5 * os] = 4.f * a[s] - 5.f * a[3 * s] + a[5 * s];
}

// F(4x4, 3x3): the output transform's four combinations of m0..m5 (A^T's rows).
template <typename V>
__attribute__((always_inline)) inline void OutputCombine6(const V* m, int64_t s, V* o, int64_t os) {
  const V a = m[s] + m[2 * s], b = m[s] - m[2 * s], c = m[3 * s] + m[4 * s], d = m[3 * s] - m[4 * s];
  o[0] = m[0] + a + c;
  o[os] = b + 2.f * d;
  o[2 * os] = a + 4.f * c;
  o[3 * os] = b + 8.f * d + m[5 * s];
}

// F(2x2, 3x3): the input transform's four combinations of a0..a3 and the output transform's two of m0..m3.
template <typename V>
__attribute__((always_inline)) inline void InputCombine4(const V* a, int64_t s, V* o, int64_t os) {
  o[0] = a[0] - a[2 * s];
  o[os] = a[s] + a[2 * s];
  o[2 * os] = a[2 * s] - a[s];
  o[3 * os] = a[s] - a[3 * s];
}
template <typename V>
__attribute__((always_inline)) inline void OutputCombine4(const V* m, int64_t s, V* o, int64_t os) {
  o[0] = m[0] + m[s] + m[2 * s];
  o[os] = m[s] - m[2 * s] - m[3 * s];
}

// The input tile's side (alpha = R + 2) combinations for output tiles of side R.
template <int R, typename V>
__attribute__((always_inline)) inline void InputCombine(const V* a, int64_t s, V* o, int64_t os) {
  if (R == 4) InputCombine6(a, s, o, os); else InputCombine4(a, s, o, os);
}
template <int R, typename V>
__attribute__((always_inline)) inline void OutputCombine(const V* m, int64_t s, V* o, int64_t os) {
  if (R == 4) OutputCombine6(m, s, o, os); else OutputCombine4(m, s, o, os);
}

// v[(t * positions + p) * C + 8 b ...] for tiles [t0, t0 + n) (tile t0 + t at v's tile t) and blocks [b0, b1),
// sizeof(V) / 32 blocks at a time (b1 - b0 a multiple of that). Tile by tile, its blocks in turn: a tile's rows of v
// (one per position, C values each) are written in one sweep.
template <int R, typename V>
__attribute__((always_inline)) inline void TransformInputsBody(const float* x, const ConvGeometry& g, int64_t tiles_w,
                                                              int64_t t0, int64_t n, int64_t b0, int64_t b1,
                                                              float* v) {
  constexpr int64_t kStep = sizeof(V) / 32, A = R + 2, kP = A * A;
  const int64_t plane = g.H * g.W * kB;
  const V zero = {};
  for (int64_t t = 0; t < n; ++t) {
    const int64_t ty = (t0 + t) / tiles_w, tx = (t0 + t) % tiles_w;
    const int64_t iy0 = R * ty - g.pad_top, ix0 = R * tx - g.pad_left;
    const bool inside = iy0 >= 0 && ix0 >= 0 && iy0 + A <= g.H && ix0 + A <= g.W;
    const int64_t i_lo = std::max<int64_t>(0, -iy0), i_hi = std::min<int64_t>(A, g.H - iy0);
    const int64_t k_lo = std::max<int64_t>(0, -ix0), k_hi = std::min<int64_t>(A, g.W - ix0);
    for (int64_t b = b0; b < b1; b += kStep) {
      const float* xb = x + b * plane;
      // B^T d a column at a time from the input (zeros outside the plane), then each row of that times B straight
      // into v: one pass through memory for the intermediate, the columns and rows in registers.
      V r[kP];
      #pragma GCC unroll 8
      for (int64_t k = 0; k < A; ++k) {
        V col[A];
        #pragma GCC unroll 8
        for (int64_t i = 0; i < A; ++i) {
          if (inside || (i >= i_lo && i < i_hi && k >= k_lo && k < k_hi))
            LoadBlocks(xb + ((iy0 + i) * g.W + ix0 + k) * kB, plane, col[i]);
          else
            col[i] = zero;
        }
        InputCombine<R>(col, 1, r + k, A);
      }
      float* vt = v + t * kP * g.C + b * kB;
      #pragma GCC unroll 8
      for (int64_t i = 0; i < A; ++i) {
        V row[A];
        InputCombine<R>(r + i * A, 1, row, 1);
        #pragma GCC unroll 8
        for (int64_t k = 0; k < A; ++k) std::memcpy(vt + (i * A + k) * g.C, &row[k], sizeof(V));
      }
    }
  }
}

// y's R x R pixels of tiles [t0, t0 + n), blocks [b0, b1) (sizeof(V) / 32 at a time), from their sums
// q[(t * positions + p) * M + 8 b ...]: act(A^T m A + bias + residual). ReLU, ReLU6, SiLU and none in registers; other
// activations in a pass over each row.
template <int R, typename V>
__attribute__((always_inline)) inline void TransformOutputsBody(const float* q, const ConvGeometry& g,
                                                               int64_t tiles_w, int64_t t0, int64_t n, int64_t b0,
                                                               int64_t b1, const float* bias, const float* residual,
                                                               EpilogueAct act, float* y) {
  constexpr int64_t kStep = sizeof(V) / 32, A = R + 2, kP = A * A;
  const bool in_registers = act == EpilogueAct::kNone || act == EpilogueAct::kRelu || act == EpilogueAct::kRelu6 ||
                            act == EpilogueAct::kSilu;
  const V zero = {}, six = zero + 6.f;
  const int64_t plane = g.OH * g.OW * kB;
  for (int64_t t = 0; t < n; ++t) {   // tile by tile, its blocks in turn (a tile's rows of q read in one sweep)
    const int64_t ty = (t0 + t) / tiles_w, tx = (t0 + t) % tiles_w;
    const int64_t oy0 = R * ty, ox0 = R * tx;
    const int64_t rows = std::min<int64_t>(R, g.OH - oy0), cols = std::min<int64_t>(R, g.OW - ox0);
    for (int64_t b = b0; b < b1; b += kStep) {
      V bv = zero;
      if (bias) std::memcpy(&bv, bias + b * kB, sizeof(V));
      float* yb = y + b * plane;
      const float* rb = residual ? residual + b * plane : nullptr;
      // m A a row at a time from the sums, then each column of that times A^T: the outputs of column c, rows 0..R-1.
      V s[A * R];
      const float* qt = q + t * kP * g.M + b * kB;
      #pragma GCC unroll 8
      for (int64_t i = 0; i < A; ++i) {
        V row[A];
        #pragma GCC unroll 8
        for (int64_t k = 0; k < A; ++k) std::memcpy(&row[k], qt + (i * A + k) * g.M, sizeof(V));
        OutputCombine<R>(row, 1, s + i * R, 1);
      }
      V o[R * R];
      #pragma GCC unroll 8
      for (int64_t c = 0; c < R; ++c) OutputCombine<R>(s + c, R, o + c, R);
      #pragma GCC unroll 8
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t at = ((oy0 + r) * g.OW + ox0) * kB;
        #pragma GCC unroll 8
        for (int64_t c = 0; c < cols; ++c) {
          V val = o[r * R + c];
          if (in_registers) {
            val += bv;
            if (rb) {
              V res;
              LoadBlocks(rb + at + c * kB, plane, res);
              val += res;
            }
            // NaN stays NaN through ReLU / ReLU6 (as ONNX Runtime's): the comparisons are false for it.
            if (act == EpilogueAct::kSilu) {
              val = FastSiluVec(val);   // YOLO's Convs: no second pass over the row
            } else if (act != EpilogueAct::kNone) {
              val = val < zero ? zero : val;
              if (act == EpilogueAct::kRelu6) val = val > six ? six : val;
            }
          }
          StoreBlocks(yb + at + c * kB, plane, val);
        }
        if (!in_registers)
          for (int64_t h = 0; h < kStep; ++h)
            BlockedRowEpilogue(yb + h * plane + at, cols, bias ? bias + (b + h) * kB : nullptr,
                               rb ? rb + h * plane + at : nullptr, act);
      }
    }
  }
}

template <int R>
LITE_VECTOR_CLONES void TransformInputs8(const float* x, const ConvGeometry& g, int64_t tiles_w, int64_t t0, int64_t n,
                                         int64_t b0, int64_t b1, float* v) {
  TransformInputsBody<R, v8f>(x, g, tiles_w, t0, n, b0, b1, v);
}
template <int R>
LITE_VECTOR_CLONES void TransformOutputs8(const float* q, const ConvGeometry& g, int64_t tiles_w, int64_t t0,
                                          int64_t n, int64_t b0, int64_t b1, const float* bias, const float* residual,
                                          EpilogueAct act, float* y) {
  TransformOutputsBody<R, v8f>(q, g, tiles_w, t0, n, b0, b1, bias, residual, act, y);
}
#if defined(__x86_64__)
// Two blocks per 512-bit vector: half the instructions of the 8-channel form.
template <int R>
__attribute__((target("avx512f"))) void TransformInputs16(const float* x, const ConvGeometry& g, int64_t tiles_w,
                                                          int64_t t0, int64_t n, int64_t b0, int64_t b1, float* v) {
  TransformInputsBody<R, v16f>(x, g, tiles_w, t0, n, b0, b1, v);
}
template <int R>
__attribute__((target("avx512f"))) void TransformOutputs16(const float* q, const ConvGeometry& g, int64_t tiles_w,
                                                           int64_t t0, int64_t n, int64_t b0, int64_t b1,
                                                           const float* bias, const float* residual, EpilogueAct act,
                                                           float* y) {
  TransformOutputsBody<R, v16f>(q, g, tiles_w, t0, n, b0, b1, bias, residual, act, y);
}
#endif

// Block ranges [b0, b1) in pairs on AVX-512 (an odd last block on its own).
template <int R>
void TransformInputs(const float* x, const ConvGeometry& g, int64_t tiles_w, int64_t t0, int64_t n, int64_t b0,
                     int64_t b1, float* v) {
#if defined(__x86_64__)
  if (DetectSimdIsa() == SimdIsa::kAvx512) {
    const int64_t pairs_end = b0 + (b1 - b0) / 2 * 2;
    if (pairs_end > b0) TransformInputs16<R>(x, g, tiles_w, t0, n, b0, pairs_end, v);
    if (pairs_end < b1) TransformInputs8<R>(x, g, tiles_w, t0, n, pairs_end, b1, v);
    return;
  }
#endif
  TransformInputs8<R>(x, g, tiles_w, t0, n, b0, b1, v);
}
template <int R>
void TransformOutputs(const float* q, const ConvGeometry& g, int64_t tiles_w, int64_t t0, int64_t n, int64_t b0,
                      int64_t b1, const float* bias, const float* residual, EpilogueAct act, float* y) {
#if defined(__x86_64__)
  if (DetectSimdIsa() == SimdIsa::kAvx512) {
    const int64_t pairs_end = b0 + (b1 - b0) / 2 * 2;
    if (pairs_end > b0) TransformOutputs16<R>(q, g, tiles_w, t0, n, b0, pairs_end, bias, residual, act, y);
    if (pairs_end < b1) TransformOutputs8<R>(q, g, tiles_w, t0, n, pairs_end, b1, bias, residual, act, y);
    return;
  }
#endif
  TransformOutputs8<R>(q, g, tiles_w, t0, n, b0, b1, bias, residual, act, y);
}

thread_local CacheLineVector<float> tls_work;   // a band's chunk (threads taking bands of tiles)

}  // namespace

// On Intel cores and AMD Zen 4 by default (measured on a Xeon of the Sapphire Rapids class and on a Zen 4 EPYC:
// CpuTakesXeonConvRules); Zen 5's and ARM64's figures were taken with WinogradConv3x3, which they keep until
// measured. LITE_CONV_WINOGRAD_BLOCKED=1 / 0 decides on any CPU.
bool WinogradBlockedConv3x3::Enabled() {
  static const bool on = [] {
    const char* v = std::getenv("LITE_CONV_WINOGRAD_BLOCKED");
    if (v) return std::strcmp(v, "0") != 0;
    return CpuTakesXeonConvRules();
  }();
  return on;
}

bool WinogradBlockedConv3x3::Supports(const ConvGeometry& g) {
  return g.KH == 3 && g.KW == 3 && g.SH == 1 && g.SW == 1 && g.DH == 1 && g.DW == 1 && g.OH > 0 && g.OW > 0 &&
         g.C > 0 && g.M > 0 && g.C % kB == 0 && g.M % kB == 0;
}

WinogradBlockedConv3x3::WinogradBlockedConv3x3(const ConvGeometry& g, const float* w, int tile, ConvLayouts layouts)
    : g_(g), layouts_(layouts), tile_(tile == 2 ? 2 : 4), positions_((tile_ + 2) * (tile_ + 2)) {
  tiles_h_ = (g.OH + tile_ - 1) / tile_;
  tiles_w_ = (g.OW + tile_ - 1) / tile_;
  const int64_t tiles = tiles_h_ * tiles_w_;
  // Chunks whose transformed inputs and sums stay in L2, unless that would stream the transformed filters again for
  // every chunk at more cost than one chunk's spill beyond L2 (counted three times: written, read, and the lines
  // fetched for the writes), up to kOneChunkMaxBytes of it: wide layers on small planes. An SD VAE decoder's
  // 512-channel 32x32 layers (37.7 MB of filters, 9.4 MB of inputs and sums) ran 1.09-1.14x WinogradConv3x3's time
  // in eight chunks and 0.46-0.54x in one; its 256-channel 128x128 one (75 MB of inputs and sums) 1.13x in one.
  const int64_t filter_bytes = positions_ * g.C * g.M * static_cast<int64_t>(sizeof(float));
  const int64_t chunk_data = positions_ * tiles * (g.C + g.M) * static_cast<int64_t>(sizeof(float));
  int64_t chunks = (chunk_data + kChunkBytes - 1) / kChunkBytes;
  if (chunks > 1 && chunk_data <= kOneChunkMaxBytes && filter_bytes + 3 * chunk_data < chunks * filter_bytes)
    chunks = 1;
  if (Bands()) {   // whole tile rows per chunk: the NCHW side converted a band of rows at a time
    chunks = std::min(chunks, tiles_h_);
    chunk_tiles_ = (tiles_h_ + chunks - 1) / chunks * tiles_w_;
  } else {
    chunk_tiles_ = (tiles + chunks - 1) / chunks;
  }
  // U = G g G^T per (input, output) channel pair (cpu/conv/winograd/filter_transform.h); each position's C x M
  // matrix is packed as a GEMM B.
  const std::vector<std::array<float, 9>> coef = WinogradFilterCoefficients(tile_);
  // Taps tap-major per input channel ([C][9][M]), so one position's C x M matrix is formed row by row.
  std::vector<float> taps(static_cast<size_t>(9 * g.M * g.C)), u(static_cast<size_t>(g.C * g.M));
  for (int64_t m = 0; m < g.M; ++m)
    for (int64_t c = 0; c < g.C; ++c)
      for (int t = 0; t < 9; ++t) taps[(c * 9 + t) * g.M + m] = w[(m * g.C + c) * 9 + t];
  // All positions in one block (huge pages from 2 MB, unmapped when the kernel goes).
  u_stride_ = PackedBFloats(g.C, g.M);
  packed_u_.resize(static_cast<size_t>(positions_ * u_stride_));
  for (int64_t p = 0; p < positions_; ++p) {
    for (int64_t c = 0; c < g.C; ++c)
      WinogradFilterPosition(coef[p].data(), taps.data() + c * 9 * g.M, g.M, u.data() + c * g.M);
    PackBInto(false, g.C, g.M, u.data(), g.M, packed_u_.data() + p * u_stride_);
  }
}

int64_t WinogradBlockedConv3x3::InBandFloats() const {
  return layouts_.in_blocked ? 0 : g_.C * (tile_ * (chunk_tiles_ / tiles_w_) + 2) * g_.W;
}

int64_t WinogradBlockedConv3x3::OutBandFloats() const {
  return layouts_.out_blocked ? 0 : g_.M * tile_ * (chunk_tiles_ / tiles_w_) * g_.OW;
}

size_t WinogradBlockedConv3x3::ScratchBytes() const {
  return static_cast<size_t>(WorkFloats()) * sizeof(float);
}

WinogradBlockedConv3x3::Chunk WinogradBlockedConv3x3::ChunkOf(int64_t t0, int64_t n, float* work) const {
  Chunk c;
  c.t0 = t0;
  c.n = n;
  c.v = work;
  c.q = c.v + positions_ * chunk_tiles_ * g_.C;
  c.in_band = c.q + positions_ * chunk_tiles_ * g_.M;
  c.out_band = c.in_band + InBandFloats();
  if (Bands()) {   // tiles [t0, t0 + n) are whole tile rows
    c.ty0 = t0 / tiles_w_;
    const int64_t ty1 = (t0 + n) / tiles_w_;
    c.in_r0 = std::max<int64_t>(0, tile_ * c.ty0 - g_.pad_top);
    c.in_r1 = std::max(c.in_r0, std::min<int64_t>(g_.H, tile_ * ty1 + 2 - g_.pad_top));
    c.out_r0 = tile_ * c.ty0;
    c.out_r1 = std::min<int64_t>(g_.OH, tile_ * ty1);
  }
  return c;
}

void WinogradBlockedConv3x3::InputTiles(const float* x, const Chunk& c, int64_t b0, int64_t b1) const {
  const float* src = x;
  ConvGeometry g = g_;
  int64_t t0 = c.t0;
  if (!layouts_.in_blocked) {
    // The chunk's input rows of these blocks into a blocked band; the tiles then count from the band's first row.
    const int64_t rows = c.in_r1 - c.in_r0;
    for (int64_t b = b0; b < b1; ++b)
      for (int64_t r = 0; r < rows; ++r)
        LinesToBlockedRow(x + (b * kB * g_.H + c.in_r0 + r) * g_.W, g_.H * g_.W, g_.W,
                          c.in_band + (b * rows + r) * g_.W * kB);
    src = c.in_band;
    g.H = rows;
    g.pad_top = g_.pad_top + c.in_r0 - tile_ * c.ty0;
    t0 -= c.ty0 * tiles_w_;
  }
  if (tile_ == 4)
    TransformInputs<4>(src, g, tiles_w_, t0, c.n, b0, b1, c.v);
  else
    TransformInputs<2>(src, g, tiles_w_, t0, c.n, b0, b1, c.v);
}

void WinogradBlockedConv3x3::Products(const Chunk& c, int64_t p0, int64_t p1) const {
  for (int64_t p = p0; p < p1; ++p)
    SgemmPackedB(false, c.n, g_.M, g_.C, 1.f, c.v + p * g_.C, positions_ * g_.C, packed_u_.data() + p * u_stride_, 0.f,
                 c.q + p * g_.M, positions_ * g_.M, GemmEpilogue{}, nullptr);
}

void WinogradBlockedConv3x3::OutputTiles(const Chunk& c, int64_t b0, int64_t b1, const float* bias,
                                         const float* residual, EpilogueAct act, float* y) const {
  if (layouts_.out_blocked) {
    if (tile_ == 4)
      TransformOutputs<4>(c.q, g_, tiles_w_, c.t0, c.n, b0, b1, bias, residual, act, y);
    else
      TransformOutputs<2>(c.q, g_, tiles_w_, c.t0, c.n, b0, b1, bias, residual, act, y);
    return;
  }
  // NCHW out: the chunk's output rows (with the bias) into a blocked band, then each row's eight channel lines into
  // y, and the residual and activation over them while they are in cache.
  ConvGeometry g = g_;
  const int64_t rows = c.out_r1 - c.out_r0;
  g.OH = rows;
  const int64_t t0 = c.t0 - c.ty0 * tiles_w_;
  if (tile_ == 4)
    TransformOutputs<4>(c.q, g, tiles_w_, t0, c.n, b0, b1, bias, nullptr, EpilogueAct::kNone, c.out_band);
  else
    TransformOutputs<2>(c.q, g, tiles_w_, t0, c.n, b0, b1, bias, nullptr, EpilogueAct::kNone, c.out_band);
  const int64_t plane = g_.OH * g_.OW;
  for (int64_t b = b0; b < b1; ++b) {
    for (int64_t r = 0; r < rows; ++r)
      BlockedRowToLines(c.out_band + (b * rows + r) * g_.OW * kB, g_.OW, y + b * kB * plane + (c.out_r0 + r) * g_.OW,
                        plane);
    if (!residual && act == EpilogueAct::kNone) continue;
    for (int64_t ch = 0; ch < kB; ++ch) {
      const int64_t at = (b * kB + ch) * plane + c.out_r0 * g_.OW;
      GemmEpilogue ep;
      ep.residual = residual ? residual + at : nullptr;
      ep.act = act;
      ApplyEpilogue(y + at, 0, 0, 1, 0, rows * g_.OW, ep);
    }
  }
}

void WinogradBlockedConv3x3::RunTiles(const float* x, const float* bias, const float* residual, EpilogueAct act,
                                      float* y, int64_t t0, int64_t n, float* work) const {
  const Chunk c = ChunkOf(t0, n, work);
  InputTiles(x, c, 0, g_.C / kB);
  Products(c, 0, positions_);
  OutputTiles(c, 0, g_.M / kB, bias, residual, act, y);
}

// Bands of tiles per thread read all the transformed filters on every thread; split steps read them once, half on
// each, but pass the transformed inputs and sums between the threads. Bands win where each thread has 16+ tiles and
// the filters are at most 64 KiB a tile. ResNet-50 at two threads: 56x56 x 64 (3 KiB a tile) 0.37-0.46 ms in bands
// against 0.60-0.65 split, 28x28 x 128 (48 KiB) 0.37-0.41 against 0.40-0.45, 14x14 x 256 in F(2x2) (86 KiB) 0.60-0.66
// against 0.53-0.59.
bool WinogradBlockedConv3x3::SplitsByTiles(int64_t threads) const {
  const int64_t tiles = tiles_h_ * tiles_w_;
  const int64_t filter_bytes = positions_ * g_.C * g_.M * static_cast<int64_t>(sizeof(float));
  return tiles / threads >= kMinTilesPerThread && filter_bytes <= kMaxFilterBytesPerBandTile * tiles;
}

void WinogradBlockedConv3x3::Run(const float* x, const float* bias, const float* residual, EpilogueAct act, float* y,
                                 float* scratch, ThreadPool* pool) const {
  const int64_t tiles = tiles_h_ * tiles_w_, threads = pool ? pool->size() : 1;
  if (threads > 1 && SplitsByTiles(threads)) {
    // Each thread takes a band of tiles (of tile rows where a side is NCHW) through all three steps: it reads and
    // writes its own part of the planes.
    pool->ParallelFor(threads, 1, [&](int64_t pb, int64_t pe) {
      const size_t floats = static_cast<size_t>(WorkFloats());
      if (tls_work.size() < floats) tls_work.resize(floats);
      for (int64_t part = pb; part < pe; ++part) {
        const int64_t a = Bands() ? part * tiles_h_ / threads * tiles_w_ : part * tiles / threads;
        const int64_t e = Bands() ? (part + 1) * tiles_h_ / threads * tiles_w_ : (part + 1) * tiles / threads;
        for (int64_t t0 = a; t0 < e; t0 += chunk_tiles_)
          RunTiles(x, bias, residual, act, y, t0, std::min(chunk_tiles_, e - t0), tls_work.data());
      }
    });
    return;
  }
  // Blocks in pairs (the transforms' 16-channel vectors) when split across threads.
  const int64_t in_pairs = (g_.C / kB + 1) / 2, out_pairs = (g_.M / kB + 1) / 2;
  for (int64_t t0 = 0; t0 < tiles; t0 += chunk_tiles_) {
    const int64_t n = std::min(chunk_tiles_, tiles - t0);
    if (threads == 1) {
      RunTiles(x, bias, residual, act, y, t0, n, scratch);
      continue;
    }
    // Few tiles a thread: each step split across the threads (input blocks, positions, output blocks).
    const Chunk c = ChunkOf(t0, n, scratch);
    pool->ParallelFor(in_pairs, 1, [&](int64_t u0, int64_t u1) {
      InputTiles(x, c, 2 * u0, std::min(2 * u1, g_.C / kB));
    });
    pool->ParallelFor(positions_, 1, [&](int64_t p0, int64_t p1) { Products(c, p0, p1); });
    pool->ParallelFor(out_pairs, 1, [&](int64_t u0, int64_t u1) {
      OutputTiles(c, 2 * u0, std::min(2 * u1, g_.M / kB), bias, residual, act, y);
    });
  }
}

}  // namespace lite
