#include "cpu/isa_dispatch.h"

#include <cstdlib>
#include <cstring>

namespace lite {

SimdIsa DetectSimdIsa() {
  static const SimdIsa isa = [] {
    // LITE_CPU_ISA=portable runs the portable builds on any CPU (to test them, or to rule out a vector kernel);
    // LITE_CPU_ISA=avx2 caps an AVX-512 CPU at the AVX2 builds (to compare the two on one machine).
    const char* forced = std::getenv("LITE_CPU_ISA");
    if (forced && std::strcmp(forced, "portable") == 0) return SimdIsa::kPortable;
    const bool cap_avx2 = forced && std::strcmp(forced, "avx2") == 0;
#ifdef LITE_X86_SIMD
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && !cap_avx2) return SimdIsa::kAvx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return SimdIsa::kAvx2Fma;
#endif
    return SimdIsa::kPortable;
  }();
  return isa;
}

bool CpuHasAvx512Vnni() {
#ifdef LITE_X86_SIMD
  static const bool yes = DetectSimdIsa() == SimdIsa::kAvx512 && __builtin_cpu_supports("avx512vnni") &&
                          __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  return yes;
#else
  return false;
#endif
}

bool CpuHasAvx512Bf16() {
#ifdef LITE_X86_SIMD
  static const bool yes = DetectSimdIsa() == SimdIsa::kAvx512 && __builtin_cpu_supports("avx512bf16") &&
                          __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  return yes;
#else
  return false;
#endif
}

const char* SimdIsaName(SimdIsa isa) {
  switch (isa) {
    case SimdIsa::kAvx512: return "avx512f";
    case SimdIsa::kAvx2Fma: return "avx2+fma";
    case SimdIsa::kPortable: break;
  }
  return "portable";
}

}  // namespace lite
