#include "cpu/conv/pixel_major_conv.h"

#include <algorithm>
#include <cstring>

#include "cpu/simd/simd.h"
#include "cpu/simd/transpose_block.h"

namespace lite {
namespace {

constexpr int64_t kPixelSplitMin = 256;   // pixels per thread from which the transpose splits pixels

}  // namespace

PixelMajorConv::PixelMajorConv(const ConvGeometry& s, const float* w, bool bf16, HalfFormat format)
    : s_(s), K_(s.C * s.KH * s.KW), P_(s.OH * s.OW), bf16_(bf16) {
  // The columns' k runs over (kh, kw, c): each tap of a pixel is one contiguous run of C channels of the
  // pixel-major input. The weights (M x C x KH x KW) are reordered to match and packed as W^T (K x M).
  const int64_t taps = s_.KH * s_.KW;
  std::vector<float> reordered(static_cast<size_t>(s_.M * K_));
  for (int64_t m = 0; m < s_.M; ++m)
    for (int64_t c = 0; c < s_.C; ++c)
      for (int64_t t = 0; t < taps; ++t) reordered[m * K_ + t * s_.C + c] = w[(m * s_.C + c) * taps + t];
  if (bf16_) {
    bf16_wt_ = PackBf16B(true, K_, s_.M, reordered.data(), K_, format);
  } else {
    packed_wt_ = PackBOnce(true, K_, s_.M, reordered.data(), K_);
  }
}

bool PixelMajorConv::OneTap() const { return s_.KH == 1 && s_.KW == 1 && s_.pad_top == 0 && s_.pad_left == 0; }

bool PixelMajorConv::InputIsColumns() const { return OneTap() && s_.SH == 1 && s_.SW == 1 && P_ == s_.H * s_.W; }

size_t PixelMajorConv::ScratchBytes() const {
  int64_t floats = P_ * s_.M;
  if (OneTap() && !InputIsColumns()) {
    floats += s_.C * P_;   // the strided input's pixels, channel-major
  } else if (!OneTap()) {
    floats += s_.H * s_.W * s_.C + P_ * K_;   // the input pixel-major, then the columns
  }
  return static_cast<size_t>(floats) * sizeof(float);
}

// Channel-major (C x P) copy of the pixels a strided 1x1 convolution reads.
void PixelMajorConv::SampleStrided(const float* x, float* sampled, ThreadPool* pool) const {
  auto channels = [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const float* plane = x + c * s_.H * s_.W;
      float* d = sampled + c * P_;
      for (int64_t oh = 0; oh < s_.OH; ++oh)
        for (int64_t ow = 0; ow < s_.OW; ++ow) *d++ = plane[oh * s_.SH * s_.W + ow * s_.SW];
    }
  };
  if (pool) pool->ParallelFor(s_.C, 16, channels); else channels(0, s_.C);
}

// cols[p][(kh, kw, c)]: the input transposed to pixel-major (HW x C) once, then every tap of a pixel is a copy of
// C floats (zeros outside the input). Built per channel (c, kh, kw) order, the writes went down the columns:
// with K a multiple of 1024 floats every row fell into the same two L1 sets (2x the GEMM's time at 512 x 3 x 3).
void PixelMajorConv::BuildColumns(const float* x, float* pixels, float* cols, ThreadPool* pool) const {
  const int64_t C = s_.C, HW = s_.H * s_.W;
  auto transpose = [&](int64_t b0, int64_t b1) {   // unit: 8 channels
    const int64_t c0 = b0 * 8, c1 = std::min(C, b1 * 8);
    TransposeBlock(x + c0 * HW, HW, c1 - c0, HW, pixels + c0, C);
  };
  const int64_t bands = (C + 7) / 8;
  if (pool) pool->ParallelFor(bands, 4, transpose); else transpose(0, bands);
  auto rows = [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t oh = p / s_.OW, ow = p % s_.OW;
      float* d = cols + p * K_;
      for (int64_t kh = 0; kh < s_.KH; ++kh) {
        const int64_t ih = oh * s_.SH - s_.pad_top + kh * s_.DH;
        for (int64_t kw = 0; kw < s_.KW; ++kw, d += C) {
          const int64_t iw = ow * s_.SW - s_.pad_left + kw * s_.DW;
          if (ih >= 0 && ih < s_.H && iw >= 0 && iw < s_.W) {
            std::memcpy(d, pixels + (ih * s_.W + iw) * C, C * sizeof(float));
          } else {
            std::memset(d, 0, C * sizeof(float));
          }
        }
      }
    }
  };
  if (pool) pool->ParallelFor(P_, 4, rows); else rows(0, P_);
}

void PixelMajorConv::Run(const float* x, const float* bias, const float* residual, EpilogueAct act, float* y,
                         float* scratch, ThreadPool* pool) const {
  const int64_t M = s_.M, P = P_;
  float* yt = scratch;   // P x M
  float* rest = scratch + P * M;
  // Y^T = op(A) W^T, A the input (C x P, transposed), its sampled pixels (likewise) or the columns (P x K).
  auto product = [&](bool trans_a, const float* a, int64_t lda) {
    if (bf16_) {
      Bf16GemmPackedB(trans_a, P, M, K_, 1.f, a, lda, bf16_wt_, 0.f, yt, M, GemmEpilogue{}, pool);
    } else {
      SgemmPackedB(trans_a, P, M, K_, 1.f, a, lda, packed_wt_.data(), 0.f, yt, M, GemmEpilogue{}, pool);
    }
  };
  if (InputIsColumns()) {
    product(true, x, P);
  } else if (OneTap()) {
    SampleStrided(x, rest, pool);
    product(true, rest, P);
  } else {
    float* cols = rest + s_.H * s_.W * s_.C;
    BuildColumns(x, rest, cols, pool);
    product(false, cols, K_);
  }
  GemmEpilogue ep;
  ep.row_bias = bias;
  ep.residual = residual;
  ep.ld_residual = P;
  ep.act = act;
  // Y (M x P) = Y^T transposed, eight channels at a time, then the epilogue on those rows while they are in L1.
  // Split by pixels, as the product's rows are when it splits rows (and as the layers around it split theirs):
  // each thread transposes the part of Y^T it wrote and writes its own pixels of Y. Small planes by channels.
  auto block = [&](int64_t m0, int64_t p0, int64_t p1) {
    const int64_t rows = std::min<int64_t>(8, M - m0);
    TransposeBlock(yt + p0 * M + m0, M, p1 - p0, rows, y + m0 * P + p0, P);
    ApplyEpilogue(y, P, m0, rows, p0, p1 - p0, ep);
  };
  const int64_t band_count = (M + 7) / 8;
  const int64_t threads = pool ? pool->size() : 1;
  if (threads > 1 && P >= kPixelSplitMin * threads) {
    const int64_t parts = 4 * threads;   // whole 8-pixel groups
    pool->ParallelFor(parts, 1, [&](int64_t b0, int64_t b1) {
      const int64_t p0 = b0 * P / parts / 8 * 8, p1 = b1 == parts ? P : b1 * P / parts / 8 * 8;
      for (int64_t band = 0; band < band_count; ++band) block(band * 8, p0, p1);
    });
    return;
  }
  auto bands = [&](int64_t b0, int64_t b1) {
    for (int64_t band = b0; band < b1; ++band) block(band * 8, 0, P);
  };
  if (pool) pool->ParallelFor(band_count, 4, bands); else bands(0, band_count);
}

}  // namespace lite
