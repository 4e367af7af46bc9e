#include "runtime/tensor_parallel.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include "kernels/dtype.h"
#include "runtime/backends.h"
#include "runtime/cpu_backend.h"
#include "runtime/error.h"
#ifdef HYPIC_WITH_CUDA
#include "kernels/cuda/check.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/nccl_communicator.h"
#endif

namespace hypic {
namespace {

size_t element_bytes(const Linear& l) { return dtype_size(l.dtype); }

// Rows [row0, row0 + n) of l: a view.
Linear rows_view(const Linear& l, int64_t row0, int64_t n) {
  HYPIC_ASSERT(row0 >= 0 && row0 + n <= l.out, "row slice outside the matrix");
  Linear s = l;
  s.data = static_cast<const char*>(l.data) + static_cast<size_t>(row0 * l.in) * element_bytes(l);
  s.out = n;
  return s;
}

// Several row ranges of l stacked, or columns [col0, col0 + n) of every row: copies kept in `owned`.
Linear rows_copy(const Linear& l, const std::vector<std::pair<int64_t, int64_t>>& ranges,
                 std::vector<std::shared_ptr<std::vector<char>>>& owned) {
  const size_t row_bytes = static_cast<size_t>(l.in) * element_bytes(l);
  int64_t n = 0;
  for (auto [r0, k] : ranges) n += k;
  auto buf = std::make_shared<std::vector<char>>(static_cast<size_t>(n) * row_bytes);
  char* dst = buf->data();
  for (auto [r0, k] : ranges) {
    HYPIC_ASSERT(r0 >= 0 && r0 + k <= l.out, "row range outside the matrix");
    std::memcpy(dst, static_cast<const char*>(l.data) + static_cast<size_t>(r0) * row_bytes, static_cast<size_t>(k) * row_bytes);
    dst += static_cast<size_t>(k) * row_bytes;
  }
  Linear s = l;
  s.data = buf->data();
  s.out = n;
  owned.push_back(std::move(buf));
  return s;
}

Linear cols_copy(const Linear& l, int64_t col0, int64_t n, std::vector<std::shared_ptr<std::vector<char>>>& owned) {
  HYPIC_ASSERT(col0 >= 0 && col0 + n <= l.in, "column slice outside the matrix");
  const size_t es = element_bytes(l);
  auto buf = std::make_shared<std::vector<char>>(static_cast<size_t>(l.out * n) * es);
  for (int64_t o = 0; o < l.out; ++o)
    std::memcpy(buf->data() + static_cast<size_t>(o * n) * es,
                static_cast<const char*>(l.data) + static_cast<size_t>(o * l.in + col0) * es, static_cast<size_t>(n) * es);
  Linear s = l;
  s.data = buf->data();
  s.in = n;
  owned.push_back(std::move(buf));
  return s;
}

std::vector<float> slice(const std::vector<float>& v, int64_t at, int64_t n) {
  HYPIC_ASSERT(at >= 0 && at + n <= static_cast<int64_t>(v.size()), "vector slice outside the vector");
  return {v.begin() + at, v.begin() + at + n};
}

void shard_mlp(MlpWeights& m, int64_t I, int rank, int ranks, std::vector<std::shared_ptr<std::vector<char>>>& owned) {
  const int64_t n = I / ranks, at = rank * n;
  m.gate = rows_view(m.gate, at, n);
  m.up = rows_view(m.up, at, n);
  m.down = cols_copy(m.down, at, n, owned);
}

void must_divide(int64_t what, int ranks, const std::string& name) {
  if (what % ranks != 0)
    throw InvalidArgument(name + " (" + std::to_string(what) + ") does not divide over " + std::to_string(ranks) +
                          " tensor-parallel ranks");
}

}  // namespace

void check_tensor_parallel(const ModelConfig& c, int ranks) {
  if (ranks < 1) throw InvalidArgument("tensor parallelism needs at least one rank, got " + std::to_string(ranks));
  if (c.linear_kind != LinearKind::GatedDeltaNet || c.mla || c.residual_from_norm)
    throw InvalidArgument("tensor parallelism covers the Qwen3-Next / Qwen3.5 layers, not " + c.text_model_type);
  must_divide(c.num_heads, ranks, "num_attention_heads");
  must_divide(c.num_kv_heads, ranks, "num_key_value_heads");
  must_divide(c.lin_k_heads, ranks, "linear_num_key_heads");
  must_divide(c.lin_v_heads, ranks, "linear_num_value_heads");
  bool dense = false, moe = false;
  for (int64_t l = 0; l < c.num_layers; ++l) (c.layer_is_moe[static_cast<size_t>(l)] ? moe : dense) = true;
  if (dense) must_divide(c.intermediate_size, ranks, "intermediate_size");
  if (moe) {
    must_divide(c.moe_intermediate_size, ranks, "moe_intermediate_size");
    must_divide(c.shared_expert_intermediate_size, ranks, "shared_expert_intermediate_size");
  }
}

ModelConfig shard_config(const ModelConfig& cfg, int rank, int ranks) {
  check_tensor_parallel(cfg, ranks);
  ModelConfig c = cfg;
  c.num_heads /= ranks;
  c.num_kv_heads /= ranks;
  c.lin_k_heads /= ranks;
  c.lin_v_heads /= ranks;
  c.intermediate_size /= ranks;
  c.moe_intermediate_size /= ranks;
  c.shared_expert_intermediate_size /= ranks;
  c.fingerprint += "|tp" + std::to_string(rank) + "/" + std::to_string(ranks);
  return c;
}

ModelWeights shard_weights(const ModelConfig& cfg, const ModelWeights& w, int rank, int ranks) {
  check_tensor_parallel(cfg, ranks);
  HYPIC_ASSERT(rank >= 0 && rank < ranks, "rank outside the group");
  ModelWeights s = w;
  s.fingerprint += "|tp" + std::to_string(rank) + "/" + std::to_string(ranks);
  if (ranks == 1) return s;
  const int64_t key_dim = cfg.lin_key_dim(), value_dim = cfg.lin_value_dim();
  const int64_t kd = key_dim / ranks, vd = value_dim / ranks, hv = cfg.lin_v_heads / ranks;
  const int64_t K = cfg.conv_kernel;
  const int64_t qrow = cfg.head_dim * (cfg.attn_output_gate ? 2 : 1);
  const int64_t h = cfg.num_heads / ranks, hkv = cfg.num_kv_heads / ranks;
  for (LayerWeights& L : s.layers) {
    if (L.kind == LayerKind::LinearAttention) {
      GatedDeltaNetWeights& g = L.lin;
      // q | k | v channels of this rank's heads, in the same order (the conv runs over them as they are).
      const std::vector<std::pair<int64_t, int64_t>> ch = {
          {rank * kd, kd}, {key_dim + rank * kd, kd}, {2 * key_dim + rank * vd, vd}};
      g.in_qkv = rows_copy(g.in_qkv, ch, s.owned);
      g.in_z = rows_view(g.in_z, rank * vd, vd);
      g.in_b = rows_view(g.in_b, rank * hv, hv);
      g.in_a = rows_view(g.in_a, rank * hv, hv);
      g.out = cols_copy(g.out, rank * vd, vd, s.owned);
      std::vector<float> conv;
      for (auto [c0, n] : ch) {
        const auto part = slice(g.conv_w, c0 * K, n * K);
        conv.insert(conv.end(), part.begin(), part.end());
      }
      g.conv_w = std::move(conv);
      g.A_log = slice(g.A_log, rank * hv, hv);
      g.dt_bias = slice(g.dt_bias, rank * hv, hv);
    } else {
      AttentionWeights& a = L.attn;
      a.q = rows_view(a.q, rank * h * qrow, h * qrow);
      a.k = rows_view(a.k, rank * hkv * cfg.head_dim, hkv * cfg.head_dim);
      a.v = rows_view(a.v, rank * hkv * cfg.head_dim, hkv * cfg.head_dim);
      a.o = cols_copy(a.o, rank * h * cfg.head_dim, h * cfg.head_dim, s.owned);
    }
    if (L.moe) {
      for (MlpWeights& e : L.moe_w.experts) shard_mlp(e, cfg.moe_intermediate_size, rank, ranks, s.owned);
      if (L.moe_w.has_shared) shard_mlp(L.moe_w.shared, cfg.shared_expert_intermediate_size, rank, ranks, s.owned);
    } else {
      shard_mlp(L.mlp, cfg.intermediate_size, rank, ranks, s.owned);
    }
  }
  return s;
}

// ---- the group ----

namespace {

std::vector<int> rank_devices(int ranks, std::vector<int> devices) {
  if (devices.empty())
    for (int r = 0; r < ranks; ++r) devices.push_back(r);
  if (static_cast<int>(devices.size()) != ranks)
    throw InvalidArgument(std::to_string(devices.size()) + " CUDA devices given for " + std::to_string(ranks) + " ranks");
  return devices;
}

bool distinct(std::vector<int> v) {
  std::sort(v.begin(), v.end());
  return std::adjacent_find(v.begin(), v.end()) == v.end();
}

}  // namespace

std::unique_ptr<TensorParallelGroup> TensorParallelGroup::open(const std::string& dir, int ranks, Device device,
                                                               std::vector<int> cuda_devices) {
  const ModelConfig cfg = ModelConfig::load(dir + "/config.json");
  check_tensor_parallel(cfg, ranks);
  if (device == Device::Cuda) {
    if (!cuda_built()) throw InvalidArgument("device 'cuda': this hypic was built without the CUDA backend");
    cfg.check_cuda_supported();
  }
  const std::vector<int> devs = device == Device::Cuda ? rank_devices(ranks, cuda_devices) : std::vector<int>{};
  const ModelWeights w = ModelWeights::load(cfg, dir);
  std::unique_ptr<TensorParallelGroup> g(new TensorParallelGroup());
  g->device_ = device;
#ifdef HYPIC_WITH_CUDA
  int before = 0;
  if (device == Device::Cuda) HYPIC_CUDA_CHECK(cudaGetDevice(&before));
#endif
  for (int r = 0; r < ranks; ++r) {
    const ModelConfig c = shard_config(cfg, r, ranks);
    ModelWeights s = shard_weights(cfg, w, r, ranks);
    if (device == Device::Cpu) {
      g->backends_.push_back(std::make_unique<CpuBackend>(c, std::move(s)));
    } else {
#ifdef HYPIC_WITH_CUDA
      HYPIC_CUDA_CHECK(cudaSetDevice(devs[static_cast<size_t>(r)]));
      g->backends_.push_back(std::make_unique<CudaBackend>(CudaModel::upload(c, s)));
#endif
    }
  }
#ifdef HYPIC_WITH_CUDA
  if (device == Device::Cuda) HYPIC_CUDA_CHECK(cudaSetDevice(before));  // the caller's device again
#endif
  g->connect(devs);
  return g;
}

std::unique_ptr<TensorParallelGroup> TensorParallelGroup::random(const ModelConfig& cfg, int ranks, uint64_t seed,
                                                                 std::vector<int> cuda_devices) {
  check_tensor_parallel(cfg, ranks);
  if (!cuda_built()) throw InvalidArgument("random weights are generated on the GPU: this build has no CUDA backend");
  const std::vector<int> devs = rank_devices(ranks, cuda_devices);
  std::unique_ptr<TensorParallelGroup> g(new TensorParallelGroup());
  g->device_ = Device::Cuda;
#ifdef HYPIC_WITH_CUDA
  int before = 0;
  HYPIC_CUDA_CHECK(cudaGetDevice(&before));
  for (int r = 0; r < ranks; ++r) {
    HYPIC_CUDA_CHECK(cudaSetDevice(devs[static_cast<size_t>(r)]));
    g->backends_.push_back(std::make_unique<CudaBackend>(CudaModel::random(shard_config(cfg, r, ranks), seed + r)));
  }
  HYPIC_CUDA_CHECK(cudaSetDevice(before));  // the caller's device again
#endif
  g->connect(devs);
  return g;
}

void TensorParallelGroup::connect(const std::vector<int>& devices) {
  std::vector<std::shared_ptr<Communicator>> comms;
  if (device_ == Device::Cpu) {
    comms = ThreadCommunicator::group(ranks());
  } else if (distinct(devices)) {
#ifdef HYPIC_WITH_CUDA
    comms = NcclCommunicator::group(devices);
#endif
  } else {
    for (auto& c : ThreadCommunicator::group(ranks()))
      comms.push_back(std::make_shared<StagedCommunicator>(*backends_[comms.size()], c));
  }
  for (int r = 0; r < ranks(); ++r) backends_[static_cast<size_t>(r)]->set_communicator(comms[static_cast<size_t>(r)]);
  comms_ = std::move(comms);
}

TensorParallelGroup::~TensorParallelGroup() = default;

void TensorParallelGroup::each(const std::function<void(int)>& f) {
  if (aborted_) throw DeviceError("the tensor-parallel group was aborted after a rank failed: open a new one");
  std::vector<std::exception_ptr> failed(backends_.size());
  std::mutex abort_mu;
  auto one = [&](int r) {
    try {
      backends_[static_cast<size_t>(r)]->bind_thread();
      f(r);
    } catch (...) {
      failed[static_cast<size_t>(r)] = std::current_exception();
      std::lock_guard<std::mutex> g(abort_mu);
      if (!aborted_ && ranks() > 1) {
        aborted_ = true;
        for (auto& c : comms_) c->abort();  // the other ranks' reductions now throw instead of waiting
      }
    }
  };
  std::vector<std::thread> threads;
  for (int r = 1; r < ranks(); ++r) threads.emplace_back(one, r);
  one(0);
  for (auto& t : threads) t.join();
  for (auto& e : failed)
    if (e) std::rethrow_exception(e);
}

// ---- the engine ----

TensorParallelEngine::TensorParallelEngine(TensorParallelGroup& group, CacheMode mode, EngineOptions opt) : g_(group) {
  for (int r = 0; r < g_.ranks(); ++r) engines_.push_back(std::make_unique<Engine>(g_.rank(r), mode, opt));
}

TensorParallelEngine::~TensorParallelEngine() = default;

// Engine::begin's and Engine::forward's checks are made once here, before the ranks start: a request they
// refuse must not fail on some ranks between collectives.
PromptResult TensorParallelEngine::run(const std::vector<PromptBlock>& blocks, States& states) {
  check_prompt_for(g_.rank(0).config(), blocks);
  std::vector<PromptResult> res(engines_.size());
  g_.each([&](int r) { res[static_cast<size_t>(r)] = engines_[static_cast<size_t>(r)]->run(blocks); });
  states.state.clear();
  for (auto& x : res) states.state.push_back(std::move(x.state));
  return std::move(res[0]);
}

std::vector<float> TensorParallelEngine::forward(std::span<const int> ids, States& states) {
  HYPIC_ASSERT(states.state.size() == engines_.size(), "a state per rank");
  if (ids.empty()) throw InvalidArgument("forward: no tokens");
  check_token_ids(g_.rank(0).config(), ids, "the tokens");
  g_.rank(0).config().check_length(states.state[0]->length + static_cast<int64_t>(ids.size()));
  std::vector<std::vector<float>> out(engines_.size());
  g_.each([&](int r) {
    out[static_cast<size_t>(r)] = engines_[static_cast<size_t>(r)]->forward(ids, *states.state[static_cast<size_t>(r)]);
  });
  return std::move(out[0]);
}

std::vector<int> TensorParallelEngine::greedy_decode(const std::vector<float>& first, States& states, int n) {
  return greedy_tokens(first, n, -1, [&](int next) {
    const int one[1] = {next};
    return forward(one, states);
  });
}

}  // namespace hypic
