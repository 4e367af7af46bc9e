#include "runtime/cuda/cuda_sequence_state.h"

#include <algorithm>
#include <array>

#include "kernels/cuda/check.h"
#include "kernels/cuda/param_copies.h"
#include "kernels/cuda/types.h"
#include "kernels/dtype.h"

namespace hypic {

namespace {

// A block for work on `stream`: stream-ordered where `stream` is the owner's, a plain one otherwise.
DeviceMemory block_for(size_t bytes, const std::shared_ptr<const cuda::Stream>& owner, cudaStream_t stream) {
  return owner && owner->get() == stream ? DeviceMemory(bytes, owner) : DeviceMemory(bytes);
}

// Queues the copy of a layer's rows (K, V and positions) into new storage on `stream`.
void copy_rows(const CudaAttentionLayerState& a, void* k, void* v, void* pos, size_t row_bytes, cudaStream_t stream) {
  HYPIC_CUDA_CHECK(cudaMemcpyAsync(k, a.k.get(), row_bytes * a.rows, cudaMemcpyDeviceToDevice, stream));
  HYPIC_CUDA_CHECK(cudaMemcpyAsync(v, a.v.get(), row_bytes * a.rows, cudaMemcpyDeviceToDevice, stream));
  HYPIC_CUDA_CHECK(cudaMemcpyAsync(pos, a.pos.get(), sizeof(int64_t) * a.rows, cudaMemcpyDeviceToDevice, stream));
}

}  // namespace

void CudaAttentionLayerState::reserve(int64_t needed, int64_t row_elems, cudaStream_t stream) {
  if (needed <= capacity) return;
  const int64_t cap = std::max({needed, 2 * capacity, int64_t{256}});
  const size_t row_bytes = sizeof(cuda::bf16) * row_elems;
  // On the owner's stream the old blocks go back to the pool in stream order, after the copies below.
  const bool ordered = this->stream && this->stream->get() == stream;
  DeviceMemory nk = block_for(row_bytes * cap, this->stream, stream);
  DeviceMemory nv = block_for(row_bytes * cap, this->stream, stream);
  DeviceMemory np = block_for(sizeof(int64_t) * cap, this->stream, stream);
  if (rows > 0) {
    copy_rows(*this, nk.get(), nv.get(), np.get(), row_bytes, stream);
    // Plain blocks are freed below at once: the copies (and earlier readers) must be done with them.
    if (!ordered) HYPIC_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  k = std::move(nk);
  v = std::move(nv);
  pos = std::move(np);
  group.reset();  // after the copies above are queued (or done, for plain blocks)
  capacity = cap;
}

void CudaAttentionLayerState::append(const void* k_rows, const void* v_rows, const int64_t* positions, int64_t n,
                                     int64_t row_elems, cudaStream_t stream, bool device_positions) {
  if (n <= 0) return;
  reserve(rows + n, row_elems, stream);
  const size_t row_bytes = sizeof(cuda::bf16) * row_elems;
  if (device_positions) {  // one launch for the three (three copies on the stream each cost idle device around them)
    const cuda::CopyRegion r[3] = {
        {k_rows, static_cast<char*>(k.get()) + row_bytes * rows, static_cast<int64_t>(row_bytes * n)},
        {v_rows, static_cast<char*>(v.get()) + row_bytes * rows, static_cast<int64_t>(row_bytes * n)},
        {positions, pos.as<int64_t>() + rows, static_cast<int64_t>(sizeof(int64_t) * n)}};
    cuda::copy_regions(r, 3, stream);
    rows += n;
    return;
  }
  HYPIC_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(k.get()) + row_bytes * rows, k_rows, row_bytes * n,
                                   cudaMemcpyDeviceToDevice, stream));
  HYPIC_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(v.get()) + row_bytes * rows, v_rows, row_bytes * n,
                                   cudaMemcpyDeviceToDevice, stream));
  // Direction from the pointer (unified addressing); a pageable host source returns once staged, so the
  // caller may release it.
  HYPIC_CUDA_CHECK(
      cudaMemcpyAsync(pos.as<int64_t>() + rows, positions, sizeof(int64_t) * n, cudaMemcpyDefault, stream));
  rows += n;
}

namespace {

DeviceMemory copy_of(const DeviceMemory& m, cudaStream_t stream, const std::shared_ptr<const cuda::Stream>& owner) {
  DeviceMemory c = block_for(m.bytes(), owner, stream);
  if (m.bytes()) HYPIC_CUDA_CHECK(cudaMemcpyAsync(c.get(), m.get(), m.bytes(), cudaMemcpyDeviceToDevice, stream));
  return c;
}

}  // namespace

namespace {

// Carves per-layer conv tails and states out of one block (views), the block itself owning.
DeviceMemory carve_linear(const ModelConfig& cfg, std::vector<CudaLinearLayerState>& lin, bool zero,
                          const std::shared_ptr<const cuda::Stream>& stream) {
  const size_t tail = sizeof(cuda::bf16) * (cfg.conv_kernel - 1) * cfg.lin_conv_dim();
  const size_t state = sizeof(float) * cfg.lin_v_heads * cfg.lin_k_dim * cfg.lin_v_dim;
  const size_t tail_padded = (tail + 255) / 256 * 256;
  size_t n = 0;
  for (int64_t i = 0; i < cfg.num_layers; ++i) n += cfg.layer_kinds[i] == LayerKind::LinearAttention;
  const size_t bytes = (tail_padded + state) * n;
  DeviceMemory block = stream ? DeviceMemory(bytes, stream, zero) : DeviceMemory(bytes, zero);
  char* at = static_cast<char*>(block.get());
  for (int64_t i = 0; i < cfg.num_layers; ++i) {
    if (cfg.layer_kinds[i] != LayerKind::LinearAttention) continue;
    lin[i].S = DeviceMemory::view(at, state);
    lin[i].conv_tail = DeviceMemory::view(at + state, tail);
    at += state + tail_padded;
  }
  return block;
}

}  // namespace

CudaSequenceState CudaSequenceState::clone(cudaStream_t stream) const {
  CudaSequenceState c;
  c.length = length;
  c.lin.resize(lin.size());
  c.attn.resize(attn.size());
  // One block like the original: same layout, so one copy moves every linear layer.
  const std::shared_ptr<const cuda::Stream>& owner = attn.empty() ? nullptr : attn.front().stream;
  c.lin_block = block_for(lin_block.bytes(), owner, stream);
  const char* from = static_cast<const char*>(lin_block.get());
  char* to = static_cast<char*>(c.lin_block.get());
  for (size_t i = 0; i < lin.size(); ++i) {
    if (!lin[i].S.get()) continue;
    c.lin[i].S = DeviceMemory::view(to + (static_cast<const char*>(lin[i].S.get()) - from), lin[i].S.bytes());
    c.lin[i].conv_tail =
        DeviceMemory::view(to + (static_cast<const char*>(lin[i].conv_tail.get()) - from), lin[i].conv_tail.bytes());
  }
  if (lin_block.bytes())
    HYPIC_CUDA_CHECK(cudaMemcpyAsync(to, from, lin_block.bytes(), cudaMemcpyDeviceToDevice, stream));
  for (size_t i = 0; i < attn.size(); ++i) {
    c.attn[i].stream = attn[i].stream;
    c.attn[i].k = copy_of(attn[i].k, stream, owner);
    c.attn[i].v = copy_of(attn[i].v, stream, owner);
    c.attn[i].pos = copy_of(attn[i].pos, stream, owner);
    c.attn[i].rows = attn[i].rows;
    c.attn[i].capacity = attn[i].capacity;
  }
  return c;
}

void CudaSequenceState::reserve_attention(std::span<const int> layers, int64_t needed, int64_t row_elems,
                                          cudaStream_t stream) {
  constexpr size_t kAlign = 256;
  const auto up = [](size_t b) { return (b + kAlign - 1) / kAlign * kAlign; };
  const size_t row_bytes = sizeof(cuda::bf16) * row_elems;
  std::vector<int> grow;
  std::vector<int64_t> caps;
  size_t total = 0;
  for (int l : layers) {
    const CudaAttentionLayerState& a = attn[static_cast<size_t>(l)];
    if (needed <= a.capacity) continue;
    const int64_t cap = std::max({needed, 2 * a.capacity, int64_t{256}});
    grow.push_back(l);
    caps.push_back(cap);
    total += 2 * up(row_bytes * cap) + up(sizeof(int64_t) * cap);
  }
  if (grow.empty()) return;
  const std::shared_ptr<const cuda::Stream>& owner = attn[static_cast<size_t>(grow[0])].stream;
  const bool ordered = owner && owner->get() == stream;
  auto block = std::make_shared<DeviceMemory>(block_for(total, owner, stream));
  std::vector<std::array<DeviceMemory, 3>> views(grow.size());  // k, v, pos of each growing layer
  char* at = static_cast<char*>(block->get());
  bool copied = false;
  for (size_t i = 0; i < grow.size(); ++i) {
    const CudaAttentionLayerState& a = attn[static_cast<size_t>(grow[i])];
    const size_t kv = row_bytes * caps[i];
    views[i] = {DeviceMemory::view(at, kv), DeviceMemory::view(at + up(kv), kv),
                DeviceMemory::view(at + 2 * up(kv), sizeof(int64_t) * caps[i])};
    at += 2 * up(kv) + up(sizeof(int64_t) * caps[i]);
    if (a.rows == 0) continue;
    copy_rows(a, views[i][0].get(), views[i][1].get(), views[i][2].get(), row_bytes, stream);
    copied = true;
  }
  // Plain blocks are freed below at once: the copies (and earlier readers) must be done with them.
  if (copied && !ordered) HYPIC_CUDA_CHECK(cudaStreamSynchronize(stream));
  for (size_t i = 0; i < grow.size(); ++i) {
    CudaAttentionLayerState& a = attn[static_cast<size_t>(grow[i])];
    a.k = std::move(views[i][0]);
    a.v = std::move(views[i][1]);
    a.pos = std::move(views[i][2]);
    a.group = block;  // the old blocks (or group) go here, in stream order after the copies
    a.capacity = caps[i];
  }
}

void CudaSequenceState::reset(cudaStream_t stream) {
  if (lin_block.bytes()) HYPIC_CUDA_CHECK(cudaMemsetAsync(lin_block.get(), 0, lin_block.bytes(), stream));
  for (auto& a : attn) a.rows = 0;
  length = 0;
}

CudaSequenceState CudaSequenceState::empty_for(const ModelConfig& cfg, std::shared_ptr<const cuda::Stream> stream) {
  CudaSequenceState s;
  s.lin.resize(static_cast<size_t>(cfg.num_layers));
  s.attn.resize(static_cast<size_t>(cfg.num_layers));
  for (auto& a : s.attn) a.stream = stream;
  s.lin_block = carve_linear(cfg, s.lin, true, stream);
  return s;
}

size_t CudaSequenceState::bytes() const {
  size_t n = lin_block.bytes();
  for (auto& a : attn) n += a.k.bytes() + a.v.bytes() + a.pos.bytes();
  return n;
}

namespace {

std::vector<float> bf16_to_host_f32(const void* dev, size_t n) {
  std::vector<uint16_t> raw(n);
  if (n) HYPIC_CUDA_CHECK(cudaMemcpy(raw.data(), dev, 2 * n, cudaMemcpyDeviceToHost));
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(raw[i]);
  return out;
}

}  // namespace

SequenceState CudaSequenceState::download(const ModelConfig& cfg) const {
  HYPIC_CUDA_CHECK(cudaDeviceSynchronize());
  SequenceState s = SequenceState::empty_for(cfg);
  s.length = length;
  const int64_t row = cfg.num_kv_heads * cfg.head_dim;
  for (int64_t i = 0; i < cfg.num_layers; ++i) {
    if (cfg.layer_kinds[i] == LayerKind::LinearAttention) {
      s.layers[i].lin.conv_tail = bf16_to_host_f32(lin[i].conv_tail.get(), s.layers[i].lin.conv_tail.size());
      HYPIC_CUDA_CHECK(cudaMemcpy(s.layers[i].lin.S.data(), lin[i].S.get(), sizeof(float) * s.layers[i].lin.S.size(),
                                  cudaMemcpyDeviceToHost));
    } else {
      const CudaAttentionLayerState& a = attn[i];
      AttentionLayerState& h = s.layers[i].attn;
      h.k = bf16_to_host_f32(a.k.get(), static_cast<size_t>(a.rows * row));
      h.v = bf16_to_host_f32(a.v.get(), static_cast<size_t>(a.rows * row));
      h.pos.resize(static_cast<size_t>(a.rows));
      if (a.rows)
        HYPIC_CUDA_CHECK(cudaMemcpy(h.pos.data(), a.pos.get(), sizeof(int64_t) * a.rows, cudaMemcpyDeviceToHost));
    }
  }
  return s;
}

}  // namespace hypic
