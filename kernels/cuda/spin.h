// A stream held busy for a while: benchmarks queue a pass behind it so that events around the pass time the
// device alone (its kernels back to back) rather than the host's issuing of them.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace hypic::cuda {

// One thread that returns after about `microseconds` of the device's global timer (>= 0).
void spin(int64_t microseconds, cudaStream_t stream);

}  // namespace hypic::cuda
