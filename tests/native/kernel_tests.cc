// The runtime's kernel tests that need no Python: each kernel family's dispatch entry point against a reference in
// double (float32 GEMM, the 8-bit integer GEMM in both orientations, int4 blocks), over shapes that cover the full
// register tiles and every edge tile, one and two threads. Built with the cross builds (./build.sh arm64) and run
// under qemu-aarch64 with several CPU models (tests/arm64/run.py), so the NEON / dot-product paths run where no ARM
// machine is. Prints one line per failing case and a summary; exits 1 on any failure.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "cpu/aligned.h"
#include "cpu/conv/blocked_pointwise.h"
#include "cpu/conv/winograd/winograd_conv.h"
#include "cpu/gemm/bf16_gemm.h"
#include "cpu/gemm/dq_float_prompts.h"
#include "cpu/gemm/dynamic_quant_gemm.h"
#include "cpu/gemm/gemm.h"
#include "cpu/gemm/skinny_gemm.h"
#include "cpu/simd/float16.h"
#include "cpu/isa_dispatch.h"
#include "cpu/quantized/qgemm.h"
#include "cpu/simd/simd.h"
#include "cpu/weight_pages.h"
#include "lite/attention.h"

namespace {

int failures = 0, cases = 0;

void Check(bool ok, const std::string& what) {
  ++cases;
  if (!ok) {
    ++failures;
    std::printf("FAIL %s\n", what.c_str());
  }
}

std::vector<float> Random(std::mt19937& rng, size_t n, float lo = -1.f, float hi = 1.f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

double Act(lite::EpilogueAct act, double x) {
  switch (act) {
    case lite::EpilogueAct::kRelu: return x < 0 ? 0 : x;
    case lite::EpilogueAct::kRelu6: return x < 0 ? 0 : x > 6 ? 6 : x;
    case lite::EpilogueAct::kSilu: return x / (1 + std::exp(-x));
    case lite::EpilogueAct::kGelu: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    default: return x;
  }
}

// C = act(op(A) op(B) + col_bias + residual) * multiplier, against a double reference; |err| within 1e-5 of the
// products' magnitude (sum of |a||b|) plus 1e-6.
void TestSgemm(std::mt19937& rng, int64_t M, int64_t N, int64_t K, bool ta, bool tb, int variant, lite::ThreadPool* pool,
               int packed) {
  const std::vector<float> A = Random(rng, M * K), B = Random(rng, K * N), bias = Random(rng, N),
                           res = Random(rng, M * N), mult = Random(rng, M * N);
  std::vector<float> C(M * N, 7.f);
  lite::GemmEpilogue ep;
  if (variant == 1) ep.col_bias = bias.data(), ep.act = lite::EpilogueAct::kRelu;
  if (variant == 2) ep.residual = res.data(), ep.ld_residual = N, ep.act = lite::EpilogueAct::kGelu;
  if (variant == 3) ep.multiplier = mult.data(), ep.ld_multiplier = N, ep.act = lite::EpilogueAct::kSilu;
  const int64_t lda = ta ? M : K, ldb = tb ? K : N;
  if (packed == 3) {   // a decode step's few rows against a packed weight (the skinny products)
    const auto pb = lite::PackBOnce(tb, K, N, B.data(), ldb);
    lite::SkinnyGemmPackedB(M, N, K, A.data(), lda, pb.data(), C.data(), N, ep, pool);
  } else if (packed == 1) {
    const auto pb = lite::PackBOnce(tb, K, N, B.data(), ldb);
    lite::SgemmPackedB(ta, M, N, K, 1.f, A.data(), lda, pb.data(), 0.f, C.data(), N, ep, pool);
  } else if (packed == 2) {
    const auto pa = lite::PackAOnce(ta, M, K, 1.f, A.data(), lda);
    lite::SgemmPackedA(pa.data(), M, N, K, tb, B.data(), ldb, 0.f, C.data(), N, ep, pool);
  } else {
    lite::Sgemm(ta, tb, M, N, K, 1.f, A.data(), lda, B.data(), ldb, 0.f, C.data(), N, ep, pool);
  }
  double worst = 0;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double a = ta ? A[k * M + i] : A[i * K + k], b = tb ? B[j * K + k] : B[k * N + j];
        s += a * b, mag += std::fabs(a * b);
      }
      if (ep.col_bias) s += bias[j];
      if (ep.residual) s += res[i * N + j];
      s = Act(ep.act, s);
      if (ep.multiplier) s *= mult[i * N + j];
      const double err = std::fabs(C[i * N + j] - s) / (1e-5 * (mag + 1) + 1e-6);
      worst = std::max(worst, err);
    }
  char what[160];
  std::snprintf(what, sizeof what, "sgemm M=%lld N=%lld K=%lld ta=%d tb=%d epilogue=%d packed=%d threads=%d: %.3g",
                static_cast<long long>(M), static_cast<long long>(N), static_cast<long long>(K), ta, tb, variant,
                packed, pool ? pool->size() : 1, worst);
  Check(worst <= 1.0, what);
}

// The integer GEMM: uint8 activation codes (zero point zp) x int8 weight codes in [-64, 63], per-output scales (or
// int4-style blocks of 32 depth values), bias and ReLU; the integer sums are exact, so the float result is within
// float rounding of the reference.
void TestQgemm(std::mt19937& rng, int64_t M, int64_t N, int64_t K, bool act_is_a, int64_t block, int zp,
               lite::ThreadPool* pool) {
  std::uniform_int_distribution<int> code(-64, 63), act(0, 255);
  const int64_t outputs = act_is_a ? N : M, cols = act_is_a ? M : N;   // cols: activation rows / columns
  std::vector<int8_t> w(outputs * K);
  for (auto& x : w) x = static_cast<int8_t>(code(rng));
  const int64_t blocks = block > 0 ? (K + block - 1) / block : 1;
  std::vector<float> scales = Random(rng, blocks * outputs, 0.01f, 0.1f), bias = Random(rng, outputs);
  const lite::QWeights qw = lite::PackQWeights(w.data(), outputs, K, K, 1, scales.data(), act_is_a, block);
  const int64_t d4 = lite::QDepth4(K);
  std::vector<uint8_t> x(cols * d4, static_cast<uint8_t>(zp));   // activation rows, padded with the zero point
  for (int64_t r = 0; r < cols; ++r)
    for (int64_t k = 0; k < K; ++k) x[r * d4 + k] = static_cast<uint8_t>(act(rng));
  const lite::ActQuant aq{0.05f, zp};
  lite::GemmEpilogue ep;
  ep.act = lite::EpilogueAct::kRelu;
  std::vector<float> C(M * N, 7.f);
  if (act_is_a) {
    lite::QgemmActByWeights(M, x.data(), d4, aq, qw, bias.data(), C.data(), N, ep, pool);
  } else {
    // activation panels of 16 columns: per depth group of 4, 16 columns x their 4 values
    std::vector<uint8_t> panels(lite::QPanelBytes(K, N), 0);
    const int64_t np = (N + 15) / 16;
    for (int64_t p = 0; p < np; ++p)
      for (int64_t g = 0; g < d4 / 4; ++g)
        for (int64_t j = 0; j < 16; ++j)
          for (int64_t t = 0; t < 4; ++t) {
            const int64_t n = p * 16 + j, k = g * 4 + t;
            panels[p * 16 * d4 + g * 64 + j * 4 + t] = n < N ? x[n * d4 + k] : static_cast<uint8_t>(zp);
          }
    lite::QgemmWeightsByAct(qw, N, panels.data(), aq, bias.data(), C.data(), N, ep, pool);
  }
  double worst = 0;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      const int64_t o = act_is_a ? j : i, r = act_is_a ? i : j;
      double y = bias[o];
      for (int64_t b = 0; b < blocks; ++b) {
        int64_t s = 0;
        const int64_t k0 = block > 0 ? b * block : 0, k1 = block > 0 ? std::min(K, k0 + block) : K;
        for (int64_t k = k0; k < k1; ++k) s += (int64_t{x[r * d4 + k]} - zp) * w[o * K + k];
        y += static_cast<double>(s) * aq.scale * scales[b * outputs + o];
      }
      y = y < 0 ? 0 : y;
      worst = std::max(worst, std::fabs(C[i * N + j] - y) / (1e-5 * std::fabs(y) + 1e-4));
    }
  char what[160];
  std::snprintf(what, sizeof what, "qgemm M=%lld N=%lld K=%lld %s block=%lld zp=%d threads=%d: %.3g",
                static_cast<long long>(M), static_cast<long long>(N), static_cast<long long>(K),
                act_is_a ? "act x weights" : "weights x act", static_cast<long long>(block), zp,
                pool ? pool->size() : 1, worst);
  Check(worst <= 1.0, what);
}

// The dynamic-quantisation products (an LLM's int8 / int4 weights): M rows of float activations quantised per row
// and block to int8 by QuantizeActivations (checked against its definition), times K x N weight codes with per-block
// or per-column scales, SiLU epilogue; against the integer sums of those codes in double. Where DqTallProductInFloat
// (int8 codes, more than 8 rows, a core whose integer multiplies are no faster than its FMAs), against the float
// product of the activations and the decoded weight instead.
void TestDqGemm(std::mt19937& rng, int64_t M, int64_t N, int64_t K, int bits, int64_t block, lite::ThreadPool* pool) {
  if (!lite::DqGemmAvailable()) return;
  std::uniform_int_distribution<int> code(bits == 8 ? -127 : -8, bits == 8 ? 127 : 7);
  const int64_t step = bits == 8 ? 4 : 8, offset = bits == 8 ? 128 : 8;
  lite::DqWeights w;
  w.bits = bits, w.K = K, w.N = N, w.panels = (N + 15) / 16;
  w.block = block > 0 ? block : lite::kDqColumnBlock;
  w.blocks = std::max<int64_t>(1, (K + w.block - 1) / w.block);
  w.scale_groups = block > 0 ? w.blocks : 1;
  w.panel_bytes = (K + step - 1) / step * 64;
  w.data.assign(static_cast<size_t>(w.panels * w.panel_bytes + 64), 0);
  std::vector<int> codes(K * N);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) {
      codes[k * N + n] = code(rng);
      const auto u = static_cast<uint8_t>(codes[k * N + n] + offset);
      uint8_t& byte = w.data[(n / 16) * w.panel_bytes + k / step * 64 + k % 4 + 4 * (n % 16)];
      byte = bits == 8 ? u : static_cast<uint8_t>(byte | (k % 8 < 4 ? u : u << 4));
    }
  w.scales = Random(rng, w.panels * w.scale_groups * 16, 0.01f, 0.1f);
  w.zero = static_cast<float>(offset);
  const std::vector<float> A = Random(rng, M * K, -2.f, 2.f);
  std::vector<float> C(M * N, 7.f);
  lite::GemmEpilogue ep;
  ep.act = lite::EpilogueAct::kSilu;
  lite::DqGemm(M, A.data(), K, w, C.data(), N, ep, pool);
  lite::DqActivations act;
  lite::QuantizeActivations(M, K, A.data(), K, w.block, &act, nullptr);
  double worst = 0;
  bool codes_ok = true;
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t b = 0; b < act.blocks; ++b) {   // codes = round-half-even(x * 127 / max |x|) over the block
      const int64_t k0 = b * w.block, k1 = std::min(K, k0 + w.block);
      float top = 0;
      for (int64_t k = k0; k < k1; ++k) top = std::max(top, std::fabs(A[m * K + k]));
      for (int64_t k = k0; k < k1; ++k)
        codes_ok &= act.row(m)[k] == static_cast<int8_t>(std::nearbyint(A[m * K + k] * (127.f / top)));
    }
    const bool in_float = lite::DqTallProductInFloat(w, M);
    for (int64_t n = 0; n < N; ++n) {
      double y = 0, mag = 0;
      for (int64_t b = 0; b < act.blocks; ++b) {
        const int64_t k0 = b * w.block, k1 = std::min(K, k0 + w.block);
        const double ws = w.scales[((n / 16) * w.scale_groups + (block > 0 ? b : 0)) * 16 + n % 16];
        if (in_float) {
          for (int64_t k = k0; k < k1; ++k) {
            y += double{A[m * K + k]} * codes[k * N + n] * ws;
            mag += std::fabs(double{A[m * K + k]} * codes[k * N + n] * ws);
          }
          continue;
        }
        int64_t s = 0;
        for (int64_t k = k0; k < k1; ++k) s += int64_t{act.row(m)[k]} * codes[k * N + n];
        const double scale = double{act.scale[m * act.blocks + b]} * ws;
        y += static_cast<double>(s) * scale;
        mag += std::fabs(static_cast<double>(s) * scale);
      }
      y = y / (1 + std::exp(-y));
      worst = std::max(worst, std::fabs(C[m * N + n] - y) / (1e-5 * (mag + 1)));
    }
  }
  char what[160];
  std::snprintf(what, sizeof what, "dq_gemm M=%lld N=%lld K=%lld bits=%d block=%lld threads=%d: %.3g codes %s",
                static_cast<long long>(M), static_cast<long long>(N), static_cast<long long>(K), bits,
                static_cast<long long>(block), pool ? pool->size() : 1, worst, codes_ok ? "ok" : "WRONG");
  Check(worst <= 1.0 && codes_ok, what);
}

// The bf16 products (precision_mode preferred_bf16): both operands rounded to bf16, float32 sums; against the
// double sum of the rounded operands, within 1e-5 of the products' magnitude (float32 summation; ARM's bfdot rounds
// its pair sums to odd). Packed B (MatMul) with epilogues, bf16 rows of A times a float matrix (Conv), few rows.
// float16 (preferred_fp16 on ARM64): the same products on float16 operands, summed in float16 over runs of 32 depth
// pairs: within 4e-3 of the products' magnitude (a run's float16 rounding, 2^-11 a step, over its 64 products).
void TestBf16(std::mt19937& rng, int64_t M, int64_t N, int64_t K, int variant, lite::ThreadPool* pool,
              lite::HalfFormat format = lite::HalfFormat::kBf16) {
  const bool fp16 = format == lite::HalfFormat::kFp16;
  if (fp16 ? !lite::Fp16GemmAvailable() : !lite::Bf16GemmAvailable()) return;
  const std::vector<float> A = Random(rng, M * K), B = Random(rng, K * N), bias = Random(rng, N),
                           res = Random(rng, M * N), mult = Random(rng, M * N);
  auto r = [&](float x) {
    return fp16 ? lite::Fp16ToFloat(lite::FloatToFp16(x)) : lite::Bf16ToFloat(lite::FloatToBf16(x));
  };
  lite::GemmEpilogue ep;
  if (variant == 1) ep.col_bias = bias.data(), ep.act = lite::EpilogueAct::kRelu;
  if (variant == 2) ep.residual = res.data(), ep.ld_residual = N, ep.act = lite::EpilogueAct::kGelu;
  if (variant == 3) ep.multiplier = mult.data(), ep.ld_multiplier = N, ep.act = lite::EpilogueAct::kSilu;
  std::vector<float> C(M * N, 7.f);
  if (variant == 4) {   // Conv orientation: A as bf16 rows, B a float matrix converted per block
    const lite::Bf16RowsA rows = lite::ToBf16Rows(M, K, A.data(), K, format);
    lite::Bf16GemmRowsA(rows, N, B.data(), N, C.data(), N, ep, pool);
  } else {
    lite::Bf16PanelsB packed = lite::PackBf16B(false, K, N, B.data(), N, format);
    const bool skinny = M <= lite::kBf16SkinnyMaxRows && variant == 3;
    auto product = [&](float* out) {
      if (skinny) {
        lite::Bf16SkinnyGemm(M, A.data(), K, packed, out, N, ep, pool);
      } else {
        lite::Bf16GemmPackedB(false, M, N, K, 1.f, A.data(), K, packed, 0.f, out, N, ep, pool);
      }
    };
    product(C.data());
    if (packed.mmla) {   // ARM BF16 packs B for bfmmla: the bfdot tiles on depth pairs give the same sums, bit for bit
      std::vector<float> pairs(M * N, 7.f);
      lite::SetBfmmlaOrder(packed, false);
      product(pairs.data());
      char what[120];
      std::snprintf(what, sizeof what, "bfmmla = bfdot M=%lld N=%lld K=%lld variant=%d", static_cast<long long>(M),
                    static_cast<long long>(N), static_cast<long long>(K), variant);
      Check(std::memcmp(pairs.data(), C.data(), C.size() * sizeof(float)) == 0, what);
    }
  }
  double worst = 0;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double p = double{r(A[i * K + k])} * r(B[k * N + j]);
        s += p, mag += std::fabs(p);
      }
      if (ep.col_bias) s += bias[j];
      if (ep.residual) s += res[i * N + j];
      s = Act(ep.act, s);
      if (ep.multiplier) s *= mult[i * N + j];
      worst = std::max(worst, std::fabs(C[i * N + j] - s) / ((fp16 ? 4e-3 : 1e-5) * (mag + 1) + 1e-6));
    }
  char what[160];
  std::snprintf(what, sizeof what, fp16 ? "fp16 M=%lld N=%lld K=%lld variant=%d threads=%d: %.3g" : "bf16 M=%lld N=%lld K=%lld variant=%d threads=%d: %.3g", static_cast<long long>(M),
                static_cast<long long>(N), static_cast<long long>(K), variant, pool ? pool->size() : 1, worst);
  Check(worst <= 1.0, what);
}

// The 1x1 convolution on channel-blocked inputs at float16 (ARM64 FP16: BlockedPointwiseConv's float16 tiles): the
// products of float16-rounded inputs and weights, float16 sums over runs of 64 input channels then float32, against
// the double sum of the rounded operands within 4e-3 of the products' magnitude (as the float16 GEMM); bias,
// residual (in the output's layout), ReLU6 in the tile or GELU after it, blocked and NCHW outputs, a last output
// block of 8 channels, a short last pixel tile, runs of 64 channels and a partial one.
void TestHalfPointwise(std::mt19937& rng, int64_t C, int64_t M, int64_t P, bool out_blocked, bool residual,
                       lite::EpilogueAct act, lite::ThreadPool* pool) {
  if (!lite::BlockedPointwiseConv::HalfTilesAvailable()) return;
  const std::vector<float> w = Random(rng, M * C), x = Random(rng, C * P), bias = Random(rng, M),
                           res = Random(rng, M * P);
  const lite::BlockedPointwiseConv conv(C, M, w.data(), false, true);
  std::vector<float> xb(C * P);   // [C / 8][P][8]
  for (int64_t c = 0; c < C; ++c)
    for (int64_t p = 0; p < P; ++p) xb[(c / 8 * P + p) * 8 + c % 8] = x[c * P + p];
  auto at = [&](int64_t m, int64_t p) { return out_blocked ? (m / 8 * P + p) * 8 + m % 8 : m * P + p; };
  std::vector<float> rl(M * P), y(M * P, 7.f);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t p = 0; p < P; ++p) rl[at(m, p)] = res[m * P + p];
  conv.Run(1, P, xb.data(), bias.data(), act, out_blocked, y.data(), pool, residual ? rl.data() : nullptr);
  auto h = [](float v) { return lite::Fp16ToFloat(lite::FloatToFp16(v)); };
  double worst = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t p = 0; p < P; ++p) {
      double s = bias[m], mag = 0;
      for (int64_t c = 0; c < C; ++c) {
        const double v = double{h(w[m * C + c])} * h(x[c * P + p]);
        s += v, mag += std::fabs(v);
      }
      if (residual) s += res[m * P + p];
      s = Act(act, s);
      worst = std::max(worst, std::fabs(y[at(m, p)] - s) / (4e-3 * (mag + 1) + 1e-6));
    }
  char what[160];
  std::snprintf(what, sizeof what, "fp16 pointwise C=%lld M=%lld P=%lld %s residual=%d act=%d threads=%d: %.3g",
                static_cast<long long>(C), static_cast<long long>(M), static_cast<long long>(P),
                out_blocked ? "blocked" : "nchw", residual, static_cast<int>(act), pool ? pool->size() : 1, worst);
  Check(worst <= 1.0, what);
}

// Winograd F(4x4, 3x3) with its products at float16 / bf16 (ARM64 FP16 / BF16): NCHW in and out, bias, residual and
// ReLU, against direct summation in double within 2e-2 (bf16: 8e-2) of the taps' magnitude (sum of |w| |x|) plus
// 1e-3: the transforms' float32 values rounded to float16 (2^-11; bf16 2^-8) and the output transform's coefficients
// (up to 8) over 36 products; a product taken at the wrong position moves outputs by their whole magnitude.
void TestWinogradHalf(std::mt19937& rng, int64_t C, int64_t M, int64_t H, int64_t W, lite::ThreadPool* pool,
                      lite::HalfFormat format = lite::HalfFormat::kFp16) {
  if (!lite::WinogradConv3x3::HalfProductsAvailable(format)) return;
  const bool bf16 = format == lite::HalfFormat::kBf16;
  lite::ConvGeometry g;
  g.C = C, g.H = H, g.W = W, g.M = M, g.OH = H, g.OW = W, g.KH = g.KW = 3, g.pad_top = g.pad_left = 1;
  const std::vector<float> w = Random(rng, M * C * 9), x = Random(rng, C * H * W), bias = Random(rng, M),
                           res = Random(rng, M * H * W);
  const lite::WinogradConv3x3 conv(g, w.data(), lite::ConvLayouts{}, true, format);
  std::vector<float> scratch(conv.ScratchBytes() / sizeof(float) + 16), y(M * H * W, 7.f);
  conv.Run(x.data(), bias.data(), res.data(), lite::EpilogueAct::kRelu, y.data(), scratch.data(), pool);
  double worst = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t i = 0; i < H; ++i)
      for (int64_t j = 0; j < W; ++j) {
        double s = bias[m], mag = 0;
        for (int64_t c = 0; c < C; ++c)
          for (int64_t a = 0; a < 3; ++a)
            for (int64_t b = 0; b < 3; ++b) {
              const int64_t ih = i + a - 1, iw = j + b - 1;
              if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
              const double v = double{w[((m * C + c) * 3 + a) * 3 + b]} * x[(c * H + ih) * W + iw];
              s += v, mag += std::fabs(v);
            }
        s += res[(m * H + i) * W + j];
        s = s < 0 ? 0 : s;
        worst = std::max(worst, std::fabs(y[(m * H + i) * W + j] - s) / ((bf16 ? 8e-2 : 2e-2) * mag + 1e-3));
      }
  char what[128];
  std::snprintf(what, sizeof what, "%s winograd C=%lld M=%lld %lldx%lld threads=%d: %.3g", bf16 ? "bf16" : "fp16",
                static_cast<long long>(C), static_cast<long long>(M), static_cast<long long>(H),
                static_cast<long long>(W), pool ? pool->size() : 1, worst);
  Check(worst <= 1.0, what);
}

// Attention through the public ComputeAttention: a dense causal prefill (BSND operands read in place), and decode
// steps over a paged float32 KV cache (grouped-query heads, a shuffled block table, each sample its own length: the
// paged decode path's per-key kernels), against softmax(q k^T * scale) v in double; within 1e-5 (+ 1e-6).
// tnd: the queries and outputs as one [tokens, heads, dim] operand with per-sample lengths (q_lens; the runtime's
// paged Attention op), else [batch, queries, heads, dim] with batch strides; the same memory either way.
// bf16 (dense only, where the bf16 kernels run): both products on bf16 operands (q, the scaled k, the probabilities
// and v rounded), within 2e-2 of |y| plus 1e-2 (bf16's 2^-9 per operand over 64 features; a misplaced key or
// feature moves outputs by a tenth or more).
void TestAttention(std::mt19937& rng, bool paged, int64_t B, int64_t Hq, int64_t Hkv, int64_t Lq, int64_t D,
                   lite::ThreadPool* pool, bool tnd = false, bool bf16 = false) {
  if (bf16 && !lite::Bf16GemmAvailable()) return;
  const int64_t block = 16, max_kv = 77;
  std::vector<int64_t> kv_lens(B), table;
  std::uniform_int_distribution<int64_t> len(Lq, max_kv);   // every query has a position in its sample
  for (auto& l : kv_lens) l = paged ? len(rng) : Lq;
  const int64_t per_seq = (max_kv + block - 1) / block, blocks = B * per_seq;
  for (int64_t i = 0; i < blocks; ++i) table.push_back(i);
  std::shuffle(table.begin(), table.end(), rng);
  // K / V: paged [blocks][block][Hkv][D], or dense [B][Lq][Hkv][D]; q [B][Lq][Hq][D]
  const int64_t kv_rows = paged ? blocks * block : B * Lq;
  const std::vector<float> q = Random(rng, B * Lq * Hq * D), k = Random(rng, kv_rows * Hkv * D),
                           v = Random(rng, kv_rows * Hkv * D);
  std::vector<float> out(B * Lq * Hq * D, 7.f);
  lite::AttentionArgs a;
  a.batch = B, a.q_heads = Hq, a.kv_heads = Hkv, a.q_len = Lq, a.head_dim = D, a.v_dim = D;
  a.kv_len = paged ? max_kv : Lq;
  a.q = {q.data(), Lq * Hq * D, D, Hq * D};
  const int64_t kv_batch = paged ? block * Hkv * D : Lq * Hkv * D;
  a.k = {k.data(), kv_batch, D, Hkv * D};
  a.v = {v.data(), kv_batch, D, Hkv * D};
  a.out = out.data(), a.out_batch_stride = Lq * Hq * D, a.out_head_stride = D, a.out_row_stride = Hq * D;
  a.scale = 1.f / std::sqrt(static_cast<float>(D));
  a.causal = true;
  if (paged) {
    a.causal_from_end = true;
    a.kv_block_table = table.data(), a.kv_block_size = block, a.kv_blocks_per_seq = per_seq;
    a.kv_num_blocks = blocks, a.kv_lens = kv_lens.data();
  }
  const std::vector<int64_t> q_lens(B, Lq);
  if (tnd) {
    a.q.batch_stride = 0, a.out_batch_stride = 0;
    a.q_lens = q_lens.data();
  }
  a.bf16_products = bf16;
  lite::ComputeAttention(a, pool ? pool->size() : 1);
  auto row = [&](const std::vector<float>& t, int64_t b, int64_t r, int64_t h) {
    if (!paged) return t.data() + ((b * Lq + r) * Hkv + h) * D;
    return t.data() + ((table[b * per_seq + r / block] * block + r % block) * Hkv + h) * D;
  };
  double worst = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < Lq; ++i)
      for (int64_t h = 0; h < Hq; ++h) {
        const int64_t hk = h / (Hq / Hkv), pos = paged ? kv_lens[b] - Lq + i : i;
        std::vector<double> w(pos + 1);
        double top = -1e300, total = 0;
        for (int64_t j = 0; j <= pos; ++j) {
          const float* kr = row(k, b, j, hk);
          double sdot = 0;
          for (int64_t d = 0; d < D; ++d) sdot += double{q[((b * Lq + i) * Hq + h) * D + d]} * kr[d];
          w[j] = sdot * a.scale, top = std::max(top, w[j]);
        }
        for (auto& x : w) x = std::exp(x - top), total += x;
        for (int64_t d = 0; d < D; ++d) {
          double y = 0;
          for (int64_t j = 0; j <= pos; ++j) y += w[j] / total * row(v, b, j, hk)[d];
          const double tol = bf16 ? 2e-2 * std::fabs(y) + 1e-2 : 1e-5 * std::fabs(y) + 1e-6;
          worst = std::max(worst, std::fabs(out[((b * Lq + i) * Hq + h) * D + d] - y) / tol);
        }
      }
  char what[160];
  std::snprintf(what, sizeof what, tnd ? "attention %s (TND) B=%lld Hq=%lld Hkv=%lld Lq=%lld D=%lld threads=%d: %.3g"
                                       : "attention %s B=%lld Hq=%lld Hkv=%lld Lq=%lld D=%lld threads=%d: %.3g",
                paged ? "paged decode" : bf16 ? "dense causal bf16" : "dense causal", static_cast<long long>(B), static_cast<long long>(Hq),
                static_cast<long long>(Hkv), static_cast<long long>(Lq), static_cast<long long>(D),
                pool ? pool->size() : 1, worst);
  Check(worst <= 1.0, what);
}

// The few-row products on compressed weight panels (SkinnyGemm on a PanelMatrix: a decode step against float16 /
// bf16 / int8 / int4 weights) against the decoded weights in double. codes: 0 float16, 1 bf16, 2 int8, 3 uint8,
// 4 int4, 5 uint4; scales per tensor (axis -1), per column (axis 1) or per block of `group` rows (axis 0).
void TestPanelSkinny(std::mt19937& rng, int64_t M, int64_t N, int64_t K, int codes, int axis, int64_t group,
                     bool zero_points, lite::ThreadPool* pool) {
  const int bits = codes >= 4 ? 4 : 8;
  const bool is_signed = codes == 2 || codes == 4;
  const int64_t numel = K * N;
  std::vector<uint8_t> bytes;
  flatbuffers::FlatBufferBuilder fbb;
  lite::StoredWeight w{};
  w.shape = {K, N};
  if (codes <= 1) {
    w.storage = codes == 0 ? ms_schema::DataType::FLOAT16 : ms_schema::DataType::BFLOAT16;
    const std::vector<float> v = Random(rng, numel, -2.f, 2.f);
    bytes.resize(numel * 2);
    for (int64_t i = 0; i < numel; ++i) {
      const uint16_t h = codes == 1 ? lite::FloatToBFloat16(v[i]) : lite::FloatToHalf(v[i]);
      std::memcpy(&bytes[i * 2], &h, 2);
    }
  } else {
    w.storage = is_signed ? ms_schema::DataType::INT8 : ms_schema::DataType::UINT8;
    const int lo = bits == 8 ? (is_signed ? -128 : 0) : (is_signed ? -8 : 0), span = bits == 8 ? 256 : 16;
    std::uniform_int_distribution<int> code(lo, lo + span - 1);
    bytes.assign(bits == 8 ? numel : (numel + 1) / 2, 0);
    for (int64_t i = 0; i < numel; ++i) {
      const int c = code(rng);
      if (bits == 8) {
        bytes[i] = static_cast<uint8_t>(c);
      } else {
        bytes[i / 2] |= static_cast<uint8_t>((c & 0xF) << (i % 2 ? 4 : 0));
      }
    }
    const int64_t entries = axis == -1 ? 1 : axis == 1 ? N : (K + group - 1) / group * N;
    std::vector<float> scales = Random(rng, entries, 0.002f, 0.02f);
    std::vector<int64_t> zps;
    if (zero_points) {
      std::uniform_int_distribution<int> zp(lo, lo + span - 1);
      for (int64_t e = 0; e < entries; ++e) zps.push_back(zp(rng));
    }
    fbb.Finish(ms_schema::CreateQuantParamDirect(fbb, &scales, &zps, axis, bits, axis == 0 ? static_cast<int>(group) : 0));
    w.quant = flatbuffers::GetRoot<ms_schema::QuantParam>(fbb.GetBufferPointer());
  }
  w.bytes = bytes.data();
  w.length = bytes.size();
  char what[200];
  std::snprintf(what, sizeof what, "skinny panels M=%lld N=%lld K=%lld codes=%d axis=%d group=%lld zp=%d threads=%d",
                static_cast<long long>(M), static_cast<long long>(N), static_cast<long long>(K), codes, axis,
                static_cast<long long>(group), zero_points, pool ? pool->size() : 1);
  const std::string bad = lite::PanelMatrixUnsupported(w);
  std::vector<float> B;
  const std::string decode = lite::DecodeStoredWeight(w, B);
  if (!bad.empty() || !decode.empty()) {
    Check(false, std::string(what) + ": " + bad + decode);
    return;
  }
  const lite::PanelMatrix pm = lite::MakePanelMatrix(w);
  const int64_t lda = K + 3;
  const std::vector<float> A = Random(rng, M * lda), bias = Random(rng, N);
  std::vector<float> C(M * N, 7.f);
  lite::GemmEpilogue ep;
  ep.col_bias = bias.data();
  lite::SkinnyGemm(M, A.data(), lda, pm, C.data(), N, ep, pool);
  double worst = 0;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = bias[j], mag = 0;
      for (int64_t k = 0; k < K; ++k) s += double(A[i * lda + k]) * B[k * N + j], mag += std::fabs(A[i * lda + k] * B[k * N + j]);
      worst = std::max(worst, std::fabs(C[i * N + j] - s) / (1e-5 * (mag + 1) + 1e-6));
    }
  // The prompt path's decoding of the same panels into the GEMM's layout (a block from a panel edge on), against
  // the decoded weight: zeros past N.
  const int64_t k0 = K / 3, kc = K - k0, n0 = N > 16 ? 16 : 0, nc = N - n0;
  std::vector<float> packed((nc + 15) / 16 * 16 * kc, -1.f);
  lite::PanelMatrixPacker(std::make_shared<const lite::PanelMatrix>(lite::MakePanelMatrix(w)))
      .Pack(k0, kc, n0, nc, packed.data());
  double worst_decode = 0;
  for (int64_t i = 0; i < (nc + 15) / 16; ++i)
    for (int64_t k = 0; k < kc; ++k)
      for (int64_t j = 0; j < 16; ++j) {
        const int64_t col = n0 + i * 16 + j;
        const float want = col < N ? B[(k0 + k) * N + col] : 0.f;
        worst_decode = std::max(worst_decode, std::fabs(double(packed[(i * kc + k) * 16 + j]) - want) /
                                                  (1e-6 * std::fabs(want) + 1e-30));
      }
  std::snprintf(what + std::strlen(what), sizeof what - std::strlen(what), ": %.3g, decoded %.3g", worst, worst_decode);
  Check(worst <= 1.0 && worst_decode <= 1.0, what);
}

// The softmax's exp-and-sum (ExpShiftSum) against std::exp, over lengths that cover its vector body and tail, with
// the special values: -inf (a masked score) gives 0, NaN stays NaN, values past the range give 0 / inf.
void TestExpShiftSum(std::mt19937& rng) {
  for (int64_t n : {1, 7, 8, 9, 16, 33, 100}) {
    std::vector<float> x = Random(rng, n, -30.f, 30.f), y(n);
    const float inf = std::numeric_limits<float>::infinity();
    if (n >= 9) x[1] = -inf, x[2] = -200.f, x[3] = 150.f, x[5] = std::nanf("");
    const float shift = 2.5f;
    const float sum = lite::ExpShiftSum(x.data(), y.data(), n, shift);
    double ref_sum = 0, worst = 0;
    bool specials = true;
    for (int64_t i = 0; i < n; ++i) {
      const double e = std::exp(double(x[i] - shift));   // of the float difference the kernel exponentiates
      if (std::isnan(x[i])) {
        specials = specials && std::isnan(y[i]);
        continue;
      }
      ref_sum += e;
      const bool overflow = e > std::numeric_limits<float>::max();
      if (overflow || e < 1e-37) {   // float's range: inf above it, 0 for a denormal or smaller result
        specials = specials && (overflow ? std::isinf(y[i]) && y[i] > 0 : y[i] == 0.f);
        continue;
      }
      worst = std::max(worst, std::fabs(y[i] - e) / e);
    }
    const bool sum_ok = n >= 9 ? std::isnan(sum) : std::fabs(sum - ref_sum) <= 1e-6 * ref_sum;
    char what[160];
    std::snprintf(what, sizeof what, "ExpShiftSum n=%lld: max rel err %.3g, specials %s, sum %s",
                  static_cast<long long>(n), worst, specials ? "ok" : "WRONG", sum_ok ? "ok" : "WRONG");
    Check(worst <= 4e-7 && specials && sum_ok, what);
  }
}

}  // namespace

// Weight blocks below and above the 2 MB mapping threshold, and the kernels' scratch vectors, start on a cache line
// (a 64-byte load from a 16-byte-aligned panel straddles two lines on every step).
void TestCacheLineAlignment() {
  for (size_t bytes : {size_t{4}, size_t{1000}, size_t{300} << 10, size_t{3} << 20}) {
    void* p = lite::AllocateWeightBytes(bytes);
    Check(reinterpret_cast<uintptr_t>(p) % 64 == 0, "weight block of " + std::to_string(bytes) + " bytes 64-byte aligned");
    std::memset(p, 1, bytes);
    lite::FreeWeightBytes(p, bytes);
  }
  for (size_t n : {size_t{1}, size_t{17}, size_t{40000}, size_t{100000}}) {
    lite::CacheLineVector<float> v(n);
    Check(reinterpret_cast<uintptr_t>(v.data()) % 64 == 0, "CacheLineVector of " + std::to_string(n) + " floats aligned");
    v.resize(3 * n + 5);
    Check(reinterpret_cast<uintptr_t>(v.data()) % 64 == 0, "CacheLineVector aligned after growing");
  }
}

int main() {
  std::printf("isa %s %s\n", lite::SimdIsaName(lite::DetectSimdIsa()), lite::ArmFeaturesName());
  std::mt19937 rng(7);
  lite::ThreadPool two(2);
  TestCacheLineAlignment();
  const int64_t shapes[][3] = {{1, 1, 1},    {6, 16, 8},   {7, 17, 33},  {12, 32, 64}, {13, 40, 300},
                               {5, 100, 16}, {64, 64, 64}, {100, 33, 257}, {1, 130, 70}, {30, 7, 520}};
  for (const auto& s : shapes)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (int variant = 0; variant < 4; ++variant) {
          lite::ThreadPool* pool = (ta + tb + variant) % 2 ? &two : nullptr;
          TestSgemm(rng, s[0], s[1], s[2], ta, tb, variant, pool, 0);
        }
  for (const auto& s : shapes)   // pre-packed B (A's rows read in place) and pre-packed A, every epilogue
    for (int packed = 1; packed <= 2; ++packed)
      for (int variant = 0; variant < 4; ++variant)
        TestSgemm(rng, s[0], s[1], s[2], false, packed == 1, variant, variant % 2 ? &two : nullptr, packed);
  for (const auto& s : shapes)
    for (int act_is_a = 0; act_is_a < 2; ++act_is_a)
      for (int zp : {0, 3, 128, 255}) {
        TestQgemm(rng, s[0], s[1], s[2], act_is_a, 0, zp, zp == 3 ? &two : nullptr);
        if (act_is_a && s[2] >= 32) TestQgemm(rng, s[0], s[1], s[2], true, 32, zp, nullptr);
      }
  const int64_t dq_shapes[][3] = {{1, 16, 32}, {1, 50, 200}, {2, 33, 64}, {3, 64, 136}, {9, 40, 256}, {17, 20, 96}};
  for (const auto& s : dq_shapes)
    for (int bits : {8, 4})
      for (int64_t block : {int64_t{0}, int64_t{32}}) TestDqGemm(rng, s[0], s[1], s[2], bits, block, s[0] > 2 ? &two : nullptr);
  for (int64_t M = 1; M <= lite::kSkinnyMaxRows; ++M)
    for (const auto& NK : {std::array<int64_t, 2>{40, 70}, std::array<int64_t, 2>{130, 300}, std::array<int64_t, 2>{17, 3}})
      TestSgemm(rng, M, NK[0], NK[1], false, M % 2 == 0, static_cast<int>(M % 4), M > 4 ? &two : nullptr, 3);
  for (int codes = 0; codes < 6; ++codes)
    for (int64_t M : {1, 2, 3, 4, 5, 8})
      for (const auto& NK : {std::array<int64_t, 2>{40, 64}, std::array<int64_t, 2>{17, 37}}) {
        const int64_t N = NK[0], K = NK[1];
        lite::ThreadPool* pool = M % 2 ? nullptr : &two;
        if (codes <= 1) {
          TestPanelSkinny(rng, M, N, K, codes, -1, 0, false, pool);
          continue;
        }
        TestPanelSkinny(rng, M, N, K, codes, -1, 0, M % 3 == 0, pool);
        TestPanelSkinny(rng, M, N, K, codes, 1, 0, true, pool);
        if (K % 8 == 0) TestPanelSkinny(rng, M, N, K, codes, 0, 16, M != 4, pool);
      }
  TestExpShiftSum(rng);
  for (int64_t D : {64, 40, 7}) {
    TestAttention(rng, false, 2, 4, 2, 37, D, nullptr);
    TestAttention(rng, false, 1, 2, 2, 70, D, &two);
    TestAttention(rng, false, 2, 4, 2, 37, D, nullptr, false, true);
    TestAttention(rng, false, 1, 2, 2, 70, D, &two, false, true);
    TestAttention(rng, true, 3, 8, 2, 1, D, nullptr);
    TestAttention(rng, true, 2, 4, 4, 1, D, &two);
    TestAttention(rng, true, 2, 6, 3, 3, D, nullptr);
    TestAttention(rng, true, 3, 4, 2, 1, D, &two, true);
    TestAttention(rng, true, 2, 4, 2, 2, D, nullptr, true);
    TestAttention(rng, true, 2, 14, 2, 1, D, &two);   // 7 query heads a key head: blocks of 4 + 3 heads
  }
  TestWinogradHalf(rng, 64, 64, 28, 28, nullptr);
  TestWinogradHalf(rng, 72, 40, 17, 30, &two);
  TestWinogradHalf(rng, 64, 64, 28, 28, &two, lite::HalfFormat::kBf16);
  TestWinogradHalf(rng, 72, 40, 17, 30, nullptr, lite::HalfFormat::kBf16);
  for (const int64_t C : {8, 72, 136})
    for (const int64_t M : {8, 24, 48})
      for (const int64_t P : {1, 7, 53}) {
        const bool blocked = (C + M + P) % 2 == 0;
        TestHalfPointwise(rng, C, M, P, blocked, P != 7, lite::EpilogueAct::kRelu6, P == 53 ? &two : nullptr);
        TestHalfPointwise(rng, C, M, P, !blocked, P == 7, lite::EpilogueAct::kGelu, nullptr);
      }
  for (const auto& s : shapes)
    for (int variant = 0; variant < 5; ++variant) {
      TestBf16(rng, s[0], s[1], s[2], variant, variant % 2 ? &two : nullptr);
      TestBf16(rng, s[0], s[1], s[2], variant, variant % 2 ? nullptr : &two, lite::HalfFormat::kFp16);
    }
  std::printf("%d of %d kernel cases passed (dynamic quantisation %s, bf16 %s, fp16 %s)\n", cases - failures, cases,
              lite::DqGemmAvailable() ? "tested" : "not on this CPU",
              lite::Bf16GemmAvailable() ? "tested" : "not on this CPU",
              lite::Fp16GemmAvailable() ? "tested" : "not on this CPU");
  return failures ? 1 : 0;
}
