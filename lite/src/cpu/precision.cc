#include "cpu/precision.h"

#include "lite/errors.h"

#if defined(__aarch64__) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

namespace lite {

bool CpuHasBf16Arithmetic() {
#if defined(__x86_64__) && defined(__GNUC__)
  return __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

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
  if ((bf16 && CpuHasBf16Arithmetic()) || (fp16 && CpuHasFp16Arithmetic()))
    throw NotSupported(std::string("precision_mode ") + mode + ": this CPU has " +
                       (bf16 ? "bf16 dot products (AVX512_BF16)" : "fp16 arithmetic") +
                       " but lite has no " + (bf16 ? "bf16" : "fp16") +
                       " kernels yet; use enforce_fp32 (float32 arithmetic)");
  return "float32";   // no such instructions here: float32, as preferred modes fall back
}

}  // namespace lite
