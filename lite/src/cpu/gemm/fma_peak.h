// Measures the single-thread float32 FMA throughput of this CPU with the widest vector ISA the GEMM uses:
// the ceiling any float32 kernel here can reach. Reported by benchmarks next to the GEMM figures.
#pragma once

namespace lite {

// Runs 12 independent FMA chains (enough to cover FMA latency x throughput on current x86 cores) for
// about `seconds`; returns the best GFLOP/s (2 flops per lane per FMA) over several repetitions.
double MeasureFmaPeakGflops(double seconds);

}  // namespace lite
