#include "cpu/stored_weight_packer.h"

#include <algorithm>
#include <vector>

namespace lite {

void StoredWeightPacker::Pack(int64_t k0, int64_t kc, int64_t n0, int64_t nc, float* dst) const {
  constexpr int64_t NR = kGemmNR;
  const int64_t panels = (nc + NR - 1) / NR;
  thread_local std::vector<float> run;
  if (!transposed_) {   // row k of the block: nc decoded values, then spread over the panels
    run.resize(static_cast<size_t>(panels * NR));
    std::fill(run.begin() + nc, run.end(), 0.f);   // columns past nc in the last panel are zero
    for (int64_t k = 0; k < kc; ++k) {
      DecodeStoredRange(w_, (k0 + k) * N_ + n0, nc, run.data());
      for (int64_t p = 0; p < panels; ++p) std::copy_n(run.data() + p * NR, NR, dst + (p * kc + k) * NR);
    }
    return;
  }
  // Transposed: column n of the block is a contiguous run of row n of the stored [N, K] matrix.
  run.resize(static_cast<size_t>(kc));
  for (int64_t p = 0; p < panels; ++p) {
    float* panel = dst + p * kc * NR;
    for (int64_t j = 0; j < NR; ++j) {
      const int64_t n = n0 + p * NR + j;
      if (n >= n0 + nc) {
        for (int64_t k = 0; k < kc; ++k) panel[k * NR + j] = 0.f;
        continue;
      }
      DecodeStoredRange(w_, n * K_ + k0, kc, run.data());
      for (int64_t k = 0; k < kc; ++k) panel[k * NR + j] = run[k];
    }
  }
}

}  // namespace lite
