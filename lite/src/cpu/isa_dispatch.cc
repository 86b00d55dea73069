#include "cpu/isa_dispatch.h"

#include <cstdlib>
#include <cstring>

namespace lite {

SimdIsa DetectSimdIsa() {
  static const SimdIsa isa = [] {
    // LITE_CPU_ISA=portable runs the portable builds on any CPU (to test them, or to rule out a vector kernel).
    const char* forced = std::getenv("LITE_CPU_ISA");
    if (forced && std::strcmp(forced, "portable") == 0) return SimdIsa::kPortable;
#ifdef LITE_X86_SIMD
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return SimdIsa::kAvx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return SimdIsa::kAvx2Fma;
#endif
    return SimdIsa::kPortable;
  }();
  return isa;
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
