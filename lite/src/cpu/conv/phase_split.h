// A zero-padded copy of a convolution's input planes with every row split by stride phase: element q of phase r of
// padded row h of channel c is x[c][h - pad_top][r + q * SW - pad_left] (zero outside the input). A strided
// convolution's filter tap then reads a contiguous run along an output row (column kw * DW of output pixel ow is
// element ow + kw * DW / SW of phase kw * DW % SW), with no bounds tests: the direct kernel's pixel vectors are plain
// loads. (Tried for the implicit im2col's panels of ResNet-50's stride-2 3x3 layer into 28x28: packing fell from 26%
// to 19% of the layer, but the copy took 8.5%: 1.09x the time, not kept.)
#pragma once
#include <cstdint>

#include "core/thread_pool.h"

namespace lite {

struct PhaseSplitLayout {
  int64_t C = 0, H = 0, W = 0;            // input planes
  int64_t pad_top = 0, pad_left = 0, SW = 1;
  int64_t Hp = 0;                         // padded rows
  int64_t PL = 0;                         // elements per phase of a row
  int64_t RowLength() const { return SW * PL; }
  int64_t Floats() const { return C * Hp * RowLength(); }
  // Offset of column `q` (padded coordinates, q = kw * DW for a tap at output column 0) within a padded row.
  int64_t ColumnOffset(int64_t q) const { return (q % SW) * PL + q / SW; }
};

// Rows cover every output row's taps; phases cover `reach` elements (the output columns a kernel reads past the
// last one, plus the filter's span) and the input's columns.
PhaseSplitLayout MakePhaseSplitLayout(int64_t C, int64_t H, int64_t W, int64_t OH, int64_t KH, int64_t SH, int64_t DH,
                                      int64_t pad_top, int64_t pad_left, int64_t KW, int64_t SW, int64_t DW,
                                      int64_t reach_columns);

// Writes the copy of x (C planes of H x W) into dst (layout.Floats() floats); rows split between threads.
void PhaseSplitCopy(const PhaseSplitLayout& layout, const float* x, float* dst, ThreadPool* pool);

}  // namespace lite
