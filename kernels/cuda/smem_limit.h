// The opt-in above 48 KB of dynamic shared memory for one kernel. The attribute belongs to the kernel's copy on
// the current device (a limit raised on GPU 0 does not hold on GPU 1), and cudaFuncSetAttribute costs ~2 us of
// host time, which a stitch paying it before each of its ~90 launches of such kernels felt; so it is raised
// once per (kernel, device), from any thread.
#pragma once
#include <cstddef>

namespace hypic::cuda {

// Raises `kernel`'s (a __global__ function) limit on the current device to at least `bytes` (asked even below
// 48 KB: a kernel's static shared memory comes off that default); never lowers it (a thread asking for less
// must not undo what another thread's launch needs).
void raise_smem_limit(const void* kernel, size_t bytes);

template <class... Params>
void raise_smem_limit(void (*kernel)(Params...), size_t bytes) {
  raise_smem_limit(reinterpret_cast<const void*>(kernel), bytes);
}

// Asks for the largest shared-memory carveout for `kernel` on the current device, once per (kernel, device): an SM
// takes the split of the first kernel placed on it, so a kernel that should leave room for another kernel's blocks
// beside its own asks for more than it needs.
void prefer_max_shared(const void* kernel);

template <class... Params>
void prefer_max_shared(void (*kernel)(Params...)) {
  prefer_max_shared(reinterpret_cast<const void*>(kernel));
}

}  // namespace hypic::cuda
