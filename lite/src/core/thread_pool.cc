#include "core/thread_pool.h"

#include <algorithm>
#ifdef __linux__
#include <pthread.h>
#include <sched.h>
#endif

namespace lite {

ThreadPool::ThreadPool(int thread_num, bool bind_cores) {
  int workers = std::max(0, thread_num - 1);
  workers_.reserve(workers);
  for (int i = 0; i < workers; ++i) {
    workers_.emplace_back([this, i] { WorkerLoop(i); });
#ifdef __linux__
    if (bind_cores) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET((i + 1) % std::max(1u, std::thread::hardware_concurrency()), &set);
      pthread_setaffinity_np(workers_.back().native_handle(), sizeof(set), &set);
    }
#endif
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::RunChunks() {
  for (;;) {
    int64_t c;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (next_chunk_ >= num_chunks_) return;
      c = next_chunk_++;
    }
    int64_t b = c * chunk_, e = std::min(n_, b + chunk_);
    try {
      (*fn_)(b, e);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
    }
  }
}

void ThreadPool::WorkerLoop(int) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    RunChunks();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--active_ == 0) done_.notify_one();
    }
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int threads = size();
  if (threads == 1 || n <= grain) {
    fn(0, n);
    return;
  }
  // A few chunks per thread balances uneven work without much locking.
  int64_t chunks = std::min<int64_t>((n + grain - 1) / grain, threads * 4);
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_ = n;
    chunk_ = (n + chunks - 1) / chunks;
    num_chunks_ = (n + chunk_ - 1) / chunk_;
    next_chunk_ = 0;
    active_ = static_cast<int>(workers_.size());
    error_ = nullptr;
    ++generation_;
  }
  wake_.notify_all();
  RunChunks();
  std::exception_ptr err;
  {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return active_ == 0; });
    fn_ = nullptr;
    err = error_;
    error_ = nullptr;
  }
  if (err) std::rethrow_exception(err);
}

}  // namespace lite
