#include "runtime/cuda/cuda_backend.h"

#include "runtime/cuda/nccl_communicator.h"

#include <algorithm>
#include <cstring>

#include "kernels/cuda/check.h"
#include "kernels/cuda/engine_state_ops.h"
#include "kernels/cuda/family_glue.h"
#include "kernels/cuda/model_glue.h"
#include "kernels/cuda/packed_expand.h"
#include "kernels/cuda/param_copies.h"
#include "kernels/cuda/rope.h"
#include "kernels/cuda/transfer_operator.h"
#include "kernels/dtype.h"
#include "runtime/sequence_state.h"
#include "runtime/error.h"

namespace hypic {
namespace {

// Cache entries come and go with every cold request and eviction: stream-ordered allocations from the
// device's memory pool (kept, not returned to the driver) cost microseconds where cudaMalloc/cudaFree cost
// milliseconds and synchronise the device. All work on an entry is ordered on the model's stream, so
// freeing on it is safe once the last reader was queued.
class DeviceBlock : public Memory {
 public:
  DeviceBlock(size_t bytes, cudaStream_t stream) : stream_(stream) {
    if (bytes) HYPIC_CUDA_CHECK(cudaMallocAsync(&data_, bytes, stream));
    bytes_ = bytes;
  }
  ~DeviceBlock() override {
    if (data_) cudaFreeAsync(data_, stream_);
  }

 private:
  cudaStream_t stream_;
};

struct CudaRows : Rows {
  CudaActivations a;
};

CudaActivations& acts(Rows& r) { return static_cast<CudaRows&>(r).a; }

cuda::TransferShape transfer_shape(const ModelConfig& c) {
  const auto kind = c.linear_kind == LinearKind::Lightning ? cuda::TransferKind::Scalar : cuda::TransferKind::Dense;
  return {kind, c.lin_v_heads, c.lin_k_dim, c.lin_v_dim};
}

size_t state_bytes(const ModelConfig& c) { return sizeof(float) * c.lin_v_heads * c.lin_k_dim * c.lin_v_dim; }

}  // namespace

CudaSequenceState& cuda_state(State& s) {
  auto* c = dynamic_cast<CudaSequenceState*>(&s);
  HYPIC_ASSERT(c, "a state of another backend given to the CUDA backend");
  return *c;
}

const CudaSequenceState& cuda_state(const State& s) {
  auto* c = dynamic_cast<const CudaSequenceState*>(&s);
  HYPIC_ASSERT(c, "a state of another backend given to the CUDA backend");
  return *c;
}

// Freed pinned blocks kept for reuse: a few requests' worth of records read from disk.
constexpr size_t kPinnedKeepBytes = size_t{4} << 30;

CudaBackend::CudaBackend(std::unique_ptr<CudaModel> model)
    : m_(std::move(model)), scratch_(state_bytes(m_->config())), pinned_(PinnedPool::create(kPinnedKeepBytes)) {
  // The pool keeps freed blocks for reuse instead of handing them back at every synchronisation.
  int device = 0;
  cudaMemPool_t pool;
  HYPIC_CUDA_CHECK(cudaGetDevice(&device));
  HYPIC_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  uint64_t keep = UINT64_MAX;
  HYPIC_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
}

std::unique_ptr<CudaBackend> CudaBackend::load(const std::string& dir) {
  return std::make_unique<CudaBackend>(CudaModel::load(dir));
}

std::unique_ptr<CudaBackend> CudaBackend::random(const ModelConfig& cfg, uint64_t seed) {
  return std::make_unique<CudaBackend>(CudaModel::random(cfg, seed));
}

std::unique_ptr<Memory> CudaBackend::allocate(size_t bytes) {
  return std::make_unique<DeviceBlock>(bytes, m_->stream());
}

std::unique_ptr<Backend> CudaBackend::worker() { return std::make_unique<CudaBackend>(m_->sibling()); }

bool CudaBackend::shares_memory_with(const Backend& other) const {
  const auto* o = dynamic_cast<const CudaBackend*>(&other);
  return o && o->m_->device() == m_->device();
}

void CudaBackend::set_communicator(std::shared_ptr<Communicator> comm) {
  const ModelConfig& c = m_->config();
  if (comm && comm->size() > 1 && (c.linear_kind != LinearKind::GatedDeltaNet || c.mla || c.residual_from_norm))
    throw InvalidArgument("tensor parallelism covers the Qwen3-Next / Qwen3.5 layers, not " + c.text_model_type);
  if (auto* n = dynamic_cast<NcclCommunicator*>(comm.get())) n->set_stream(m_->stream());
  m_->set_communicator(std::move(comm));
}

bool CudaBackend::copy_from_peer(const Backend& from, const void* src, void* dst, size_t bytes) {
  const auto* o = dynamic_cast<const CudaBackend*>(&from);
  if (!o) return false;
  HYPIC_CUDA_CHECK(cudaMemcpyPeerAsync(dst, m_->device(), src, o->m_->device(), bytes, m_->stream()));
  return true;
}

void CudaBackend::bind_thread() { HYPIC_CUDA_CHECK(cudaSetDevice(m_->device())); }

void CudaBackend::copy_shared(const void* src, void* dst, size_t bytes) {
  HYPIC_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, m_->stream()));
}

std::unique_ptr<State> CudaBackend::new_state() {
  return std::make_unique<CudaSequenceState>(CudaSequenceState::empty_for(config(), m_->stream_owner()));
}

std::unique_ptr<State> CudaBackend::clone(const State& s) {
  return std::make_unique<CudaSequenceState>(cuda_state(s).clone(m_->stream()));
}

void CudaBackend::reset(State& s) { cuda_state(s).reset(m_->stream()); }

std::unique_ptr<Rows> CudaBackend::rows(int64_t T) {
  auto r = std::make_unique<CudaRows>();
  r->T = T;
  r->a = m_->activations(T);
  return r;
}

void CudaBackend::embed(std::span<const int> ids, std::span<const int64_t> pos, Rows& r) { m_->embed(ids, pos, acts(r)); }
void CudaBackend::input_norm(int layer, Rows& r) { m_->input_norm(layer, acts(r)); }
void CudaBackend::post_norm(int layer, Rows& r) { m_->post_norm(layer, acts(r)); }
void CudaBackend::linear_project(int layer, Rows& r) { m_->linear_project(layer, acts(r)); }
void CudaBackend::linear_recur(int layer, Rows& r, int64_t row0, int64_t n, State& st, float* transfer) {
  m_->linear_recur(layer, acts(r), row0, n, cuda_state(st).lin[layer], transfer);
}
void CudaBackend::linear_body(int layer, Rows& r, int64_t row0, int64_t n, State& st, float* T, float* body) {
  m_->linear_body(layer, acts(r), row0, n, cuda_state(st).lin[layer], T, body);
}
void CudaBackend::linear_isolated(int layer, Rows& r, std::span<const IsolatedBlock> items) {
  std::vector<CudaModel::IsolatedBlock> blocks;
  for (const IsolatedBlock& b : items)
    blocks.push_back({b.row0, b.seam, b.n, b.T, b.body, b.full, static_cast<cuda::bf16*>(b.conv_tail)});
  if (!m_->linear_isolated(layer, acts(r), blocks)) Backend::linear_isolated(layer, r, items);
}
void CudaBackend::linear_chain(int layer, Rows& r, State& st, std::span<const ChainStep> steps, Composition how) {
  std::vector<CudaModel::ChainStep> chain;
  for (const ChainStep& c : steps)
    chain.push_back({static_cast<CudaModel::ChainStep::Kind>(c.kind), c.row0, c.n, c.T, c.body,
                     static_cast<const cuda::bf16*>(c.conv_tail), c.S_out, static_cast<cuda::bf16*>(c.tail_out)});
  if (!m_->linear_chain(layer, acts(r), cuda_state(st).lin[layer], chain, how == Composition::NaiveSum))
    Backend::linear_chain(layer, r, st, steps, how);
}
void CudaBackend::linear_output(int layer, Rows& r) { m_->linear_output(layer, acts(r)); }
void CudaBackend::attention_project(int layer, Rows& r) { m_->attention_project(layer, acts(r)); }
void CudaBackend::attention_core(int layer, Rows& r, int64_t row0, int64_t n, State& st) {
  m_->attention_core(layer, acts(r), row0, n, cuda_state(st).attn[layer]);
}
void CudaBackend::attention_output(int layer, Rows& r) { m_->attention_output(layer, acts(r)); }
void CudaBackend::ffn(int layer, Rows& r) { m_->ffn(layer, acts(r)); }

std::vector<float> CudaBackend::logits(Rows& r, std::span<const int64_t> rows) {
  if (rows.empty()) return {};
  bool contiguous = true;
  for (size_t i = 1; i < rows.size(); ++i) contiguous = contiguous && rows[i] == rows[i - 1] + 1;
  if (contiguous) return m_->logits(acts(r), rows[0], static_cast<int64_t>(rows.size()));
  std::vector<float> out;
  for (int64_t row : rows) {
    std::vector<float> one = m_->logits(acts(r), row, 1);
    out.insert(out.end(), one.begin(), one.end());
  }
  return out;
}

std::vector<float> CudaBackend::decode_step(int id, State& st) {
  if (m_->tensor_parallel()) return {};  // the captured step does not reduce over the ranks
  return m_->decode_step(id, cuda_state(st));
}

std::vector<float> CudaBackend::decode_batch(std::span<State* const> states, std::span<const int> ids) {
  if (m_->tensor_parallel()) return {};
  std::vector<CudaSequenceState*> cs;
  for (State* s : states) cs.push_back(&cuda_state(*s));
  return m_->decode_batch(ids, cs);
}

bool CudaBackend::decode_batch_drawn(std::span<State* const> states, std::span<const int> ids,
                                     std::span<const TokenDraw* const> draws, std::span<int> sampled,
                                     std::vector<std::vector<float>>& logits) {
  if (m_->tensor_parallel()) return false;
  std::vector<CudaSequenceState*> cs;
  for (State* s : states) cs.push_back(&cuda_state(*s));
  std::vector<cuda::RowDraw> rows(states.size());
  for (size_t i = 0; i < states.size(); ++i) {
    const TokenDraw* d = draws[i];
    if (!d) {
      rows[i] = {0.0f, 0, 1.0f, 0.0f, 1, 0};
      continue;
    }
    rows[i] = {d->params.temperature, static_cast<int32_t>(d->params.top_k), d->params.top_p, static_cast<float>(d->u),
               static_cast<int32_t>(d->vocab), 1};
  }
  return m_->decode_batch_drawn(ids, cs, rows, sampled, logits);
}

void CudaBackend::save_linear(int layer, const State& s, float* S, void* conv_tail) {
  const CudaLinearLayerState& st = cuda_state(s).lin[layer];
  cudaStream_t cs = m_->stream();
  if (S) HYPIC_CUDA_CHECK(cudaMemcpyAsync(S, st.S.get(), st.S.bytes(), cudaMemcpyDeviceToDevice, cs));
  if (conv_tail)
    HYPIC_CUDA_CHECK(cudaMemcpyAsync(conv_tail, st.conv_tail.get(), st.conv_tail.bytes(), cudaMemcpyDeviceToDevice, cs));
}

void CudaBackend::load_linear(int layer, State& s, const float* S, const void* conv_tail) {
  CudaLinearLayerState& st = cuda_state(s).lin[layer];
  cudaStream_t cs = m_->stream();
  if (S) HYPIC_CUDA_CHECK(cudaMemcpyAsync(st.S.get(), S, st.S.bytes(), cudaMemcpyDeviceToDevice, cs));
  if (conv_tail)
    HYPIC_CUDA_CHECK(cudaMemcpyAsync(st.conv_tail.get(), conv_tail, st.conv_tail.bytes(), cudaMemcpyDeviceToDevice, cs));
}

void CudaBackend::load_linear_layers(State& s, std::span<const LinearLoad> items) {
  CudaSequenceState& cs = cuda_state(s);
  std::vector<cuda::CopyRegion> regions;
  for (const LinearLoad& a : items) {
    const CudaLinearLayerState& st = cs.lin[a.layer];
    if (a.S) regions.push_back({a.S, st.S.get(), static_cast<int64_t>(st.S.bytes())});
    if (a.conv_tail) regions.push_back({a.conv_tail, st.conv_tail.get(), static_cast<int64_t>(st.conv_tail.bytes())});
  }
  cuda::copy_regions(regions.data(), static_cast<int64_t>(regions.size()), m_->stream());
}

void CudaBackend::compose_linear(int layer, State& s, const float* T, const float* body, Composition how,
                                 int64_t rotate) {
  const ModelConfig& c = config();
  CudaLinearLayerState& st = cuda_state(s).lin[layer];
  cudaStream_t cs = m_->stream();
  const int64_t n = static_cast<int64_t>(st.S.bytes() / sizeof(float));
  const bool scalar = transfer_shape(c).kind == cuda::TransferKind::Scalar;
  if (c.linear_rope && rotate != 0) {
    // The body's keys were rotated at local positions: move them (Ring, whose operator is a scalar, so the
    // scratch state is free to hold the moved body).
    HYPIC_ASSERT(scalar, "compose_linear: re-rotation with a dense operator");
    HYPIC_CUDA_CHECK(cudaMemcpyAsync(scratch_.get(), body, st.S.bytes(), cudaMemcpyDeviceToDevice, cs));
    cuda::rope_shift_state(scratch_.as<float>(), c.lin_v_heads, c.lin_k_dim, c.lin_v_dim, c.rotary_dim, rotate,
                           c.rope_theta, cs);
    body = scratch_.as<float>();
  }
  if (how == Composition::NaiveSum) {
    cuda::add_scaled(st.S.as<float>(), st.S.as<float>(), 1.0f, body, n, cs);
    return;
  }
  if (scalar) {
    cuda::scalar_transfer_apply(st.S.as<float>(), T, body, c.lin_v_heads, c.lin_k_dim * c.lin_v_dim, cs);
    return;
  }
  // The dense product may not write its own input: through the scratch state, then back.
  cuda::transfer_apply(transfer_shape(c), T, st.S.as<float>(), body, scratch_.as<float>(), cs);
  HYPIC_CUDA_CHECK(cudaMemcpyAsync(st.S.get(), scratch_.get(), st.S.bytes(), cudaMemcpyDeviceToDevice, cs));
}

void CudaBackend::empty_body(float* T, float* body) {
  cudaStream_t cs = m_->stream();
  if (transfer_shape(config()).kind == cuda::TransferKind::Scalar)
    cuda::fill_uniform(T, config().lin_v_heads, 1.0f, 1.0f, 0, cs);
  else
    cuda::identity_operators(T, config().lin_v_heads, config().lin_k_dim, cs);
  HYPIC_CUDA_CHECK(cudaMemsetAsync(body, 0, state_bytes(config()), cs));
}

void CudaBackend::shift_linear_state(float* S, int64_t delta) {
  const ModelConfig& c = config();
  if (c.linear_rope && delta != 0)
    cuda::rope_shift_state(S, c.lin_v_heads, c.lin_k_dim, c.lin_v_dim, c.rotary_dim, delta, c.rope_theta,
                           m_->stream());
}

void CudaBackend::append_kv(int layer, State& s, const void* k, const void* v, int64_t n,
                            std::span<const int64_t> pos, int64_t rotate) {
  if (n <= 0) return;
  HYPIC_ASSERT(static_cast<int64_t>(pos.size()) == n, "append_kv: one position per row");
  const ModelConfig& c = config();
  CudaAttentionLayerState& kv = cuda_state(s).attn[layer];
  const int64_t row = c.num_kv_heads * c.head_dim, r0 = kv.rows;
  cudaStream_t cs = m_->stream();
  kv.append(k, v, pos.data(), n, row, cs);
  if (rotate && c.rotary_dim > 0)
    cuda::rope_shift(kv.k.as<cuda::bf16>() + r0 * row, n, c.num_kv_heads, c.head_dim, c.rotary_dim, rotate,
                     c.rope_theta, cs);
}

void CudaBackend::attention_isolated(int layer, Rows& r, std::span<const IsolatedAttention> items) {
  std::vector<CudaModel::IsolatedAttention> its;
  for (const IsolatedAttention& a : items)
    its.push_back({a.row0, a.n, static_cast<cuda::bf16*>(a.k), static_cast<cuda::bf16*>(a.v)});
  m_->attention_isolated(layer, acts(r), its);
}

void CudaBackend::append_kv_ranges(int layer, State& s, std::span<const KvAppend> items) {
  std::vector<CudaModel::KvRange> ranges;
  for (const KvAppend& a : items)
    ranges.push_back({static_cast<const cuda::bf16*>(a.k), static_cast<const cuda::bf16*>(a.v), a.n, a.pos0, a.rotate});
  m_->append_kv_ranges(cuda_state(s).attn[layer], ranges);
}

void CudaBackend::save_kv(int layer, const State& s, int64_t row, int64_t n, void* k, void* v, int64_t at,
                          int64_t rotate) {
  if (n <= 0) return;
  const ModelConfig& c = config();
  const CudaAttentionLayerState& kv = cuda_state(s).attn[layer];
  HYPIC_ASSERT(row >= 0 && row + n <= kv.rows, "save_kv: rows out of range");
  const int64_t rw = c.num_kv_heads * c.head_dim;
  const size_t rb = sizeof(cuda::bf16) * rw;
  cudaStream_t cs = m_->stream();
  cuda::bf16* kd = static_cast<cuda::bf16*>(k) + at * rw;
  HYPIC_CUDA_CHECK(cudaMemcpyAsync(kd, kv.k.as<cuda::bf16>() + row * rw, rb * n, cudaMemcpyDeviceToDevice, cs));
  HYPIC_CUDA_CHECK(cudaMemcpyAsync(static_cast<cuda::bf16*>(v) + at * rw, kv.v.as<cuda::bf16>() + row * rw, rb * n,
                                   cudaMemcpyDeviceToDevice, cs));
  if (rotate && c.rotary_dim > 0) cuda::rope_shift(kd, n, c.num_kv_heads, c.head_dim, c.rotary_dim, rotate, c.rope_theta, cs);
}

void CudaBackend::save_kv_ranges(int layer, const State& s, std::span<const KvSave> items) {
  const ModelConfig& c = config();
  const CudaAttentionLayerState& kv = cuda_state(s).attn[layer];
  const int64_t rw = c.num_kv_heads * c.head_dim;
  const size_t rb = sizeof(cuda::bf16) * rw;
  std::vector<cuda::CopyRegion> regions;
  for (const KvSave& a : items) {
    if (a.n <= 0) continue;
    if (a.rotate && c.rotary_dim > 0) {  // re-rotated keys: a copy and a rotation of their own
      save_kv(layer, s, a.row, a.n, a.k, a.v, a.at, a.rotate);
      continue;
    }
    HYPIC_ASSERT(a.row >= 0 && a.row + a.n <= kv.rows, "save_kv_ranges: rows out of range");
    const int64_t bytes = static_cast<int64_t>(rb) * a.n;
    regions.push_back({kv.k.as<cuda::bf16>() + a.row * rw, static_cast<cuda::bf16*>(a.k) + a.at * rw, bytes});
    regions.push_back({kv.v.as<cuda::bf16>() + a.row * rw, static_cast<cuda::bf16*>(a.v) + a.at * rw, bytes});
  }
  cuda::copy_regions(regions.data(), static_cast<int64_t>(regions.size()), m_->stream());
}

int64_t CudaBackend::kv_rows(int layer, const State& s) const { return cuda_state(s).attn[layer].rows; }

void CudaBackend::reserve_kv(State& s, int64_t rows) {
  const ModelConfig& c = config();
  std::vector<int> layers;
  for (int l = 0; l < c.num_layers; ++l)
    if (c.layer_kinds[l] == LayerKind::FullAttention) layers.push_back(l);
  cuda_state(s).reserve_attention(layers, rows, c.num_kv_heads * c.head_dim, m_->stream());
}

CudaBackend::~CudaBackend() {
  // Copies may still read host buffers held in keep_: let them finish before the buffers go.
  cudaStreamSynchronize(copy_);
  cudaStreamSynchronize(m_->stream());
}

void CudaBackend::set_split_invariant(bool on) { m_->set_split_invariant(on); }

void CudaBackend::prepare_memory(size_t bytes) {
  // Room left beside it for the scratch pool, cuBLAS and the passes' plain allocations.
  constexpr size_t kLeaveFree = size_t{8} << 30;
  int device = 0;
  cudaMemPool_t pool;
  HYPIC_CUDA_CHECK(cudaGetDevice(&device));
  if (device != m_->device()) return;  // cudaMemGetInfo below answers for the current device
  HYPIC_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  size_t reserved = 0, used = 0, free_b = 0, total = 0;
  HYPIC_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
  HYPIC_CUDA_CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
  HYPIC_CUDA_CHECK(cudaMemGetInfo(&free_b, &total));
  const size_t idle = reserved - used;  // mapped already, not in use
  if (bytes <= idle || free_b <= kLeaveFree) return;
  const size_t grow = std::min(bytes - idle, free_b - kLeaveFree);
  // One block taken and given back: the pool keeps the memory (its release threshold is unlimited).
  void* p = nullptr;
  cudaStream_t s = m_->stream();
  if (cudaMallocAsync(&p, grow, s) != cudaSuccess) {
    (void)cudaGetLastError();  // only a head start: the pool grows on demand as before
    return;
  }
  HYPIC_CUDA_CHECK(cudaFreeAsync(p, s));
  HYPIC_CUDA_CHECK(cudaStreamSynchronize(s));
}

void CudaBackend::sync() {
  HYPIC_CUDA_CHECK(cudaStreamSynchronize(m_->stream()));
  // Every queued expansion waited for its copy: the host buffers are free.
  std::vector<std::shared_ptr<const void>> done;
  {
    std::lock_guard<std::mutex> g(keep_mu_);
    done.swap(keep_);
  }
}

std::unique_ptr<Memory> CudaBackend::allocate_host(size_t bytes) { return pinned_->allocate(bytes); }

void CudaBackend::pack_to_host(std::span<const PackPiece> pieces, char* packed, size_t bytes) {
  if (bytes == 0) return;
  const size_t table_at = (bytes + 255) / 256 * 256, table_bytes = pieces.size() * sizeof(PackPiece);
  std::unique_ptr<Memory> table = pinned_->allocate(std::max<size_t>(table_bytes, 1));
  if (table_bytes) std::memcpy(table->data(), pieces.data(), table_bytes);
  uint64_t max_n = 0;
  for (const PackPiece& p : pieces) max_n = std::max(max_n, p.n);
  const cudaStream_t s = m_->stream();
  char* dev = nullptr;
  // Packed on the model's stream (after the work that wrote the arrays), copied out in one piece.
  HYPIC_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&dev), table_at + table_bytes, s));
  HYPIC_CUDA_CHECK(cudaMemcpyAsync(dev + table_at, table->data(), table_bytes, cudaMemcpyHostToDevice, s));
  cuda::pack_arrays(dev, reinterpret_cast<const PackPiece*>(dev + table_at), static_cast<int64_t>(pieces.size()),
                    max_n, s);
  HYPIC_CUDA_CHECK(cudaMemcpyAsync(packed, dev, bytes, cudaMemcpyDeviceToHost, s));
  HYPIC_CUDA_CHECK(cudaFreeAsync(dev, s));
  sync();
}

std::vector<float> CudaBackend::head_max_abs(const float* x, size_t heads, size_t per_head) {
  std::vector<float> out(heads);
  if (heads == 0) return out;
  const cudaStream_t s = m_->stream();
  float* dev = nullptr;
  HYPIC_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&dev), heads * sizeof(float), s));
  cuda::head_max_abs(x, static_cast<int64_t>(heads), static_cast<int64_t>(per_head), dev, s);
  HYPIC_CUDA_CHECK(cudaMemcpyAsync(out.data(), dev, heads * sizeof(float), cudaMemcpyDeviceToHost, s));
  HYPIC_CUDA_CHECK(cudaFreeAsync(dev, s));
  sync();
  return out;
}

void CudaBackend::expand_from_host(std::shared_ptr<const void> keep, const char* packed, size_t bytes,
                                   std::span<const ExpandPiece> pieces) {
  if (pieces.empty()) return;
  // The piece table travels with the record: pinned too, so both copies are queued without a wait.
  const size_t table_at = (bytes + 255) / 256 * 256, table_bytes = pieces.size() * sizeof(ExpandPiece);
  std::shared_ptr<Memory> table = pinned_->allocate(table_bytes);
  std::memcpy(table->data(), pieces.data(), table_bytes);
  uint64_t max_n = 0;
  for (const ExpandPiece& p : pieces) max_n = std::max(max_n, p.n);
  const cudaStream_t s = m_->stream();
  char* dev = nullptr;
  HYPIC_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&dev), table_at + table_bytes, copy_));
  HYPIC_CUDA_CHECK(cudaMemcpyAsync(dev, packed, bytes, cudaMemcpyHostToDevice, copy_));
  HYPIC_CUDA_CHECK(cudaMemcpyAsync(dev + table_at, table->data(), table_bytes, cudaMemcpyHostToDevice, copy_));
  HYPIC_CUDA_CHECK(cudaEventRecord(copied_.get(), copy_));
  // The model's stream waits for this copy only (work queued on it before goes on meanwhile), expands,
  // and frees the staging once the kernel is done.
  HYPIC_CUDA_CHECK(cudaStreamWaitEvent(s, copied_.get(), 0));
  cuda::expand_packed(dev, reinterpret_cast<const ExpandPiece*>(dev + table_at), static_cast<int64_t>(pieces.size()),
                      max_n, s);
  HYPIC_CUDA_CHECK(cudaFreeAsync(dev, s));
  std::lock_guard<std::mutex> g(keep_mu_);
  keep_.push_back(std::move(keep));
  keep_.push_back(std::move(table));
}

std::unique_ptr<SequenceState> CudaBackend::to_host(const State& s) {
  sync();
  return std::make_unique<SequenceState>(cuda_state(s).download(config()));
}

std::vector<float> CudaBackend::to_host(const void* data, size_t n, DType t) {
  HYPIC_ASSERT(t == DType::F32 || t == DType::BF16, "CUDA backend memory holds fp32 or bf16");
  sync();
  std::vector<float> out(n);
  if (t == DType::F32) {
    HYPIC_CUDA_CHECK(cudaMemcpy(out.data(), data, sizeof(float) * n, cudaMemcpyDeviceToHost));
    return out;
  }
  std::vector<uint16_t> raw(n);
  HYPIC_CUDA_CHECK(cudaMemcpy(raw.data(), data, 2 * n, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(raw[i]);
  return out;
}

// Ordered on the model's stream (after the work that wrote an entry), then waited for: the host copy is
// complete on return. Pageable host memory makes these copies synchronous anyway.
void CudaBackend::copy_to_host(const void* src, void* host_dst, size_t bytes) {
  if (!bytes) return;
  HYPIC_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, m_->stream()));
  sync();
}
void CudaBackend::copy_from_host(const void* host_src, void* dst, size_t bytes) {
  if (!bytes) return;
  HYPIC_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, m_->stream()));
  sync();
}

}  // namespace hypic
