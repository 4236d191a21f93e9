// probes.h — machine probes for benchmarks: memory read bandwidth and peak
// arithmetic throughput, so kernel speed can be stated as a fraction of what
// this machine can deliver, measured in the same run.
#pragma once

#include <cstddef>

#include "threadpool.h"

namespace lp {

// Reads a buffer of `nbytes` (allocated and touched once, larger than the
// caches) `n_reps` times with all pool threads, each summing its own slice
// with wide loads. Returns the median GB/s (1e9 bytes/s) over the repetitions.
double measure_read_bandwidth(size_t nbytes, int n_reps, thread_pool& pool);

// Peak arithmetic throughput with all pool threads, in GFLOP/s (1e9
// operations/s; a multiply-add counts as 2): kind "f32_fma" (vector FMA,
// widest vectors of the best ISA) or "i8_dot" (int8 dot products: VNNI
// dpbusd on AVX-512, maddubs+madd on AVX2). Measured with many independent
// accumulator chains so latency does not limit it.
double measure_peak_gflops(const char* kind, thread_pool& pool);

}  // namespace lp
