// Tall products (prompts, prefill chunks) of int4 dynamic-quant weights as bf16 tile products, on CPUs with AMX-BF16.
//
// On AMX-INT8 an int4 weight's blocks of 32 depth values each need their own int32 sums: half-depth TDPBSSD tiles
// (a tile product costs the same at 32 or 64 deep) and four sum tiles stored and converted to float32 per block of 32
// (dq_amx.h): a 512-token int4 prompt ran at 56% of the int8 one's rate. Here each task decodes its columns' codes once
// into bf16 panels (scale * (code - zero), rounded to nearest even) and TDPBF16PS multiplies them with the activations
// rounded to bf16: the products run at the tiles' bf16 rate with one conversion per output, as OpenVINO's CPU plugin
// runs int4 prompts. The activations keep 8 significant bits instead of an int8 code per block of 32 values (as
// accurate or more; not the same numbers as the integer scheme's). Decode steps and short chunks (under 32 rows) and
// int8 weights (full-depth AMX-INT8 tiles, twice the bf16 rate) stay integer.
#pragma once
#include <cstdint>

#include "cpu/gemm/bf16_gemm.h"
#include "cpu/gemm/dynamic_quant_gemm.h"

namespace lite {

// Rows from which the bf16 path takes int4 products: each weight is decoded once per product, which fewer rows do
// not repay (the Qwen2.5-0.5B layer's products against the AMX-INT8 kernels, benchmarks.dq_gemm: 0.75-1.1x at 16
// rows, 0.94-1.25x at 32, 1.16-1.5x at 64, 1.35-1.95x at 512, one and two threads).
constexpr int64_t kDqBf16MinRows = 32;

// Whether a product of `rows` rows with `w` takes the bf16 path: int4 codes, at least kDqBf16MinRows rows, a CPU
// with AMX-BF16 (LITE_CPU_ISA not capping it). LITE_DQ_TALL_PRODUCTS=integer keeps every tall product integer;
// =bf16 sends int8 codes here too (for comparisons).
bool DqTallProductInBf16(const DqWeights& w, int64_t rows);

// "bf16" or "integer": the choice above for int4 weights on this CPU (for tests and benchmarks to report).
const char* DqTallInt4Path();

// The codes of a DqWeights (int4 or int8) decoded into Bf16PanelsB panels block by block: scale * (code - zero) as
// float32 (the weight-only path's value, to the bit), then rounded to bf16. Requires AVX512_BF16.
class DqWeightsBf16Packer : public Bf16PanelPacker {
 public:
  explicit DqWeightsBf16Packer(const DqWeights& w) : w_(w) {}
  void Pack(int64_t k0, int64_t kc, int64_t n0, int64_t nc, uint16_t* dst) const override;

 private:
  const DqWeights& w_;
};

}  // namespace lite
