// Elementwise loops compiled twice: for AVX2 and for the baseline ISA, chosen at load time by CPU
// features (GCC function multi-versioning). The loop bodies are plain C++ that the compiler vectorises;
// this header only decides which vector width they get.
#pragma once
#include <cstdint>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
// "avx2" alone (not "arch=..."): the resolver then tests the CPU's features, not its model name.
#define LITE_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define LITE_VECTOR_CLONES
#endif

namespace lite {

template <typename R, typename T, typename Op>
LITE_VECTOR_CLONES void MapLoop(const T* x, R* y, int64_t n, Op op) {
  for (int64_t i = 0; i < n; ++i) y[i] = op(x[i]);
}

// y[i] = op(a[i], b[i]) with either operand optionally a broadcast scalar (stride 0).
template <typename R, typename T, typename Op>
LITE_VECTOR_CLONES void ZipLoop(const T* a, bool a_vec, const T* b, bool b_vec, R* y, int64_t n, Op op) {
  if (a_vec && b_vec) {
    for (int64_t i = 0; i < n; ++i) y[i] = op(a[i], b[i]);
  } else if (a_vec) {
    const T vb = b[0];
    for (int64_t i = 0; i < n; ++i) y[i] = op(a[i], vb);
  } else if (b_vec) {
    const T va = a[0];
    for (int64_t i = 0; i < n; ++i) y[i] = op(va, b[i]);
  } else {
    const R v = op(a[0], b[0]);
    for (int64_t i = 0; i < n; ++i) y[i] = v;
  }
}

}  // namespace lite
