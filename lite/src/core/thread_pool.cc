#include "core/thread_pool.h"

#include <algorithm>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#ifdef __linux__
#include <pthread.h>
#include <sched.h>
#endif

namespace lite {

namespace {
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}
constexpr int kSpinIterations = 20000;   // ~50-100 us of spinning before a worker sleeps
}  // namespace

ThreadPool::ThreadPool(int thread_num, bool bind_cores) {
  const int workers = std::max(0, thread_num - 1);
  workers_.reserve(workers);
  for (int i = 0; i < workers; ++i) {
    workers_.emplace_back([this] { WorkerLoop(); });
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
    stop_.store(true);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::RunChunks() {
  for (;;) {
    const int64_t c = next_chunk_.fetch_add(1, std::memory_order_relaxed);
    if (c >= num_chunks_) return;
    const int64_t b = c * chunk_, e = std::min(n_, b + chunk_);
    try {
      (*fn_)(b, e);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mu_);
      if (!error_) error_ = std::current_exception();
    }
  }
}

void ThreadPool::WorkerLoop() {
  uint64_t seen = 0;
  for (;;) {
    bool have_job = false;
    for (int i = 0; i < kSpinIterations && !have_job; ++i) {
      if (stop_.load(std::memory_order_relaxed)) return;
      have_job = generation_.load(std::memory_order_acquire) != seen;
      if (!have_job) CpuRelax();
    }
    if (!have_job) {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_.load() || generation_.load(std::memory_order_acquire) != seen; });
      if (stop_.load()) return;
    }
    seen = generation_.load(std::memory_order_acquire);
    RunChunks();
    active_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int threads = size();
  if (threads == 1 || n <= grain) {
    fn(0, n);
    return;
  }
  // A few chunks per thread balances uneven work at little cost (one atomic add per chunk).
  const int64_t chunks = std::min<int64_t>((n + grain - 1) / grain, threads * 4);
  fn_ = &fn;
  n_ = n;
  chunk_ = (n + chunks - 1) / chunks;
  num_chunks_ = (n + chunk_ - 1) / chunk_;
  next_chunk_.store(0, std::memory_order_relaxed);
  active_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);   // pairs with the sleepers' predicate check
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  RunChunks();
  for (int spins = 0; active_.load(std::memory_order_acquire) != 0; ++spins) {
    if (spins < kSpinIterations) {
      CpuRelax();
    } else {
      std::this_thread::yield();
    }
  }
  fn_ = nullptr;
  std::exception_ptr err;
  {
    std::lock_guard<std::mutex> lock(error_mu_);
    std::swap(err, error_);
  }
  if (err) std::rethrow_exception(err);
}

}  // namespace lite
