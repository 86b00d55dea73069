#include "format/weight_storage.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "cpu/simd/float16.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define LITE_HAVE_F16C_PATH 1
#endif

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

int64_t Numel(const StoredWeight& w) {
  int64_t n = 1;
  for (int64_t d : w.shape) n *= d;
  return n;
}

// The tensor as [outer, dim, inner] around the quantisation axis; the scales as [outer, blocks, inner]
// (blocked), [dim] (per channel) or [1] (per tensor, axis -1: dim 1, inner = every element).
struct Layout {
  int64_t outer = 1, dim = 1, inner = 1, blocks = 1, scales = 1;
  explicit Layout(const StoredWeight& w) {
    const ms_schema::QuantParam* q = w.quant;
    const int64_t axis = q->axis(), group = q->group_size(), rank = static_cast<int64_t>(w.shape.size());
    if (axis < 0 || axis >= rank) {
      inner = Numel(w);
      return;
    }
    for (int64_t d = 0; d < axis; ++d) outer *= w.shape[d];
    dim = w.shape[axis];
    for (int64_t d = axis + 1; d < rank; ++d) inner *= w.shape[d];
    blocks = group > 0 ? (dim + group - 1) / group : 1;
    scales = group > 0 ? outer * blocks * inner : dim;
  }
};

}  // namespace

std::string ValidateStoredWeight(const StoredWeight& w) {
  const int64_t numel = Numel(w);
  if (w.storage == DataType::FLOAT16 || w.storage == DataType::BFLOAT16) {
    if (w.length != StoredWeightBytes(w.storage, 0, numel))
      return "holds " + std::to_string(w.length) + " bytes, " + std::to_string(numel) + " 16-bit values need " +
             std::to_string(StoredWeightBytes(w.storage, 0, numel));
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
  const int64_t rank = static_cast<int64_t>(w.shape.size()), axis = q->axis(), group = q->group_size();
  if (axis == -1 && group != 0) return "has a group size without an axis";
  if (axis != -1 && (axis < 0 || axis >= rank))
    return "has quantisation axis " + std::to_string(axis) + " for rank " + std::to_string(rank);
  if (group < 0) return "has a negative group size";
  const Layout l(w);
  if (static_cast<int64_t>(q->scale()->size()) != l.scales)
    return "has " + std::to_string(q->scale()->size()) + " scales, its quantisation layout needs " + std::to_string(l.scales);
  const bool has_zp = q->zero_point() && q->zero_point()->size() > 0;
  if (has_zp && static_cast<int64_t>(q->zero_point()->size()) != l.scales)
    return "has " + std::to_string(q->zero_point()->size()) + " zero points for " + std::to_string(l.scales) + " scales";
  for (int64_t i = 0; i < l.scales; ++i) {
    if (!std::isfinite(q->scale()->Get(static_cast<uint32_t>(i)))) return "has a non-finite scale";
    if (has_zp && std::abs(q->zero_point()->Get(static_cast<uint32_t>(i))) > (int64_t(1) << 16))
      return "has an out-of-range zero point";
  }
  return "";
}

std::string DecodeStoredWeight(const StoredWeight& w, std::vector<float>& out) {
  std::string err = ValidateStoredWeight(w);
  if (!err.empty()) return err;
  out.resize(static_cast<size_t>(Numel(w)));
  DecodeStoredRange(w, 0, Numel(w), out.data());
  return "";
}

namespace {

#ifdef LITE_HAVE_F16C_PATH
// float16 constants decoded at load (and a Gather's rows): 8 at a time.
__attribute__((target("avx,f16c"))) void HalvesToFloatF16c(const uint8_t* src, int64_t count, float* out) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i))));
  for (; i < count; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    out[i] = HalfToFloat(h);
  }
}

bool HasF16c() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
  }();
  return yes;
}
#endif

}  // namespace

void DecodeStoredRange(const StoredWeight& w, int64_t begin, int64_t count, float* out) {
#ifdef LITE_HAVE_F16C_PATH
  if (w.storage == DataType::FLOAT16 && HasF16c()) return HalvesToFloatF16c(w.bytes + 2 * begin, count, out);
#endif
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
  const int64_t group = q->group_size();
  const bool per_run = q->axis() == -1 || group == 0;   // one scale per [inner] run
  const bool is_signed = w.storage == DataType::INT8;
  const Layout l(w);
  // The weight section is little-endian, as the host (see docs/format.md): read scales and zero points in place.
  const float* scale = q->scale()->data();
  const int64_t* zero = q->zero_point() && q->zero_point()->size() > 0 ? q->zero_point()->data() : nullptr;
  if (per_run && q->axis() != -1 && l.inner == 1 && bits == 8 && is_signed) {
    // Per channel along the last axis (MatMul weights [K, N]): the scale follows the element along a row.
    const int8_t* src = reinterpret_cast<const int8_t*>(w.bytes);
    for (int64_t e = begin, end = begin + count; e < end;) {
      const int64_t a0 = e % l.dim, n = std::min(l.dim - a0, end - e);
      float* dst = out + (e - begin);
      for (int64_t j = 0; j < n; ++j)
        dst[j] = static_cast<float>(src[e + j] - (zero ? zero[a0 + j] : 0)) * scale[a0 + j];
      e += n;
    }
    return;
  }
  // Runs of the [outer, dim, inner] walk (counters, no division per run), the first one from mid-run when
  // `begin` is.
  int64_t o = begin / (l.dim * l.inner), a = (begin / l.inner) % l.dim, i0 = begin % l.inner;
  for (int64_t e = begin, end = begin + count; e < end; i0 = 0) {
    const int64_t n = std::min(l.inner - i0, end - e);
    float* dst = out + (e - begin);
    if (per_run) {
      const int64_t si = q->axis() == -1 ? 0 : a;
      const float sc = scale[si];
      const int32_t zp = zero ? static_cast<int32_t>(zero[si]) : 0;
      if (bits == 8 && is_signed) {
        const int8_t* src = reinterpret_cast<const int8_t*>(w.bytes) + e;
        for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i] - zp) * sc;
      } else {
        for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(Code(w.bytes, e + i, bits, is_signed) - zp) * sc;
      }
    } else {
      const int64_t si = (o * l.blocks + a / group) * l.inner + i0;
      for (int64_t i = 0; i < n; ++i)
        dst[i] = static_cast<float>(Code(w.bytes, e + i, bits, is_signed) - (zero ? zero[si + i] : 0)) * scale[si + i];
    }
    e += n;
    if (++a == l.dim) a = 0, ++o;
  }
}

int32_t StoredCode(const StoredWeight& w, int64_t i) {
  return Code(w.bytes, i, w.quant->bits(), w.storage == DataType::INT8);
}

}  // namespace lite
