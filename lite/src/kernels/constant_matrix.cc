#include "kernels/constant_matrix.h"

#include <cstdlib>
#include <string>

namespace lite {

bool IsCompressedMatrix(const TensorRec& t) {
  static const bool decode_at_load = [] {
    const char* v = std::getenv("LITE_DECODE_WEIGHTS");
    return v != nullptr && std::string(v) == "1";
  }();
  if (decode_at_load || t.kind != TensorRec::Kind::kConstant || t.decoded == nullptr || t.shape.size() != 2)
    return false;
  return PanelMatrixUnsupported(t.decoded->record).empty();
}

std::shared_ptr<const PanelMatrix> SharedPanels(TensorRec& b) {
  return SharedPacked<PanelMatrix>(b, "panels", [&] { return MakePanelMatrix(b.decoded->record); });
}

void ConstantMatrix::Prepare(TensorRec& b, int64_t K, int64_t N, bool bf16, bool dynamic_quant, bool transposed,
                             bool fp16) {
  if (prepared()) return;
  K_ = K;
  N_ = N;
  // A transposed weight ([N, K], MatMulAttr.b_transposed) is packed from its float values (decoded at load when
  // stored compressed): its codes would be read across their panels.
  const bool compressed = !transposed && IsCompressedMatrix(b);
  if (dynamic_quant && compressed && DqWeightsUnsupported(b.decoded->record).empty()) {
    dq_ = SharedPacked<DqWeights>(b, "dq_panels", [&] { return MakeDqWeights(b.decoded->record); });
  } else if (bf16 && compressed &&
             b.decoded->record.storage == (fp16 ? ms_schema::DataType::FLOAT16 : ms_schema::DataType::BFLOAT16)) {
    // bf16 weights under precision bfloat16 (float16 ones under float16: the converter's --fp16): the half-precision
    // kernels take the halves as they are.
    bf16_ = SharedPacked<Bf16PanelsB>(b, fp16 ? "fp16_b_halves" : "bf16_b_halves", [&] {
      return PackBf16BFromHalves(K, N, reinterpret_cast<const uint16_t*>(b.decoded->record.bytes),
                                 fp16 ? HalfFormat::kFp16 : HalfFormat::kBf16);
    });
  } else if (compressed) {
    panels_ = std::make_unique<PanelMatrixPacker>(SharedPanels(b));
  } else {
    const std::string shape = ":" + std::to_string(K) + "x" + std::to_string(N) + (transposed ? "t" : "");
    const int64_t ldb = transposed ? K : N;
    if (bf16) {   // fp16: the same panels holding float16 values
      const HalfFormat format = fp16 ? HalfFormat::kFp16 : HalfFormat::kBf16;
      bf16_ = SharedPacked<Bf16PanelsB>(b, (fp16 ? "fp16_b" : "bf16_b") + shape,
                                        [&] { return PackBf16B(transposed, K, N, b.as<float>(), ldb, format); });
    } else {
      packed_ = SharedPacked<WeightVector<float>>(b, "sgemm_b" + shape,
                                                 [&] { return PackBOnce(transposed, K, N, b.as<float>(), ldb); });
    }
  }
  ReleaseMappedPages(b);
}

std::string ConstantMatrix::Name(int64_t rows) const {
  if (dq_) return "dynamic_quant_gemm";
  if (panels_) return rows <= kSkinnyMaxRows ? "skinny_gemm_compressed" : "gemm_compressed";
  if (bf16_) {
    if (rows <= kBf16SkinnyMaxRows) return "skinny_gemm_bf16";
    return Bf16ProductsOnAmx(bf16_->format) ? "gemm_bf16_amx" : bf16_->format == HalfFormat::kFp16 ? "gemm_fp16"
                                                                                                    : "gemm_bf16";
  }
  if (packed_) return rows <= kSkinnyMaxRows ? "skinny_gemm" : "gemm_packed_b";
  return {};
}

void ConstantMatrix::Multiply(int64_t rows, const float* A, int64_t lda, float* C, int64_t ldc,
                              const GemmEpilogue& ep, ThreadPool* pool) const {
  if (dq_) return DqGemm(rows, A, lda, *dq_, C, ldc, ep, pool);
  if (panels_) {
    if (rows <= kSkinnyMaxRows) return SkinnyGemm(rows, A, lda, panels_->matrix(), C, ldc, ep, pool);
    return SgemmWithBPacker(false, rows, N_, K_, 1.f, A, lda, *panels_, 0.f, C, ldc, ep, pool);
  }
  if (bf16_) {
    if (rows <= kBf16SkinnyMaxRows) return Bf16SkinnyGemm(rows, A, lda, *bf16_, C, ldc, ep, pool);
    return Bf16GemmPackedB(false, rows, N_, K_, 1.f, A, lda, *bf16_, 0.f, C, ldc, ep, pool);
  }
  if (rows <= kSkinnyMaxRows) return SkinnyGemmPackedB(rows, N_, K_, A, lda, packed_->data(), C, ldc, ep, pool);
  SgemmPackedB(false, rows, N_, K_, 1.f, A, lda, packed_->data(), 0.f, C, ldc, ep, pool);
}

}  // namespace lite
