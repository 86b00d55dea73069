#include "cpu/isa_dispatch.h"

#include <cstdlib>
#include <cstring>
#include <string>

#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

namespace lite {

SimdIsa DetectSimdIsa() {
  static const SimdIsa isa = [] {
    // LITE_CPU_ISA=portable runs the portable builds on any CPU (to test them, or to rule out a vector kernel);
    // LITE_CPU_ISA=avx2 caps an AVX-512 CPU at the AVX2 builds (to compare the two on one machine); =avx512 keeps
    // AVX-512 but turns AMX off (CpuHasAmxBf16).
    const char* forced = std::getenv("LITE_CPU_ISA");
    if (forced && std::strcmp(forced, "portable") == 0) return SimdIsa::kPortable;
#ifdef LITE_X86_SIMD
    const bool cap_avx2 = forced && std::strcmp(forced, "avx2") == 0;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && !cap_avx2) return SimdIsa::kAvx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return SimdIsa::kAvx2Fma;
#endif
#ifdef LITE_ARM64_SIMD
    return SimdIsa::kNeon;
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

bool CpuHasAvx512Fp16() {
#ifdef LITE_X86_SIMD
  static const bool yes = DetectSimdIsa() == SimdIsa::kAvx512 && __builtin_cpu_supports("avx512fp16") &&
                          __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  return yes;
#else
  return false;
#endif
}

namespace {

// AMX's CPUID bits (leaf 7, EDX: 22 bf16, 24 tile, 25 int8) and the tile state granted by the kernel. Linux hands
// the 8 KiB tile data state out per process on request (arch_prctl ARCH_REQ_XCOMP_PERM with XFEATURE_XTILEDATA);
// a refusal (an older kernel, a seccomp filter) leaves AMX off and the AVX-512 kernels run.
struct AmxSupport {
  bool bf16 = false, int8 = false;
};
const AmxSupport& Amx() {
  static const AmxSupport amx = [] {
    AmxSupport a;
#if defined(__x86_64__) && defined(__linux__)
    const char* forced = std::getenv("LITE_CPU_ISA");
    if (DetectSimdIsa() != SimdIsa::kAvx512 || (forced && std::strcmp(forced, "avx512") == 0)) return a;
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return a;
    const bool tile = (edx >> 24) & 1;
    if (!tile) return a;
    constexpr long kArchGetXcompPerm = 0x1022, kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) return a;
    unsigned long granted = 0;
    if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &granted) != 0 || !((granted >> kXfeatureXtiledata) & 1)) return a;
    a.bf16 = (edx >> 22) & 1;
    a.int8 = (edx >> 25) & 1;
#endif
    return a;
  }();
  return amx;
}

}  // namespace

bool CpuHasAmxBf16() { return Amx().bf16 && CpuHasAvx512Bf16(); }
bool CpuHasAmxInt8() { return Amx().int8 && CpuHasAvx512Vnni(); }

namespace {

#if defined(__x86_64__) && defined(__linux__)
// cpuid's vendor string ("GenuineIntel", "AuthenticAMD", ...), empty where cpuid answers nothing.
bool VendorIs(const char* name) {
  static const std::string vendor = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return std::string();
    char v[13] = {};
    std::memcpy(v, &ebx, 4);
    std::memcpy(v + 4, &edx, 4);
    std::memcpy(v + 8, &ecx, 4);
    return std::string(v);
  }();
  return vendor == name;
}
#endif

}  // namespace

bool CpuIsIntel() {
#if defined(__x86_64__) && defined(__linux__)
  static const bool intel = VendorIs("GenuineIntel");
  return intel;
#else
  return false;
#endif
}

bool CpuIsAmdZen4() {
#if defined(__x86_64__) && defined(__linux__)
  static const bool zen4 = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!VendorIs("AuthenticAMD") || !__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
    const unsigned base = (eax >> 8) & 0xF;
    const unsigned family = base == 0xF ? base + ((eax >> 20) & 0xFF) : base;
    if (family != 0x19) return false;   // Zen 3 and Zen 4; of those only Zen 4 has AVX-512
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    return ((ebx >> 16) & 1) != 0;   // AVX512F
  }();
  return zen4;
#else
  return false;
#endif
}

bool CpuTakesXeonConvRules() { return CpuIsIntel() || CpuIsAmdZen4(); }

bool WeightPrefetchNonTemporal() {
  static const bool nta = [] {
    const char* v = std::getenv("LITE_WEIGHT_PREFETCH_NTA");
    if (v && (std::strcmp(v, "0") == 0 || std::strcmp(v, "1") == 0)) return v[0] == '1';
    return !CpuIsIntel();
  }();
  return nta;
}

namespace {

// LITE_CPU_ISA as a cap on the ARM extensions: unset (or an x86 name) caps nothing; "portable" or "neon" every
// extension; a comma list keeps the extensions it names.
bool ArmExtensionAllowed(const char* name) {
  const char* forced = std::getenv("LITE_CPU_ISA");
  if (!forced || !*forced) return true;
  const std::string list = std::string(",") + forced + ",";
  if (list == ",portable," || list == ",neon,") return false;
  if (list.find(",neon") == std::string::npos) return true;   // not an ARM list
  return list.find(std::string(",") + name + ",") != std::string::npos;
}

}  // namespace

const ArmFeatures& CpuArmFeatures() {
  static const ArmFeatures f = [] {
    ArmFeatures a;
#if defined(__aarch64__) && defined(__linux__)
    if (DetectSimdIsa() != SimdIsa::kNeon) return a;
    const unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
    (void)hw2;
#ifdef HWCAP_ASIMDDP
    a.dotprod = (hw & HWCAP_ASIMDDP) && ArmExtensionAllowed("dotprod");
#endif
#ifdef HWCAP_ASIMDHP
    a.fp16 = (hw & HWCAP_ASIMDHP) && (hw & HWCAP_FPHP) && ArmExtensionAllowed("fp16");
#endif
#ifdef HWCAP2_BF16
    a.bf16 = (hw2 & HWCAP2_BF16) && ArmExtensionAllowed("bf16");
#endif
#ifdef HWCAP2_I8MM
    a.i8mm = (hw2 & HWCAP2_I8MM) && ArmExtensionAllowed("i8mm");
#endif
#ifdef HWCAP_SVE
    a.sve = (hw & HWCAP_SVE) && ArmExtensionAllowed("sve");
#endif
#endif
    return a;
  }();
  return f;
}

const char* ArmFeaturesName() {
  static const std::string name = [] {
    if (DetectSimdIsa() != SimdIsa::kNeon) return std::string();
    const ArmFeatures& f = CpuArmFeatures();
    std::string s = "neon";
    if (f.dotprod) s += "+dotprod";
    if (f.fp16) s += "+fp16";
    if (f.bf16) s += "+bf16";
    if (f.i8mm) s += "+i8mm";
    if (f.sve) s += "+sve";
    return s;
  }();
  return name.c_str();
}

const char* SimdIsaName(SimdIsa isa) {
  switch (isa) {
    case SimdIsa::kAvx512: return "avx512f";
    case SimdIsa::kAvx2Fma: return "avx2+fma";
    case SimdIsa::kNeon: return "neon";
    case SimdIsa::kPortable: break;
  }
  return "portable";
}

}  // namespace lite
