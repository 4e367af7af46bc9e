#include "runtime/backends.h"

#include "runtime/cpu_backend.h"
#include "runtime/error.h"
#ifdef HYPIC_WITH_CUDA
#include "kernels/cuda/check.h"
#include "runtime/cuda/cuda_backend.h"
#endif

namespace hypic {

bool cuda_built() {
#ifdef HYPIC_WITH_CUDA
  return true;
#else
  return false;
#endif
}

bool cuda_device_present() {
#ifdef HYPIC_WITH_CUDA
  return cuda::device_available();
#else
  return false;
#endif
}

int cuda_device_count() {
#ifdef HYPIC_WITH_CUDA
  int n = 0;
  if (cuda::device_available() && cudaGetDeviceCount(&n) == cudaSuccess) return n;
#endif
  return 0;
}

Device resolve_device(const std::string& name) {
  if (name == "cpu") return Device::Cpu;
  if (name == "auto") return cuda_built() && cuda_device_present() ? Device::Cuda : Device::Cpu;
  if (name != "cuda") throw InvalidArgument("unknown device '" + name + "' (expected cpu, cuda or auto)");
  if (!cuda_built())
    throw InvalidArgument("device 'cuda': this hypic was built without the CUDA backend (nvcc was not found at "
                          "configure time)");
  if (!cuda_device_present()) throw InvalidArgument("device 'cuda': no usable CUDA device was found");
  return Device::Cuda;
}

std::unique_ptr<Backend> open_backend(const std::string& model_dir, Device device) {
#ifdef HYPIC_WITH_CUDA
  if (device == Device::Cuda) return CudaBackend::load(model_dir);
#endif
  HYPIC_ASSERT(device == Device::Cpu, "open_backend: device not built");
  return CpuBackend::load(model_dir);
}

std::unique_ptr<Backend> random_backend(const ModelConfig& cfg, uint64_t seed, Device device) {
#ifdef HYPIC_WITH_CUDA
  if (device == Device::Cuda) return CudaBackend::random(cfg, seed);
#endif
  throw InvalidArgument("random weights are generated on the GPU: use the CUDA device");
}

namespace {

// Makes `cuda_device` current for the upload, and the previous device current again afterwards.
template <class Make>
std::unique_ptr<Backend> on_device(int cuda_device, Make make) {
  const int n = cuda_device_count();
  if (cuda_device < 0 || cuda_device >= n)
    throw InvalidArgument("CUDA device " + std::to_string(cuda_device) + " is not present (" + std::to_string(n) +
                          " found)");
#ifdef HYPIC_WITH_CUDA
  int before = 0;
  HYPIC_CUDA_CHECK(cudaGetDevice(&before));
  HYPIC_CUDA_CHECK(cudaSetDevice(cuda_device));
  std::unique_ptr<Backend> b;
  try {
    b = make();
  } catch (...) {
    cudaSetDevice(before);
    throw;
  }
  HYPIC_CUDA_CHECK(cudaSetDevice(before));
  return b;
#else
  (void)make;
  throw InvalidArgument("this hypic was built without the CUDA backend");
#endif
}

}  // namespace

std::unique_ptr<Backend> open_backend_on(const std::string& model_dir, int cuda_device) {
  return on_device(cuda_device, [&] { return open_backend(model_dir, Device::Cuda); });
}

std::unique_ptr<Backend> random_backend_on(const ModelConfig& cfg, uint64_t seed, int cuda_device) {
  return on_device(cuda_device, [&] { return random_backend(cfg, seed, Device::Cuda); });
}

}  // namespace hypic
