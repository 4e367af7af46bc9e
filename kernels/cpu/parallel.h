// Parallel loops for the CPU kernels (matrix work uses every core), on oneTBB.
#pragma once
#include <cstdint>
#include <functional>

namespace hypic::cpu {

// Splits [0, n) into contiguous ranges and runs fn(begin, end) in parallel; returns when all are done.
// Ranges are at least `grain` long (one range when n < 2 * grain). A single range, and any call made
// from inside a range of another parallel_for (a nested call), runs inline on the calling thread.
// Safe to call from several threads at once: callers share the workers of one task arena per thread
// count, and idle workers sleep instead of spinning.
// If fn throws, ranges not yet started are skipped and the first exception is rethrown here.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

// Threads per parallel_for (default: hardware concurrency, or HYPIC_THREADS if it is a positive
// integer). set_num_threads clamps n < 1 to 1 and affects later calls from every thread.
int num_threads();
void set_num_threads(int n);

}  // namespace hypic::cpu
