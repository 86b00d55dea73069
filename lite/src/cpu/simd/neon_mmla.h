// The matrix-multiply instructions' (smmla, bfmmla) 2 x 2 sums back into rows: each of a pair of rows' 8
// accumulators holds [r0c0, r0c1, r1c0, r1c1] of a column pair; the rows are 16 columns, 4 vectors each.
#pragma once

#ifdef __aarch64__
#include <arm_neon.h>

namespace lite {

// rows[2p] and rows[2p + 1] from acc[p] (R rows: an odd last row's pair partner, a copy of it, is dropped).
template <int R, int P>
inline void UnzipMmlaRows(const int32x4_t (&acc)[P][8], int32x4_t (&rows)[R][4]) {
  for (int p = 0; p < P; ++p)
    for (int q = 0; q < 4; ++q) {
      const int64x2_t x = vreinterpretq_s64_s32(acc[p][2 * q]), y = vreinterpretq_s64_s32(acc[p][2 * q + 1]);
      rows[2 * p][q] = vreinterpretq_s32_s64(vzip1q_s64(x, y));
      if (2 * p + 1 < R) rows[2 * p + 1][q] = vreinterpretq_s32_s64(vzip2q_s64(x, y));
    }
}
template <int R, int P>
inline void UnzipMmlaRows(const float32x4_t (&acc)[P][8], float32x4_t (&rows)[R][4]) {
  for (int p = 0; p < P; ++p)
    for (int q = 0; q < 4; ++q) {
      const float64x2_t x = vreinterpretq_f64_f32(acc[p][2 * q]), y = vreinterpretq_f64_f32(acc[p][2 * q + 1]);
      rows[2 * p][q] = vreinterpretq_f32_f64(vzip1q_f64(x, y));
      if (2 * p + 1 < R) rows[2 * p + 1][q] = vreinterpretq_f32_f64(vzip2q_f64(x, y));
    }
}

}  // namespace lite
#endif
