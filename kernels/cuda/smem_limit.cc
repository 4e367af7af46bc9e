#include "kernels/cuda/smem_limit.h"

#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <utility>

#include "kernels/cuda/check.h"

namespace hypic::cuda {

void raise_smem_limit(const void* kernel, size_t bytes) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, size_t> raised;  // (kernel, device) -> the limit set there
  int dev = 0;
  HYPIC_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  size_t& at = raised[{kernel, dev}];
  if (at >= bytes) return;
  HYPIC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  at = bytes;
}

void prefer_max_shared(const void* kernel) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, bool> asked;
  int dev = 0;
  HYPIC_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  bool& done = asked[{kernel, dev}];
  if (done) return;
  HYPIC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                        static_cast<int>(cudaSharedmemCarveoutMaxShared)));
  done = true;
}

}  // namespace hypic::cuda
