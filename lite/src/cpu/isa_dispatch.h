// Picks, once per kernel, the build of it compiled for the best vector ISA this CPU has. The choice is
// made by CPU feature tests (`__builtin_cpu_supports` on x86-64, getauxval(AT_HWCAP) on ARM64), never by CPU model
// names.
#pragma once
#include <cstdint>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define LITE_X86_SIMD 1
#define LITE_IF_X86_SIMD(f) f
#else
#define LITE_IF_X86_SIMD(f) nullptr
#endif

#if defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
#define LITE_ARM64_SIMD 1
#define LITE_IF_ARM64_SIMD(f) f
#else
#define LITE_IF_ARM64_SIMD(f) nullptr
#endif

namespace lite {

// kNeon: ARMv8's Advanced SIMD, which every ARM64 CPU has (its extensions: ArmFeatures).
enum class SimdIsa { kPortable, kAvx2Fma, kAvx512, kNeon };

SimdIsa DetectSimdIsa();           // avx512f > avx2 + fma > portable; on ARM64 neon (portable when forced)
const char* SimdIsaName(SimdIsa);  // "avx512f", "avx2+fma", "neon", "portable"

// The ARMv8.x extensions kernels have builds for, read once from the kernel's hwcaps. All false off ARM64, and
// under LITE_CPU_ISA=portable or =neon (baseline NEON alone: to test that path on a CPU that has more).
// LITE_CPU_ISA may also name a list, e.g. "neon,dotprod,fp16": the CPU's features, capped at that list.
struct ArmFeatures {
  bool dotprod = false;   // sdot / udot (ARMv8.2 DotProd): int8 products
  bool fp16 = false;      // half-precision arithmetic (ARMv8.2 FP16: fmla .8h)
  bool bf16 = false;      // bfdot / bfmmla (ARMv8.6 BF16)
  bool i8mm = false;      // smmla / ummla / usdot (ARMv8.6 I8MM)
  bool sve = false;       // the Scalable Vector Extension
};
const ArmFeatures& CpuArmFeatures();
// "neon+dotprod+fp16..." (what CpuArmFeatures found); "" off ARM64.
const char* ArmFeaturesName();
// AVX-512 extensions some kernels have builds for; false whenever DetectSimdIsa() is below kAvx512 (so
// LITE_CPU_ISA=avx2 turns them off too). Vnni: vpdpbusd on 512-bit registers (avx512vnni + avx512bw + vl).
// Bf16: vdpbf16ps / vcvtne2ps2bf16 (avx512bf16 + avx512bw + vl).
bool CpuHasAvx512Vnni();
bool CpuHasAvx512Bf16();
// Fp16: float16 arithmetic on 512-bit registers (vfmadd231ph: avx512fp16 + avx512bw + vl; Sapphire Rapids and later).
bool CpuHasAvx512Fp16();
// AMX (Sapphire Rapids and later): tile registers with bf16 (TDPBF16PS) / int8 (TDPBUSD) products. True only where
// the CPU has them, the kernel granted this process the tile state (arch_prctl ARCH_REQ_XCOMP_PERM, asked once
// here), and LITE_CPU_ISA does not cap the run below them ("avx512" keeps AVX-512 without AMX).
bool CpuHasAmxBf16();
bool CpuHasAmxInt8();
// Whether the CPU says it is Intel's (cpuid's vendor "GenuineIntel"): for tuning what the two vendors' cores do
// differently with the same instructions (their hardware prefetchers), never for which instructions run.
bool CpuIsIntel();
// Whether the CPU is an AMD Zen 4 core (AuthenticAMD, family 19h, with AVX-512): 256-bit datapaths under the
// 512-bit instructions, unlike Zen 5's full-width ones.
bool CpuIsAmdZen4();
// Whether the convolution rules first measured on a Sapphire Rapids Xeon are the default here: Intel cores and AMD
// Zen 4, where `benchmarks.cpu_rules` measured them faster or level too (2026-12-07, three runs: the wide tiles
// 0.945-0.958x the time on ResNet-50 at one thread, the pixel-tile rule 0.95-0.99x on MobileNetV2 and Whisper-tiny,
// the blocked Winograd 0.91-0.92x on ResNet-50; at two threads level within the VM's noise, 0.93-1.10). Zen 5, where
// the other side's figures were taken, keeps it until measured. Each rule's environment variable still decides on
// any CPU.
bool CpuTakesXeonConvRules();
// Whether weights read once per product are prefetched non-temporal (prefetchnta). On AMD cores that keeps a
// model's weights from pushing the activations out of the L3 (ResNet-50 0.99x the time); on Intel cores the line
// goes to L1 only, not L2, and a panel that every row tile of a block reads (larger than L1) came from memory again
// for each of them: a 49 x 512 x 2048 product with cold weights ran at 0.6x the rate (83 against 138 GFLOP/s).
// LITE_WEIGHT_PREFETCH_NTA=0 / 1 overrides the vendor's default.
bool WeightPrefetchNonTemporal();

template <typename Fn>
struct IsaKernel {
  Fn fn;
  int64_t lanes;   // floats per vector in that build
  SimdIsa isa;
};

// The best of a kernel's builds; avx2 and avx512 may be null where the kernel has no such build (or on
// other architectures, through LITE_IF_X86_SIMD).
// On ARM64 the portable builds are NEON code: their 4-float vectors (GCC vector extensions) compile to NEON's
// 128-bit registers; kernels with hand-written NEON builds pick them with PickArmKernel.
template <typename Fn>
IsaKernel<Fn> PickIsaKernel(Fn portable, Fn avx2, Fn avx512) {
  const SimdIsa isa = DetectSimdIsa();
  if (isa == SimdIsa::kAvx512 && avx512) return {avx512, 16, SimdIsa::kAvx512};
  if ((isa == SimdIsa::kAvx512 || isa == SimdIsa::kAvx2Fma) && avx2) return {avx2, 8, SimdIsa::kAvx2Fma};
  return {portable, 4, isa == SimdIsa::kNeon ? SimdIsa::kNeon : SimdIsa::kPortable};
}

// A kernel's NEON build on ARM64 (null: none, or off ARM64), else the x86 / portable choice above.
template <typename Fn>
IsaKernel<Fn> PickArmKernel(Fn neon, Fn portable, Fn avx2, Fn avx512) {
  if (neon && DetectSimdIsa() == SimdIsa::kNeon) return {neon, 4, SimdIsa::kNeon};
  return PickIsaKernel(portable, avx2, avx512);
}

}  // namespace lite
