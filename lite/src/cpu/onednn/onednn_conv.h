// A 2-D convolution (one group, constant weights) at precision bfloat16 on oneDNN's AMX convolution kernels
// (onednn_library.h says why and when). It takes what lite's pixel-major bf16 Conv takes between bf16 rows
// (core/bf16_pixel_layout.h: pixel-major, the row stride C exactly while oneDNN is loaded, then a row of zeros): the
// input as bf16 rows, or NCHW float32 (a stem reading the graph's input: rounded into a bf16 nhwc copy per run by a
// oneDNN reorder); the output as bf16 rows; the residual as bf16 rows (oneDNN's binary-add post-op, in place over the
// output where the plan shares the buffer: each output element is read before it is written); ReLU / ReLU6 as an
// eltwise post-op. The weights are reordered once into the layout oneDNN's kernel picks.
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
  struct Options {
    bool nchw_input = false;   // float32 NCHW in (else bf16 rows)
    bool bias = false;
    bool residual = false;     // bf16 rows, laid out as the output
    EpilogueAct act = EpilogueAct::kNone;   // None, ReLU or ReLU6
    int parts = 1;             // the pool's threads
  };

  // nullptr where oneDNN is not loaded or offers no AMX kernel for the convolution (why says which).
  // w: M x C x KH x KW float32.
  static std::shared_ptr<const OneDnnConv> Create(const ConvGeometry& g, const float* w, const Options& o,
                                                  std::string* why);
  ~OneDnnConv();
  OneDnnConv(const OneDnnConv&) = delete;
  OneDnnConv& operator=(const OneDnnConv&) = delete;

  // The bf16 copy of an NCHW input (0 for bf16 rows in).
  size_t ScratchBytes() const;
  // One image: y (bf16 rows, M per pixel, then the row of zeros) = act(conv(x) + bias + residual). x as Options said;
  // residual (bf16 rows) only where Options::residual, and may be y itself.
  void Run(const void* x, const float* bias, const uint16_t* residual, uint16_t* y, void* scratch,
           ThreadPool* pool) const;
  // oneDNN's name for the kernel it picked (e.g. "brgconv:avx512_core_amx").
  const std::string& implementation() const { return impl_; }

 private:
  struct Part;
  OneDnnConv() = default;
  std::string Build(const float* w, int parts);   // "" where built, else why not

  ConvGeometry g_;
  Options o_;
  std::string impl_;
  std::vector<std::unique_ptr<Part>> parts_;
  WeightVector<uint8_t> weight_store_;
  uint8_t* weights_ = nullptr;         // in weight_store_, 64-byte aligned: oneDNN's layout
  dnnl_memory_desc* weights_md_ = nullptr;   // weights_' layout
  dnnl_memory_desc* bias_md_ = nullptr;
};

}  // namespace lite
