// Bilinear resizing of 8-bit interleaved images ([H][W][C]) with half-pixel centres and no antialiasing: OpenCV's
// INTER_LINEAR, what detectors' letterboxes call (lite.detection's preprocessing, lite._lite.resize_bilinear_u8).
#pragma once
#include <cstdint>

namespace lite {

// dst [oh][ow][c] from src [h][w][c]; each value rounded to nearest. Rows first (the two source rows of an output
// row blended into floats), then columns, as lite.detection.preprocess.resize_bilinear computes it in NumPy.
void ResizeBilinearU8(const uint8_t* src, int64_t h, int64_t w, int64_t c, uint8_t* dst, int64_t oh, int64_t ow);

}  // namespace lite
