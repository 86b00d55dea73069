#include "lite/types.h"

#include <limits>

#include "lite/errors.h"

namespace lite {

size_t DataTypeSize(DataType t) {
  switch (t) {
    case DataType::kFloat32: return 4;
    case DataType::kFloat16: return 2;
    case DataType::kBFloat16: return 2;
    case DataType::kInt8: return 1;
    case DataType::kUInt8: return 1;
    case DataType::kInt16: return 2;
    case DataType::kInt32: return 4;
    case DataType::kInt64: return 8;
    case DataType::kBool: return 1;
    case DataType::kFloat64: return 8;
    case DataType::kUInt16: return 2;
    case DataType::kUInt32: return 4;
    case DataType::kUInt64: return 8;
    default: return 0;
  }
}

const char* DataTypeName(DataType t) {
  switch (t) {
    case DataType::kFloat32: return "float32";
    case DataType::kFloat16: return "float16";
    case DataType::kBFloat16: return "bfloat16";
    case DataType::kInt8: return "int8";
    case DataType::kUInt8: return "uint8";
    case DataType::kInt16: return "int16";
    case DataType::kInt32: return "int32";
    case DataType::kInt64: return "int64";
    case DataType::kBool: return "bool";
    case DataType::kFloat64: return "float64";
    case DataType::kUInt16: return "uint16";
    case DataType::kUInt32: return "uint32";
    case DataType::kUInt64: return "uint64";
    default: return "unknown";
  }
}

const char* FormatName(Format f) {
  switch (f) {
    case Format::kNCHW: return "NCHW";
    case Format::kNHWC: return "NHWC";
    default: return "DEFAULT";
  }
}

std::string ShapeToString(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

int64_t ShapeNumel(const Shape& s) {
  // An empty tensor's other dims must multiply within int64 too: kernels derive strides and offsets from every dim
  // (a hostile [0, 2^40, 2^31 - 1] input had Slice's strides overflow behind a count of 0).
  int64_t span = 1;
  bool empty = false;
  for (int64_t d : s) {
    if (d < 0) throw InvalidArgument("shape " + ShapeToString(s) + " has a negative or unresolved dim");
    if (d == 0) {
      empty = true;
      continue;
    }
    if (span > std::numeric_limits<int64_t>::max() / d)
      throw InvalidArgument("shape " + ShapeToString(s) + " has too many elements");
    span *= d;
  }
  return empty ? 0 : span;
}

}  // namespace lite
