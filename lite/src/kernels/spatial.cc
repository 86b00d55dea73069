#include "kernels/spatial.h"

namespace lite {

std::string ResolveSpatial(const std::vector<int64_t>& in_dims, const std::vector<int64_t>& kernel,
                           const flatbuffers::Vector<int64_t>* strides, const flatbuffers::Vector<int64_t>* pads,
                           const flatbuffers::Vector<int64_t>* dilations, ms_schema::AutoPad auto_pad,
                           bool ceil_mode, SpatialParams& p) {
  const size_t k = in_dims.size();
  auto get = [&](const flatbuffers::Vector<int64_t>* v, size_t expect, int64_t dflt, std::vector<int64_t>& out,
                 const char* name) -> std::string {
    out.assign(expect, dflt);
    if (!v || v->size() == 0) return "";
    if (v->size() != expect)
      return std::string(name) + " has " + std::to_string(v->size()) + " values, expected " + std::to_string(expect);
    for (size_t i = 0; i < expect; ++i) out[i] = v->Get(static_cast<flatbuffers::uoffset_t>(i));
    return "";
  };
  std::string err;
  if (kernel.size() != k)
    return "kernel_shape has " + std::to_string(kernel.size()) + " values, expected " + std::to_string(k);
  p.kernel = kernel;
  if (!(err = get(strides, k, 1, p.strides, "strides")).empty()) return err;
  if (!(err = get(dilations, k, 1, p.dilations, "dilations")).empty()) return err;
  std::vector<int64_t> pads_all;
  if (!(err = get(pads, 2 * k, 0, pads_all, "pads")).empty()) return err;
  p.pad_begin.assign(pads_all.begin(), pads_all.begin() + k);
  p.pad_end.assign(pads_all.begin() + k, pads_all.end());
  p.out.assign(k, 0);
  for (size_t i = 0; i < k; ++i) {
    if (p.kernel[i] < 1 || p.kernel[i] > (1 << 20)) return "kernel size must be in [1, 2^20]";
    if (p.strides[i] < 1 || p.strides[i] > (1 << 20)) return "strides must be in [1, 2^20]";
    if (p.dilations[i] < 1 || p.dilations[i] > (1 << 20)) return "dilations must be in [1, 2^20]";
    if (p.pad_begin[i] < 0 || p.pad_end[i] < 0 || p.pad_begin[i] > (1 << 20) || p.pad_end[i] > (1 << 20))
      return "pads must be in [0, 2^20]";
    const int64_t eff = (p.kernel[i] - 1) * p.dilations[i] + 1;
    const int64_t in = in_dims[i];
    if (auto_pad == ms_schema::AutoPad::SAME_UPPER || auto_pad == ms_schema::AutoPad::SAME_LOWER) {
      p.out[i] = (in + p.strides[i] - 1) / p.strides[i];
      const int64_t total = std::max<int64_t>(0, (p.out[i] - 1) * p.strides[i] + eff - in);
      const int64_t small = total / 2;
      p.pad_begin[i] = auto_pad == ms_schema::AutoPad::SAME_UPPER ? small : total - small;
      p.pad_end[i] = total - p.pad_begin[i];
      continue;
    }
    if (auto_pad == ms_schema::AutoPad::VALID) p.pad_begin[i] = p.pad_end[i] = 0;
    const int64_t span = in + p.pad_begin[i] + p.pad_end[i] - eff;
    // With ceil_mode a window larger than the padded input still makes one output, over what it covers
    // (ceil((in + pads - eff) / stride) + 1 = 1 for a shortfall below one stride: EfficientNet's pooler).
    if (span < 0 && !(ceil_mode && span > -p.strides[i]))
      return "kernel (effective size " + std::to_string(eff) + ") is larger than the padded input (" +
             std::to_string(in + p.pad_begin[i] + p.pad_end[i]) + ")";
    p.out[i] = span < 0 ? 1 : (ceil_mode ? (span + p.strides[i] - 1) / p.strides[i] : span / p.strides[i]) + 1;
    // ONNX: with ceil_mode the last window must start inside the input or left padding.
    if (ceil_mode && (p.out[i] - 1) * p.strides[i] >= in + p.pad_begin[i]) --p.out[i];
  }
  return "";
}

}  // namespace lite
