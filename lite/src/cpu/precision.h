// Context.precision_mode: which arithmetic the CPU backend computes float models in.
#pragma once
#include <string>

namespace lite {

// The precision the CPU backend computes float models in for `mode` ("enforce_fp32", "preferred_bf16",
// "preferred_fp16"): "float32"; "bfloat16" for preferred_bf16 on a CPU with bf16 dot products (AVX512_BF16, ARM
// BF16): MatMul/Gemm/Conv with constant weights then multiply bf16 operands with float32 sums (cpu/gemm/bf16_gemm.h);
// "float16" for preferred_fp16 on an ARM64 CPU with FP16 arithmetic or an x86 one with AVX512-FP16: the same products
// on float16 operands, each float16 sum holding at most 64 products (ARM: runs of 64 depth values; x86: runs of 64
// depth pairs, a lane per depth of a pair), float32 beyond. The rest stays float32. A preferred reduced precision
// falls back to float32 on a CPU without the instructions for it. Throws InvalidArgument for an unknown mode.
std::string ResolveComputePrecision(const std::string& mode);

// Whether this CPU has fp16 arithmetic (AVX512_FP16, ARMv8.2 FP16).
bool CpuHasFp16Arithmetic();

}  // namespace lite
