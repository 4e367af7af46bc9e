// Errors of the CUDA backend, inside hypic's one error hierarchy (runtime/error.h): a shape or argument
// the kernels do not support is a ModelError (the caller can catch it and fall back), a failed CUDA /
// cuBLAS call a DeviceError carrying the call and its location.
#pragma once
#include <cuda_runtime.h>

#include <string>

#include "runtime/error.h"

namespace hypic::cuda {

// A CUDA runtime or cuBLAS call failed. code(): the runtime's error (cudaErrorUnknown for cuBLAS and hypic's own),
// so a caller can tell running out of device memory (cudaErrorMemoryAllocation) from other failures.
class CudaError : public DeviceError {
 public:
  explicit CudaError(const std::string& what, cudaError_t code = cudaErrorUnknown) : DeviceError(what), code_(code) {}
  cudaError_t code() const { return code_; }

 private:
  cudaError_t code_;
};

// The op was called with a shape or argument it has no kernel for (e.g. head dim 96 for attention).
class UnsupportedShape : public ModelError {
 public:
  using ModelError::ModelError;
};

[[noreturn]] void throw_cuda_error(cudaError_t e, const char* expr, const char* file, int line);
[[noreturn]] void throw_cublas_error(int status, const char* expr, const char* file, int line);
[[noreturn]] void throw_unsupported(const std::string& what, const char* file, int line);

// True when a CUDA device is present and usable (cudaGetDeviceCount succeeds with a count > 0).
bool device_available();

}  // namespace hypic::cuda

#define HYPIC_CUDA_CHECK(expr)                                                                  \
  do {                                                                                          \
    const cudaError_t hypic_e_ = (expr);                                                        \
    if (hypic_e_ != cudaSuccess) ::hypic::cuda::throw_cuda_error(hypic_e_, #expr, __FILE__, __LINE__); \
  } while (0)

#define HYPIC_CUBLAS_CHECK(expr)                                                                      \
  do {                                                                                                \
    const int hypic_s_ = static_cast<int>(expr);                                                      \
    if (hypic_s_ != 0) ::hypic::cuda::throw_cublas_error(hypic_s_, #expr, __FILE__, __LINE__);        \
  } while (0)

// Fails loudly on a shape or argument the kernels do not handle: throws UnsupportedShape with `msg`.
#define HYPIC_CUDA_REQUIRE(cond, msg)                                                              \
  do {                                                                                             \
    if (!(cond)) ::hypic::cuda::throw_unsupported(std::string(msg) + " [" #cond "]", __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: surfaces launch-configuration errors at the call site.
#define HYPIC_CUDA_LAUNCH_CHECK() HYPIC_CUDA_CHECK(cudaGetLastError())
