#include "cpu/gemm/fma_peak.h"

#include "cpu/isa_dispatch.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>

namespace lite {
namespace {

typedef float v4sf __attribute__((vector_size(16)));
typedef float v8sf __attribute__((vector_size(32)));
typedef float v16sf __attribute__((vector_size(64)));

// Returns flops done; `sink` keeps the chains alive.
template <typename V, int L>
__attribute__((always_inline)) inline double Chains(int64_t iters, float* sink) {
  V a[12];
  for (int i = 0; i < 12; ++i) a[i] = V{} + 0.001f * static_cast<float>(i);
  const V b = V{} + 0.9999f, c = V{} + 0.0001f;
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = a[i] * b + c;
  }
  V s = a[0];
  for (int i = 1; i < 12; ++i) s += a[i];
  std::memcpy(sink, &s, sizeof(float));
  return static_cast<double>(iters) * 12 * L * 2;
}

using RunFn = double (*)(int64_t, float*);
double RunPortable(int64_t n, float* s) { return Chains<v4sf, 4>(n, s); }
#ifdef LITE_X86_SIMD
__attribute__((target("avx2,fma"))) double RunAvx2(int64_t n, float* s) { return Chains<v8sf, 8>(n, s); }
__attribute__((target("avx512f,fma"))) double RunAvx512(int64_t n, float* s) { return Chains<v16sf, 16>(n, s); }
#endif

}  // namespace

double MeasureFmaPeakGflops(double seconds) {
  const RunFn run = PickIsaKernel<RunFn>(RunPortable, LITE_IF_X86_SIMD(RunAvx2), LITE_IF_X86_SIMD(RunAvx512)).fn;
  using Clock = std::chrono::steady_clock;
  float sink = 0.f;
  double best = 0.0;
  const auto end = Clock::now() + std::chrono::duration<double>(std::max(seconds, 0.01));
  const int64_t iters = 1 << 20;
  do {
    const auto t0 = Clock::now();
    const double flops = run(iters, &sink);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (s > 0) best = std::max(best, flops / s / 1e9);
  } while (Clock::now() < end);
  return best + (sink == 12345.f ? 1e-9 : 0.0);   // the sink is read, so the chains are not optimised away
}

}  // namespace lite
