// Helpers shared by the CPU kernels.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/kernel.h"

namespace lite {

// Normalises a possibly negative axis into [0, rank); throws through the kernel's Fail otherwise.
inline bool NormalizeAxis(int64_t& axis, int64_t rank) {
  if (axis < -rank || axis >= rank) return false;
  if (axis < 0) axis += rank;
  return true;
}

// NumPy broadcasting of several shapes; returns false when they are incompatible.
bool BroadcastShapes(const std::vector<const Shape*>& shapes, Shape& out);

// Row-major strides of `shape`.
std::vector<int64_t> Strides(const Shape& shape);

// Iterates an output of shape `out` whose operands are broadcast to it. For each run of the
// innermost (coalesced) dimension calls fn(out_offset, operand_offsets, operand_inner_strides, length).
// Operand inner strides are 0 (broadcast) or 1. Rows are split across the pool.
struct BroadcastPlan {
  std::vector<int64_t> dims;                      // coalesced output dims, last is the inner run
  std::vector<std::vector<int64_t>> strides;      // per operand, per coalesced dim (0 = broadcast)
  int64_t rows = 1, inner = 1;
};
BroadcastPlan MakeBroadcastPlan(const Shape& out, const std::vector<const Shape*>& operands);

// Calls fn(T{}) with T the unsigned integer type as wide as one element of `dtype` (data movement).
template <typename Fn>
void BySize(DataType dtype, Fn&& fn) {
  switch (DataTypeSize(dtype)) {
    case 1: return fn(uint8_t{});
    case 2: return fn(uint16_t{});
    case 4: return fn(uint32_t{});
    case 8: return fn(uint64_t{});
    default: throw InvalidArgument(std::string("unsupported element type ") + DataTypeName(dtype));
  }
}

// Calls fn(T{}) with T the arithmetic type of `dtype` (float32, int64, int32).
template <typename Fn>
void ByNumeric(DataType dtype, Fn&& fn) {
  switch (dtype) {
    case DataType::kFloat32: return fn(float{});
    case DataType::kInt64: return fn(int64_t{});
    case DataType::kInt32: return fn(int32_t{});
    default: throw InvalidArgument(std::string("unsupported dtype ") + DataTypeName(dtype));
  }
}

template <typename Fn>
void ForEachRow(const BroadcastPlan& plan, int64_t row_begin, int64_t row_end, Fn&& fn) {
  const size_t nops = plan.strides.size();
  const size_t nd = plan.dims.size();
  std::vector<int64_t> offs(nops), inner(nops);
  for (size_t o = 0; o < nops; ++o) inner[o] = nd ? plan.strides[o][nd - 1] : 0;
  for (int64_t r = row_begin; r < row_end; ++r) {
    int64_t rem = r;
    for (size_t o = 0; o < nops; ++o) offs[o] = 0;
    for (size_t d = nd - 1; d-- > 0;) {   // decode the row index over the outer dims
      const int64_t idx = rem % plan.dims[d];
      rem /= plan.dims[d];
      for (size_t o = 0; o < nops; ++o) offs[o] += idx * plan.strides[o][d];
    }
    fn(r * plan.inner, offs.data(), inner.data(), plan.inner);
  }
}

}  // namespace lite
