// What the cache keeps for one segment on the device (the counterpart of runtime/segment_entry.h,
// DESIGN §1.2-1.3). Every array of an entry lives in ONE device block, so an entry costs one allocation
// and evicting its last reference frees it at once.
//
// CudaSegmentEntry (position-independent, by content key), from an isolated prefill at local positions:
//   per linear layer: transfer T of the body [Hv, dk, dk], S(body | 0) [Hv, dk, dv] and the state after
//     the whole segment [Hv, dk, dv] (fp32), the trailing conv inputs [K-1, conv_dim] (bf16);
//   per attention layer: K/V of every token [n, Hkv, hd] (bf16), keys rotated at local positions 0..n-1.
// CudaPrefixEntry (exact, by chain key): the linear states and conv tails at the block end and the
// block's own KV rows at their global positions [start, start + length).
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/cuda/types.h"
#include "runtime/cuda/device_memory.h"
#include "runtime/model_config.h"

namespace hypic {

struct CudaLinearSegment {
  float* transfer = nullptr;
  float* body = nullptr;
  float* full = nullptr;
  cuda::bf16* conv_tail = nullptr;
};

struct CudaAttentionSegment {
  cuda::bf16* k = nullptr;
  cuda::bf16* v = nullptr;
};

struct CudaSegmentEntry {
  std::vector<int> tokens;
  int64_t seam = 0;  // seam tokens actually skipped: min(seam width, n)
  DeviceMemory mem;  // holds every array below
  std::vector<CudaLinearSegment> linear;        // indexed by layer (null for attention layers)
  std::vector<CudaAttentionSegment> attention;  // indexed by layer (null for linear layers)

  // An entry with its device arrays allocated (contents undefined).
  static CudaSegmentEntry allocate(const ModelConfig& cfg, std::vector<int> tokens, int64_t seam);
  // An entry that holds only tokens, all of them seam: recomputed on every use, never stored.
  static CudaSegmentEntry pass_through(std::vector<int> tokens);

  int64_t size() const { return static_cast<int64_t>(tokens.size()); }
  size_t bytes() const { return mem.bytes() + tokens.size() * sizeof(int); }
};

struct CudaPrefixEntry {
  int64_t start = 0, length = 0;
  DeviceMemory mem;
  std::vector<float*> state;            // per layer [Hv, dk, dv] fp32 (linear layers)
  std::vector<cuda::bf16*> conv_tail;   // per layer [K-1, conv_dim] bf16 (linear layers)
  std::vector<cuda::bf16*> k, v;        // per layer [length, Hkv, hd] bf16 (attention layers)

  static CudaPrefixEntry allocate(const ModelConfig& cfg, int64_t start, int64_t length);
  size_t bytes() const { return mem.bytes(); }
};

}  // namespace hypic
