// Tensor-parallel ranks on several GPUs of one process (runtime/communicator.h): NCCL's all-reduce on the
// rank's stream. libnccl.so.2 (CUDA's NCCL under /usr/local/cuda, or any on the loader's path) is opened
// when a group is made, not linked, so that programs built with the CUDA backend also run where NCCL is
// not installed and only a tensor-parallel group needs it.
#pragma once
#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "runtime/communicator.h"

namespace hypic {

class NcclCommunicator : public Communicator {
 public:
  // One communicator per device of `devices` (distinct CUDA device ordinals), rank i on devices[i], made
  // with ncclCommInitAll. IoError when libnccl.so.2 cannot be opened; InvalidArgument for a repeated or
  // missing device.
  static std::vector<std::shared_ptr<Communicator>> group(const std::vector<int>& devices);
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // Queued on the bound stream (set_stream); returns without waiting.
  void all_reduce_sum(float* data, size_t n) override;
  // ncclCommAbort on this rank's communicator (the others' pending collectives then fail).
  void abort() override;
  // The stream the rank's model queues its work on (CudaBackend::set_communicator sets it).
  void set_stream(cudaStream_t s) { stream_ = s; }

  struct Api;
  NcclCommunicator(std::shared_ptr<const Api> api, void* comm, int rank, int size)
      : api_(std::move(api)), comm_(comm), rank_(rank), size_(size) {}

 private:
  std::shared_ptr<const Api> api_;
  void* comm_;  // ncclComm_t
  int rank_, size_;
  cudaStream_t stream_ = nullptr;
  bool aborted_ = false;
};

}  // namespace hypic
