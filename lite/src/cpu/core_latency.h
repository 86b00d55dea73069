// Measures how far apart two CPUs are for shared data: the round trip of one cache line bounced between threads
// pinned to them. About 80 ns between cores that share an L3 cache on this host; about 400 ns when a VM's two vCPUs
// sit on different L3 caches (or sockets), where every line one thread writes and the other reads crosses between
// them. Multi-threaded timings on such a VM depend on which placement the host chose; benchmarks report it.
#pragma once

namespace lite {

// Median round trip in nanoseconds over `rounds` bursts of `iterations` each, or a negative value where threads
// cannot be pinned (non-Linux), the CPUs are one, or either is not available to this process.
double MeasureCoreRoundTripNs(int cpu_a, int cpu_b, int iterations = 200000, int rounds = 5);

}  // namespace lite
