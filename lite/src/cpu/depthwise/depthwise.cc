// Depthwise convolution, one channel plane at a time. Each input row is copied once into a zero-padded
// row split by stride phase (column q of phase r holds padded column r + q*SW), so every tap of the
// filter reads a contiguous run of the row: the inner loop is vector loads and FMAs with no bounds tests
// and no gathers, for any stride. The plane's rows stay in L1/L2 while all its output rows are computed.
#include "cpu/depthwise/depthwise.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/isa_dispatch.h"
#include "cpu/simd/simd.h"

namespace lite {
namespace {

typedef float v4sf __attribute__((vector_size(16)));
typedef float v8sf __attribute__((vector_size(32)));

struct RowJob {
  const float* const* rows;   // per tap row kh: the phase-split padded input row, or null when outside
  const float* w;             // KH*KW filter taps
  const int64_t* kw_off;      // per kw: offset of that tap's run inside a row (phase and column)
  int64_t KH, KW, OW;
  float bias;
  float* y;
  EpilogueAct act;            // kNone, kRelu or kRelu6 here (in registers); others run after the row
};

// All output rows of one plane: the ISA-specific function loops over them, so per-row work is only the
// row pointers (no call, and the filter taps are broadcast once per plane).
struct PlaneJob {
  RowJob row;                 // rows, y filled in per output row
  const float** rows;         // KH entries, written per output row
  const float* buf;           // prepared input rows, row_len apart
  int64_t row_len, H, SH, DH, pad_top, OH;
  float* y;                   // the output plane
};

template <typename V>
__attribute__((always_inline)) inline V Load(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof(V));
  return v;
}

// NV vectors of one output row starting at ow: NV independent FMA chains over all taps. The rows carry
// a vector of slack, so a partial last vector reads inside the buffer; only its valid lanes are stored.
// K > 0 is a square filter size known at compile time (loops fully unrolled: for 3x3 the nine broadcast
// taps stay in registers beside the four accumulators); K = 0 reads the size from the job.
template <typename V, int L, int NV, int K>
__attribute__((always_inline)) inline void RowBlock(const RowJob& j, const V* wv, bool local, V vb, int64_t ow) {
  const int64_t KH = K ? K : j.KH, KW = K ? K : j.KW;
  V a[NV];
#pragma GCC unroll 4
  for (int i = 0; i < NV; ++i) a[i] = vb;
#pragma GCC unroll 7
  for (int64_t kh = 0; kh < KH; ++kh) {
    const float* row = j.rows[kh];
    if (!row) continue;
#pragma GCC unroll 7
    for (int64_t kw = 0; kw < KW; ++kw) {
      const float* p = row + j.kw_off[kw] + ow;
      const V w = local ? wv[kh * KW + kw] : V{} + j.w[kh * KW + kw];
#pragma GCC unroll 4
      for (int i = 0; i < NV; ++i) a[i] += w * Load<V>(p + i * L);
    }
  }
  if (j.act != EpilogueAct::kNone) {
#pragma GCC unroll 4
    for (int i = 0; i < NV; ++i) {
      a[i] = a[i] < V{} ? V{} : a[i];   // (a NaN lane keeps its NaN)
      if (j.act == EpilogueAct::kRelu6) a[i] = a[i] > V{} + 6.f ? V{} + 6.f : a[i];
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < NV; ++i) {
    const int64_t n = std::min<int64_t>(L, j.OW - ow - i * L);
    if (n == L) {
      std::memcpy(j.y + ow + i * L, &a[i], sizeof(V));
    } else if (n > 0) {   // a fixed-trip loop, not a memcpy call per partial vector
      float tmp[L];
      std::memcpy(tmp, &a[i], sizeof(V));
#pragma GCC unroll 16
      for (int e = 0; e < L; ++e)
        if (e < n) j.y[ow + i * L + e] = tmp[e];
    }
  }
}

// One output row: blocks of 4 full vectors, then the remaining 1-4 vectors in one more block.
template <typename V, int L, int K>
__attribute__((always_inline)) inline void RowBody(const RowJob& j) {
  constexpr int kTaps = K ? K * K : 64;   // runtime sizes up to 8x8 keep their taps in a local array
  V wv[kTaps];
  const int64_t taps = j.KH * j.KW;
  const bool local = taps <= kTaps;
  if (local) {
#pragma GCC unroll 25
    for (int64_t t = 0; t < taps; ++t) wv[t] = V{} + j.w[t];
  }
  const V vb = V{} + j.bias;
  int64_t ow = 0;
  for (; ow + 4 * L <= j.OW; ow += 4 * L) RowBlock<V, L, 4, K>(j, wv, local, vb, ow);
  switch ((j.OW - ow + L - 1) / L) {   // 1 to 4 vectors left, the last one possibly partial
    case 4: RowBlock<V, L, 4, K>(j, wv, local, vb, ow); break;
    case 3: RowBlock<V, L, 3, K>(j, wv, local, vb, ow); break;
    case 2: RowBlock<V, L, 2, K>(j, wv, local, vb, ow); break;
    case 1: RowBlock<V, L, 1, K>(j, wv, local, vb, ow); break;
    default: break;
  }
}

template <typename V, int L>
__attribute__((always_inline)) inline void RowDispatch(const RowJob& j) {
  if (j.KH == 3 && j.KW == 3) return RowBody<V, L, 3>(j);
  if (j.KH == 5 && j.KW == 5) return RowBody<V, L, 5>(j);
  RowBody<V, L, 0>(j);
}

// even[q] = p[2q], odd[q] = p[2q + 1]: the two phases of a stride-2 row.
LITE_VECTOR_CLONES void Deinterleave2(const float* p, float* even, float* odd, int64_t n) {
  for (int64_t q = 0; q < n; ++q) {
    even[q] = p[2 * q];
    odd[q] = p[2 * q + 1];
  }
}

template <typename V, int L>
__attribute__((always_inline)) inline void PlaneBody(const PlaneJob& p) {
  RowJob j = p.row;
  j.rows = p.rows;
  for (int64_t oh = 0; oh < p.OH; ++oh) {
    for (int64_t kh = 0; kh < j.KH; ++kh) {
      const int64_t ih = oh * p.SH - p.pad_top + kh * p.DH;
      p.rows[kh] = ih >= 0 && ih < p.H ? p.buf + ih * p.row_len : nullptr;
    }
    j.y = p.y + oh * j.OW;
    RowDispatch<V, L>(j);
  }
}

using RowFn = void (*)(const PlaneJob&);
void RowPortable(const PlaneJob& p) { PlaneBody<v4sf, 4>(p); }
#ifdef LITE_X86_SIMD
__attribute__((target("avx2,fma"))) void RowAvx2(const PlaneJob& p) { PlaneBody<v8sf, 8>(p); }
#endif

const IsaKernel<RowFn>& Row() {
  static const IsaKernel<RowFn> k = PickIsaKernel<RowFn>(RowPortable, LITE_IF_X86_SIMD(RowAvx2), nullptr);
  return k;
}

}  // namespace

void DepthwiseConv2D(const DepthwiseShape& s, int64_t N, int64_t C, int64_t mult, const float* x, const float* w,
                     const float* bias, float* y, EpilogueAct act, ThreadPool* pool) {
  const IsaKernel<RowFn>& rk = Row();
  // Phase row length: the last output's furthest tap, plus a vector of slack for partial vectors.
  const int64_t reach = (s.OW - 1) + ((s.KW - 1) * s.DW) / s.SW + 1;
  const int64_t phase_len = (reach + rk.lanes + 7) / 8 * 8;
  const int64_t row_len = phase_len * s.SW;   // all phases of one input row
  GemmEpilogue act_only;
  act_only.act = act;
  const bool in_register = act == EpilogueAct::kNone || act == EpilogueAct::kRelu || act == EpilogueAct::kRelu6;
  std::vector<int64_t> kw_off(s.KW);
  for (int64_t kw = 0; kw < s.KW; ++kw) kw_off[kw] = (kw * s.DW) % s.SW * phase_len + (kw * s.DW) / s.SW;
  auto planes = [&](int64_t b, int64_t e) {
    thread_local std::vector<float> buf;
    thread_local std::vector<const float*> tap_rows;
    thread_local std::vector<float> row_tmp;
    // The zero padding of the rows sits at the same places for every plane of a layer: written once per
    // layout, after which each row only copies its data.
    thread_local int64_t zeroed_row_len = -1, zeroed_pad = -1, zeroed_w = -1, zeroed_h = -1, zeroed_sw = -1;
    if (row_tmp.size() < static_cast<size_t>(row_len)) row_tmp.assign(row_len, 0.f);
    if (buf.size() < static_cast<size_t>(row_len * s.H)) buf.assign(row_len * s.H, 0.f);
    tap_rows.resize(s.KH);
    const int64_t lo = std::min<int64_t>(s.pad_left, row_len);
    const int64_t hi = std::max(lo, std::min<int64_t>(row_len, s.pad_left + s.W));
    if (zeroed_row_len != row_len || zeroed_pad != s.pad_left || zeroed_w != s.W || zeroed_h != s.H ||
        zeroed_sw != s.SW) {
      std::fill(buf.begin(), buf.begin() + row_len * s.H, 0.f);
      std::fill(row_tmp.begin(), row_tmp.begin() + row_len, 0.f);
      zeroed_row_len = row_len, zeroed_pad = s.pad_left, zeroed_w = s.W, zeroed_h = s.H, zeroed_sw = s.SW;
    }
    int64_t prepared_plane = -1;
    for (int64_t p = b; p < e; ++p) {   // p = output plane (n, c*mult + m)
      const int64_t n = p / (C * mult), oc = p % (C * mult), ic = oc / mult;
      const int64_t in_plane = n * C + ic;
      if (in_plane != prepared_plane) {   // multiplier > 1 reuses the prepared rows
        const float* xc = x + in_plane * s.H * s.W;
        for (int64_t ih = 0; ih < s.H; ++ih) {
          const float* src = xc + ih * s.W;
          float* dst = buf.data() + ih * row_len;
          // The zero-padded row: padded column q reads x column q - pad_left (zeros already in place).
          float* padded = s.SW == 1 ? dst : row_tmp.data();
          std::memcpy(padded + lo, src + (lo - s.pad_left), (hi - lo) * sizeof(float));
          if (s.SW == 2) {
            Deinterleave2(padded, dst, dst + phase_len, phase_len);
          } else if (s.SW > 2) {
            for (int64_t r = 0; r < s.SW; ++r)
              for (int64_t q = 0; q < phase_len; ++q) dst[r * phase_len + q] = padded[q * s.SW + r];
          }
        }
        prepared_plane = in_plane;
      }
      PlaneJob job;
      job.row.w = w + oc * s.KH * s.KW;
      job.row.KH = s.KH;
      job.row.KW = s.KW;
      job.row.kw_off = kw_off.data();
      job.row.OW = s.OW;
      job.row.bias = bias ? bias[oc] : 0.f;
      job.row.act = in_register ? act : EpilogueAct::kNone;
      job.rows = tap_rows.data();
      job.buf = buf.data();
      job.row_len = row_len;
      job.H = s.H;
      job.SH = s.SH;
      job.DH = s.DH;
      job.pad_top = s.pad_top;
      job.OH = s.OH;
      float* yp = y + p * s.OH * s.OW;
      job.y = yp;
      rk.fn(job);
      if (!in_register) ApplyEpilogue(yp, s.OW, 0, s.OH, 0, s.OW, act_only);
    }
  };
  const int64_t total = N * C * mult;
  // Small planes are grouped so a chunk is worth a dispatch.
  const int64_t work = s.OH * s.OW * s.KH * s.KW;
  if (pool) {
    pool->ParallelFor(total, std::max<int64_t>(1, 4096 / std::max<int64_t>(work, 1)), planes);
  } else {
    planes(0, total);
  }
}

}  // namespace lite
