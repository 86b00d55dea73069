#include "cpu/precision.h"

#include "cpu/gemm/bf16_gemm.h"
#include "lite/errors.h"

#if defined(__aarch64__) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

namespace lite {

bool CpuHasFp16Arithmetic() {
#if defined(__x86_64__) && defined(__GNUC__)
  return __builtin_cpu_supports("avx512fp16");
#elif defined(__aarch64__) && defined(__linux__) && defined(HWCAP_ASIMDHP)
  return (getauxval(AT_HWCAP) & HWCAP_ASIMDHP) != 0;
#else
  return false;
#endif
}

std::string ResolveComputePrecision(const std::string& mode) {
  if (mode == "enforce_fp32") return "float32";
  const bool bf16 = mode == "preferred_bf16", fp16 = mode == "preferred_fp16";
  if (!bf16 && !fp16)
    throw InvalidArgument("Context.precision_mode must be enforce_fp32, preferred_bf16 or preferred_fp16, got '" + mode +
                          "'");
  if (bf16 && Bf16GemmAvailable()) return "bfloat16";
  // preferred_fp16: float16 products on ARM64 CPUs with FP16 arithmetic and x86 CPUs with AVX512-FP16; elsewhere
  // float32 (the Python API warns where the CPU has fp16 arithmetic but LITE_CPU_ISA caps the kernels).
  if (fp16 && Fp16GemmAvailable()) return "float16";
  return "float32";   // no such instructions here (or bf16 kernels capped off by LITE_CPU_ISA): float32
}

}  // namespace lite
