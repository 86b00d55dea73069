#include "cpu/core_latency.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>
#ifdef __linux__
#include <pthread.h>
#include <sched.h>
#endif

namespace lite {
namespace {

#ifdef __linux__
bool PinCurrentThread(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}
#endif

}  // namespace

double MeasureCoreRoundTripNs(int cpu_a, int cpu_b, int iterations, int rounds) {
#ifdef __linux__
  if (cpu_a < 0 || cpu_b < 0 || cpu_a == cpu_b || iterations <= 0 || rounds <= 0) return -1.0;
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0 || !CPU_ISSET(cpu_a, &allowed) ||
      !CPU_ISSET(cpu_b, &allowed))
    return -1.0;
  alignas(64) std::atomic<int> ball{0};   // 1: the partner's turn, 0: ours; -1 ends the partner
  std::atomic<bool> partner_ok{true};
  std::thread partner([&] {
    if (!PinCurrentThread(cpu_b)) {
      partner_ok.store(false);
      return;
    }
    for (;;) {
      int v;
      while ((v = ball.load(std::memory_order_acquire)) == 0) {
      }
      if (v < 0) return;
      ball.store(0, std::memory_order_release);
    }
  });
  std::vector<double> per_trip;
  cpu_set_t original;
  const bool restore = pthread_getaffinity_np(pthread_self(), sizeof(original), &original) == 0;
  if (PinCurrentThread(cpu_a)) {
    for (int r = 0; r < rounds && partner_ok.load(); ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iterations && partner_ok.load(std::memory_order_relaxed); ++i) {
        ball.store(1, std::memory_order_release);
        while (ball.load(std::memory_order_acquire) != 0 && partner_ok.load(std::memory_order_relaxed)) {
        }
      }
      const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
      per_trip.push_back(ns / iterations);
    }
  }
  ball.store(-1, std::memory_order_release);
  partner.join();
  if (restore) pthread_setaffinity_np(pthread_self(), sizeof(original), &original);
  if (per_trip.empty() || !partner_ok.load()) return -1.0;
  std::sort(per_trip.begin(), per_trip.end());
  return per_trip[per_trip.size() / 2];
#else
  (void)cpu_a, (void)cpu_b, (void)iterations, (void)rounds;
  return -1.0;
#endif
}

}  // namespace lite
