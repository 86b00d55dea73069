// GEMM B panels decoded block by block from a weight the file stores compressed (float16/bfloat16 halves, int8
// or int4 codes with scales): the float32 weight never exists whole, so a WEIGHT_QUANT or --fp16 model keeps its
// compressed size in memory at run time.
#pragma once
#include <cstdint>

#include "cpu/gemm.h"
#include "cpu/isa_dispatch.h"
#include "format/weight_storage.h"

namespace lite {

class StoredWeightPacker : public BPacker {
 public:
  // `w` holds a K x N matrix, or with `transposed` an N x K one used as its transpose (Gemm's transB).
  StoredWeightPacker(const StoredWeight& w, int64_t K, int64_t N, bool transposed)
      : w_(w), K_(K), N_(N), transposed_(transposed), avx2_(DetectSimdIsa() != SimdIsa::kPortable) {}
  void Pack(int64_t k0, int64_t kc, int64_t n0, int64_t nc, float* dst) const override;

 private:
  const StoredWeight& w_;
  int64_t K_, N_;
  bool transposed_;
  bool avx2_;
};

}  // namespace lite
