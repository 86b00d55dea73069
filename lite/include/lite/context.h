// Execution settings for a Model.
#pragma once
#include <string>

namespace lite {

struct Context {
  std::string target = "cpu";   // only "cpu" exists today; device backends plug in behind it
  int thread_num = 1;           // worker threads including the caller; exactly this many run kernels
  bool bind_cores = false;      // pin workers to cores (Linux only; ignored elsewhere)
  // Arithmetic for float models: "enforce_fp32", or "preferred_bf16" / "preferred_fp16", which fall back to float32
  // on CPUs without bf16 / fp16 arithmetic (Model::ComputePrecision() says what a built model computes in).
  std::string precision_mode = "enforce_fp32";
};

}  // namespace lite
