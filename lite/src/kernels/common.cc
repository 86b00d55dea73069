#include "kernels/common.h"

#include <algorithm>

namespace lite {

bool BroadcastShapes(const std::vector<const Shape*>& shapes, Shape& out) {
  size_t rank = 0;
  for (const Shape* s : shapes) rank = std::max(rank, s->size());
  out.assign(rank, 1);
  for (const Shape* s : shapes) {
    const size_t off = rank - s->size();
    for (size_t i = 0; i < s->size(); ++i) {
      const int64_t d = (*s)[i];
      int64_t& o = out[off + i];
      if (d == o || d == 1) continue;
      if (o == 1) {
        o = d;
        continue;
      }
      return false;
    }
  }
  return true;
}

std::vector<int64_t> Strides(const Shape& shape) {
  std::vector<int64_t> s(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc *= shape[i];
  }
  return s;
}

BroadcastPlan MakeBroadcastPlan(const Shape& out, const std::vector<const Shape*>& operands) {
  const size_t rank = out.size();
  const size_t nops = operands.size();
  // Per operand strides aligned to the output rank (0 where broadcast).
  std::vector<std::vector<int64_t>> full(nops, std::vector<int64_t>(rank, 0));
  for (size_t o = 0; o < nops; ++o) {
    const Shape& s = *operands[o];
    const size_t off = rank - s.size();
    int64_t acc = 1;
    for (size_t i = s.size(); i-- > 0;) {
      full[o][off + i] = s[i] == 1 ? 0 : acc;
      acc *= s[i];
    }
  }
  BroadcastPlan plan;
  plan.strides.assign(nops, {});
  // Coalesce neighbouring dims when every operand is contiguous across them; drop size-1 dims.
  for (size_t i = 0; i < rank; ++i) {
    if (out[i] == 1) continue;
    bool merge = !plan.dims.empty();
    for (size_t o = 0; merge && o < nops; ++o)
      merge = plan.strides[o].back() == full[o][i] * out[i];
    if (merge) {
      plan.dims.back() *= out[i];
      for (size_t o = 0; o < nops; ++o) plan.strides[o].back() = full[o][i];
    } else {
      plan.dims.push_back(out[i]);
      for (size_t o = 0; o < nops; ++o) plan.strides[o].push_back(full[o][i]);
    }
  }
  if (plan.dims.empty()) {
    plan.dims.push_back(1);
    for (size_t o = 0; o < nops; ++o) plan.strides[o].push_back(0);
  }
  plan.inner = plan.dims.back();
  plan.rows = 1;
  for (size_t i = 0; i + 1 < plan.dims.size(); ++i) plan.rows *= plan.dims[i];
  for (int64_t d : out)
    if (d == 0) plan.rows = 0;
  return plan;
}

}  // namespace lite
