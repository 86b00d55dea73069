// Memory for weights laid out once at load (packed GEMM panels, code panels): asked for in 2 MB pages where the OS
// gives them on request (Linux transparent huge pages in "madvise" mode, a common default). A decode step streams
// every weight byte once; with 4 KB pages that is a TLB miss every 4 KB, and the page walks held two threads' reads
// below what the memory gives (llama.cpp's mapped weights sit in huge pages of the page cache).
#pragma once
#include <cstddef>
#include <vector>

namespace lite {

// Advises the 2 MB-aligned part of [p, p + bytes) to be backed by huge pages; a no-op elsewhere or when refused.
void AdviseHugePages(void* p, size_t bytes);

// v.assign(n, value) with the storage advised before it is first written (the pages are then faulted in huge).
template <typename T>
void AssignWeightStorage(std::vector<T>& v, size_t n, const T& value = T()) {
  v.clear();
  v.shrink_to_fit();
  v.reserve(n);
  AdviseHugePages(v.data(), n * sizeof(T));
  v.assign(n, value);
}

}  // namespace lite
