// A 2-D convolution (one group, constant weights) on oneDNN's AMX convolution kernels (onednn_library.h says why and
// when), at precision bfloat16 or on 8-bit codes (uint8 activations x int8 weights, a quantised model's). It takes
// what lite's pixel-major Convs take between "rows" (pixel-major activations, the row stride C exactly while oneDNN is
// loaded, then one more row: zeros for bf16 (core/bf16_pixel_layout.h), the zero point for codes
// (core/u8_pixel_layout.h)): the input as rows, or (bf16) NCHW float32, a stem reading the graph's input, rounded into
// an nhwc copy per run (2-4 channels by lite, OwnInputCopy; others by a oneDNN reorder); the output as rows; the
// residual as rows (oneDNN's sum post-op, which adds what the output holds: the residual is copied there first unless
// the plan gave the output the residual's buffer; int8 dequantises its codes); ReLU / ReLU6 as an eltwise post-op.
// The weights are reordered once into the layout oneDNN's kernel picks (for int8 with its zero-point compensation).
//
// int8 arithmetic: oneDNN's quantisation model is lite's (integer sums less the input zero point's share, x input
// scale x the channel's weight scale, + bias, + the residual's dequantised codes, the activation, / output scale +
// output zero point, rounded half to even and saturated); it rounds at other points (no fused multiply-add, the
// residual dequantised as (code - zero point) x scale), so a code may differ by one from lite's kernels'.
//
// Threads: the output rows are split into one part per thread of lite's pool, each part its own primitive over its
// input rows (its own top / bottom padding), run on that thread with one OpenMP thread: the parts share the one
// reordered weight copy (Create checks that every part asks the same weight layout).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "cpu/conv/conv_geometry.h"
#include "cpu/gemm/gemm.h"
#include "cpu/weight_pages.h"

struct dnnl_memory_desc;   // oneDNN's (oneapi/dnnl/dnnl_types.h), opaque here

namespace lite {

class OneDnnConv {
 public:
  struct Quant {
    float scale = 1.f;
    int32_t zero_point = 0;
  };
  struct Options {
    bool int8 = false;         // uint8 codes x int8 weights -> uint8 codes; else bf16
    bool nchw_input = false;   // bf16 only: NCHW float32 in (a stem), else rows
    bool bias = false;
    bool residual = false;     // rows, laid out as the output
    EpilogueAct act = EpilogueAct::kNone;   // None, ReLU or ReLU6
    int parts = 1;             // the pool's threads
    Quant in, out, res;        // int8: the input's, output's and residual's quantisation
  };

  // Whether oneDNN's AMX kernels are worth taking the convolution from lite's at `threads` threads (measured on
  // ResNet-50 and MobileNetV2, docs/performance.md): output channels in whole 16-column tiles (MobileNetV2's 96 -> 24
  // reductions ran 2.2x lite's time), and with several threads at least 8 output rows (the row parts each stream all
  // the weights, split 4 / 3: ResNet-50's 7x7-plane layers ran 1.1-1.5x lite's time; lite's kernels split channels).
  // bf16 on planes under 8 rows at one thread: only the stride-1 windows (ResNet-50's 3x3 layers on 7x7 planes: lite's
  // kernel 1.1-1.18x oneDNN's time); its stride-2 3x3 into 7x7 ran 0.84-0.90x and its 2048 -> 512 1x1 layers
  // 0.85-0.89x oneDNN's time on lite's (int8 on oneDNN throughout: lite's ran 0.97-1.26x).
  static bool Worthwhile(const ConvGeometry& g, int threads, bool int8);

  // nullptr where oneDNN is not loaded or offers no AMX kernel for the convolution (why says which).
  // w: M x C x KH x KW, float32 (bf16) or int8 codes with one scale per output channel in weight_scales (int8).
  static std::shared_ptr<const OneDnnConv> Create(const ConvGeometry& g, const void* w, const float* weight_scales,
                                                  const Options& o, std::string* why);
  struct Key {   // made by Create only
   private:
    friend class OneDnnConv;
    Key() {}   // user-provided: not an aggregate anyone could brace-initialise
  };
  explicit OneDnnConv(Key);
  ~OneDnnConv();
  OneDnnConv(const OneDnnConv&) = delete;
  OneDnnConv& operator=(const OneDnnConv&) = delete;

  // The bias to pass to Run for the node's bias (M floats, or null): int8 with no activation and an output zero
  // point takes it folded into the bias (+ zero point x output scale: the same value before the output's rounding),
  // which keeps oneDNN on its brgemm kernels (with a zero point its older JIT ones, 1.5x their time on ResNet-50's
  // shortcut Convs); a residual's zero point is folded in as well (- zero point x residual scale: a sum post-op with
  // a zero point made ResNet-50's 56x56 residual Conv 1.3x the time of its siblings'). Empty where the node's bias
  // goes as it is.
  std::vector<float> RunBias(const float* bias) const;
  // The run's scratch: the nhwc copy of an NCHW input, and oneDNN's scratchpads (one per part: they run at once).
  size_t ScratchBytes() const;
  // One image: y (rows, M per pixel, then the extra row) = act(conv(x) + bias + residual). x as Options said;
  // residual (rows) only where Options::residual, and may be y itself.
  void Run(const void* x, const float* bias, const void* residual, void* y, void* scratch, ThreadPool* pool) const;
  // oneDNN's name for the kernel it picked (e.g. "brgconv:avx512_core_amx").
  const std::string& implementation() const { return impl_; }

 private:
  struct Part;
  std::string Build(const void* w, int parts);   // "" where built, else why not
  size_t Value() const { return o_.int8 ? 1 : 2; }   // bytes per activation value
  bool FoldsOutZeroPoint() const {
    return o_.int8 && o_.out.zero_point != 0 && o_.act == EpilogueAct::kNone;
  }
  // The sum post-op's zero point goes into the bias too (- zero point x residual scale: the sum comes before the
  // activation), so the sum adds the residual's codes as they are.
  bool FoldsResidualZeroPoint() const { return o_.int8 && o_.residual && o_.res.zero_point != 0; }
  bool FoldsBias() const { return FoldsOutZeroPoint() || FoldsResidualZeroPoint(); }
  // A bf16 stem's NCHW float input of 2-4 channels goes into the nhwc copy by lite's own rounding
  // (FewChannelsToNhwcBf16), not a oneDNN reorder: ResNet-50's bf16 stem 0.365-0.374 -> 0.318-0.326 ms.
  bool OwnInputCopy() const { return o_.nchw_input && !o_.int8 && g_.C >= 2 && g_.C <= 4; }

  ConvGeometry g_;
  Options o_;
  std::string impl_;
  std::vector<std::unique_ptr<Part>> parts_;
  WeightVector<uint8_t> weight_store_;
  uint8_t* weights_ = nullptr;         // in weight_store_, 64-byte aligned: oneDNN's layout
  std::vector<float> weight_scales_;   // int8: per output channel
  dnnl_memory_desc* weights_md_ = nullptr;   // weights_' layout
  dnnl_memory_desc* bias_md_ = nullptr;
  dnnl_memory_desc* scalar_md_ = nullptr;     // int8: one float32 (the input's and output's scales)
  dnnl_memory_desc* scales_md_ = nullptr;     // int8: M float32 (the weights')
  dnnl_memory_desc* zp_md_ = nullptr;         // int8: one int32 (a zero point)
  size_t scratch_bytes_ = 0;                  // ScratchBytes: the nhwc copy, then each part's scratchpads
};

}  // namespace lite
