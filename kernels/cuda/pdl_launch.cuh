// Host side of programmatic dependent launch (sm_90; device side: pdl_wait / pdl_trigger in
// device_util.cuh). A decode step is a chain of short dependent kernels; launched programmatically, a
// kernel's blocks are resident and waiting (griddepcontrol.wait) when its predecessor finishes, instead
// of being launched after it, and a successor that reads its weights before its wait (cuda::gemv) can
// start while this kernel runs once this kernel triggers.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include "kernels/cuda/check.h"
#include "kernels/cuda/env_switch.h"

namespace hypic::cuda::detail {

// An attribute of the current device, asked once per (device, attribute).
inline int device_attribute(cudaDeviceAttr attr) {
  static std::mutex mu;
  static std::map<std::pair<int, int>, int> known;
  int dev = 0;
  HYPIC_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> g(mu);
  auto it = known.find({dev, int(attr)});
  if (it != known.end()) return it->second;
  int v = 0;
  HYPIC_CUDA_CHECK(cudaDeviceGetAttribute(&v, attr, dev));
  known[{dev, int(attr)}] = v;
  return v;
}

// The current device's SM count.
inline int device_sm_count() { return device_attribute(cudaDevAttrMultiProcessorCount); }

// HYPIC_CUDA_PDL_CHAIN=0 launches the step's small kernels the ordinary way (A/B runs); read once.
inline bool pdl_chain_enabled() {
  static const bool on = !env_is("HYPIC_CUDA_PDL_CHAIN", "0");
  return on;
}

// Whether a kernel of `blocks` blocks should let its programmatic successor start once it runs
// (pdl_trigger right after its own wait): only when its grid fits in one wave, so that the successor's
// waiting blocks never hold an SM that one of its own later blocks needs (at decode batch 32 the early
// successors cost ~1% of the step). HYPIC_CUDA_PDL_EARLY=all lets every grid trigger, for A/B runs.
inline bool pdl_trigger_early(int64_t blocks) {
  static const bool all = env_is("HYPIC_CUDA_PDL_EARLY", "all");
  return pdl_chain_enabled() && (all || blocks <= device_sm_count());
}

// Launches kernel<<<grid, block, smem, stream>>>(args...), programmatically when `pdl` is set, in thread-block
// clusters of `cluster_x` blocks along x when it is above 0 (grid.x a multiple of it). The kernel must call
// pdl_wait() before it reads or writes anything an earlier kernel may still be writing.
template <class... Params, class... Args>
void launch_pdl_clusters(bool pdl, unsigned cluster_x, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                         cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  if (cluster_x > 0) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = cluster_x;
    attr[n].val.clusterDim.y = 1;
    attr[n].val.clusterDim.z = 1;
    ++n;
  }
  if (pdl) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  cfg.attrs = attr;
  cfg.numAttrs = n;
  HYPIC_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

// The same without clusters.
template <class... Params, class... Args>
void launch_pdl(bool pdl, void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                Args&&... args) {
  launch_pdl_clusters(pdl, 0, kernel, grid, block, smem, stream, std::forward<Args>(args)...);
}

}  // namespace hypic::cuda::detail
