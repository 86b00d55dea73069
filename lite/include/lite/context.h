// Execution settings for a Model.
#pragma once
#include <string>
#include <vector>

namespace lite {

struct Context {
  std::string target = "cpu";   // only "cpu" exists today; device backends plug in behind it
  int thread_num = 1;           // worker threads including the caller; exactly this many run kernels
  bool bind_cores = false;      // pin workers to cores (Linux only; ignored elsewhere)
  // MindSpore Lite's affinity settings. thread_affinity_mode: 0 none, 1 pin the workers to cores counting up from the
  // first this process may use, 2 counting down from the last (big / little cores first on hybrid CPUs; x86 CPUs here
  // have one kind). thread_affinity_core_list, when given, names the cores: worker i (the caller being thread 0) runs
  // on core_list[i % size]; the calling thread itself is never moved. Cores outside the process's allowed set are an
  // InvalidArgument.
  int thread_affinity_mode = 0;
  std::vector<int> thread_affinity_core_list;
  // Arithmetic for float models: "enforce_fp32"; "preferred_bf16", bf16 dot products with float32 sums for
  // MatMul/Gemm/Conv with constant weights on CPUs with AVX512_BF16, float32 elsewhere; or "preferred_fp16", float32
  // everywhere (no fp16 kernels yet; the Python API warns on CPUs with fp16 arithmetic).
  // Model::ComputePrecision() says what a built model computes in.
  std::string precision_mode = "enforce_fp32";
  // Products with int8/int4-stored weights quantise their activations to int8 on the fly (a scale per block of
  // depth values) and multiply in integers, on CPUs with AVX512-VNNI (cpu/gemm/dynamic_quant_gemm.h); off, or on other
  // CPUs, they multiply float32 activations by the decoded weights. Model::DynamicQuant() says which.
  bool dynamic_quant = false;
};

}  // namespace lite
