// The .ms container: a fixed 64-byte header, the FlatBuffers graph, then a 64-byte aligned weight section.
// docs/format.md describes the layout and the versioning rules.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace lite {

constexpr char kMsMagic[8] = {'M', 'S', 'L', 'I', 'T', 'E', '\x1a', '\n'};
constexpr uint16_t kMsFormatMajor = 1;   // a reader rejects any other major version
constexpr uint16_t kMsFormatMinor = 16;   // minor versions only add; older readers still load them
constexpr uint32_t kMsHeaderSize = 64;
constexpr uint64_t kMsWeightAlignment = 64;

// On-disk header, little-endian.
struct MsHeader {
  char magic[8];
  uint16_t version_major;
  uint16_t version_minor;
  uint32_t header_size;
  uint64_t graph_offset;
  uint64_t graph_size;
  uint64_t weights_offset;
  uint64_t weights_size;
  uint32_t graph_crc32;     // CRC-32 (IEEE) of the graph bytes
  uint32_t flags;           // reserved, 0
  uint64_t reserved;
};
static_assert(sizeof(MsHeader) == kMsHeaderSize, "header layout");

uint32_t Crc32(const uint8_t* data, size_t size);

// A read-only memory map of a whole file, unmapped on destruction.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);   // throws ModelFormatError / InvalidArgument
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Validates the header against the file size and returns it. Throws ModelFormatError.
MsHeader ParseHeader(const uint8_t* data, size_t size, const std::string& path);

}  // namespace lite
