#include "kernels/cuda/check.h"

#include <string>

namespace hypic::cuda {

void throw_cuda_error(cudaError_t e, const char* expr, const char* file, int line) {
  throw CudaError(std::string(file) + ":" + std::to_string(line) + ": " + expr + " failed: " +
                      cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")",
                  e);
}

void throw_cublas_error(int status, const char* expr, const char* file, int line) {
  throw CudaError(std::string(file) + ":" + std::to_string(line) + ": " + expr + " failed with cuBLAS status " +
                  std::to_string(status));
}

void throw_unsupported(const std::string& what, const char* file, int line) {
  throw UnsupportedShape(std::string(file) + ":" + std::to_string(line) + ": unsupported: " + what);
}

bool device_available() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device / no driver" error
    return false;
  }
  return n > 0;
}

}  // namespace hypic::cuda
