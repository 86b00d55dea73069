// Picks, once per kernel, the build of it compiled for the best vector ISA this CPU has. The choice is
// made by CPU feature tests (`__builtin_cpu_supports`), never by CPU model names.
#pragma once
#include <cstdint>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define LITE_X86_SIMD 1
#define LITE_IF_X86_SIMD(f) f
#else
#define LITE_IF_X86_SIMD(f) nullptr
#endif

namespace lite {

enum class SimdIsa { kPortable, kAvx2Fma, kAvx512 };

SimdIsa DetectSimdIsa();           // avx512f > avx2 + fma > portable
const char* SimdIsaName(SimdIsa);  // "avx512f", "avx2+fma", "portable"
// AVX-512 extensions some kernels have builds for; false whenever DetectSimdIsa() is below kAvx512 (so
// LITE_CPU_ISA=avx2 turns them off too). Vnni: vpdpbusd on 512-bit registers (avx512vnni + avx512bw + vl).
// Bf16: vdpbf16ps / vcvtne2ps2bf16 (avx512bf16 + avx512bw + vl).
bool CpuHasAvx512Vnni();
bool CpuHasAvx512Bf16();

template <typename Fn>
struct IsaKernel {
  Fn fn;
  int64_t lanes;   // floats per vector in that build
  SimdIsa isa;
};

// The best of a kernel's builds; avx2 and avx512 may be null where the kernel has no such build (or on
// other architectures, through LITE_IF_X86_SIMD).
template <typename Fn>
IsaKernel<Fn> PickIsaKernel(Fn portable, Fn avx2, Fn avx512) {
  const SimdIsa isa = DetectSimdIsa();
  if (isa == SimdIsa::kAvx512 && avx512) return {avx512, 16, SimdIsa::kAvx512};
  if (isa != SimdIsa::kPortable && avx2) return {avx2, 8, SimdIsa::kAvx2Fma};
  return {portable, 4, SimdIsa::kPortable};
}

}  // namespace lite
