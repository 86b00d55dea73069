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
  // `w` holds a K x N matrix (row-major: a MatMul weight, or Gemm's without transB).
  StoredWeightPacker(const StoredWeight& w, int64_t N) : w_(w), N_(N), avx2_(DetectSimdIsa() != SimdIsa::kPortable) {}
  void Pack(int64_t k0, int64_t kc, int64_t n0, int64_t nc, float* dst) const override;

 private:
  const StoredWeight& w_;
  int64_t N_;
  bool avx2_;
};

}  // namespace lite
