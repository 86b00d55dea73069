#include "format/ms_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "lite/errors.h"

namespace lite {

namespace {
std::array<uint32_t, 256> MakeCrcTable() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    t[i] = c;
  }
  return t;
}
}  // namespace

uint32_t Crc32(const uint8_t* data, size_t size) {
  static const std::array<uint32_t, 256> table = MakeCrcTable();
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) c = table[(c ^ data[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

MappedFile::MappedFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw InvalidArgument("cannot open model file '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw InvalidArgument("'" + path + "' is not a regular file");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ == 0) {
    ::close(fd);
    throw ModelFormatError("model file '" + path + "' is empty");
  }
  void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) throw InvalidArgument("cannot mmap '" + path + "': " + std::strerror(errno));
  data_ = static_cast<const uint8_t*>(p);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

MsHeader ParseHeader(const uint8_t* data, size_t size, const std::string& path) {
  auto fail = [&](const std::string& why) {
    return ModelFormatError("invalid .ms file '" + path + "': " + why);
  };
  if (size < kMsHeaderSize) throw fail("file is " + std::to_string(size) + " bytes, smaller than the header");
  MsHeader h;
  std::memcpy(&h, data, sizeof(h));
  static const char kEncryptedMagic[8] = {'M', 'S', 'L', 'E', 'N', 'C', '0', '1'};   // lite/encryption.py
  if (size >= sizeof(kEncryptedMagic) && std::memcmp(data, kEncryptedMagic, sizeof(kEncryptedMagic)) == 0)
    throw fail("the model is encrypted (AES-GCM); build it with its key through the Python API: "
               "Model.build_from_file(..., dec_key=KEY) or ModelParallelRunner.build_from_file(..., dec_key=KEY)");
  if (std::memcmp(h.magic, kMsMagic, sizeof(kMsMagic)) != 0) throw fail("bad magic (not a .ms model)");
  if (h.version_major != kMsFormatMajor)
    throw fail("format version " + std::to_string(h.version_major) + "." + std::to_string(h.version_minor) +
               " is not supported (this runtime reads " + std::to_string(kMsFormatMajor) + ".x)");
  if (h.header_size != kMsHeaderSize) throw fail("bad header size");
  const uint64_t fsize = size;
  if (h.graph_offset < kMsHeaderSize || h.graph_offset > fsize || h.graph_size > fsize - h.graph_offset)
    throw fail("graph section [" + std::to_string(h.graph_offset) + ", +" + std::to_string(h.graph_size) +
               ") lies outside the " + std::to_string(fsize) + "-byte file (truncated?)");
  if (h.graph_size == 0) throw fail("empty graph section");
  if (h.weights_offset % kMsWeightAlignment != 0) throw fail("weight section is not 64-byte aligned");
  if (h.weights_offset > fsize || h.weights_size > fsize - h.weights_offset)
    throw fail("weight section [" + std::to_string(h.weights_offset) + ", +" + std::to_string(h.weights_size) +
               ") lies outside the " + std::to_string(fsize) + "-byte file (truncated?)");
  if (h.weights_size && h.weights_offset < h.graph_offset + h.graph_size) throw fail("sections overlap");
  if (Crc32(data + h.graph_offset, h.graph_size) != h.graph_crc32)
    throw fail("graph checksum mismatch (file corrupted)");
  return h;
}

}  // namespace lite
