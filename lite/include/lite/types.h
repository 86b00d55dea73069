// Element types and layouts shared by the public API and the runtime.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace lite {

// Values match ms_schema::DataType in lite/schema/model.fbs.
enum class DataType : int8_t {
  kUnknown = 0, kFloat32 = 1, kFloat16 = 2, kBFloat16 = 3, kInt8 = 4, kUInt8 = 5,
  kInt16 = 6, kInt32 = 7, kInt64 = 8, kBool = 9, kFloat64 = 10, kUInt16 = 11, kUInt32 = 12, kUInt64 = 13
};

// Values match ms_schema::Format.
enum class Format : int8_t { kDefault = 0, kNCHW = 1, kNHWC = 2 };

using Shape = std::vector<int64_t>;

size_t DataTypeSize(DataType t);          // 0 for kUnknown
const char* DataTypeName(DataType t);     // "float32", "int64", ...
const char* FormatName(Format f);
std::string ShapeToString(const Shape& s);
// Number of elements; throws lite::InvalidArgument on negative dims or overflow (of the nonzero dims' product, also
// in an empty shape).
int64_t ShapeNumel(const Shape& s);

}  // namespace lite
