// IEEE half and bfloat16 conversions (round to nearest even).
#pragma once
#include <cstdint>
#include <cstring>

namespace lite {

inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1F, mant = h & 0x3FF, bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {   // subnormal: normalise
      exp = 127 - 15 + 1;
      while (!(mant & 0x400)) {
        mant <<= 1;
        --exp;
      }
      bits = sign | (exp << 23) | ((mant & 0x3FF) << 13);
    }
  } else if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = (x >> 16) & 0x8000;
  const uint32_t absx = x & 0x7FFFFFFFu;
  if (absx >= 0x7F800000u) return sign | 0x7C00 | (absx > 0x7F800000u ? 0x200 : 0);   // inf / nan
  if (absx >= 0x477FF000u) return sign | 0x7C00;                                      // overflow
  if (absx < 0x38800000u) {                                                           // subnormal or zero
    if (absx < 0x33000000u) return sign;
    const uint32_t e = absx >> 23, m = (absx & 0x7FFFFF) | 0x800000;
    const uint32_t shift = 126 - e;   // half subnormal unit is 2^-24
    const uint32_t mant = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    const uint32_t r = mant + (rem > half || (rem == half && (mant & 1)));
    return sign | static_cast<uint16_t>(r);
  }
  uint32_t r = ((absx >> 13) - ((127 - 15) << 10));
  const uint32_t rem = absx & 0x1FFF;
  if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) ++r;
  return sign | static_cast<uint16_t>(r);
}

inline float BFloat16ToFloat(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t FloatToBFloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40);
  x += 0x7FFF + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

}  // namespace lite
