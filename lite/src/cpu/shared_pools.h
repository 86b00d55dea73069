// Thread pools for library entry points called without a Model (lite_boost's operators): one per thread count,
// created on first use and kept; calls on the same pool are serialised.
#pragma once
#include <functional>

#include "core/thread_pool.h"

namespace lite {

void RunOnSharedPool(int threads, const std::function<void(ThreadPool*)>& fn);

}  // namespace lite
