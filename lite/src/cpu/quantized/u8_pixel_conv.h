// A 2-D 8-bit integer convolution (one group, constant symmetric int8 weights, uint8 activation codes) computed
// pixel-major on AVX-512 VNNI CPUs, as cpu/conv/bf16_pixel_conv.h does in bf16: output channels are the vector dimension
// (16 int32 sums a register), every register tile of 7-8 output pixels x 32 output channels broadcasts, per tap and
// channel quad, 4 input codes of each pixel from that pixel's row of a pixel-major copy read in place (an offset table
// from construction names the row, or a row of zero points for padding taps) against the weights packed once
// (tap-major depth, 4 codes per channel, vpdpbusd's operand). No column matrix, no padding columns, nothing packed per
// run but the input copy, and none at all when the input is already stored as "uint8 rows" (per image H x W rows of
// RowStride(C) codes, then one row of the zero point: core/u8_pixel_layout.h).
//
// The sums are exact integers; the zero point's share (zero_point x the weights' sum over the taps a tile reads:
// tiles group pixels by the padding taps they lose and skip those taps) is subtracted as an integer. Into uint8 codes
// the tile works in code units: the scales, the bias, the output's zero point and the residual's shift are folded
// per run into one multiplier and one addend per channel (code = sum x m + a [+ residual code x r], one FMA each, one
// rounding half to even, ReLU / ReLU6 and saturation as clamps on the code: 7 vector operations a 16 sums against
// 10 in separate dequantise / activate / requantise steps, ResNet-50 int8 on these kernels 0.93x the time). Codes
// may differ from the channel-major kernels' two-rounding result by one where a value lies within float error of a
// rounding tie. Into float32 (NCHW rows, or NCHW8c blocks stored in place) the tile dequantises, adds the residual
// and applies the activation.
#pragma once
#include <cstdint>
#include <vector>

#include "core/thread_pool.h"
#include "cpu/aligned.h"
#include "cpu/conv/conv_geometry.h"
#include "cpu/conv/pixel_tiling.h"
#include "cpu/quantized/qgemm.h"

namespace lite {

// How an activation of uint8 codes is stored: NCHW, or uint8 rows.
enum class U8Storage { kNchw, kRows };
// The output: uint8 codes (NCHW or rows), float32 NCHW, or float32 channel-blocked (NCHW8c,
// core/channel_blocked_layout.h: the tiles store each pixel's 8-channel runs in place, no transposing pass).
enum class U8PixelOut { kRows, kNchw, kFloatNchw, kFloatBlocked };

// C NCHW planes of HW codes as uint8 rows (ld apart), then the row of zero points after them.
void U8NchwToRows(const uint8_t* x, int64_t C, int64_t HW, int64_t ld, uint8_t zero_point, uint8_t* rows,
                  ThreadPool* pool);
// HW pixel-major rows (ld apart) of C values as C NCHW planes.
void U8RowsToNchw(const uint8_t* rows, int64_t C, int64_t HW, int64_t ld, uint8_t* y, ThreadPool* pool);
void FloatRowsToNchw(const float* rows, int64_t C, int64_t HW, int64_t ld, float* y, ThreadPool* pool);

// The end of a pixel-major integer kernel's run: rows (ld apart) of C channels over P pixels, uint8 codes or float32
// (ld_float apart), become `out`: uint8 rows get their row of zero points, NCHW outputs a transposing pass into y.
void FinishPixelOutput(U8PixelOut out, uint8_t* rows, const float* float_rows, int64_t C, int64_t P, int64_t ld,
                       int64_t ld_float, uint8_t zero_point, void* y, ThreadPool* pool);

class U8PixelConv {
 public:
  // Bytes between pixel rows, and per image, of C channels over HW pixels stored as uint8 rows.
  static int64_t RowStride(int64_t C);
  static size_t RowsBytes(int64_t C, int64_t HW);
  // Whether this CPU runs the kernel (AVX-512 VNNI, not capped by LITE_CPU_ISA).
  static bool Available();
  // Available, input channels a multiple of 4 (or, on AMX, 1-3: a stem, see BuildFewChannels), output channels a
  // multiple of 8 (a last panel of 8 or 24 stores masked: MobileNetV2's 24-channel projections), offsets within int32.
  static bool Supports(const ConvGeometry& g);

  // codes: M x C x KH x KW int8 (within [kQWeightMin, kQWeightMax]), scales: one per output channel.
  U8PixelConv(const ConvGeometry& g, const int8_t* codes, const float* scales);

  // The per-channel constants of the epilogue for an input quantisation and a bias (M floats, may be null): held by
  // the caller, so one convolution (its packed weights) serves plans and workers with different inputs. With `out`
  // (a uint8 output's quantisation) also the code-unit tables CodeEpilogue reads, the residual's shift folded in
  // where `residual` (a uint8 residual's quantisation) is given: Run then takes that output and residual only.
  struct Bound {
    ActQuant in;
    std::vector<int32_t> sum_init;    // -(zero point x the key sums) ([key][Mp_]): where a tile's sums start, so
                                      // that they end as sum((x - zero point) x w)
    std::vector<float> mult, bias;    // dequantisation multipliers and bias (Mp_ each)
    bool codes_out = false, residual = false;
    ActQuant out, res;                // what codes_out / residual were bound with
    std::vector<float> q_mult, q_add; // uint8 out: mult and bias in output code units (Mp_ each)
    bool q_cap = true;                // uint8 out: a code before its clamps may be NaN or past int32 (else the
                                      // epilogue's conversion needs no cap)
  };
  Bound Bind(ActQuant in, const float* bias, const ActQuant* out = nullptr, const ActQuant* residual = nullptr) const;

  size_t ScratchBytes(U8Storage in, bool residual_nchw, U8PixelOut out) const;

  // y = act(dequant(conv(x)) + bias + residual) for one image; x in `in` storage, residual (may be null) uint8
  // codes of rq in `res` storage, act ReLU (clamp 1), ReLU6 (2), SiLU (3) or none (0); y uint8 codes of oq (rows or NCHW) or
  // float32 NCHW.
  // x_float: a stem's float32 NCHW input (TakesFloatInput), quantised with bound.in straight into its padded copy
  // (x is not read): no plane of codes between.
  void Run(const Bound& bound, const uint8_t* x, U8Storage in, const uint8_t* residual, ActQuant rq, U8Storage res,
           int clamp, void* y, U8PixelOut out, ActQuant oq, void* scratch, ThreadPool* pool,
           const float* x_float = nullptr) const;
  // Whether Run takes a float input as x_float: a stem (1-3 channels, BuildFewChannels) on an x86 build.
  bool TakesFloatInput() const;
  bool amx() const { return amx_; }   // on AMX int8 tiles (else VNNI)

 private:
  void BuildFewChannels(const int8_t* codes);
  // A stem's input codes (NCHW) as its padded copy: every pixel 4 bytes per interleaved row (the missing channels and the
  // padding the zero point), rows of few_wp_ pixels, then 64 bytes of slack for a step's loads past the last pixel.
  void FewChannelCopy(const uint8_t* x, const float* x_float, ActQuant q, uint8_t* copy, ThreadPool* pool) const;
  size_t InputCopyBytes() const;
  size_t ResidualCopyBytes() const;
  size_t StagingBytes(U8PixelOut out) const;
  size_t PartialBytes() const;

  ConvGeometry g_;
  int64_t P_ = 0, taps_ = 0, Mp_ = 0;          // Mp_: M rounded up to 32 (whole panels)
  bool amx_ = false;                           // AMX int8 tiles (AmxU8Tile) of up to 32 pixels, not the VNNI ones
  bool few_ = false;                           // 1-3 input channels (AMX only): BuildFewChannels
  int64_t few_rows_ = 1;                       // filter rows per segment (input rows per copy pixel): 1 or 2
  int64_t few_hp_ = 0, few_wp_ = 0;            // the stem's padded plane, in pixels
  int64_t off_stride_ = 0;                     // offsets per output pixel: one per tap, or per filter row (few_)
  int64_t panel_quads_ = 0;                    // depth quads per weight panel
  PixelTiling tiling_;
  std::vector<AmxTapRows> tap_rows_;           // AMX: per [tile][offset column] (cpu/conv/pixel_tiling.h)
  std::vector<int32_t> tile_key_;              // [tile]: its set of skipped padding taps, as an index
  std::vector<std::vector<int32_t>> key_sums_; // [key][Mp_]: the weights' sums over the taps the key's tiles read
  std::vector<PixelDepthBlock> blocks_;        // units: channel quads
  CacheLineVector<int8_t> w_;                  // [panel][quad][32 channels][4]
  std::vector<float> scales_;                  // per output channel (Mp_)
};

}  // namespace lite
