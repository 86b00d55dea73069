// Tall products (prompts, batches) of int8 dynamic-quant weights as float32 GEMMs, on CPUs whose integer multiplies
// are no faster than their float32 FMAs.
//
// The AVX2 build of the integer kernels multiplies int8 codes with vpmaddubsw + vpmaddwd: 32 multiply-adds for two
// instructions a 256-bit register. Where those run at half rate (AMD Zen 1 splits each 256-bit operation into two
// 128-bit halves and has one integer multiplier pipe) that is 8 multiply-adds a cycle, what the float32 FMAs do, and
// the float32 GEMM reaches a higher fraction of its peak than the integer tile: a 512-token int8 prompt ran at 36
// tok/s in integers and 41 this way on such a core (runs taken in turn, one thread). There products of more than kSkinnyMaxRows rows decode the
// int8 codes into the GEMM's float32 panels block by block (as the weight-only paths do) and keep the activations in
// float32; the few-row products of decode steps keep the integer kernels, which read a quarter of the bytes. Int4 codes
// (twice the multiply-adds per instruction: their int16 sums need vpmaddwd once per four steps) stay integer.
#pragma once
#include <cstdint>

#include "cpu/gemm/dynamic_quant_gemm.h"
#include "cpu/gemm/gemm.h"

namespace lite {

// Whether a product of `rows` rows with `w` takes the float32 path here. Decided once per process: never with the
// AVX512-VNNI build; with the AVX2 build when this core's int8 multiply-add rate (vpmaddubsw + vpmaddwd, measured
// for a few milliseconds at first use) is below 1.5x its float32 FMA rate (Zen 1: ~1x; Intel cores with two 256-bit
// multiply ports: ~2x). LITE_DQ_TALL_PRODUCTS=float / =integer overrides the measurement.
bool DqTallProductInFloat(const DqWeights& w, int64_t rows);

// "float" or "integer": the choice above for int8 weights on this CPU (for tests and benchmarks to report).
const char* DqTallInt8Path();

// The int8 codes of a DqWeights decoded into the GEMM's panels: scale * (code - zero), the values the weight-only path
// (PanelMatrixPacker) gives for the same stored weight, to the bit. Requires the AVX2 build.
class DqWeightsPacker : public BPacker {
 public:
  explicit DqWeightsPacker(const DqWeights& w) : w_(w) {}
  void Pack(int64_t k0, int64_t kc, int64_t n0, int64_t nc, float* dst) const override;

 private:
  const DqWeights& w_;
};

}  // namespace lite
