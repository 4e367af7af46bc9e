#include "runtime/cuda/cuda_segment_entry.h"

namespace hypic {
namespace {

// Lays arrays out in one block: first pass counts bytes, second hands out pointers.
class Carver {
 public:
  size_t take(size_t bytes) {
    const size_t at = used_;
    used_ += (bytes + 255) / 256 * 256;
    return at;
  }
  size_t used() const { return used_; }

 private:
  size_t used_ = 0;
};

template <class T>
T* at(const DeviceMemory& m, size_t offset) {
  return reinterpret_cast<T*>(static_cast<char*>(m.get()) + offset);
}

}  // namespace

CudaSegmentEntry CudaSegmentEntry::allocate(const ModelConfig& cfg, std::vector<int> tokens, int64_t seam) {
  const size_t n = tokens.size(), L = static_cast<size_t>(cfg.num_layers);
  const size_t op = sizeof(float) * cfg.lin_v_heads * cfg.lin_k_dim * cfg.lin_k_dim;
  const size_t st = sizeof(float) * cfg.lin_v_heads * cfg.lin_k_dim * cfg.lin_v_dim;
  const size_t tail = sizeof(cuda::bf16) * (cfg.conv_kernel - 1) * cfg.lin_conv_dim();
  const size_t kv = sizeof(cuda::bf16) * n * cfg.num_kv_heads * cfg.head_dim;
  Carver c;
  std::vector<size_t> off(4 * L);
  for (size_t l = 0; l < L; ++l) {
    if (cfg.layer_kinds[l] == LayerKind::LinearAttention) {
      off[4 * l] = c.take(op);
      off[4 * l + 1] = c.take(st);
      off[4 * l + 2] = c.take(st);
      off[4 * l + 3] = c.take(tail);
    } else {
      off[4 * l] = c.take(kv);
      off[4 * l + 1] = c.take(kv);
    }
  }
  CudaSegmentEntry e;
  e.tokens = std::move(tokens);
  e.seam = seam;
  e.mem = DeviceMemory(c.used());
  e.linear.resize(L);
  e.attention.resize(L);
  for (size_t l = 0; l < L; ++l) {
    if (cfg.layer_kinds[l] == LayerKind::LinearAttention) {
      e.linear[l] = {at<float>(e.mem, off[4 * l]), at<float>(e.mem, off[4 * l + 1]), at<float>(e.mem, off[4 * l + 2]),
                     at<cuda::bf16>(e.mem, off[4 * l + 3])};
    } else {
      e.attention[l] = {at<cuda::bf16>(e.mem, off[4 * l]), at<cuda::bf16>(e.mem, off[4 * l + 1])};
    }
  }
  return e;
}

CudaSegmentEntry CudaSegmentEntry::pass_through(std::vector<int> tokens) {
  CudaSegmentEntry e;
  e.seam = static_cast<int64_t>(tokens.size());
  e.tokens = std::move(tokens);
  return e;
}

CudaPrefixEntry CudaPrefixEntry::allocate(const ModelConfig& cfg, int64_t start, int64_t length) {
  const size_t L = static_cast<size_t>(cfg.num_layers);
  const size_t st = sizeof(float) * cfg.lin_v_heads * cfg.lin_k_dim * cfg.lin_v_dim;
  const size_t tail = sizeof(cuda::bf16) * (cfg.conv_kernel - 1) * cfg.lin_conv_dim();
  const size_t kv = sizeof(cuda::bf16) * length * cfg.num_kv_heads * cfg.head_dim;
  Carver c;
  std::vector<size_t> off(2 * L);
  for (size_t l = 0; l < L; ++l) {
    const bool lin = cfg.layer_kinds[l] == LayerKind::LinearAttention;
    off[2 * l] = c.take(lin ? st : kv);
    off[2 * l + 1] = c.take(lin ? tail : kv);
  }
  CudaPrefixEntry e;
  e.start = start;
  e.length = length;
  e.mem = DeviceMemory(c.used());
  e.state.assign(L, nullptr);
  e.conv_tail.assign(L, nullptr);
  e.k.assign(L, nullptr);
  e.v.assign(L, nullptr);
  for (size_t l = 0; l < L; ++l) {
    if (cfg.layer_kinds[l] == LayerKind::LinearAttention) {
      e.state[l] = at<float>(e.mem, off[2 * l]);
      e.conv_tail[l] = at<cuda::bf16>(e.mem, off[2 * l + 1]);
    } else {
      e.k[l] = at<cuda::bf16>(e.mem, off[2 * l]);
      e.v[l] = at<cuda::bf16>(e.mem, off[2 * l + 1]);
    }
  }
  return e;
}

}  // namespace hypic
