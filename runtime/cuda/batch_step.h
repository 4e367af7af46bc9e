// The buffers of one batched decode step of CudaModel (runtime/cuda/batch_decode.cc), private to the
// CUDA backend: the captured graph reads and writes only these and the weights. Also the step's
// optional profile.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/check.h"
#include "kernels/cuda/kv_cache.h"
#include "kernels/cuda/memory.h"
#include "kernels/cuda/sampling.h"
#include "runtime/cuda/cuda_activations.h"
#include "runtime/cuda/cuda_model.h"

namespace hypic {

struct CudaModel::BatchStep {
  int64_t N = 0, bound = 0;
  int64_t attn_layers = 0, lin_layers = 0;
  CudaActivations a;  // T = N
  // Per-step inputs, uploaded together from `host` (pinned): cu [N + 1] int32, then per attention layer
  // the N KvSlots, then per linear layer the N state pointers and the N conv-tail pointers.
  cuda::DeviceBuffer args;
  size_t args_bytes = 0, o_slots = 0, o_states = 0, o_tails = 0;
  cuda::DeviceBuffer att_ws, logits;  // logits fp32 [N, V]
  cuda::DeviceBuffer draws, sampled;  // RowDraw [N], int32 [N]: decode_batch_drawn's draws and tokens
  // pinned: the args image, then ids int32 [N], pos int64 [N], draws RowDraw [N], sampled int32 [N]
  char* host = nullptr;
  size_t o_ids = 0, o_pos = 0, o_draws = 0, o_sampled = 0;
  std::vector<int64_t> rows;  // each sequence's KV rows before the step in flight
  cudaGraphExec_t exec = nullptr;

  ~BatchStep() {
    if (exec) cudaGraphExecDestroy(exec);
    if (host) cudaFreeHost(host);
  }
  int32_t* cu() const { return args.as<int32_t>(); }
  cuda::KvSlot* slots(int64_t i) const {
    return reinterpret_cast<cuda::KvSlot*>(args.as<char>() + o_slots) + i * N;
  }
  float* const* states(int64_t i) const { return reinterpret_cast<float* const*>(args.as<char>() + o_states) + i * N; }
  cuda::bf16* const* tails(int64_t i) const { return reinterpret_cast<cuda::bf16* const*>(args.as<char>() + o_tails) + i * N; }
};


// Where a launched step's device time goes (HYPIC_PROFILE_DECODE=1): events between its parts, summed
// per part over the steps since the last reset (a benchmark's breakdown; never during a capture).
struct CudaModel::StepProfile {
  std::vector<std::pair<std::string, cudaEvent_t>> marks;
  std::map<std::string, double> ms;
  void mark(const char* part, cudaStream_t cs) {
    cudaEvent_t e;
    HYPIC_CUDA_CHECK(cudaEventCreate(&e));
    HYPIC_CUDA_CHECK(cudaEventRecord(e, cs));
    marks.push_back({part, e});
  }
  // After the stream synchronised: the time from each mark to the next goes to the next mark's part.
  void collect() {
    for (size_t i = 1; i < marks.size(); ++i) {
      float t = 0;
      HYPIC_CUDA_CHECK(cudaEventElapsedTime(&t, marks[i - 1].second, marks[i].second));
      ms[marks[i].first] += t;
    }
    for (auto& m : marks) cudaEventDestroy(m.second);
    marks.clear();
  }
};

}  // namespace hypic
