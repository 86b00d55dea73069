// Execution settings for a Model.
#pragma once
#include <string>

namespace lite {

struct Context {
  std::string target = "cpu";   // only "cpu" exists today; device backends plug in behind it
  int thread_num = 1;           // worker threads including the caller; exactly this many run kernels
  bool bind_cores = false;      // pin workers to cores (Linux only; ignored elsewhere)
  // Arithmetic for float models: "enforce_fp32"; "preferred_bf16", bf16 dot products with float32 sums for
  // MatMul/Gemm/Conv with constant weights on CPUs with AVX512_BF16, float32 elsewhere; or "preferred_fp16", float32
  // on CPUs without fp16 arithmetic and refused (NotSupported) on CPUs with it (no fp16 kernels yet).
  // Model::ComputePrecision() says what a built model computes in.
  std::string precision_mode = "enforce_fp32";
};

}  // namespace lite
