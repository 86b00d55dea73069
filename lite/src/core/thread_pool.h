// A persistent pool of worker threads; the calling thread takes part in every ParallelFor.
// Workers spin briefly for the next job before sleeping, so back-to-back small operators do not pay
// a futex wake-up each (dispatch costs a few microseconds). Each thread has a home share of every job's chunks
// (the same share every time, so consecutive layers split alike keep their data in that thread's caches), and
// chunks are claimed, not assigned: a thread done with its share takes chunks from the back of another's, so a
// worker that wakes late (a halted virtual CPU can take milliseconds) finds its share taken and leaves, and the
// caller, which waits only for chunks in progress, never waits for it.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace lite {

// The CPUs this process may run on (its affinity mask; 0..hardware_concurrency-1 where there is none).
std::vector<int> UsableCpus();

// The cores a pool's workers are pinned to for Context's affinity settings: the core list given, or for mode 1 the
// usable CPUs in order, for mode 2 reversed; empty for mode 0 without a list.
std::vector<int> AffinityCores(int thread_affinity_mode, const std::vector<int>& core_list);

class ThreadPool {
 public:
  // thread_num counts the caller: thread_num = 1 runs everything inline with no worker threads.
  // core_list (optional): worker i (the caller being 0) is pinned to core_list[i % size]; bind_cores without a list
  // pins worker i to CPU i.
  explicit ThreadPool(int thread_num, bool bind_cores = false, const std::vector<int>& core_list = {});
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) over [0, n) in chunks of at least `grain` items; returns when all are done.
  // An exception thrown by fn is rethrown here (the first one wins).
  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void WorkerLoop(int slot);
  void KeepOffCallerCpu(int& avoided) const;
  void RunChunks(uint64_t job, int slot);
  int64_t Claim(int slot, uint64_t job, bool own);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
  // Current job: written before claims_ publish it, read only by whoever claims one of its chunks (the job
  // cannot change while a claimed chunk is unfinished).
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, grain_ = 1, grains_ = 0, chunks_ = 0;   // chunk c: grains [c grains_ / chunks_, (c + 1) ...)
  // Per thread: job id (24 bits) | end (20) | next unclaimed chunk (20) of its range, one word, so a claim is one
  // compare-exchange that fails for a late worker of an earlier job. Own cache line each.
  struct alignas(64) Slot {
    std::atomic<uint64_t> word{0};
  };
  std::unique_ptr<Slot[]> claims_;
  std::atomic<int64_t> pending_{0};   // chunks of the current job not yet finished
  std::vector<int> allowed_cpus_;      // this process's CPUs where workers keep off the caller's (else empty)
  std::atomic<int> caller_cpu_{-1};    // the CPU the caller of the current job runs on
  std::mutex error_mu_;
  std::exception_ptr error_;
};

}  // namespace lite
