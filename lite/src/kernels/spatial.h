// Output-size arithmetic shared by Conv and the pooling operators.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model_generated.h"

namespace lite {

struct SpatialParams {
  std::vector<int64_t> kernel, strides, dilations, pad_begin, pad_end, out;
};

// Resolves defaults and auto_pad and computes output sizes. Returns an error text, empty on success.
// `kernel` is resolved by the caller (Conv takes it from the weight when the attribute is absent).
std::string ResolveSpatial(const std::vector<int64_t>& in_dims, const std::vector<int64_t>& kernel,
                           const flatbuffers::Vector<int64_t>* strides, const flatbuffers::Vector<int64_t>* pads,
                           const flatbuffers::Vector<int64_t>* dilations, ms_schema::AutoPad auto_pad,
                           bool ceil_mode, SpatialParams& p);

}  // namespace lite
