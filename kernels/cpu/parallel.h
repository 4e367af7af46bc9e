// A small persistent thread pool for the CPU kernels (matrix work uses every core).
#pragma once
#include <cstdint>
#include <functional>

namespace hypic::cpu {

// Splits [0, n) into contiguous ranges and runs fn(begin, end) on the pool; returns when all are done.
// Ranges are at least `grain` long. Nested calls run inline on the calling thread.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

// Number of worker threads (default: hardware concurrency, or HYPIC_THREADS if set).
int num_threads();
void set_num_threads(int n);

}  // namespace hypic::cpu
