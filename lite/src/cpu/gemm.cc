#include "cpu/gemm.h"

#include "cpu/vmath.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace lite {

namespace {

constexpr int64_t kMR = 6;     // rows of the register tile
constexpr int64_t kNR = 16;    // columns of the register tile (one AVX-512 vector, two AVX2 vectors)
constexpr int64_t kKC = 256;   // depth of a packed block (A and B panels stay in L1/L2)
constexpr int64_t kMC = 96;    // rows of A packed per task
constexpr int64_t kNC = 512;   // columns of B handled per task

typedef float v16sf __attribute__((vector_size(64)));

// acc(MR x NR) = sum_k a[k*MR + i] * b[k*NR + j]; then C = acc (store) or C += acc.
// V holds W floats; the tile is MR rows x (NR / W) vectors. Compiled once per ISA below; the best
// one for the running CPU is picked on first use.
template <typename V, int W>
__attribute__((always_inline)) inline void MicroKernelBody(int64_t kc, const float* a, const float* b, float* c,
                                                           int64_t ldc, int64_t mr, int64_t nr, bool accumulate) {
  constexpr int NV = kNR / W;
  V acc[kMR][NV];
#pragma GCC unroll 8
  for (int i = 0; i < kMR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) acc[i][j] = V{};
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k) {
    V bv[NV];
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) std::memcpy(&bv[j], b + k * kNR + j * W, sizeof(V));
    const float* ak = a + k * kMR;
#pragma GCC unroll 8
    for (int i = 0; i < kMR; ++i) {
      const float av = ak[i];
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) acc[i][j] += av * bv[j];
    }
  }
  if (mr == kMR && nr == kNR) {
#pragma GCC unroll 8
    for (int i = 0; i < kMR; ++i) {
      float* ci = c + i * ldc;
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) {
        if (accumulate) {
          V old;
          std::memcpy(&old, ci + j * W, sizeof(V));
          acc[i][j] += old;
        }
        std::memcpy(ci + j * W, &acc[i][j], sizeof(V));
      }
    }
    return;
  }
  for (int64_t i = 0; i < mr; ++i) {
    float tmp[kNR];
    std::memcpy(tmp, acc[i], sizeof(tmp));
    float* ci = c + i * ldc;
    for (int64_t j = 0; j < nr; ++j) ci[j] = accumulate ? ci[j] + tmp[j] : tmp[j];
  }
}

typedef float v4sf __attribute__((vector_size(16)));
typedef float v8sf __attribute__((vector_size(32)));

using MicroKernelFn = void (*)(int64_t, const float*, const float*, float*, int64_t, int64_t, int64_t, bool);

void MicroKernelPortable(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int64_t mr, int64_t nr,
                         bool acc) {
  MicroKernelBody<v4sf, 4>(kc, a, b, c, ldc, mr, nr, acc);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx2,fma"))) void MicroKernelAvx2(int64_t kc, const float* a, const float* b, float* c,
                                                         int64_t ldc, int64_t mr, int64_t nr, bool acc) {
  MicroKernelBody<v8sf, 8>(kc, a, b, c, ldc, mr, nr, acc);
}
__attribute__((target("avx512f,fma"))) void MicroKernelAvx512(int64_t kc, const float* a, const float* b, float* c,
                                                             int64_t ldc, int64_t mr, int64_t nr, bool acc) {
  MicroKernelBody<v16sf, 16>(kc, a, b, c, ldc, mr, nr, acc);
}
#endif

struct IsaChoice {
  MicroKernelFn kernel;
  const char* name;
};

IsaChoice ChooseIsa() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return {MicroKernelAvx512, "avx512f"};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return {MicroKernelAvx2, "avx2+fma"};
#endif
  return {MicroKernelPortable, "portable"};
}

const IsaChoice& Isa() {
  static const IsaChoice choice = ChooseIsa();
  return choice;
}

// Packs op(A)[m0:m0+mc, k0:k0+kc] into MR-row panels, k-major inside a panel, scaled by alpha.
void PackA(bool trans, const float* A, int64_t lda, int64_t m0, int64_t mc, int64_t k0, int64_t kc, float alpha,
           float* dst) {
  for (int64_t p = 0; p < mc; p += kMR) {
    const int64_t rows = std::min(kMR, mc - p);
    if (!trans && rows == kMR) {   // the common case: six full rows, no bounds tests
      const float* r[kMR];
      for (int64_t i = 0; i < kMR; ++i) r[i] = A + (m0 + p + i) * lda + k0;
      if (alpha == 1.f) {
        for (int64_t k = 0; k < kc; ++k)
          for (int64_t i = 0; i < kMR; ++i) dst[k * kMR + i] = r[i][k];
      } else {
        for (int64_t k = 0; k < kc; ++k)
          for (int64_t i = 0; i < kMR; ++i) dst[k * kMR + i] = alpha * r[i][k];
      }
      dst += kc * kMR;
      continue;
    }
    for (int64_t k = 0; k < kc; ++k) {
      for (int64_t i = 0; i < kMR; ++i) {
        float v = 0.f;
        if (i < rows) {
          const int64_t r = m0 + p + i, c = k0 + k;
          v = trans ? A[c * lda + r] : A[r * lda + c];
        }
        dst[k * kMR + i] = alpha * v;
      }
    }
    dst += kc * kMR;
  }
}

// Packs op(B)[k0:k0+kc, n0:n0+nc] into NR-column panels, k-major inside a panel.
void PackB(bool trans, const float* B, int64_t ldb, int64_t k0, int64_t kc, int64_t n0, int64_t nc, float* dst) {
  for (int64_t p = 0; p < nc; p += kNR) {
    const int64_t cols = std::min(kNR, nc - p);
    for (int64_t k = 0; k < kc; ++k) {
      float* d = dst + k * kNR;
      if (!trans && cols == kNR) {
        std::memcpy(d, B + (k0 + k) * ldb + n0 + p, kNR * sizeof(float));
        continue;
      }
      for (int64_t j = 0; j < kNR; ++j) {
        float v = 0.f;
        if (j < cols) {
          const int64_t r = k0 + k, c = n0 + p + j;
          v = trans ? B[c * ldb + r] : B[r * ldb + c];
        }
        d[j] = v;
      }
    }
    dst += kc * kNR;
  }
}

inline float Act(float v, EpilogueAct act) {
  switch (act) {
    case EpilogueAct::kRelu: return v > 0.f ? v : 0.f;
    case EpilogueAct::kRelu6: return std::min(std::max(v, 0.f), 6.f);
    case EpilogueAct::kSigmoid: return FastSigmoid(v);
    case EpilogueAct::kTanh: return FastTanh(v);
    case EpilogueAct::kHardSwish: return v * std::min(std::max(v + 3.f, 0.f), 6.f) / 6.f;
    default: return v;
  }
}

}  // namespace

const char* GemmIsa() { return Isa().name; }

void ApplyEpilogue(float* C, int64_t ldc, int64_t row0, int64_t rows, int64_t col0, int64_t cols,
                   const GemmEpilogue& e) {
  if (!e.row_bias && !e.col_bias && e.act == EpilogueAct::kNone) return;
  for (int64_t i = row0; i < row0 + rows; ++i) {
    float* ci = C + i * ldc;
    const float rb = e.row_bias ? e.row_bias[i] : 0.f;
    if (e.col_bias) {
      for (int64_t j = col0; j < col0 + cols; ++j) ci[j] += rb + e.col_bias[j];
    } else if (e.row_bias) {
      for (int64_t j = col0; j < col0 + cols; ++j) ci[j] += rb;
    }
    if (e.act == EpilogueAct::kRelu) {
      for (int64_t j = col0; j < col0 + cols; ++j) ci[j] = ci[j] > 0.f ? ci[j] : 0.f;
    } else if (e.act != EpilogueAct::kNone) {
      for (int64_t j = col0; j < col0 + cols; ++j) ci[j] = Act(ci[j], e.act);
    }
  }
}

namespace {

// Shared driver: A is either packed per tile (packed_a == nullptr) or taken from a PackAOnce buffer.
void GemmDriver(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                const float* packed_a, const float* B, int64_t ldb, const float* prepacked_b, float beta, float* C,
                int64_t ldc, const GemmEpilogue& epilogue, ThreadPool* pool) {
  if (M <= 0 || N <= 0) return;
  if (beta != 0.f && beta != 1.f) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] *= beta;
  }
  if (K <= 0 || alpha == 0.f) {
    if (beta == 0.f)
      for (int64_t i = 0; i < M; ++i) std::fill(C + i * ldc, C + i * ldc + N, 0.f);
    ApplyEpilogue(C, ldc, 0, M, 0, N, epilogue);
    return;
  }
  const MicroKernelFn micro = Isa().kernel;
  const int64_t n_panels = (N + kNR - 1) / kNR;
  // Reused across calls on this thread (no allocation or zeroing per call); PackB writes every element.
  thread_local std::vector<float> packed_b_storage;
  const size_t packed_b_size = static_cast<size_t>(std::min(K, kKC) * n_panels * kNR);
  if (!prepacked_b && packed_b_storage.size() < packed_b_size) packed_b_storage.resize(packed_b_size);
  float* packed_b = packed_b_storage.data();
  const int64_t m_blocks = (M + kMC - 1) / kMC;
  // Narrow column strips when there are few row blocks, so every thread gets work.
  const int threads = pool ? pool->size() : 1;
  int64_t nc = kNC;
  while (nc > kNR && m_blocks * ((N + nc - 1) / nc) < threads * 2) nc /= 2;
  nc = std::max<int64_t>(kNR, nc / kNR * kNR);
  const int64_t n_blocks = (N + nc - 1) / nc;

  for (int64_t k0 = 0; k0 < K; k0 += kKC) {
    const int64_t kc = std::min(kKC, K - k0);
    const bool accumulate = k0 > 0 || beta != 0.f;
    const bool last = k0 + kc >= K;
    auto pack_b = [&](int64_t pb, int64_t pe) {
      for (int64_t p = pb; p < pe; ++p) {
        const int64_t n0 = p * kNR;
        PackB(trans_b, B, ldb, k0, kc, n0, std::min(kNR, N - n0), packed_b + p * kc * kNR);
      }
    };
    if (prepacked_b) {
      packed_b = const_cast<float*>(prepacked_b) + k0 * n_panels * kNR;   // read only
    } else if (pool) {
      pool->ParallelFor(n_panels, 4, pack_b);
    } else {
      pack_b(0, n_panels);
    }

    const int64_t m_padded = (M + kMR - 1) / kMR * kMR;
    auto tile_task = [&](int64_t tb, int64_t te) {
      thread_local std::vector<float> local_a;
      if (!packed_a) local_a.resize(static_cast<size_t>(kMC * kKC));
      for (int64_t t = tb; t < te; ++t) {
        const int64_t mb = t / n_blocks, nb = t % n_blocks;
        const int64_t m0 = mb * kMC, mc = std::min(kMC, M - m0);
        const int64_t n0 = nb * nc, ncur = std::min(nc, N - n0);
        const float* a_block;
        if (packed_a) {
          a_block = packed_a + k0 * m_padded + (m0 / kMR) * kc * kMR;
        } else {
          PackA(trans_a, A, lda, m0, mc, k0, kc, alpha, local_a.data());
          a_block = local_a.data();
        }
        for (int64_t j = 0; j < ncur; j += kNR) {
          const float* bp = packed_b + ((n0 + j) / kNR) * kc * kNR;
          const int64_t nr = std::min(kNR, ncur - j);
          for (int64_t i = 0; i < mc; i += kMR) {
            const int64_t mr = std::min(kMR, mc - i);
            micro(kc, a_block + i * kc, bp, C + (m0 + i) * ldc + n0 + j, ldc, mr, nr, accumulate);
          }
        }
        if (last) ApplyEpilogue(C, ldc, m0, mc, n0, ncur, epilogue);
      }
    };
    if (pool) pool->ParallelFor(m_blocks * n_blocks, 1, tile_task); else tile_task(0, m_blocks * n_blocks);
  }
}

}  // namespace

void Sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc, const GemmEpilogue& epilogue,
           ThreadPool* pool) {
  GemmDriver(trans_a, trans_b, M, N, K, alpha, A, lda, nullptr, B, ldb, nullptr, beta, C, ldc, epilogue, pool);
}

std::vector<float> PackAOnce(bool trans_a, int64_t M, int64_t K, float alpha, const float* A, int64_t lda) {
  // Layout: per k block of kKC, every MR-row panel of all M rows, as PackA writes them.
  const int64_t m_padded = (M + kMR - 1) / kMR * kMR;
  std::vector<float> packed(static_cast<size_t>(std::max<int64_t>(1, m_padded * K)));
  for (int64_t k0 = 0; k0 < K; k0 += kKC) {
    const int64_t kc = std::min(kKC, K - k0);
    PackA(trans_a, A, lda, 0, M, k0, kc, alpha, packed.data() + k0 * m_padded);
  }
  return packed;
}

void SgemmPackedA(const float* packed_a, int64_t M, int64_t N, int64_t K, bool trans_b, const float* B, int64_t ldb,
                  float beta, float* C, int64_t ldc, const GemmEpilogue& epilogue, ThreadPool* pool) {
  GemmDriver(false, trans_b, M, N, K, 1.f, nullptr, 0, packed_a, B, ldb, nullptr, beta, C, ldc, epilogue, pool);
}

std::vector<float> PackBOnce(bool trans_b, int64_t K, int64_t N, const float* B, int64_t ldb) {
  // Layout: per k block of kKC, every NR-column panel of all N columns, as PackB writes them.
  const int64_t n_padded = (N + kNR - 1) / kNR * kNR;
  std::vector<float> packed(static_cast<size_t>(std::max<int64_t>(1, n_padded * K)));
  for (int64_t k0 = 0; k0 < K; k0 += kKC) {
    const int64_t kc = std::min(kKC, K - k0);
    PackB(trans_b, B, ldb, k0, kc, 0, N, packed.data() + k0 * n_padded);
  }
  return packed;
}

void SgemmPackedB(bool trans_a, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                  const float* packed_b, float beta, float* C, int64_t ldc, const GemmEpilogue& epilogue,
                  ThreadPool* pool) {
  GemmDriver(trans_a, false, M, N, K, alpha, A, lda, nullptr, nullptr, 0, packed_b, beta, C, ldc, epilogue, pool);
}

}  // namespace lite
