// bandwidth.h — a memory read-bandwidth probe, so benchmarks can state kernel
// speed as a fraction of what this machine's memory can deliver, measured in
// the same run.
#pragma once

#include <cstddef>

#include "threadpool.h"

namespace lp {

// Reads a buffer of `nbytes` (allocated and touched once, larger than the
// caches) `n_reps` times with all pool threads, each summing its own slice
// with wide loads. Returns the median GB/s (1e9 bytes/s) over the repetitions.
double measure_read_bandwidth(size_t nbytes, int n_reps, thread_pool& pool);

}  // namespace lp
