// A constant [K, N] weight ready for products with activations: float32 packed once for the GEMM (bfloat16 panels
// under precision bfloat16), or a compressed one laid out as panels of its codes (cpu/gemm/skinny_gemm.h; with dynamic
// quantisation, int8/int4 codes in the integer kernels' panels, cpu/gemm/dynamic_quant_gemm.h). Shared by every plan of
// the model (TensorRec::packed); products of a few rows take the skinny path, taller ones the GEMM.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "cpu/gemm/bf16_gemm.h"
#include "cpu/gemm/dynamic_quant_gemm.h"
#include "cpu/gemm/gemm.h"
#include "cpu/gemm/skinny_gemm.h"
#include "kernels/common.h"

namespace lite {

// Whether a constant is a [K, N] matrix the file stores compressed in a layout the panels take: the kernel then
// reads it without decoding (Kernel::NeedsDecodedInput false). LITE_DECODE_WEIGHTS=1 decodes at load instead.
bool IsCompressedMatrix(const TensorRec& t);

// The panels of such a compressed weight, laid out once and shared by every plan and kernel (TensorRec::packed).
std::shared_ptr<const PanelMatrix> SharedPanels(TensorRec& b);

class ConstantMatrix {
 public:
  // Packs (or lays out) `b`, a constant [K, N], once per model; bf16: the precision-bfloat16 GEMM's panels;
  // dynamic_quant: int8/int4 codes for products on quantised activations (KernelIO::dynamic_quant).
  // `transposed`: b is stored [N, K] (MatMulAttr.b_transposed), packed from its float values.
  void Prepare(TensorRec& b, int64_t K, int64_t N, bool bf16, bool dynamic_quant, bool transposed = false,
               bool fp16 = false);
  bool prepared() const { return packed_ || bf16_ || panels_ || dq_; }
  // C[rows, N] = epilogue(A[rows, K] x B), A's rows lda apart.
  void Multiply(int64_t rows, const float* A, int64_t lda, float* C, int64_t ldc, const GemmEpilogue& ep,
                ThreadPool* pool) const;
  // Which product Multiply runs for `rows` rows (Kernel::Implementation).
  std::string Name(int64_t rows) const;

 private:
  int64_t K_ = 0, N_ = 0;
  std::shared_ptr<const WeightVector<float>> packed_;
  std::shared_ptr<const Bf16PanelsB> bf16_;
  std::unique_ptr<PanelMatrixPacker> panels_;
  std::shared_ptr<const DqWeights> dq_;
};

}  // namespace lite
