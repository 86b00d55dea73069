#include "cpu/buffer_cache.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <new>

namespace lite {

struct BufferCache::Pool {
  std::mutex mu;
  std::multimap<size_t, void*> free_blocks;   // rounded size -> block
  size_t held = 0;
  ~Pool() {
    for (auto& [size, p] : free_blocks) std::free(p);
  }
};

BufferCache::BufferCache() : pool_(std::make_shared<Pool>()) {}

std::shared_ptr<void> BufferCache::Get(size_t bytes) {
  const size_t rounded = bytes ? (bytes + 63) / 64 * 64 : 64;
  void* p = nullptr;
  if (rounded >= kMinCachedBytes) {
    std::lock_guard<std::mutex> lock(pool_->mu);
    auto it = pool_->free_blocks.find(rounded);
    if (it != pool_->free_blocks.end()) {
      p = it->second;
      pool_->free_blocks.erase(it);
      pool_->held -= rounded;
    }
  }
  if (!p) p = std::aligned_alloc(64, rounded);
  if (!p) throw std::bad_alloc();
  std::shared_ptr<Pool> pool = pool_;
  return std::shared_ptr<void>(p, [pool, rounded](void* q) {
    if (rounded >= kMinCachedBytes) {
      std::lock_guard<std::mutex> lock(pool->mu);
      if (pool->held + rounded <= kMaxCachedBytes) {
        pool->free_blocks.emplace(rounded, q);
        pool->held += rounded;
        return;
      }
    }
    std::free(q);
  });
}

size_t BufferCache::cached_bytes() const {
  std::lock_guard<std::mutex> lock(pool_->mu);
  return pool_->held;
}

}  // namespace lite
