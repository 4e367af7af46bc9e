#include "runtime/cuda/nccl_communicator.h"

#include <dlfcn.h>
#include <nccl.h>

#include <algorithm>
#include <string>

#include "runtime/error.h"

namespace hypic {

// The few NCCL entry points a group uses, resolved from the shared library.
struct NcclCommunicator::Api {
  void* lib = nullptr;
  decltype(&ncclCommInitAll) init_all = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclCommDestroy) destroy = nullptr;
  decltype(&ncclCommAbort) abort = nullptr;
  decltype(&ncclGetErrorString) error = nullptr;

  static std::shared_ptr<const Api> open() {
    auto a = std::make_shared<Api>();
    a->lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!a->lib) throw IoError(std::string("tensor parallelism over GPUs needs NCCL: ") + dlerror());
    auto sym = [&](const char* name) {
      void* f = dlsym(a->lib, name);
      if (!f) throw IoError(std::string("libnccl.so.2 has no ") + name);
      return f;
    };
    a->init_all = reinterpret_cast<decltype(init_all)>(sym("ncclCommInitAll"));
    a->all_reduce = reinterpret_cast<decltype(all_reduce)>(sym("ncclAllReduce"));
    a->destroy = reinterpret_cast<decltype(destroy)>(sym("ncclCommDestroy"));
    a->abort = reinterpret_cast<decltype(abort)>(sym("ncclCommAbort"));
    a->error = reinterpret_cast<decltype(error)>(sym("ncclGetErrorString"));
    return a;
  }
  void check(ncclResult_t r, const char* what) const {
    if (r != ncclSuccess) throw IoError(std::string(what) + ": " + error(r));
  }
};

std::vector<std::shared_ptr<Communicator>> NcclCommunicator::group(const std::vector<int>& devices) {
  if (devices.empty()) throw InvalidArgument("an NCCL group needs at least one device");
  std::vector<int> sorted = devices;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
    throw InvalidArgument("an NCCL group needs a distinct GPU per rank (NCCL runs one rank per device)");
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
  for (int d : devices)
    if (d < 0 || d >= count)
      throw InvalidArgument("CUDA device " + std::to_string(d) + " is not present (" + std::to_string(count) + " found)");
  std::shared_ptr<const Api> api = Api::open();
  std::vector<ncclComm_t> comms(devices.size());
  api->check(api->init_all(comms.data(), static_cast<int>(devices.size()), devices.data()), "ncclCommInitAll");
  std::vector<std::shared_ptr<Communicator>> out;
  for (size_t r = 0; r < devices.size(); ++r)
    out.push_back(std::make_shared<NcclCommunicator>(api, comms[r], static_cast<int>(r), static_cast<int>(devices.size())));
  return out;
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ && !aborted_) api_->destroy(static_cast<ncclComm_t>(comm_));
}

void NcclCommunicator::abort() {
  if (comm_ && !aborted_) api_->abort(static_cast<ncclComm_t>(comm_));
  aborted_ = true;
}

void NcclCommunicator::all_reduce_sum(float* data, size_t n) {
  if (size_ == 1) return;
  if (aborted_) throw DeviceError("a tensor-parallel rank failed: the NCCL group was aborted");
  api_->check(api_->all_reduce(data, data, n, ncclFloat32, ncclSum, static_cast<ncclComm_t>(comm_), stream_),
              "ncclAllReduce");
}

}  // namespace hypic
