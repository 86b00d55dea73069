// 64-byte aligned host buffers, with large freed ones kept for reuse by size: each predict hands its
// outputs to the caller in fresh buffers, and without reuse every run of a model with a large output
// would page-fault and zero that memory again (the allocator returns big blocks to the OS on free).
#pragma once
#include <cstddef>
#include <memory>

namespace lite {

class BufferCache {
 public:
  // Buffers of at least kMinCachedBytes are recycled, up to kMaxCachedBytes held in total.
  static constexpr size_t kMinCachedBytes = size_t(64) << 10;
  static constexpr size_t kMaxCachedBytes = size_t(64) << 20;

  BufferCache();
  // A buffer of at least `bytes` (64-byte aligned). Freed when the last owner drops it, or kept for reuse.
  std::shared_ptr<void> Get(size_t bytes);
  size_t cached_bytes() const;

 private:
  struct Pool;
  std::shared_ptr<Pool> pool_;   // shared with the deleters, so buffers may outlive the cache
};

}  // namespace lite
