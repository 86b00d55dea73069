// Context.precision_mode: which arithmetic the CPU backend computes float models in.
#pragma once
#include <string>

namespace lite {

// The precision the CPU backend computes float models in for `mode` ("enforce_fp32", "preferred_bf16",
// "preferred_fp16"): "float32", or "bfloat16" for preferred_bf16 on a CPU with bf16 dot products (AVX512_BF16):
// MatMul/Gemm/Conv with constant weights then multiply bf16 operands with float32 sums (cpu/gemm/bf16_gemm.h), the
// rest stays float32. A preferred reduced precision falls back to float32 on a CPU without the instructions for
// it. Throws InvalidArgument for an unknown mode, and NotSupported for preferred_fp16 on a CPU with fp16 arithmetic
// (AVX512_FP16 or ARMv8.2 FP16): lite has no fp16 kernels yet, and says so rather than quietly computing in float32
// where the user could have had the faster arithmetic.
std::string ResolveComputePrecision(const std::string& mode);

// Whether this CPU has fp16 arithmetic (AVX512_FP16, ARMv8.2 FP16).
bool CpuHasFp16Arithmetic();

}  // namespace lite
