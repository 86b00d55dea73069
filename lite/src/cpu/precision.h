// Context.precision_mode: which arithmetic the CPU backend computes float models in.
#pragma once
#include <string>

namespace lite {

// The precision the CPU backend computes float models in for `mode` ("enforce_fp32", "preferred_bf16",
// "preferred_fp16"): "float32". A preferred reduced precision falls back to float32 on a CPU without the
// instructions for it (AVX512_BF16; AVX512_FP16 or ARMv8.2 FP16 arithmetic). Throws InvalidArgument for an unknown
// mode and NotSupported where the CPU has those instructions: lite has no bf16/fp16 kernels yet, and says so
// rather than quietly computing in float32 where the user could have had the faster arithmetic.
std::string ResolveComputePrecision(const std::string& mode);

// Whether this CPU has bf16 dot products (AVX512_BF16) / fp16 arithmetic (AVX512_FP16, ARMv8.2 FP16).
bool CpuHasBf16Arithmetic();
bool CpuHasFp16Arithmetic();

}  // namespace lite
