// Collectives between the ranks of a tensor-parallel group (runtime/tensor_parallel.h): each rank holds a
// slice of every layer's heads and of every feed-forward's intermediate width, and the partial outputs of
// a sublayer are summed across the ranks before they join the residual stream. A Communicator is one
// rank's end of the group.
//
// Implementations: ThreadCommunicator (ranks are host threads of one process, CPU ranks' host buffers),
// and in CUDA builds NcclCommunicator (runtime/cuda/nccl_communicator.h: one GPU per rank, NCCL's
// all-reduce on the rank's stream).
#pragma once
#include <cstddef>
#include <memory>
#include <vector>

namespace hypic {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // data[0, n) (fp32, in the memory of this rank's backend) becomes the sum over the ranks of their
  // data[0, n). Every rank calls it with the same n, in the same order of calls. The result is the same
  // on every rank, bit for bit. DeviceError once the group was aborted.
  virtual void all_reduce_sum(float* data, size_t n) = 0;
  // A rank that fails between collectives calls this, so that the other ranks' pending and later
  // reductions throw DeviceError instead of waiting for it forever. The group cannot be used afterwards.
  virtual void abort() = 0;
};

// The ranks of one process as host threads over host buffers. Each rank sums every rank's buffer in rank
// order, so that every rank gets the same bits.
class ThreadCommunicator : public Communicator {
 public:
  // A group of `ranks` communicators sharing one rendezvous.
  static std::vector<std::shared_ptr<Communicator>> group(int ranks);

  int rank() const override { return rank_; }
  int size() const override;
  void all_reduce_sum(float* data, size_t n) override;
  void abort() override;

  struct Shared;
  ThreadCommunicator(std::shared_ptr<Shared> s, int rank) : s_(std::move(s)), rank_(rank) {}

 private:
  std::shared_ptr<Shared> s_;
  int rank_;
  std::vector<float> sum_;  // this rank's result before it replaces data
};

class Backend;

// A rank whose buffers live in a backend's memory (a CUDA device) reduced through a host communicator:
// the buffer is copied to the host, reduced there, and copied back (Backend::copy_to_host /
// copy_from_host, each complete on return). Slow (two copies and a synchronisation per reduction); for
// several ranks on one device, where NCCL cannot run (it needs a GPU per rank), to check the
// tensor-parallel path on one GPU.
class StagedCommunicator : public Communicator {
 public:
  StagedCommunicator(Backend& backend, std::shared_ptr<Communicator> host)
      : b_(backend), host_(std::move(host)) {}
  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  void all_reduce_sum(float* data, size_t n) override;
  void abort() override { host_->abort(); }

 private:
  Backend& b_;
  std::shared_ptr<Communicator> host_;
  std::vector<float> staged_;
};

}  // namespace hypic
