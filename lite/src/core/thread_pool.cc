#include "core/thread_pool.h"

#include <algorithm>
#include <cstdlib>
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
constexpr int kSpinIterations = 20000;   // ~0.1-0.5 ms of spinning before a worker sleeps
// Spinning threads yield the core this often: where the scheduler has put a worker and the caller on one core
// (seen after idle periods on a 2-vCPU VM), a spinner that never yields holds the core the other needs for the
// rest of its time slice (MobileNetV2 runs of 5-7 ms instead of 1.7 at two threads; with it, none).
constexpr int kSpinsPerYield = 64;
inline void Spin(int i) {
  CpuRelax();
  if (i % kSpinsPerYield == kSpinsPerYield - 1) std::this_thread::yield();
}
// LITE_KEEP_OFF_CALLER=0 turns the workers' keep-off-the-caller's-CPU affinity off (for comparisons).
bool KeepOffCallerEnabled() {
  const char* v = std::getenv("LITE_KEEP_OFF_CALLER");
  return !(v && v[0] == '0');
}
}  // namespace

std::vector<int> UsableCpus() {
  std::vector<int> cpus;
#ifdef __linux__
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
#endif
  if (cpus.empty())
    for (unsigned c = 0; c < std::max(1u, std::thread::hardware_concurrency()); ++c) cpus.push_back(static_cast<int>(c));
  return cpus;
}

std::vector<int> AffinityCores(int thread_affinity_mode, const std::vector<int>& core_list) {
  if (!core_list.empty()) return core_list;
  if (thread_affinity_mode == 0) return {};
  std::vector<int> cores = UsableCpus();
  if (thread_affinity_mode == 2) std::reverse(cores.begin(), cores.end());
  return cores;
}

ThreadPool::ThreadPool(int thread_num, bool bind_cores, const std::vector<int>& core_list) {
  if (!core_list.empty()) bind_cores = true;
  const int workers = std::max(0, thread_num - 1);
  claims_ = std::make_unique<Slot[]>(static_cast<size_t>(workers) + 1);
#ifdef __linux__
  // Workers keep off the caller's CPU where there are CPUs enough (see WorkerLoop), unless pinned.
  cpu_set_t allowed;
  if (!bind_cores && workers > 0 && sched_getaffinity(0, sizeof(allowed), &allowed) == 0 &&
      CPU_COUNT(&allowed) >= thread_num && KeepOffCallerEnabled()) {
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &allowed)) allowed_cpus_.push_back(c);
  }
#endif
  workers_.reserve(workers);
  for (int i = 0; i < workers; ++i) {
    workers_.emplace_back([this, i] { WorkerLoop(i + 1); });
#ifdef __linux__
    if (bind_cores) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(core_list.empty() ? (i + 1) % std::max(1u, std::thread::hardware_concurrency())
                                : core_list[(i + 1) % core_list.size()],
              &set);
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

namespace {
constexpr int kJobShift = 40, kCountShift = 20;
constexpr uint64_t kField = (uint64_t{1} << 20) - 1, kJobMask = (uint64_t{1} << 24) - 1;
}  // namespace

// Claims one chunk of `slot`'s range: the front one for the slot's own thread, the back one for a thief (so the
// owner keeps the start of its range). Returns -1 when the range is empty or holds a later job.
int64_t ThreadPool::Claim(int slot, uint64_t job, bool own) {
  std::atomic<uint64_t>& word = claims_[slot].word;
  for (;;) {
    uint64_t cur = word.load(std::memory_order_acquire);
    if ((cur >> kJobShift) != job) return -1;
    const uint64_t next = cur & kField, end = (cur >> kCountShift) & kField;
    if (next >= end) return -1;
    const uint64_t updated = own ? cur + 1 : cur - (uint64_t{1} << kCountShift);
    if (word.compare_exchange_weak(cur, updated, std::memory_order_acq_rel))
      return static_cast<int64_t>(own ? next : end - 1);
  }
}

void ThreadPool::RunChunks(uint64_t job, int slot) {
  const int slots = size();
  auto run = [&](int64_t chunk) {
    const int64_t b = std::min(n_, chunk * grains_ / chunks_ * grain_);
    const int64_t e = std::min(n_, (chunk + 1) * grains_ / chunks_ * grain_);
    try {
      (*fn_)(b, e);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mu_);
      if (!error_) error_ = std::current_exception();
    }
    pending_.fetch_sub(1, std::memory_order_release);
  };
  for (int64_t c; (c = Claim(slot, job, true)) >= 0;) run(c);
  for (int k = 1; k < slots; ++k) {
    const int victim = (slot + k) % slots;
    for (int64_t c; (c = Claim(victim, job, false)) >= 0;) run(c);
  }
}

// A worker woken from its sleep may be placed on the CPU of the thread that woke it (seen on a 2-vCPU VM: the
// worker then shares the caller's CPU and runs only when the caller waits, so a whole run goes at one-thread speed,
// for milliseconds, until the scheduler moves one of them). Where the process has a CPU for every thread, a worker
// excludes the caller's current CPU from its own affinity (only when that CPU changes: one system call), so it runs
// beside the caller; with bind_cores the workers are pinned instead.
void ThreadPool::KeepOffCallerCpu(int& avoided) const {
#ifdef __linux__
  if (allowed_cpus_.empty()) return;
  const int caller = caller_cpu_.load(std::memory_order_relaxed);
  if (caller < 0 || caller == avoided) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : allowed_cpus_)
    if (c != caller) CPU_SET(c, &set);
  if (CPU_COUNT(&set) > 0) pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
  avoided = caller;
#else
  (void)avoided;
#endif
}

void ThreadPool::WorkerLoop(int slot) {
  uint64_t seen = 0;
  int avoided_cpu = -1;   // the caller CPU this worker's affinity excludes
  for (;;) {
    bool have_job = false;
    for (int i = 0; i < kSpinIterations && !have_job; ++i) {
      if (stop_.load(std::memory_order_relaxed)) return;
      have_job = generation_.load(std::memory_order_acquire) != seen;
      if (!have_job) Spin(i);
    }
    if (!have_job) {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_.load() || generation_.load(std::memory_order_acquire) != seen; });
      if (stop_.load()) return;
    }
    seen = generation_.load(std::memory_order_acquire);
    KeepOffCallerCpu(avoided_cpu);
    RunChunks(seen & kJobMask, slot);
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
  // A few chunks per thread balances uneven work at little cost (one compare-exchange per chunk). The grains are
  // dealt out evenly (sizes differ by at most one grain), and up to 16 grains a thread every grain is a chunk: 14
  // GEMM column blocks cut into chunks of 2 made 7 chunks, 3 owned by one thread and 4 by the other (ResNet-50's
  // 56x56 expansions ran at 1.72x their one-thread speed at two threads; 2.0x dealt evenly).
  const int64_t grains = (n + grain - 1) / grain;
  const int64_t chunks = grains <= 16 * int64_t{threads} ? grains : int64_t{threads} * 4;
  fn_ = &fn;
  n_ = n;
  grain_ = grain;
  grains_ = grains;
  chunks_ = chunks;
  const uint64_t num_chunks = static_cast<uint64_t>(chunks);
  const uint64_t job = (generation_.load(std::memory_order_relaxed) + 1) & kJobMask;
  pending_.store(static_cast<int64_t>(num_chunks), std::memory_order_relaxed);
#ifdef __linux__
  if (!allowed_cpus_.empty()) caller_cpu_.store(sched_getcpu(), std::memory_order_relaxed);   // published below
#endif
  // Thread s (the caller is 0) owns chunks [s * num_chunks / threads, (s + 1) * num_chunks / threads): the same
  // part of every job, so a layer split like the one before it reads what its own thread wrote (on a VM whose two
  // vCPUs may sit on different L3 caches, data the other thread wrote is a cross-cache transfer). Idle threads
  // take the back of another's range.
  for (int s = 0; s < threads; ++s) {
    const uint64_t b = num_chunks * s / threads, e = num_chunks * (s + 1) / threads;
    claims_[s].word.store((job << kJobShift) | (e << kCountShift) | b, std::memory_order_release);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);   // pairs with the sleepers' predicate check
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  RunChunks(job, 0);
  // Only chunks another thread claimed and is still running are waited for.
  for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins) {
    if (spins < kSpinIterations) {
      Spin(spins);
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
