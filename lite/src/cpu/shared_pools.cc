#include "cpu/shared_pools.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>

namespace lite {

void RunOnSharedPool(int threads, const std::function<void(ThreadPool*)>& fn) {
  struct Pool {
    std::mutex busy;
    std::unique_ptr<ThreadPool> pool;
  };
  static std::mutex registry_lock;
  static std::map<int, std::unique_ptr<Pool>> pools;
  threads = std::max(1, threads);
  Pool* entry;
  {
    std::lock_guard<std::mutex> lock(registry_lock);
    auto& slot = pools[threads];
    if (!slot) {
      slot = std::make_unique<Pool>();
      slot->pool = std::make_unique<ThreadPool>(threads);
    }
    entry = slot.get();
  }
  std::lock_guard<std::mutex> lock(entry->busy);
  fn(entry->pool.get());
}

}  // namespace lite
