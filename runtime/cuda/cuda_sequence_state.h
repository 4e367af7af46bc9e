// The running state of one sequence on the CUDA backend, the counterpart of SequenceState:
//   linear-attention layers: the conv tail [K-1, conv_dim] bf16 (the last K-1 pre-conv inputs, oldest
//     first) and the recurrent state [Hv, dk, dv] fp32;
//   full-attention layers: keys (post-norm, post-RoPE) and values [rows, Hkv, hd] bf16 with their global
//     positions [rows] int64, in buffers that grow by doubling.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "runtime/backend.h"
#include "runtime/cuda/device_memory.h"
#include "runtime/model_config.h"
#include "runtime/sequence_state.h"

namespace hypic {

struct CudaLinearLayerState {
  DeviceMemory conv_tail;  // bf16 [K-1, conv_dim]
  DeviceMemory S;          // fp32 [Hv, dk, dv]
};

struct CudaAttentionLayerState {
  DeviceMemory k, v;  // bf16 [capacity, Hkv, hd]
  DeviceMemory pos;   // int64 [capacity]
  int64_t rows = 0, capacity = 0;
  // The owning model's stream: growth on it takes stream-ordered memory (null: plain blocks).
  std::shared_ptr<const cuda::Stream> stream;
  // Set while k, v and pos are views into one block shared with the sequence's other attention layers
  // (CudaSequenceState::reserve_attention); the last layer to let go of it frees it.
  std::shared_ptr<DeviceMemory> group;

  // Makes room for `needed` rows of `row_elems` elements each, keeping the existing rows (work ordered
  // on `stream`).
  void reserve(int64_t needed, int64_t row_elems, cudaStream_t stream);
  // Appends n rows: k, v [n, row_elems] bf16 on the device, positions [n] int64 on the host, or on the device
  // where `device_positions` says so.
  void append(const void* k_rows, const void* v_rows, const int64_t* positions, int64_t n, int64_t row_elems,
              cudaStream_t stream, bool device_positions = false);
};

class CudaSequenceState : public State {
 public:
  DeviceMemory lin_block;                   // every linear layer's conv tail and state, one allocation
  std::vector<CudaLinearLayerState> lin;    // [num_layers]; views into lin_block; empty for attention layers
  std::vector<CudaAttentionLayerState> attn;  // [num_layers]; empty for linear layers

  // Memory ordered on `stream` (the owning model's; null: plain cudaMalloc blocks).
  static CudaSequenceState empty_for(const ModelConfig& cfg, std::shared_ptr<const cuda::Stream> stream = nullptr);
  // A deep copy (work ordered on `stream`).
  CudaSequenceState clone(cudaStream_t stream) const;
  // Back to the empty state, keeping the allocations (work ordered on `stream`).
  void reset(cudaStream_t stream);
  // CudaAttentionLayerState::reserve for each of `layers` (attention layers), those that grow taking their
  // K, V and positions from one block: a request's first reserve is one allocation, not three a layer.
  void reserve_attention(std::span<const int> layers, int64_t needed, int64_t row_elems, cudaStream_t stream);
  size_t bytes() const override;  // device bytes held (allocated capacity)
  // A host copy in the CPU layout (fp32), e.g. to compare with the CPU backend or to hand to the CPU engine.
  // Synchronises the device.
  SequenceState download(const ModelConfig& cfg) const;
};

}  // namespace hypic
