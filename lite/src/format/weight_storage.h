// Constants the converter stored compressed (format 1.7, Tensor.storage): float16/bfloat16 halves of float32
// weights (--fp16) and int8/int4 codes with per-tensor, per-channel or blocked scales (weight quantisation).
// The loader decodes them to float32 once, at load.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model_generated.h"

namespace lite {

struct StoredWeight {
  ms_schema::DataType storage;                 // FLOAT16, BFLOAT16, INT8 or UINT8
  const ms_schema::QuantParam* quant;          // required for INT8/UINT8
  std::vector<int64_t> shape;                  // the float32 tensor's shape
  const uint8_t* bytes;
  uint64_t length;
};

// Bytes the weight section must hold for `numel` values of `storage` at `bits` (4 or 8 for codes).
uint64_t StoredWeightBytes(ms_schema::DataType storage, int bits, int64_t numel);

// Checks a record (byte length, scale and zero-point counts, finite scales). Returns an empty string, or what
// is wrong with it.
std::string ValidateStoredWeight(const StoredWeight& w);

// Decodes into out (numel floats). Returns an empty string, or what is wrong with the record.
std::string DecodeStoredWeight(const StoredWeight& w, std::vector<float>& out);

// Decodes elements [begin, begin + count) (row-major) of a record DecodeStoredWeight accepted: a Gather
// reads the rows it needs straight from the codes, so an embedding table is never decoded whole.
void DecodeStoredRange(const StoredWeight& w, int64_t begin, int64_t count, float* out);

// Code i (row-major) of an int8/int4 record as stored: signed for INT8, unsigned for UINT8 (value = scale * (code -
// zero point)).
int32_t StoredCode(const StoredWeight& w, int64_t i);

}  // namespace lite
