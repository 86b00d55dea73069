// A persistent pool of worker threads; the calling thread takes part in every ParallelFor.
// Workers spin briefly for the next job before sleeping, so back-to-back small operators do not pay
// a futex wake-up each (dispatch costs a few microseconds). Chunks are claimed, not assigned: a worker that
// wakes late (a halted virtual CPU can take milliseconds) finds them taken and leaves, and the caller, which
// waits only for chunks in progress, never waits for it.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace lite {

class ThreadPool {
 public:
  // thread_num counts the caller: thread_num = 1 runs everything inline with no worker threads.
  explicit ThreadPool(int thread_num, bool bind_cores = false);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) over [0, n) in chunks of at least `grain` items; returns when all are done.
  // An exception thrown by fn is rethrown here (the first one wins).
  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void WorkerLoop();
  void RunChunks(uint64_t job);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
  // Current job: written before claim_ publishes it, read only by whoever claims one of its chunks (the job
  // cannot change while a claimed chunk is unfinished).
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, chunk_ = 0;
  // Job id (24 bits) | chunk count (20) | next unclaimed chunk (20): one word, so a claim is one compare-exchange
  // that fails for a late worker of an earlier job.
  std::atomic<uint64_t> claim_{0};
  std::atomic<int64_t> pending_{0};   // chunks of the current job not yet finished
  std::mutex error_mu_;
  std::exception_ptr error_;
};

}  // namespace lite
