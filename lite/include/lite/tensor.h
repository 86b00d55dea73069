// Tensors crossing the public API.
#pragma once
#include <memory>
#include <string>

#include "lite/types.h"

namespace lite {

// Static description of a model input or output.
struct TensorInfo {
  std::string name;
  DataType dtype = DataType::kUnknown;
  Shape shape;                  // -1 for a dynamic dim (until resized)
  Format format = Format::kDefault;
};

// Borrowed input data: the runtime reads it during Predict and keeps no reference.
struct TensorView {
  DataType dtype = DataType::kUnknown;
  Shape shape;
  const void* data = nullptr;
};

// Caller-owned storage for a result: Predict computes the output straight into it (or copies it there) when its dtype
// and shape are the result's, and refuses the run (InvalidArgument) otherwise. data == nullptr: no storage given.
struct OutputView {
  DataType dtype = DataType::kUnknown;
  Shape shape;
  void* data = nullptr;
};

// An owned result. The buffer is shared so bindings can hand it out without a copy.
struct Tensor {
  TensorInfo info;
  std::shared_ptr<void> buffer;
  size_t nbytes = 0;
  const void* data() const { return buffer.get(); }
};

}  // namespace lite
