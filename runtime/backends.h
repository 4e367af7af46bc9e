// Opening a backend by device name: the one place that knows which backends this build has, so the SDK,
// the command line and the tests never name a device's classes. Built into hypic_backends, which links
// the CUDA backend only in CUDA builds.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "runtime/backend.h"
#include "runtime/model_config.h"

namespace hypic {

// Whether this build has the CUDA backend, and whether a CUDA device can be used now.
bool cuda_built();
bool cuda_device_present();
// CUDA devices usable now (0 without the backend).
int cuda_device_count();

// "cpu", "cuda" or "auto" (CUDA where the build has it and a device is present, else the CPU).
// Throws InvalidArgument for another name, and for "cuda" without the backend or a device.
Device resolve_device(const std::string& name);

// Loads the model directory on the device; errors name the file and tensor.
std::unique_ptr<Backend> open_backend(const std::string& model_dir, Device device);
// A model of cfg's shape with random weights (timing production shapes without a checkpoint): CUDA only.
std::unique_ptr<Backend> random_backend(const ModelConfig& cfg, uint64_t seed, Device device);
// The same on CUDA device `cuda_device` (a replica for the cold scatter's workers on several GPUs; the same
// seed gives the same weights and fingerprint on every device). InvalidArgument for a missing device.
std::unique_ptr<Backend> open_backend_on(const std::string& model_dir, int cuda_device);
std::unique_ptr<Backend> random_backend_on(const ModelConfig& cfg, uint64_t seed, int cuda_device);

}  // namespace hypic
