#include "format/weight_storage.h"

#include <cmath>
#include <cstring>

#include "cpu/float16.h"

namespace lite {

using ms_schema::DataType;

uint64_t StoredWeightBytes(DataType storage, int bits, int64_t numel) {
  switch (storage) {
    case DataType::FLOAT16:
    case DataType::BFLOAT16:
      return static_cast<uint64_t>(numel) * 2;
    case DataType::INT8:
    case DataType::UINT8:
      return bits == 4 ? (static_cast<uint64_t>(numel) + 1) / 2 : static_cast<uint64_t>(numel);
    default:
      return 0;
  }
}

namespace {

// The code of element i: int8/uint8, or a 4-bit nibble (even index in the low half), sign-extended for INT8.
inline int32_t Code(const uint8_t* b, int64_t i, int bits, bool is_signed) {
  if (bits == 8) return is_signed ? static_cast<int32_t>(static_cast<int8_t>(b[i])) : static_cast<int32_t>(b[i]);
  const uint8_t nibble = (i & 1) ? (b[i >> 1] >> 4) : (b[i >> 1] & 0x0F);
  return is_signed && (nibble & 0x8) ? static_cast<int32_t>(nibble) - 16 : static_cast<int32_t>(nibble);
}

// The checks, and with `decode` the values.
std::string DecodeStoredWeight(const StoredWeight& w, std::vector<float>& out, bool decode);

}  // namespace

std::string ValidateStoredWeight(const StoredWeight& w) {
  std::vector<float> none;
  return DecodeStoredWeight(w, none, /*decode=*/false);
}

std::string DecodeStoredWeight(const StoredWeight& w, std::vector<float>& out) { return DecodeStoredWeight(w, out, true); }

namespace {

std::string DecodeStoredWeight(const StoredWeight& w, std::vector<float>& out, bool decode) {
  int64_t numel = 1;
  for (int64_t d : w.shape) numel *= d;
  if (w.storage == DataType::FLOAT16 || w.storage == DataType::BFLOAT16) {
    if (w.length != StoredWeightBytes(w.storage, 0, numel))
      return "holds " + std::to_string(w.length) + " bytes, " + std::to_string(numel) + " 16-bit values need " +
             std::to_string(StoredWeightBytes(w.storage, 0, numel));
    if (!decode) return "";
    out.assign(static_cast<size_t>(numel), 0.f);
    for (int64_t i = 0; i < numel; ++i) {
      uint16_t h;
      std::memcpy(&h, w.bytes + 2 * i, 2);
      out[i] = w.storage == DataType::FLOAT16 ? HalfToFloat(h) : BFloat16ToFloat(h);
    }
    return "";
  }
  if (w.storage != DataType::INT8 && w.storage != DataType::UINT8)
    return "has an unsupported storage type " + std::to_string(static_cast<int>(w.storage));
  const ms_schema::QuantParam* q = w.quant;
  if (!q || !q->scale() || q->scale()->size() == 0) return "is stored as integer codes but has no quantisation scales";
  const int bits = q->bits();
  if (bits != 8 && bits != 4) return "has " + std::to_string(bits) + "-bit codes (8 or 4 are supported)";
  if (w.length != StoredWeightBytes(w.storage, bits, numel))
    return "holds " + std::to_string(w.length) + " bytes, " + std::to_string(numel) + " " + std::to_string(bits) +
           "-bit codes need " + std::to_string(StoredWeightBytes(w.storage, bits, numel));
  const int64_t rank = static_cast<int64_t>(w.shape.size());
  const int64_t axis = q->axis(), group = q->group_size();
  // The tensor as [outer, dim, inner] around the quantisation axis; the scales as [outer, blocks, inner]
  // (blocked), [dim] (per channel) or [1] (per tensor).
  int64_t outer = 1, dim = 1, inner = 1, scales = 1;
  if (axis == -1) {
    if (group != 0) return "has a group size without an axis";
    inner = numel;
  } else {
    if (axis < 0 || axis >= rank) return "has quantisation axis " + std::to_string(axis) + " for rank " + std::to_string(rank);
    if (group < 0) return "has a negative group size";
    for (int64_t d = 0; d < axis; ++d) outer *= w.shape[d];
    dim = w.shape[axis];
    for (int64_t d = axis + 1; d < rank; ++d) inner *= w.shape[d];
    scales = group == 0 ? dim : outer * ((dim + group - 1) / group) * inner;
  }
  if (static_cast<int64_t>(q->scale()->size()) != scales)
    return "has " + std::to_string(q->scale()->size()) + " scales, its quantisation layout needs " + std::to_string(scales);
  const bool has_zp = q->zero_point() && q->zero_point()->size() > 0;
  if (has_zp && static_cast<int64_t>(q->zero_point()->size()) != scales)
    return "has " + std::to_string(q->zero_point()->size()) + " zero points for " + std::to_string(scales) + " scales";
  std::vector<float> scale(static_cast<size_t>(scales));
  std::vector<int32_t> zero(static_cast<size_t>(scales), 0);
  for (int64_t i = 0; i < scales; ++i) {
    scale[i] = q->scale()->Get(static_cast<uint32_t>(i));
    if (!std::isfinite(scale[i])) return "has a non-finite scale";
    if (has_zp) {
      const int64_t z = q->zero_point()->Get(static_cast<uint32_t>(i));
      if (z < -(int64_t(1) << 16) || z > (int64_t(1) << 16)) return "has an out-of-range zero point";
      zero[i] = static_cast<int32_t>(z);
    }
  }
  if (!decode) return "";
  out.assign(static_cast<size_t>(numel), 0.f);
  const bool is_signed = w.storage == DataType::INT8;
  const int64_t blocks = group > 0 ? (dim + group - 1) / group : 1;
  float* dst = out.data();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t a = 0; a < dim; ++a) {
      const int64_t base = (o * dim + a) * inner;
      if (axis == -1 || group == 0) {   // one scale for the whole run
        const int64_t si = axis == -1 ? 0 : a;
        const float sc = scale[si];
        const int32_t zp = zero[si];
        if (bits == 8 && is_signed) {
          const int8_t* src = reinterpret_cast<const int8_t*>(w.bytes) + base;
          for (int64_t i = 0; i < inner; ++i) dst[base + i] = static_cast<float>(src[i] - zp) * sc;
        } else {
          for (int64_t i = 0; i < inner; ++i) dst[base + i] = static_cast<float>(Code(w.bytes, base + i, bits, is_signed) - zp) * sc;
        }
        continue;
      }
      const float* sc = scale.data() + (o * blocks + a / group) * inner;
      const int32_t* zp = zero.data() + (o * blocks + a / group) * inner;
      for (int64_t i = 0; i < inner; ++i)
        dst[base + i] = static_cast<float>(Code(w.bytes, base + i, bits, is_signed) - zp[i]) * sc[i];
    }
  return "";
}

}  // namespace

void DecodeStoredRange(const StoredWeight& w, int64_t begin, int64_t count, float* out) {
  if (w.storage == DataType::FLOAT16 || w.storage == DataType::BFLOAT16) {
    for (int64_t i = 0; i < count; ++i) {
      uint16_t h;
      std::memcpy(&h, w.bytes + 2 * (begin + i), 2);
      out[i] = w.storage == DataType::FLOAT16 ? HalfToFloat(h) : BFloat16ToFloat(h);
    }
    return;
  }
  const ms_schema::QuantParam* q = w.quant;
  const int bits = q->bits();
  const int64_t rank = static_cast<int64_t>(w.shape.size()), axis = q->axis(), group = q->group_size();
  int64_t dim = 1, inner = 1;
  if (axis == -1) {
    for (int64_t d : w.shape) inner *= d;
  } else {
    dim = w.shape[axis];
    for (int64_t d = axis + 1; d < rank; ++d) inner *= w.shape[d];
  }
  const int64_t blocks = group > 0 ? (dim + group - 1) / group : 1;
  const bool has_zp = q->zero_point() && q->zero_point()->size() > 0, is_signed = w.storage == DataType::INT8;
  // Walk (o, a, i) from `begin` with counters (no division per element).
  int64_t o = begin / (dim * inner), a = (begin / inner) % dim, i = begin % inner;
  for (int64_t n = 0; n < count; ++n) {
    const int64_t si = axis == -1 ? 0 : group == 0 ? a : (o * blocks + a / group) * inner + i;
    const int64_t zp = has_zp ? q->zero_point()->Get(static_cast<uint32_t>(si)) : 0;
    out[n] = static_cast<float>(Code(w.bytes, begin + n, bits, is_signed) - zp) * q->scale()->Get(static_cast<uint32_t>(si));
    if (++i == inner) {
      i = 0;
      if (++a == dim) a = 0, ++o;
    }
  }
}

}  // namespace lite
