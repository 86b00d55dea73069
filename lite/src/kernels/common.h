// Helpers shared by the CPU kernels.
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/kernel.h"
#include "core/thread_pool.h"

namespace lite {

// A constant's packed form under `key` (the packing and its parameters), an object made in place by `make()`
// (returning its std::shared_ptr<const T>) the first time, then the same object for every plan and kernel that asks,
// in this model and the models sharing its weights (TensorRec::packed). The object must be immutable once made (its
// Run const): several workers may run it at once.
template <typename T, typename Make>
std::shared_ptr<const T> SharedObject(TensorRec& t, const std::string& key, Make&& make) {
  if (!t.packed) t.packed = std::make_shared<PackedForms>();   // not a constant of a loaded file: its own
  std::lock_guard<std::mutex> lock(t.packed->mu);
  std::shared_ptr<const void>& slot = t.packed->forms[key];
  if (!slot) slot = std::shared_ptr<const T>(make());
  return std::static_pointer_cast<const T>(slot);
}

// The same for a packed value: `make()` returns the T itself.
template <typename T, typename Make>
std::shared_ptr<const T> SharedPacked(TensorRec& t, const std::string& key, Make&& make) {
  return SharedObject<T>(t, key, [&] { return std::make_shared<const T>(make()); });
}

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

// fn over the plan on the pool: by rows, or, when there are fewer rows than twice the threads (a tensor and
// a scalar coalesce into one long row), by pieces of rows, so no thread idles. min_elems: the least work
// worth a task.
template <typename Fn>
void ParallelForEachRow(ThreadPool* pool, const BroadcastPlan& plan, int64_t min_elems, Fn&& fn) {
  const int64_t threads = pool ? pool->size() : 1;
  if (threads <= 1 || plan.rows >= 2 * threads || plan.inner < 2 * min_elems) {
    const int64_t grain = std::max<int64_t>(1, min_elems / std::max<int64_t>(1, plan.inner));
    if (!pool) return ForEachRow(plan, 0, plan.rows, fn);
    pool->ParallelFor(plan.rows, grain, [&](int64_t rb, int64_t re) { ForEachRow(plan, rb, re, fn); });
    return;
  }
  const int64_t pieces = std::min<int64_t>(2 * threads, plan.inner / min_elems);
  const int64_t len = (plan.inner + pieces - 1) / pieces;
  pool->ParallelFor(plan.rows * pieces, 1, [&](int64_t tb, int64_t te) {
    std::vector<int64_t> shifted(plan.strides.size());
    for (int64_t t = tb; t < te; ++t) {
      const int64_t r = t / pieces, i0 = (t % pieces) * len, i1 = std::min(plan.inner, i0 + len);
      if (i0 >= i1) continue;
      ForEachRow(plan, r, r + 1, [&](int64_t out, const int64_t* off, const int64_t* st, int64_t) {
        for (size_t o = 0; o < shifted.size(); ++o) shifted[o] = off[o] + i0 * st[o];
        fn(out + i0, shifted.data(), st, i1 - i0);
      });
    }
  });
}

}  // namespace lite
