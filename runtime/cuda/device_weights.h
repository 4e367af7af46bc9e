// The weights of a hybrid model on the device, bf16 matrices (norm vectors and gate parameters fp32),
// arranged for the CUDA forward pass:
//   GDN: in_qkv [conv_dim, D], in_z [value_dim, D], in_ba [2*Hv, D] (b rows, then a rows: one fp32 GEMM);
//   attention: q [H*hd*(gate ? 2 : 1), D] as stored (per head: query, then gate), k, v, o;
//   lightning, KDA and MLA layers: see their structs;
//   dense MLP and shared expert: gate_up [2I, D] (gate rows first, one GEMM), down [D, I];
//   MoE experts: one [E, 2I, D] gate_up block and one [E, D, I] down block, with host arrays of per-expert
//   pointers for the grouped GEMM.
// Built either from a loaded checkpoint (F32/BF16/F16, converted on the device) or from random numbers
// generated on the device (no host copy), scaled so activations stay O(1).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "kernels/cuda/types.h"
#include "runtime/cuda/device_memory.h"
#include "runtime/model_config.h"
#include "runtime/model_weights.h"

namespace hypic {

struct DeviceLinear {
  cuda::bf16* w = nullptr;  // [out, in]
  int64_t out = 0, in = 0;
  size_t numel() const { return static_cast<size_t>(out * in); }
};

struct DeviceGdn {
  DeviceLinear qkv, z, ba, out;
  cuda::bf16* conv_w = nullptr;  // [conv_dim, K]
  float* A_log = nullptr;        // [Hv]
  float* dt_bias = nullptr;      // [Hv]
  float* norm_w = nullptr;       // [dv]
};

// Lightning attention (Ring, MiniMax): qkv [3 * H * hd, D] rows q | k | v, gate [H * hd, D], out [D, H * hd].
struct DeviceLightning {
  DeviceLinear qkv, gate, out;
  float* q_norm = nullptr;     // [hd] (Ring; null for MiniMax)
  float* k_norm = nullptr;     // [hd]
  float* g_norm = nullptr;     // [H * hd]
  float* log_decay = nullptr;  // [H] log(lambda_h) of this layer
};

// Kimi Delta Attention: qkv [3 * H * dk, D] (the three projections stacked: the conv's channels q | k | v);
// the forget and output gates low rank (f_a [dk, D], f_b [H * dk, dk]) or full rank (f_a empty, f_b
// [H * dk, D]); b [H, D]; out [D, H * dk].
struct DeviceKda {
  DeviceLinear qkv, f_a, f_b, b, g_a, g_b, out;
  cuda::bf16* conv_w = nullptr;  // [3 * H * dk, K]
  float* A_log = nullptr;        // [H]
  float* dt_bias = nullptr;      // [H * dk]
  float* o_norm = nullptr;       // [dk]
};

struct DeviceAttention {
  DeviceLinear q, k, v, o;
  float* q_norm = nullptr;  // [hd] (null: no q/k norm, MiniMax)
  float* k_norm = nullptr;  // [hd]
};

// Multi-head latent attention (Kimi, Ring-2.5), next to DeviceAttention's q [H * (nope + rope), D] and o
// [D, H * dv]: kv_a [R + rope, D], kv_norm [R], kv_b [H * (nope + dv), R], head_gate [H, D] (Ring-2.5).
struct DeviceMla {
  DeviceLinear kv_a, kv_b, head_gate;
  float* kv_norm = nullptr;
};

struct DeviceMlp {
  DeviceLinear gate_up;  // [2I, D]
  DeviceLinear down;     // [D, I]
};

struct DeviceMoe {
  DeviceLinear router;                    // [E, D]
  float* expert_bias = nullptr;           // [E] (sigmoid group-limited routers)
  cuda::bf16* gate_up = nullptr;          // [E, 2I, D]
  cuda::bf16* down = nullptr;             // [E, D, I]
  std::vector<const cuda::bf16*> gate_up_ptrs, down_ptrs;  // host arrays: expert e's matrix
  bool has_shared = false;
  DeviceMlp shared;
  DeviceLinear shared_gate;  // [1, D]
};

struct DeviceLayer {
  LayerKind kind = LayerKind::LinearAttention;
  bool moe = false;
  float* input_norm = nullptr;  // [D]
  float* post_norm = nullptr;   // [D]
  DeviceGdn lin;
  DeviceLightning lightning;
  DeviceKda kda;
  DeviceAttention attn;
  DeviceMla mla;
  DeviceMlp mlp;
  DeviceMoe moe_w;
};

class DeviceWeights {
 public:
  // Copies (and converts to bf16) every weight of `w`; work ordered on `stream`, complete on return.
  static DeviceWeights upload(const ModelConfig& cfg, const ModelWeights& w, cudaStream_t stream);
  // Random weights of cfg's shape, generated on the device from `seed`; complete on return.
  static DeviceWeights random(const ModelConfig& cfg, uint64_t seed, cudaStream_t stream);

  DeviceLinear embed;    // [V, D]
  DeviceLinear lm_head;  // [V, D] (shares the embedding's memory when tied)
  float* final_norm = nullptr;
  std::vector<DeviceLayer> layers;

  size_t bytes() const;  // device bytes held

 private:
  // Allocates every tensor of cfg's shape (contents undefined).
  static DeviceWeights allocate(const ModelConfig& cfg, bool tie_lm_head);
  cuda::bf16* alloc_bf16(size_t n);
  float* alloc_f32(size_t n);
  DeviceLinear alloc_linear(int64_t out, int64_t in);

  std::vector<DeviceMemory> blocks_;
};

}  // namespace hypic
