#include "runtime/cuda/cuda_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <climits>
#include <cstring>
#include <filesystem>
#include <numeric>

#include "kernels/cuda/activation.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/conv1d.h"
#include "kernels/cuda/delta_rule.h"
#include "kernels/cuda/engine_state_ops.h"
#include "kernels/cuda/family_glue.h"
#include "kernels/cuda/gemm_skinny_sm90.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/kda.h"
#include "kernels/cuda/kv_cache.h"
#include "kernels/cuda/lightning.h"
#include "kernels/cuda/model_glue.h"
#include "kernels/cuda/moe.h"
#include "kernels/cuda/moe_grouped_mma.h"
#include "kernels/cuda/moe_layer_decode.h"
#include "kernels/cuda/moe_tiled.h"
#include "kernels/cuda/moe_tiled_sm90.h"
#include "kernels/cuda/moe_small.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/param_copies.h"
#include "kernels/cuda/rope.h"
#include "runtime/cuda/batch_step.h"
#include "runtime/error.h"

namespace hypic {
namespace fs = std::filesystem;
using cuda::bf16;
using cuda::DeviceBuffer;

namespace {
// Below this many tokens the delta rule runs in its recurrent form (as the CPU forward pass does) and
// attention in its split-key decode form; above, the chunked / flash prefill kernels.
constexpr int64_t kChunkedMinTokens = 16;
constexpr int64_t kDecodeMaxRows = 16;
// Up to this many routed (token, expert) rows the MoE runs on the few-row GEMV kernels.
constexpr int64_t kSmallMoeRows = 64;
// Up to this many, the expert-major kernels (each expert's weights read once for its rows, no host round
// trip); above, the grouped GEMMs. The tensor-core kernels (moe_grouped_mma.h) stay ahead of the grouped
// GEMMs for many more rows than the CUDA-core ones (docs/benchmarks.md, `hypic_bench_kernels --only moe`).
constexpr int64_t kDeviceMoeRows = 1024;
constexpr int64_t kDeviceMmaMoeRows = 4096;
// On Hopper, an MoE of this many tokens or more (a stitch, a short prefill, a decode batch) takes the tiled
// wgmma kernels (moe_tiled_sm90.h, weights by TMA) over the few-row and expert-major ones: they stream the
// experts 16% faster than the few-row kernels at 8 tokens and 5-13% faster than the expert-major ones at 16
// to 158 (`hypic_bench_kernels --only moe`); the captured decode step at batch 8 takes 16% less with them,
// at batch 32 6% less (docs/benchmarks.md).
constexpr int64_t kTiledFirstMoeTokens = 8;
// Up to this many rows in all, a linear layer's segment chain runs its rows token by token inside the
// state chain (cuda::state_chain row steps) instead of through the chunked kernels.
constexpr int64_t kChainRecurrentRows = 256;
// Decode graphs kept per model (one per sequence buffers / KV capacity), least recently used dropped.
constexpr size_t kDecodeGraphs = 4;
}  // namespace

// What the captured one-token step reads and writes: fixed buffers, plus the step's inputs uploaded
// from pinned host memory before each replay.
struct CudaModel::DecodeGraph {
  struct Step {
    int32_t id;
    int32_t rows_end;  // KV rows after this step's append
    int64_t pos;
  };
  CudaActivations a;           // T = 1
  DeviceBuffer rows_end;       // int32
  DeviceBuffer kbuf, vbuf;     // bf16 [Hkv * hd]: this step's key and value before the append
  DeviceBuffer att_ws;         // attention_decode workspace for `capacity` keys
  DeviceBuffer logits;         // fp32 [V]
  std::vector<const void*> bound;  // the state's buffers the graph was captured with
  int64_t capacity = 0;
  Step* host = nullptr;  // pinned
  cudaGraphExec_t exec = nullptr;

  ~DecodeGraph() {
    if (exec) cudaGraphExecDestroy(exec);
    if (host) cudaFreeHost(host);
  }
};

CudaModel::CudaModel(ModelConfig cfg, std::string fingerprint, std::shared_ptr<DeviceWeights> shared)
    : cfg_(std::move(cfg)),
      fingerprint_(std::move(fingerprint)),
      shared_w_(shared ? std::move(shared) : std::make_shared<DeviceWeights>()),
      w_(*shared_w_) {
  const char* env = std::getenv("HYPIC_CUDA_GRAPHS");
  graphs_on_ = !(env && std::strcmp(env, "0") == 0);
  HYPIC_CUDA_CHECK(cudaGetDevice(&device_));
  HYPIC_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device_));
  const char* inv = std::getenv("HYPIC_CUDA_SPLIT_INVARIANT");
  split_invariant_ = inv && std::strcmp(inv, "1") == 0;
  const char* batch = std::getenv("HYPIC_CUDA_BATCH_DECODE");
  batch_on_ = !(batch && std::strcmp(batch, "0") == 0);
  const char* fusion = std::getenv("HYPIC_CUDA_DECODE_FUSION");
  fusion_on_ = !(fusion && std::strcmp(fusion, "0") == 0);
  const char* pf = std::getenv("HYPIC_CUDA_PREFILL_FUSION");
  prefill_fusion_ = !(pf && std::strcmp(pf, "0") == 0);
  if (const char* cr = std::getenv("HYPIC_CUDA_GDN_CONV_RECURRENT")) conv_recurrent_ = std::strcmp(cr, "0") == 0 ? 0 : 1;
  if (const char* ol = std::getenv("HYPIC_CUDA_MOE_ONE_LAUNCH")) moe_one_launch_ = std::strcmp(ol, "0") == 0 ? 0 : 1;
  moe_mma_ = cuda::moe_grouped_mma_supported(cfg_.hidden_size, cfg_.moe_intermediate_size);
  device_moe_rows_ = moe_mma_ ? kDeviceMmaMoeRows : kDeviceMoeRows;
  if (const char* rows = std::getenv("HYPIC_CUDA_MOE_DEVICE_ROWS")) {
    char* end = nullptr;
    const long long v = std::strtoll(rows, &end, 10);
    if (end == rows || *end != '\0' || v < 0)
      throw InvalidArgument(std::string("HYPIC_CUDA_MOE_DEVICE_ROWS='") + rows + "' is not a row count (an integer >= 0)");
    device_moe_rows_ = v;
  }
  const char* tiled = std::getenv("HYPIC_CUDA_MOE_TILED");
  moe_tiled_ = !(tiled && std::strcmp(tiled, "0") == 0);
  moe_tiled_first_ = moe_tiled_ && !std::getenv("HYPIC_CUDA_MOE_DEVICE_ROWS") &&
                     cuda::moe_tiled_sm90_gate_up_applies(cfg_.hidden_size, cfg_.moe_intermediate_size) &&
                     cuda::moe_tiled_sm90_down_applies(cfg_.hidden_size, cfg_.moe_intermediate_size);
  tiled_first_tokens_ = kTiledFirstMoeTokens;
  if (const char* tokens = std::getenv("HYPIC_CUDA_MOE_TILED_TOKENS")) {  // for A/B runs
    char* end = nullptr;
    const long long v = std::strtoll(tokens, &end, 10);
    if (end == tokens || *end != '\0' || v < 1)
      throw InvalidArgument(std::string("HYPIC_CUDA_MOE_TILED_TOKENS='") + tokens + "' is not a token count (>= 1)");
    tiled_first_tokens_ = v;
  }
}

CudaModel::~CudaModel() = default;

std::unique_ptr<CudaModel> CudaModel::sibling() const {
  std::unique_ptr<CudaModel> m(new CudaModel(cfg_, fingerprint_, shared_w_));
  m->graphs_on_ = graphs_on_;
  m->split_invariant_ = split_invariant_;
  m->batch_on_ = batch_on_;
  m->fusion_on_ = fusion_on_;
  m->prefill_fusion_ = prefill_fusion_;
  m->conv_recurrent_ = conv_recurrent_;
  m->moe_one_launch_ = moe_one_launch_;
  m->device_moe_rows_ = device_moe_rows_;
  m->moe_tiled_ = moe_tiled_;
  m->moe_tiled_first_ = moe_tiled_first_;
  m->tiled_first_tokens_ = tiled_first_tokens_;
  return m;
}

void CudaModel::set_decode_graphs(bool on) {
  graphs_on_ = on;
  if (!on) {
    graphs_.clear();
    batch_steps_.clear();
  }
}

bool CudaModel::conv_recurrent_rows(int64_t N) const {
  if (!fusion_on_ || split_invariant_ || conv_recurrent_ == 0 || cfg_.linear_kind != LinearKind::GatedDeltaNet ||
      cfg_.lin_k_dim > 128 || cfg_.conv_kernel < 2 || cfg_.conv_kernel > 8)
    return false;
  return conv_recurrent_ == 1 || N * cfg_.lin_v_heads * ((cfg_.lin_v_dim + 31) / 32) <= sm_count_;
}

bool CudaModel::moe_one_launch() const {
  if (moe_one_launch_ != 1 || !fusion_on_ || split_invariant_ || tensor_parallel() || cfg_.residual_from_norm ||
      cfg_.router != RouterKind::SoftmaxTopK || cfg_.num_experts <= 0)
    return false;
  return cuda::moe_layer_decode_supported(cfg_.num_experts, cfg_.experts_per_tok, cfg_.hidden_size,
                                          cfg_.moe_intermediate_size, cfg_.shared_expert_intermediate_size);
}

bool CudaModel::small_moe(int64_t T) const {
  const int64_t K = cfg_.experts_per_tok, I = cfg_.moe_intermediate_size, D = cfg_.hidden_size;
  return T * K <= kSmallMoeRows && D % 8 == 0 && I % 8 == 0 && K * I <= 16384;
}

bool CudaModel::grouped_moe_on_device(int64_t T) const {
  const int64_t K = cfg_.experts_per_tok, I = cfg_.moe_intermediate_size, D = cfg_.hidden_size;
  return T * K > kSmallMoeRows && T * K <= device_moe_rows_ && D % 8 == 0 && I % 8 == 0 && cfg_.num_experts <= 1024;
}

bool CudaModel::tiled_moe(int64_t T) const {
  return moe_tiled_ && !small_moe(T) && !grouped_moe_on_device(T) &&
         cuda::moe_tiled_supported(cfg_.hidden_size, cfg_.moe_intermediate_size, T * cfg_.experts_per_tok,
                                   cfg_.num_experts);
}

bool CudaModel::tiled_moe_first(int64_t T) const {
  return moe_tiled_first_ && T >= tiled_first_tokens_ &&
         cuda::moe_tiled_supported(cfg_.hidden_size, cfg_.moe_intermediate_size, T * cfg_.experts_per_tok,
                                   cfg_.num_experts);
}

std::unique_ptr<CudaModel> CudaModel::load(const std::string& dir) {
  if (!fs::is_directory(dir)) throw IoError("model directory '" + dir + "' does not exist");
  ModelConfig cfg = ModelConfig::load((fs::path(dir) / "config.json").string());
  cfg.check_cuda_supported();
  const ModelWeights w = ModelWeights::load(cfg, dir);
  return upload(cfg, w);
}

std::unique_ptr<CudaModel> CudaModel::upload(const ModelConfig& cfg, const ModelWeights& w) {
  cfg.check_cuda_supported();
  std::unique_ptr<CudaModel> m(new CudaModel(cfg, w.fingerprint));
  m->w_ = DeviceWeights::upload(cfg, w, m->stream_);
  return m;
}

std::unique_ptr<CudaModel> CudaModel::random(const ModelConfig& cfg, uint64_t seed) {
  cfg.check_cuda_supported();
  std::unique_ptr<CudaModel> m(new CudaModel(cfg, "random-" + cfg.fingerprint + "-" + std::to_string(seed)));
  m->w_ = DeviceWeights::random(cfg, seed, m->stream_);
  return m;
}

void CudaModel::gemm(const bf16* x, int64_t T, int64_t ldx, const DeviceLinear& w, void* y, DType yt,
                     bool accumulate) {
  // One row: a pass over the weights, which cuda::gemv streams at a higher rate than cuBLAS's kernels for
  // these shapes (and in one launch where cuBLASLt may take two).
  if (T == 1 && fusion_on_ && !split_invariant_ && w.in % 8 == 0 && w.in <= cuda::kGemvMaxK &&
      reinterpret_cast<uintptr_t>(x) % 16 == 0 && (!accumulate || yt == DType::F32)) {
    cuda::GemvInput in;
    in.x = x;
    const cuda::GemvTarget t{w.w, w.out, y, yt, accumulate ? cuda::GemvEpilogue::Add : cuda::GemvEpilogue::Store};
    cuda::gemv(in, w.in, &t, 1, stream_);
    return;
  }
  // Up to 160 rows the product is a stream over the weights: cuda::gemm_skinny keeps every SM streaming where
  // cuBLAS's tiles leave most of them idle, and launches programmatically (its header). The split-invariant
  // mode keeps cuBLAS, the reference the other modes are checked against.
  if (skinny_rows(T) && cuda::gemm_skinny_applies(x, T, w.in, ldx, w.w, w.out, y, yt, w.out, accumulate)) {
    cuda::gemm_skinny(x, T, w.in, ldx, w.w, w.out, y, yt, w.out, accumulate, stream_);
    return;
  }
  cuda::gemm_xwt(blas_, x, T, w.in, ldx, w.w, w.out, y, yt, w.out, accumulate, stream_);
}

bool CudaModel::skinny_rows(int64_t T) const {
  return !split_invariant_ && T <= cuda::kGemmSkinnyPreferredRows && cuda::gemm_skinny_enabled();
}

void CudaModel::gemm_same_rows(const bf16* x, int64_t T, int64_t ldx, std::initializer_list<Product> products) {
  HYPIC_ASSERT(products.size() >= 1 && products.size() <= cuda::kGemmSkinnyMaxTargets,
               "gemm_same_rows: one to three products");
  const int64_t K = products.begin()->w->in;
  if (T > 1 && skinny_rows(T)) {
    cuda::GemmSkinnyTarget t[cuda::kGemmSkinnyMaxTargets];
    int n = 0;
    bool same_k = true;
    for (const Product& p : products) {
      same_k = same_k && p.w->in == K;
      t[n++] = {p.w->w, p.w->out, p.y, p.yt, p.w->out, false};
    }
    if (same_k && cuda::gemm_skinny_applies_many(x, T, K, ldx, t, n)) {
      cuda::gemm_skinny_many(x, T, K, ldx, t, n, stream_);
      return;
    }
  }
  for (const Product& p : products) gemm(x, T, ldx, *p.w, p.y, p.yt);
}

CudaActivations CudaModel::activations(int64_t T) {
  HYPIC_ASSERT(T > 0, "activations for no rows");
  const int64_t D = cfg_.hidden_size;
  // Only what this model's layer kinds use.
  CudaActivations s;
  s.T = T;
  auto buf = [&](size_t bytes) { return bytes ? DeviceBuffer(pool_, bytes) : DeviceBuffer(); };
  const size_t t = static_cast<size_t>(T);
  s.ids = buf(sizeof(int32_t) * t);
  s.pos = buf(sizeof(int64_t) * t);
  s.h = buf(sizeof(float) * t * D);
  s.x = buf(sizeof(bf16) * t * D);
  bool any_lin = false, any_attn = false, any_dense = false, any_moe = false;
  for (int64_t l = 0; l < cfg_.num_layers; ++l) {
    (cfg_.layer_kinds[l] == LayerKind::LinearAttention ? any_lin : any_attn) = true;
    (cfg_.layer_is_moe[l] ? any_moe : any_dense) = true;
  }
  if (any_lin) {
    const int64_t C = cfg_.lin_conv_dim(), vd = cfg_.lin_value_dim(), Hv = cfg_.lin_v_heads,
                  kd = cfg_.lin_key_dim();
    const cuda::GdnShape all{T, 1, cfg_.lin_v_heads, cfg_.lin_k_heads, cfg_.lin_k_dim, cfg_.lin_v_dim};
    s.qkv = buf(sizeof(bf16) * t * C);
    s.z = buf(sizeof(bf16) * t * vd);
    s.q = buf(sizeof(bf16) * t * kd);
    s.k = buf(sizeof(bf16) * t * kd);
    s.v = buf(sizeof(bf16) * t * vd);
    s.o = buf(sizeof(bf16) * t * vd);
    if (cfg_.linear_kind == LinearKind::GatedDeltaNet) {
      s.conv = buf(sizeof(bf16) * t * C);
      s.ba = buf(sizeof(float) * t * 2 * Hv);
      s.g = buf(sizeof(float) * t * Hv);
      s.beta = buf(sizeof(float) * t * Hv);
      // Sized for all rows: any piece of them may run chunked (long pieces, or with a transfer operator).
      s.gdn_ws = buf(cuda::gdn_chunked_workspace_bytes(all));
      if (conv_recurrent_rows(T)) {
        s.arrivals = buf(sizeof(int32_t) * t * cfg_.lin_k_heads);
        HYPIC_CUDA_CHECK(cudaMemsetAsync(s.arrivals.get(), 0, sizeof(int32_t) * t * cfg_.lin_k_heads, stream_));
      }
    } else if (cfg_.linear_kind == LinearKind::Kda) {
      s.conv = buf(sizeof(bf16) * t * C);
      s.g = buf(sizeof(float) * t * kd);  // a decay per key channel
      s.beta = buf(sizeof(float) * t * Hv);
      if (cfg_.kda_low_rank_gates) s.lowr = buf(sizeof(bf16) * t * cfg_.lin_k_dim);
      s.gdn_ws = buf(cuda::kda_chunked_workspace_bytes(all));
    }  // lightning: no conv, gates or workspace
  }
  if (any_attn && cfg_.mla) {
    const int64_t H = cfg_.num_heads, qd = H * cfg_.head_dim, R = cfg_.kv_lora_rank;
    s.qg = buf(sizeof(bf16) * t * qd);  // the query projection, then o_proj's input
    s.aq = buf(sizeof(bf16) * t * qd);  // the queries in the engine's row layout
    s.kn = buf(sizeof(bf16) * t * qd);
    s.vn = buf(sizeof(bf16) * t * qd);
    s.att = buf(sizeof(bf16) * t * qd);
    s.lat = buf(sizeof(bf16) * t * (R + cfg_.qk_rope_dim));
    s.latc = buf(sizeof(bf16) * t * R);
    s.kvb = buf(sizeof(bf16) * t * H * (cfg_.qk_nope_dim + cfg_.v_head_dim));
    if (cfg_.mla_head_gate) s.hgate = buf(sizeof(float) * t * H);
  } else if (any_attn) {
    const int64_t qd = cfg_.num_heads * cfg_.head_dim;
    s.qg = buf(sizeof(bf16) * t * qd * (cfg_.attn_output_gate ? 2 : 1));
    if (cfg_.attn_output_gate) s.aq = buf(sizeof(bf16) * t * qd);
    s.kn = buf(sizeof(bf16) * t * cfg_.num_kv_heads * cfg_.head_dim);
    s.vn = buf(sizeof(bf16) * t * cfg_.num_kv_heads * cfg_.head_dim);
    s.att = buf(sizeof(bf16) * t * qd);
  }
  if (any_dense) s.gu = buf(sizeof(bf16) * t * 2 * cfg_.intermediate_size);
  if (any_moe) {
    const int64_t E = cfg_.num_experts, K = cfg_.experts_per_tok, I = cfg_.moe_intermediate_size,
                  Is = cfg_.shared_expert_intermediate_size;
    s.router = buf(sizeof(float) * t * E);
    s.sel = buf(sizeof(int32_t) * t * K);
    s.wts = buf(sizeof(float) * t * K);
    s.plan_ws = buf(cuda::moe_plan_workspace_bytes(T, K, E));
    s.moe_list = buf(sizeof(int32_t) * std::min<size_t>(static_cast<size_t>(E), t * K));
    s.moe_tiles = buf(sizeof(int2) * static_cast<size_t>(cuda::moe_tile_slots(T * K, E)));
    s.xs = buf(sizeof(bf16) * t * K * D);
    s.egu = buf(sizeof(bf16) * t * K * 2 * I);
    s.eact = buf(sizeof(bf16) * t * K * I);
    s.ys = buf(sizeof(bf16) * t * K * D);
    s.y = buf(sizeof(bf16) * t * D);
    if (Is > 0) {
      s.sgu = buf(sizeof(bf16) * t * 2 * Is);
      s.sh = buf(sizeof(bf16) * t * D);
      s.sg = buf(sizeof(float) * t);
    }
    if (T == 1 && Is > 0 && moe_one_launch()) {
      s.moe_barrier = buf(sizeof(unsigned long long));
      HYPIC_CUDA_CHECK(cudaMemsetAsync(s.moe_barrier.get(), 0, sizeof(unsigned long long), stream_));
    }
    counts_host_.resize(static_cast<size_t>(E));
  }
  return s;
}

void CudaModel::embed(std::span<const int> ids, std::span<const int64_t> pos, CudaActivations& a) {
  const int64_t T = a.T, V = cfg_.vocab_size;
  HYPIC_ASSERT(static_cast<int64_t>(ids.size()) == T && static_cast<int64_t>(pos.size()) == T,
               "embed: ids and positions must cover the activation rows");
  for (int64_t t = 0; t < T; ++t)
    if (ids[t] < 0 || ids[t] >= V)
      throw InvalidArgument("token id " + std::to_string(ids[t]) + " at index " + std::to_string(t) +
                            " is outside the vocabulary [0, " + std::to_string(V) + ")");
  a.x_normed_with = nullptr;
  cudaStream_t cs = stream_;
  // Through the pinned ring (copied there at once, so the host vectors may go out of scope): a pageable copy
  // may wait for the stream to drain, holding the host back while work is still queued.
  const std::vector<int32_t> ids32(ids.begin(), ids.end());
  upload_.upload(a.ids.get(), ids32.data(), sizeof(int32_t) * T, cs);
  upload_.upload(a.pos.get(), pos.data(), sizeof(int64_t) * T, cs);
  cuda::embed_rows(w_.embed.w, a.ids.as<int32_t>(), T, cfg_.hidden_size, a.hp(), cs);
}

void CudaModel::input_norm(int layer, CudaActivations& a) {
  // MiniMax: the mixer's output is added to alpha * norm(h), not to h
  const float alpha = cfg_.layer_kinds[layer] == LayerKind::LinearAttention ? cfg_.linear_alpha : cfg_.full_alpha;
  sublayer_norm(a, w_.layers[layer].input_norm, alpha);
}

void CudaModel::post_norm(int layer, CudaActivations& a) {
  sublayer_norm(a, w_.layers[layer].post_norm, cfg_.mlp_alpha);
}

void CudaModel::sublayer_norm(CudaActivations& a, const float* w, float alpha) {
  const float* done = a.x_normed_with;
  a.x_normed_with = nullptr;
  if (done == w && !cfg_.residual_from_norm) return;  // the residual add before it left x = norm(h) with w
  run_pending_norm(a);
  if (cfg_.residual_from_norm) {
    cuda::rmsnorm_into_residual(a.hp(), a.xp(), a.T, cfg_.hidden_size, w, cfg_.rms_norm_eps, cfg_.zero_centred_norms,
                                alpha, stream_);
    return;
  }
  if (one_row(a)) {
    a.norm_pending = w;
    return;
  }
  cuda::rmsnorm(a.hp(), a.xp(), a.T, cfg_.hidden_size, w, cfg_.rms_norm_eps, cfg_.zero_centred_norms, stream_);
}

void CudaModel::final_logits(CudaActivations& a, float* logits) {
  const int64_t D = cfg_.hidden_size;
  if (one_row(a)) {  // the final norm in the LM head's product
    a.norm_pending = w_.final_norm;
    const cuda::GemvTarget t{w_.lm_head.w, w_.lm_head.out, logits, DType::F32};
    cuda::gemv(gemv_input(a), D, &t, 1, stream_);
    return;
  }
  cuda::rmsnorm(a.hp(), a.xp(), a.T, D, w_.final_norm, cfg_.rms_norm_eps, cfg_.zero_centred_norms, stream_);
  gemm(a.xp(), a.T, D, w_.lm_head, logits, DType::F32);
}

bool CudaModel::one_row(const CudaActivations& a) const {
  const int64_t D = cfg_.hidden_size;
  return fusion_on_ && a.T == 1 && !tensor_parallel() && !split_invariant_ && !cfg_.residual_from_norm && D >= 1024 &&
         D <= 4096 && D % 8 == 0;
}

void CudaModel::run_pending_norm(CudaActivations& a) {
  if (!a.norm_pending) return;
  const float* w = a.norm_pending;
  a.norm_pending = nullptr;
  cuda::rmsnorm(a.hp(), a.xp(), a.T, cfg_.hidden_size, w, cfg_.rms_norm_eps, cfg_.zero_centred_norms, stream_);
}

cuda::GemvInput CudaModel::gemv_input(CudaActivations& a) {
  cuda::GemvInput in;
  if (!a.norm_pending) {
    in.x = a.xp();
    return in;
  }
  in.h = a.hp();
  in.norm_w = a.norm_pending;
  in.eps = cfg_.rms_norm_eps;
  in.zero_centred = cfg_.zero_centred_norms;
  a.norm_pending = nullptr;
  in.x_out = a.xp();
  return in;
}

std::vector<float> CudaModel::logits(CudaActivations& a, int64_t row0, int64_t rows) {
  const int64_t D = cfg_.hidden_size, V = cfg_.vocab_size;
  HYPIC_ASSERT(rows >= 1 && row0 >= 0 && row0 + rows <= a.T, "logits: rows out of range");
  cudaStream_t cs = stream_;
  // The normed rows go to the front of x (x is free once the last layer ran).
  cuda::rmsnorm(a.hp() + row0 * D, a.xp(), rows, D, w_.final_norm, cfg_.rms_norm_eps, cfg_.zero_centred_norms, cs);
  DeviceBuffer out_dev(pool_, sizeof(float) * rows * V);
  gemm(a.xp(), rows, D, w_.lm_head, out_dev.get(), DType::F32);
  std::vector<float> out(static_cast<size_t>(rows * V));
  HYPIC_CUDA_CHECK(cudaMemcpyAsync(out.data(), out_dev.get(), sizeof(float) * out.size(), cudaMemcpyDeviceToHost, cs));
  HYPIC_CUDA_CHECK(cudaStreamSynchronize(cs));
  return out;
}

void CudaModel::linear_project(int layer, CudaActivations& s) {
  if (cfg_.linear_kind != LinearKind::GatedDeltaNet) run_pending_norm(s);
  if (cfg_.linear_kind == LinearKind::Lightning) return lightning_project(layer, s);
  if (cfg_.linear_kind == LinearKind::Kda) return kda_project(layer, s);
  const DeviceGdn& G = w_.layers[layer].lin;
  const int64_t T = s.T, Hv = cfg_.lin_v_heads, D = cfg_.hidden_size;
  if (s.norm_pending) {  // one row: the norm and the three products in one launch
    // (the gates straight from the b / a products: ba itself is not kept)
    cuda::GemvTarget t[3] = {{G.qkv.w, G.qkv.out, s.qkv.get(), DType::BF16},
                             {G.z.w, G.z.out, s.z.get(), DType::BF16},
                             {G.ba.w, G.ba.out, s.beta.get(), DType::F32, cuda::GemvEpilogue::GdnGates}};
    t[2].a_log = G.A_log;
    t[2].dt_bias = G.dt_bias;
    t[2].g_out = s.g.as<float>();
    HYPIC_ASSERT(G.ba.out == 2 * Hv, "linear_project: the ba projection has 2 rows per value head");
    cuda::gemv(gemv_input(s), D, t, 3, stream_);
    return;
  }
  // ba in fp32: the gates (softplus of a, sigmoid of b) are sensitive to its rounding.
  gemm_same_rows(s.xp(), T, D, {{&G.qkv, s.qkv.get(), DType::BF16}, {&G.z, s.z.get(), DType::BF16},
                                {&G.ba, s.ba.get(), DType::F32}});
  cuda::gdn_gates(s.ba.as<float>(), T, Hv, G.A_log, G.dt_bias, s.g.as<float>(), s.beta.as<float>(), stream_);
}

void CudaModel::gdn_conv_split(const bf16* qkv, const int32_t* cu, int64_t N, int64_t total, const bf16* conv_w,
                               const bf16* const* tails_in, bf16* const* tails_out, bf16* tail, bf16* conv, bf16* q,
                               bf16* k, bf16* v) {
  const int64_t Hk = cfg_.lin_k_heads, Hv = cfg_.lin_v_heads, dk = cfg_.lin_k_dim, dv = cfg_.lin_v_dim;
  const int64_t C = cfg_.lin_conv_dim(), K = cfg_.conv_kernel;
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(dk));
  cudaStream_t cs = stream_;
  cuda::ConvSplit sp;
  sp.key_width = Hk * dk;
  sp.head = dk;
  sp.q_scale = q_scale;
  sp.eps = 1e-6f;
  sp.q = q;
  sp.k = k;
  sp.v = v;
  if (prefill_fusion_ && cuda::conv_split_supported(qkv, C, sp)) {  // no [total, C] conv output in between
    if (cu) cuda::causal_conv1d_silu_split_varlen(qkv, cu, N, total, C, conv_w, K, tails_in, tails_out, sp, cs);
    else cuda::causal_conv1d_silu_split(qkv, total, C, conv_w, K, tail, sp, cs);
    return;
  }
  if (cu) cuda::causal_conv1d_silu_varlen(qkv, cu, N, total, C, conv_w, K, tails_in, tails_out, conv, cs);
  else cuda::causal_conv1d_silu(qkv, total, C, conv_w, K, tail, conv, cs);
  cuda::gdn_split_qkv(conv, total, Hk, dk, Hv, dv, q_scale, 1e-6f, q, k, v, cs);
}

void CudaModel::linear_recur(int layer, CudaActivations& s, int64_t row0, int64_t n, CudaLinearLayerState& st,
                             float* transfer) {
  HYPIC_ASSERT(row0 >= 0 && n > 0 && row0 + n <= s.T, "linear_recur: rows out of range");
  if (cfg_.linear_kind == LinearKind::Lightning) return lightning_recur(layer, s, row0, n, st, transfer);
  const bool kda = cfg_.linear_kind == LinearKind::Kda;
  const bf16* conv_w = kda ? w_.layers[layer].kda.conv_w : w_.layers[layer].lin.conv_w;
  const int64_t Hk = cfg_.lin_k_heads, Hv = cfg_.lin_v_heads, dk = cfg_.lin_k_dim, dv = cfg_.lin_v_dim;
  const int64_t C = cfg_.lin_conv_dim(), vd = cfg_.lin_value_dim(), kd = cfg_.lin_key_dim();
  cudaStream_t cs = stream_;
  bf16* conv = s.conv.as<bf16>() + row0 * C;
  bf16 *q = s.q.as<bf16>() + row0 * kd, *k = s.k.as<bf16>() + row0 * kd, *v = s.v.as<bf16>() + row0 * vd;
  const float* beta = s.beta.as<float>() + row0 * Hv;
  bf16* o = s.o.as<bf16>() + row0 * vd;
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(dk));
  if (n == 1 && s.arrivals.get() && !kda && !transfer) {  // one token: conv, split and recurrent step in one launch
    cuda::gdn_conv_recurrent_rows(s.qkv.as<bf16>() + row0 * C, 1, Hk, dk, Hv, dv, conv_w, cfg_.conv_kernel,
                                  st.conv_tail.as<bf16>(), nullptr, q_scale, 1e-6f, s.g.as<float>() + row0 * Hv, beta,
                                  st.S.as<float>(), nullptr, o, s.arrivals.as<int32_t>(), cs);
    return;
  }
  if (n == 1 && fusion_on_ && !split_invariant_ && dk <= 1024) {  // one token: conv and split in one launch
    cuda::gdn_conv_split_rows(s.qkv.as<bf16>() + row0 * C, 1, Hk, dk, Hv, dv, conv_w, cfg_.conv_kernel,
                              st.conv_tail.as<bf16>(), nullptr, q_scale, 1e-6f, q, k, v, cs);
  } else {
    gdn_conv_split(s.qkv.as<bf16>() + row0 * C, nullptr, 1, n, conv_w, nullptr, nullptr, st.conv_tail.as<bf16>(), conv,
                   q, k, v);
  }
  const cuda::GdnShape shape{n, 1, Hv, Hk, dk, dv};
  // Only the chunked kernels build the transfer operator.
  const bool chunked = (n >= kChunkedMinTokens && !split_invariant_) || transfer;
  if (kda) {  // the decay per key channel: g is [rows, Hv, dk]
    const float* g = s.g.as<float>() + row0 * kd;
    if (chunked)
      cuda::kda_chunked_prefill(shape, q, k, v, g, beta, nullptr, n, st.S.as<float>(), o, transfer, s.gdn_ws.get(), cs);
    else
      cuda::kda_recurrent(shape, q, k, v, g, beta, st.S.as<float>(), o, cs);
    return;
  }
  const float* g = s.g.as<float>() + row0 * Hv;
  if (chunked)
    cuda::gdn_chunked_prefill(shape, q, k, v, g, beta, nullptr, n, st.S.as<float>(), o, transfer, s.gdn_ws.get(), cs);
  else
    cuda::gdn_recurrent(shape, q, k, v, g, beta, st.S.as<float>(), o, cs);
}

void CudaModel::linear_body(int layer, CudaActivations& s, int64_t row0, int64_t n, CudaLinearLayerState& st,
                            float* T, float* body) {
  linear_recur(layer, s, row0, n, st);
  const int64_t Hk = cfg_.lin_k_heads, Hv = cfg_.lin_v_heads, dk = cfg_.lin_k_dim, dv = cfg_.lin_v_dim;
  const int64_t vd = cfg_.lin_value_dim(), kd = cfg_.lin_key_dim();
  cudaStream_t cs = stream_;
  // q, k, v of these rows are still in the activations: the conv ran once, with the true context.
  const bf16 *q = s.q.as<bf16>() + row0 * kd, *k = s.k.as<bf16>() + row0 * kd, *v = s.v.as<bf16>() + row0 * vd;
  const float* beta = cfg_.linear_kind == LinearKind::Lightning ? nullptr : s.beta.as<float>() + row0 * Hv;
  const cuda::GdnShape shape{n, 1, Hv, Hk, dk, dv};
  HYPIC_CUDA_CHECK(cudaMemsetAsync(body, 0, sizeof(float) * Hv * dk * dv, cs));
  if (cfg_.linear_kind == LinearKind::Lightning) {  // T = lambda^n per head, a number each
    const float* log_decay = w_.layers[layer].lightning.log_decay;
    cuda::fill_uniform(T, Hv, 1.0f, 1.0f, 0, cs);
    cuda::scalar_transfer_extend(T, log_decay, Hv, n, cs);
    cuda::lightning_chunked_prefill(shape, q, k, v, log_decay, nullptr, n, body, nullptr, cs);
    return;
  }
  cuda::identity_operators(T, Hv, dk, cs);
  if (cfg_.linear_kind == LinearKind::Kda) {
    cuda::kda_chunked_prefill(shape, q, k, v, s.g.as<float>() + row0 * kd, beta, nullptr, n, body, nullptr, T,
                              s.gdn_ws.get(), cs);
    return;
  }
  cuda::gdn_chunked_prefill(shape, q, k, v, s.g.as<float>() + row0 * Hv, beta, nullptr, n, body, nullptr, T,
                            s.gdn_ws.get(), cs);
}

// Lightning (Ring, MiniMax): q | k | v from one projection, split into the recurrence's inputs here with
// everything position-dependent done (Ring: q/k RMSNorm, RoPE at the rows' positions, q scaled by
// hd^-1/2; MiniMax: SiLU), so that the recurrence only reads rows.
void CudaModel::lightning_project(int layer, CudaActivations& s) {
  const DeviceLightning& L = w_.layers[layer].lightning;
  const int64_t T = s.T, D = cfg_.hidden_size, H = cfg_.lin_v_heads, hd = cfg_.lin_k_dim, W = H * hd;
  cudaStream_t cs = stream_;
  bf16* qkv = s.qkv.as<bf16>();
  gemm(s.xp(), T, D, L.qkv, qkv, DType::BF16);
  gemm(s.xp(), T, D, L.gate, s.z.get(), DType::BF16);
  if (cfg_.lightning_style == LightningStyle::MiniMax) cuda::silu_inplace(qkv, T * 3 * W, cs);
  bf16 *q = s.q.as<bf16>(), *k = s.k.as<bf16>(), *v = s.v.as<bf16>();
  const size_t row = sizeof(bf16) * W;
  HYPIC_CUDA_CHECK(cudaMemcpy2DAsync(q, row, qkv, 3 * row, row, T, cudaMemcpyDeviceToDevice, cs));
  HYPIC_CUDA_CHECK(cudaMemcpy2DAsync(k, row, qkv + W, 3 * row, row, T, cudaMemcpyDeviceToDevice, cs));
  HYPIC_CUDA_CHECK(cudaMemcpy2DAsync(v, row, qkv + 2 * W, 3 * row, row, T, cudaMemcpyDeviceToDevice, cs));
  if (cfg_.lightning_style != LightningStyle::Ring) return;
  cuda::rmsnorm(q, q, T * H, hd, L.q_norm, cfg_.rms_norm_eps, false, cs);
  cuda::rmsnorm(k, k, T * H, hd, L.k_norm, cfg_.rms_norm_eps, false, cs);
  if (cfg_.rotary_dim > 0) {
    cuda::rope_apply(q, T, H, hd, cfg_.rotary_dim, s.posp(), cfg_.rope_theta, cs);
    cuda::rope_apply(k, T, H, hd, cfg_.rotary_dim, s.posp(), cfg_.rope_theta, cs);
  }
  cuda::scale_bf16(q, 1.0f / std::sqrt(static_cast<float>(hd)), T * W, cs);
}

void CudaModel::lightning_recur(int layer, CudaActivations& s, int64_t row0, int64_t n, CudaLinearLayerState& st,
                                float* transfer) {
  const DeviceLightning& L = w_.layers[layer].lightning;
  const int64_t H = cfg_.lin_v_heads, hd = cfg_.lin_k_dim, W = H * hd;
  cudaStream_t cs = stream_;
  const bf16 *q = s.q.as<bf16>() + row0 * W, *k = s.k.as<bf16>() + row0 * W, *v = s.v.as<bf16>() + row0 * W;
  bf16* o = s.o.as<bf16>() + row0 * W;
  const cuda::GdnShape shape{n, 1, H, H, hd, hd};
  if (n >= kChunkedMinTokens && !split_invariant_)
    cuda::lightning_chunked_prefill(shape, q, k, v, L.log_decay, nullptr, n, st.S.as<float>(), o, cs);
  else
    cuda::lightning_recurrent(shape, q, k, v, L.log_decay, st.S.as<float>(), o, cs);
  if (transfer) cuda::scalar_transfer_extend(transfer, L.log_decay, H, n, cs);
}

void CudaModel::lightning_output(int layer, CudaActivations& s) {
  const DeviceLightning& L = w_.layers[layer].lightning;
  const int64_t T = s.T, W = cfg_.lin_v_heads * cfg_.lin_k_dim;
  bf16* o = s.o.as<bf16>();
  const float beta = cfg_.residual_from_norm ? cfg_.linear_beta : 1.0f;  // out(beta o) = beta out(o)
  cuda::group_rmsnorm_gate(o, s.z.as<bf16>(), T, W, cfg_.group_norm_size, L.g_norm, cfg_.rms_norm_eps, beta, stream_);
  gemm(o, T, W, L.out, s.hp(), DType::F32, /*accumulate=*/true);  // residual add
}

// KDA (Kimi, Ring-2.5): pre-conv q | k | v in qkv (the conv and the split are linear_recur's, shared with
// Gated DeltaNet), the per-channel log decay in g [T, H, dk], beta, and the output gate's input in z.
void CudaModel::kda_project(int layer, CudaActivations& s) {
  const DeviceKda& K = w_.layers[layer].kda;
  const int64_t T = s.T, D = cfg_.hidden_size, H = cfg_.lin_v_heads, dk = cfg_.lin_k_dim;
  gemm(s.xp(), T, D, K.qkv, s.qkv.get(), DType::BF16);
  // Gate inputs b(a x) (low rank) or b x; the forget gate in fp32, as the GDN gates.
  auto gate_input = [&](const DeviceLinear& a, const DeviceLinear& b, void* out, DType t) {
    if (!a.w) return gemm(s.xp(), T, D, b, out, t);
    gemm(s.xp(), T, D, a, s.lowr.get(), DType::BF16);
    gemm(s.lowr.as<bf16>(), T, dk, b, out, t);
  };
  gate_input(K.f_a, K.f_b, s.g.get(), DType::F32);
  gemm(s.xp(), T, D, K.b, s.beta.get(), DType::F32);
  cuda::kda_gates(s.g.as<float>(), s.beta.as<float>(), T, H, dk, K.A_log, K.dt_bias, cfg_.kda_gate_lower_bound, stream_);
  gate_input(K.g_a, K.g_b, s.z.get(), DType::BF16);
}

// KDA's output: per head RMSNorm (weight [dk]) times sigmoid of the output gate, then o_proj.
void CudaModel::kda_output(int layer, CudaActivations& s) {
  const DeviceKda& K = w_.layers[layer].kda;
  const int64_t T = s.T, H = cfg_.lin_v_heads, dk = cfg_.lin_k_dim, W = H * dk;
  bf16* o = s.o.as<bf16>();
  cuda::rmsnorm(o, o, T * H, dk, K.o_norm, cfg_.rms_norm_eps, false, stream_);
  cuda::sigmoid_mul(o, W, s.z.as<bf16>(), W, T, W, stream_);
  gemm(o, T, W, K.out, s.hp(), DType::F32, /*accumulate=*/true);  // residual add
}

namespace {
// The small arguments of one call (offsets, pointer arrays), packed on the host and uploaded at once.
class ArgPack {
 public:
  template <class T>
  size_t put(const std::vector<T>& v) {
    const size_t at = (host_.size() + 15) & ~size_t{15};
    host_.resize(at + sizeof(T) * v.size());
    if (!v.empty()) std::memcpy(host_.data() + at, v.data(), sizeof(T) * v.size());
    return at;
  }
  // Uploads everything put so far; offsets returned by put() index into the result.
  DeviceBuffer upload(cuda::DevicePool& pool, cuda::UploadRing& ring, cudaStream_t cs) const {
    DeviceBuffer d(pool, host_.size());
    ring.upload(d.get(), host_.data(), host_.size(), cs);
    return d;
  }

 private:
  std::vector<char> host_;
};

template <class T>
T* at(const DeviceBuffer& b, size_t offset) {
  return reinterpret_cast<T*>(b.as<char>() + offset);
}
}  // namespace

bool CudaModel::linear_isolated(int layer, CudaActivations& s, const std::vector<IsolatedBlock>& blocks) {
  if (cfg_.linear_kind != LinearKind::GatedDeltaNet) return false;
  if (blocks.empty()) return true;
  const DeviceGdn& G = w_.layers[layer].lin;
  const int64_t Hk = cfg_.lin_k_heads, Hv = cfg_.lin_v_heads, dk = cfg_.lin_k_dim, dv = cfg_.lin_v_dim;
  const int64_t C = cfg_.lin_conv_dim(), vd = cfg_.lin_value_dim(), kd = cfg_.lin_key_dim();
  const size_t state = sizeof(float) * Hv * dk * dv, op = sizeof(float) * Hv * dk * dk;
  cudaStream_t cs = stream_;
  const int64_t r0 = blocks.front().row0;
  const int64_t N = static_cast<int64_t>(blocks.size());
  std::vector<int32_t> cu(1, 0), lead;
  int64_t longest = 0;
  std::vector<float*> full_dst, T_dst, body_dst;
  std::vector<void*> tails;
  DeviceBuffer states(pool_, state * N), ops(pool_, op * N);
  for (int64_t i = 0; i < N; ++i) {
    const IsolatedBlock& b = blocks[i];
    HYPIC_ASSERT(b.row0 == r0 + cu.back(), "linear_isolated: blocks must be consecutive rows");
    cu.push_back(cu.back() + static_cast<int32_t>(b.seam + b.n));
    lead.push_back(static_cast<int32_t>(b.seam));
    longest = std::max(longest, b.seam + b.n);
    full_dst.push_back(b.full);
    T_dst.push_back(b.T);
    body_dst.push_back(b.body);
    tails.push_back(b.conv_tail);
  }
  const int64_t total = cu.back();
  ArgPack pack;
  const size_t o_cu = pack.put(cu), o_lead = pack.put(lead), o_tails = pack.put(tails);
  const size_t o_fd = pack.put(full_dst), o_td = pack.put(T_dst), o_bd = pack.put(body_dst);
  const DeviceBuffer args = pack.upload(pool_, upload_, cs);
  const int32_t* cu_dev = at<int32_t>(args, o_cu);
  // Every block's conv from a zero tail, in one call; the tail left behind is the block's conv tail.
  bf16 *q = s.q.as<bf16>() + r0 * kd, *k = s.k.as<bf16>() + r0 * kd, *v = s.v.as<bf16>() + r0 * vd;
  const float *g = s.g.as<float>() + r0 * Hv, *beta = s.beta.as<float>() + r0 * Hv;
  gdn_conv_split(s.qkv.as<bf16>() + r0 * C, cu_dev, N, total, G.conv_w, nullptr, at<bf16* const>(args, o_tails),
                 nullptr, s.conv.as<bf16>() + r0 * C, q, k, v);
  // Every block one packed sequence from zero: its outputs and the state after it, and in the same
  // preparation its body's (T, S(body | 0)) (the rows after its seam, read with the conv context the seam
  // gave them).
  HYPIC_CUDA_CHECK(cudaMemsetAsync(states.get(), 0, state * N, cs));
  const cuda::GdnShape all{total, N, Hv, Hk, dk, dv};
  DeviceBuffer ws(pool_, cuda::gdn_bodies_workspace_bytes(all));
  // The results land in the blocks' entries directly (the packed state and T are the kernels' scratch).
  cuda::BodyOutputs to;
  to.state = at<float* const>(args, o_fd);
  to.body = at<float* const>(args, o_bd);
  to.transfer = at<float* const>(args, o_td);
  cuda::gdn_chunked_prefill_with_bodies(all, q, k, v, g, beta, cu_dev, longest, at<int32_t>(args, o_lead),
                                        states.as<float>(), s.o.as<bf16>() + r0 * vd, nullptr, ops.as<float>(),
                                        ws.get(), cs, to);
  return true;
}

bool CudaModel::linear_chain(int layer, CudaActivations& s, CudaLinearLayerState& st,
                             const std::vector<ChainStep>& steps, bool naive) {
  using K = ChainStep::Kind;
  // Packed chunked kernels for the delta rule only; split-invariant runs take the steps one by one.
  if (cfg_.linear_kind != LinearKind::GatedDeltaNet || split_invariant_) return false;
  // Which steps are batched: every Rows step follows a Compose (or opens the chain).
  int64_t m = 0, composes = 0, rows_total = 0;
  K prev = K::Save;  // the last Rows / Compose seen; Save: none yet
  for (const ChainStep& c : steps) {
    if (c.kind == K::Rows) {
      if (prev == K::Rows) return false;
      ++m;
      rows_total += c.n;
    }
    if (c.kind == K::Compose || c.kind == K::Load) ++composes;
    if (c.kind != K::Save) prev = c.kind;
  }
  if (composes == 0) return false;
  const DeviceGdn& G = w_.layers[layer].lin;
  const int64_t Hk = cfg_.lin_k_heads, Hv = cfg_.lin_v_heads, dk = cfg_.lin_k_dim, dv = cfg_.lin_v_dim;
  const int64_t C = cfg_.lin_conv_dim(), vd = cfg_.lin_value_dim(), kd = cfg_.lin_key_dim();
  const size_t state = sizeof(float) * Hv * dk * dv, op = sizeof(float) * Hv * dk * dk;
  const size_t tail = sizeof(bf16) * (cfg_.conv_kernel - 1) * C;
  cudaStream_t cs = stream_;
  // A few rows (a stitch's seams and question) run token by token inside the chain; many take the chunked
  // kernels: each span's transfer operator and zero-start state, then its outputs from its start state.
  const bool recur = rows_total <= kChainRecurrentRows;
  // The chunked form's per-span operators, zero-start states and start states (none token by token).
  const size_t spans = recur ? 0 : static_cast<size_t>(std::max<int64_t>(m, 1));
  DeviceBuffer P, ops, init;
  if (spans > 0) {
    P = DeviceBuffer(pool_, state * spans);
    ops = DeviceBuffer(pool_, op * spans);
    init = DeviceBuffer(pool_, state * spans);
  }
  DeviceBuffer tails(pool_, tail * std::max<int64_t>(m, 1));
  std::vector<int32_t> cu(1, 0);
  std::vector<const bf16*> tails_in;
  std::vector<bf16*> tails_out;
  std::vector<cuda::StateStep> chain;
  std::vector<std::pair<const bf16*, bf16*>> tail_copies;  // (from, to) after the conv
  int64_t row0 = -1, longest = 0, r = 0;
  const bf16* cur_tail = st.conv_tail.as<bf16>();  // the conv tail at this point of the chain
  for (const ChainStep& c : steps) {
    if (c.kind == K::Rows) {
      if (row0 < 0) row0 = c.row0;
      HYPIC_ASSERT(c.row0 == row0 + cu.back(), "linear_chain: rows of a lane must be consecutive");
      cu.push_back(cu.back() + static_cast<int32_t>(c.n));
      longest = std::max(longest, c.n);
      tails_in.push_back(cur_tail);
      bf16* out = tails.as<bf16>() + r * (tail / sizeof(bf16));
      tails_out.push_back(out);
      cur_tail = out;
      if (recur) {
        cuda::StateStep rs{nullptr, nullptr, nullptr, nullptr, 0};
        rs.q = s.q.as<bf16>() + c.row0 * kd;
        rs.k = s.k.as<bf16>() + c.row0 * kd;
        rs.v = s.v.as<bf16>() + c.row0 * vd;
        rs.g = s.g.as<float>() + c.row0 * Hv;
        rs.beta = s.beta.as<float>() + c.row0 * Hv;
        rs.o = s.o.as<bf16>() + c.row0 * vd;
        rs.n = static_cast<int>(c.n);
        chain.push_back(rs);
      } else {
        chain.push_back({ops.as<float>() + r * (op / sizeof(float)), P.as<float>() + r * (state / sizeof(float)),
                         init.as<float>() + r * (state / sizeof(float)), nullptr, 0});
      }
      ++r;
    } else if (c.kind == K::Compose) {
      chain.push_back({naive ? nullptr : c.T, c.body, nullptr, nullptr, 0});
      cur_tail = c.conv_tail;
    } else if (c.kind == K::Load) {
      chain.push_back({nullptr, c.body, nullptr, nullptr, 1});
      cur_tail = c.conv_tail;
    } else {
      if (c.S_out) chain.push_back({nullptr, nullptr, nullptr, c.S_out, 0});
      if (c.tail_out) tail_copies.push_back({cur_tail, c.tail_out});
    }
  }
  tail_copies.push_back({cur_tail, st.conv_tail.as<bf16>()});
  ArgPack pack;
  const size_t o_cu = pack.put(cu), o_in = pack.put(tails_in), o_out = pack.put(tails_out), o_chain = pack.put(chain);
  const DeviceBuffer args = pack.upload(pool_, upload_, cs);
  const int32_t* cu_dev = at<int32_t>(args, o_cu);
  const int64_t total = cu.back();
  if (m > 0) {
    bf16 *q = s.q.as<bf16>() + row0 * kd, *k = s.k.as<bf16>() + row0 * kd, *v = s.v.as<bf16>() + row0 * vd;
    gdn_conv_split(s.qkv.as<bf16>() + row0 * C, cu_dev, m, total, G.conv_w, at<const bf16* const>(args, o_in),
                   at<bf16* const>(args, o_out), nullptr, s.conv.as<bf16>() + row0 * C, q, k, v);
  }
  if (m > 0 && !recur) {
    bf16 *q = s.q.as<bf16>() + row0 * kd, *k = s.k.as<bf16>() + row0 * kd, *v = s.v.as<bf16>() + row0 * vd;
    // Each sequence's own map S -> T S + S(rows | 0), from zero.
    const float *g = s.g.as<float>() + row0 * Hv, *beta = s.beta.as<float>() + row0 * Hv;
    const cuda::GdnShape shape{total, m, Hv, Hk, dk, dv};
    DeviceBuffer ws(pool_, cuda::gdn_chunked_workspace_bytes(shape));
    HYPIC_CUDA_CHECK(cudaMemsetAsync(P.get(), 0, state * m, cs));
    cuda::identity_operators(ops.as<float>(), m * Hv, dk, cs);
    cuda::gdn_chunked_prefill(shape, q, k, v, g, beta, cu_dev, longest, P.as<float>(), nullptr, ops.as<float>(),
                              ws.get(), cs);
    // The state through the chain, each sequence's start state recorded on the way.
    cuda::state_chain(Hv, dk, dv, at<const cuda::StateStep>(args, o_chain), static_cast<int64_t>(chain.size()),
                      st.S.as<float>(), cs);
    // The outputs, every sequence from its start state.
    cuda::gdn_chunked_prefill(shape, q, k, v, g, beta, cu_dev, longest, init.as<float>(), s.o.as<bf16>() + row0 * vd,
                              nullptr, ws.get(), cs);
  } else {
    cuda::state_chain(Hv, dk, dv, at<const cuda::StateStep>(args, o_chain), static_cast<int64_t>(chain.size()),
                      st.S.as<float>(), cs, Hk);
  }
  // The conv tails in one launch (a stitch saves a few a layer: each memcpy on the stream cost its copy and
  // as much idle device around it), in order where one copy's destination is another's source.
  std::vector<cuda::CopyRegion> regions;
  bool ordered = false;
  for (auto [from, to] : tail_copies) {
    if (from == to) continue;
    for (const cuda::CopyRegion& c : regions) ordered = ordered || c.dst == from || c.src == to || c.dst == to;
    regions.push_back({from, to, static_cast<int64_t>(tail)});
  }
  if (!ordered) {
    cuda::copy_regions(regions.data(), static_cast<int64_t>(regions.size()), cs);
  } else {
    for (const cuda::CopyRegion& c : regions)
      HYPIC_CUDA_CHECK(cudaMemcpyAsync(c.dst, c.src, tail, cudaMemcpyDeviceToDevice, cs));
  }
  return true;
}

void CudaModel::set_communicator(std::shared_ptr<Communicator> comm) {
  comm_ = std::move(comm);
  if (tensor_parallel()) {
    set_decode_graphs(false);
    batch_on_ = false;
  }
}

template <class Step>
void CudaModel::reduced(CudaActivations& a, Step&& step) {
  const size_t n = static_cast<size_t>(a.T * cfg_.hidden_size);
  cuda::DeviceBuffer partial(pool_, n * sizeof(float));
  HYPIC_CUDA_CHECK(cudaMemsetAsync(partial.get(), 0, n * sizeof(float), stream_));
  std::swap(a.h, partial);  // the step adds onto zeros
  step();
  std::swap(a.h, partial);
  comm_->all_reduce_sum(partial.as<float>(), n);
  cuda::add_scaled(a.hp(), a.hp(), 1.0f, partial.as<float>(), static_cast<int64_t>(n), stream_);
}

void CudaModel::linear_output(int layer, CudaActivations& s) {
  if (tensor_parallel()) return reduced(s, [&] { linear_output_local(layer, s); });
  linear_output_local(layer, s);
}

void CudaModel::attention_output(int layer, CudaActivations& s) {
  if (tensor_parallel()) return reduced(s, [&] { attention_output_local(layer, s); });
  attention_output_local(layer, s);
}

void CudaModel::ffn(int layer, CudaActivations& s) {
  if (tensor_parallel()) return reduced(s, [&] { ffn_local(layer, s); });
  ffn_local(layer, s);
}

void CudaModel::linear_output_local(int layer, CudaActivations& s) {
  if (cfg_.linear_kind == LinearKind::Lightning) return lightning_output(layer, s);
  if (cfg_.linear_kind == LinearKind::Kda) return kda_output(layer, s);
  const DeviceGdn& G = w_.layers[layer].lin;
  const int64_t T = s.T, Hv = cfg_.lin_v_heads, dv = cfg_.lin_v_dim, vd = cfg_.lin_value_dim();
  bf16* o = s.o.as<bf16>();
  // One row: the gated norm in the output product's prologue (one launch less a decode layer, same bits).
  if (T == 1 && fusion_on_ && !split_invariant_ && G.out.in == vd &&
      cuda::gemv_gated_input_fits(vd, dv, o, s.z.get(), G.norm_w)) {
    cuda::GemvInput in;
    in.gated_o = o;
    in.gated_z = s.z.as<bf16>();
    in.head_dim = dv;
    in.norm_w = G.norm_w;
    in.eps = cfg_.rms_norm_eps;
    const cuda::GemvTarget t{G.out.w, G.out.out, s.hp(), DType::F32, cuda::GemvEpilogue::Add};
    cuda::gemv(in, vd, &t, 1, stream_);
    return;
  }
  cuda::rmsnorm_gated_silu(o, s.z.as<bf16>(), o, T * Hv, dv, G.norm_w, cfg_.rms_norm_eps, stream_);
  gemm(o, T, vd, G.out, s.hp(), DType::F32, /*accumulate=*/true);  // residual add
}

bool CudaModel::attention_project(int layer, CudaActivations& s, const cuda::QkAppend* append,
                                  cuda::DecodeNewRows* fold) {
  if (cfg_.mla) {
    run_pending_norm(s);
    mla_project(layer, s);
    return false;
  }
  return attention_project_into(layer, s, s.kn.as<bf16>(), s.vn.as<bf16>(), append, fold);
}

bool CudaModel::attention_project_into(int layer, CudaActivations& s, bf16* kn, bf16* vn,
                                       const cuda::QkAppend* append, cuda::DecodeNewRows* fold) {
  const int64_t T = s.T, D = cfg_.hidden_size;
  const DeviceAttention& A = w_.layers[layer].attn;
  const int64_t H = cfg_.num_heads, Hkv = cfg_.num_kv_heads, hd = cfg_.head_dim;
  const bool gated = cfg_.attn_output_gate;
  cudaStream_t cs = stream_;
  bf16* qg = s.qg.as<bf16>();
  if (s.norm_pending) {  // one row: the norm and the three products in one launch
    const cuda::GemvTarget t[3] = {{A.q.w, A.q.out, qg, DType::BF16},
                                   {A.k.w, A.k.out, kn, DType::BF16},
                                   {A.v.w, A.v.out, vn, DType::BF16}};
    cuda::gemv(gemv_input(s), D, t, 3, stream_);
  } else {
    gemm_same_rows(s.xp(), T, D, {{&A.q, qg, DType::BF16}, {&A.k, kn, DType::BF16}, {&A.v, vn, DType::BF16}});
  }
  bf16* q = gated ? s.aq.as<bf16>() : qg;
  if (A.q_norm && cfg_.rotary_dim > 0 && hd < 1024) {  // the copy, both norms and both rotations in one launch
    if (append && fold && cuda::attention_decode_folds(H, Hkv, hd, cfg_.rotary_dim)) {
      *fold = {qg, gated ? 2 * hd : hd, kn, append->v_new, A.q_norm, A.k_norm, cfg_.rms_norm_eps,
               cfg_.zero_centred_norms, cfg_.rotary_dim, cfg_.rope_theta};
      return true;
    }
    cuda::qk_norm_rope(qg, gated ? 2 * hd : hd, q, kn, T, H, Hkv, hd, A.q_norm, A.k_norm, cfg_.rms_norm_eps,
                       cfg_.zero_centred_norms, cfg_.rotary_dim, s.posp(), cfg_.rope_theta, cs, append);
    return append != nullptr;
  }
  // Per head the projection holds the query then the gate: copy the queries out as [T, H, hd] rows.
  if (gated) {
    HYPIC_CUDA_CHECK(cudaMemcpy2DAsync(q, sizeof(bf16) * hd, qg, sizeof(bf16) * 2 * hd, sizeof(bf16) * hd, T * H,
                                       cudaMemcpyDeviceToDevice, cs));
  }
  if (A.q_norm) {  // MiniMax has no q/k norm
    cuda::rmsnorm(q, q, T * H, hd, A.q_norm, cfg_.rms_norm_eps, cfg_.zero_centred_norms, cs);
    cuda::rmsnorm(kn, kn, T * Hkv, hd, A.k_norm, cfg_.rms_norm_eps, cfg_.zero_centred_norms, cs);
  }
  if (cfg_.rotary_dim > 0) {
    cuda::rope_apply(q, T, H, hd, cfg_.rotary_dim, s.posp(), cfg_.rope_theta, cs);
    cuda::rope_apply(kn, T, Hkv, hd, cfg_.rotary_dim, s.posp(), cfg_.rope_theta, cs);
  }
  return false;
}

// MLA (Kimi: no RoPE; Ring-2.5: RoPE on the rope part), rows as the CPU backend lays them out: queries
// [q_rope | q_nope] and keys [k_rope | k_nope_h] per head, the rope part de-interleaved to halves where it
// is rotated, values [v_h | 0] padded to the key head dim.
void CudaModel::mla_project(int layer, CudaActivations& s) {
  const DeviceAttention& A = w_.layers[layer].attn;
  const DeviceMla& M = w_.layers[layer].mla;
  const int64_t T = s.T, D = cfg_.hidden_size, H = cfg_.num_heads, hd = cfg_.head_dim, R = cfg_.kv_lora_rank;
  const int64_t nope = cfg_.qk_nope_dim, rope = cfg_.qk_rope_dim, dv = cfg_.v_head_dim, rot = cfg_.rotary_dim;
  cudaStream_t cs = stream_;
  const bool deint = rot > 0;  // without RoPE (Kimi, whose rope dim may be odd) kept in order
  gemm(s.xp(), T, D, A.q, s.qg.get(), DType::BF16);
  bf16* q = s.aq.as<bf16>();
  cuda::mla_queries(s.qg.as<bf16>(), T, H, nope, rope, deint, q, cs);
  bf16 *lat = s.lat.as<bf16>(), *c = s.latc.as<bf16>();
  gemm(s.xp(), T, D, M.kv_a, lat, DType::BF16);
  HYPIC_CUDA_CHECK(cudaMemcpy2DAsync(c, sizeof(bf16) * R, lat, sizeof(bf16) * (R + rope), sizeof(bf16) * R, T,
                                     cudaMemcpyDeviceToDevice, cs));
  // kv_a_layernorm is built with the RMSNorm's default eps (1e-6), not rms_norm_eps.
  cuda::rmsnorm(c, c, T, R, M.kv_norm, 1e-6f, false, cs);
  gemm(c, T, R, M.kv_b, s.kvb.get(), DType::BF16);
  bf16 *kn = s.kn.as<bf16>(), *vn = s.vn.as<bf16>();
  cuda::mla_keys_values(lat, R + rope, R, s.kvb.as<bf16>(), T, H, nope, rope, dv, deint, kn, vn, cs);
  if (rot > 0) {
    cuda::rope_apply(q, T, H, hd, rot, s.posp(), cfg_.rope_theta, cs);
    cuda::rope_apply(kn, T, H, hd, rot, s.posp(), cfg_.rope_theta, cs);
  }
  if (cfg_.mla_head_gate) gemm(s.xp(), T, D, M.head_gate, s.hgate.get(), DType::F32);
}

const bf16* CudaModel::queries(const CudaActivations& s) const {
  return (cfg_.attn_output_gate || cfg_.mla ? s.aq : s.qg).as<bf16>();
}

bool CudaModel::qwen_layers() const {
  return cfg_.linear_kind == LinearKind::GatedDeltaNet && !cfg_.mla && !cfg_.residual_from_norm &&
         cfg_.router == RouterKind::SoftmaxTopK && cfg_.attn_qk_norm && cfg_.zero_centred_norms;
}

void CudaModel::attention_core(int layer, CudaActivations& s, int64_t row0, int64_t n, CudaAttentionLayerState& kv) {
  HYPIC_ASSERT(row0 >= 0 && n > 0 && row0 + n <= s.T, "attention_core: rows out of range");
  const int64_t H = cfg_.num_heads, Hkv = cfg_.num_kv_heads, hd = cfg_.head_dim, row = Hkv * hd;
  cudaStream_t cs = stream_;
  kv.append(s.kn.as<bf16>() + row0 * row, s.vn.as<bf16>() + row0 * row, s.posp() + row0, n, row, cs,
            /*device_positions=*/true);
  const bf16* q = queries(s) + row0 * H * hd;
  bf16* att = s.att.as<bf16>() + row0 * H * hd;
  const int64_t* qpos = s.posp() + row0;
  const cuda::AttentionShape shape{n, kv.rows, H, Hkv, hd};
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  if (n <= kDecodeMaxRows && !split_invariant_) {
    DeviceBuffer ws(pool_, cuda::attention_decode_workspace_bytes(shape));
    cuda::attention_decode(shape, q, kv.k.as<bf16>(), kv.v.as<bf16>(), qpos, kv.pos.as<int64_t>(), scale, att,
                           ws.get(), cs);
  } else {
    // Few query tiles over many keys (the stitch's seams and question over every cached key): the keys of
    // each tile cut over several blocks so that the SMs fill, then one combine pass.
    // Split-invariant runs keep one block per query tile: a row's sum then runs over the same key tiles in
    // the same order however many rows share the pass.
    const int64_t splits = split_invariant_ ? 1 : cuda::attention_prefill_splits(shape, sm_count_);
    DeviceBuffer ws;  // none for one split
    if (splits > 1) ws = DeviceBuffer(pool_, cuda::attention_prefill_workspace_bytes(shape, splits));
    cuda::attention_prefill_split(shape, q, kv.k.as<bf16>(), kv.v.as<bf16>(), qpos, kv.pos.as<int64_t>(), scale,
                                  splits, ws.get(), att, cs);
  }
}

void CudaModel::attention_isolated(int layer, CudaActivations& s, const std::vector<IsolatedAttention>& items) {
  if (items.empty()) return;
  const int64_t H = cfg_.num_heads, Hkv = cfg_.num_kv_heads, hd = cfg_.head_dim, row = Hkv * hd;
  cudaStream_t cs = stream_;
  const bf16* q0 = queries(s);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<const void*> src_k, src_v;
  std::vector<void*> dst_k, dst_v;
  std::vector<int64_t> sizes;
  int64_t most = 0;
  for (const IsolatedAttention& it : items) {
    HYPIC_ASSERT(it.row0 >= 0 && it.n > 0 && it.row0 + it.n <= s.T, "attention_isolated: rows out of range");
    const bf16* k = s.kn.as<bf16>() + it.row0 * row;
    const bf16* v = s.vn.as<bf16>() + it.row0 * row;
    const int64_t* pos = s.posp() + it.row0;
    const cuda::AttentionShape shape{it.n, it.n, H, Hkv, hd};
    bf16* att = s.att.as<bf16>() + it.row0 * H * hd;
    if (it.n <= kDecodeMaxRows) {
      DeviceBuffer ws(pool_, cuda::attention_decode_workspace_bytes(shape));
      cuda::attention_decode(shape, q0 + it.row0 * H * hd, k, v, pos, pos, scale, att, ws.get(), cs);
    } else {
      cuda::attention_prefill(shape, q0 + it.row0 * H * hd, k, v, pos, pos, scale, att, cs);
    }
    src_k.push_back(k);
    src_v.push_back(v);
    dst_k.push_back(it.k);
    dst_v.push_back(it.v);
    sizes.push_back(static_cast<int64_t>(sizeof(bf16) * it.n * row));
    most = std::max(most, sizes.back());
  }
  ArgPack pack;
  const size_t o_sk = pack.put(src_k), o_sv = pack.put(src_v), o_dk = pack.put(dst_k), o_dv = pack.put(dst_v);
  const size_t o_sz = pack.put(sizes);
  const DeviceBuffer args = pack.upload(pool_, upload_, cs);
  const int64_t n = static_cast<int64_t>(items.size());
  cuda::copy_batched(at<const void* const>(args, o_sk), at<void* const>(args, o_dk), at<int64_t>(args, o_sz), n,
                     static_cast<size_t>(most), cs);
  cuda::copy_batched(at<const void* const>(args, o_sv), at<void* const>(args, o_dv), at<int64_t>(args, o_sz), n,
                     static_cast<size_t>(most), cs);
}

void CudaModel::append_kv_ranges(CudaAttentionLayerState& kv, const std::vector<KvRange>& ranges) {
  const int64_t Hkv = cfg_.num_kv_heads, hd = cfg_.head_dim, half = cfg_.rotary_dim / 2;
  std::vector<cuda::KvRange> items;
  std::vector<float> tables;
  int64_t row = kv.rows;
  for (const KvRange& r : ranges) {
    if (r.n <= 0) continue;
    items.push_back({r.k, r.v, r.pos0, row, r.n, r.rotate});
    row += r.n;
    tables.resize(tables.size() + 2 * half);
    if (r.rotate && cfg_.rotary_dim > 0) cuda::rope_shift_table(cfg_.rotary_dim, r.rotate, cfg_.rope_theta, tables.data() + tables.size() - 2 * half,
                                         tables.data() + tables.size() - half);
  }
  if (items.empty()) return;
  const int64_t total = row - kv.rows;
  kv.reserve(row, Hkv * hd, stream_);
  ArgPack pack;
  const size_t o_items = pack.put(items), o_tab = pack.put(tables);
  const DeviceBuffer args = pack.upload(pool_, upload_, stream_);
  cuda::kv_append_ranges(at<const cuda::KvRange>(args, o_items), at<const float>(args, o_tab),
                         static_cast<int64_t>(items.size()), kv.rows, total, kv.k.as<bf16>(), kv.v.as<bf16>(),
                         kv.pos.as<int64_t>(), Hkv, hd, cfg_.rotary_dim, stream_);
  kv.rows = row;
}

void CudaModel::attention_output_local(int layer, CudaActivations& s) {
  const int64_t T = s.T, H = cfg_.num_heads, hd = cfg_.head_dim;
  cudaStream_t cs = stream_;
  bf16* att = s.att.as<bf16>();
  const DeviceLinear& o = w_.layers[layer].attn.o;
  // One row: the output gate in the product's prologue (one launch less a decode layer, same bits).
  if (T == 1 && fusion_on_ && !split_invariant_ && cfg_.attn_output_gate && !cfg_.mla_head_gate &&
      !cfg_.residual_from_norm && !cfg_.mla && o.in == H * hd &&
      cuda::gemv_sigmoid_input_fits(H * hd, hd, 2 * hd, att, s.qg.as<bf16>() + hd)) {
    cuda::GemvInput in;
    in.sig_x = att;
    in.sig_gate = s.qg.as<bf16>() + hd;
    in.head_dim = hd;
    in.gate_ld = 2 * hd;
    const cuda::GemvTarget t{o.w, o.out, s.hp(), DType::F32, cuda::GemvEpilogue::Add};
    cuda::gemv(in, H * hd, &t, 1, cs);
    return;
  }
  if (cfg_.attn_output_gate) cuda::sigmoid_mul(att, hd, s.qg.as<bf16>() + hd, 2 * hd, T * H, hd, cs);
  if (cfg_.mla_head_gate) cuda::head_sigmoid_scale(att, s.hgate.as<float>(), T * H, hd, cs);
  if (cfg_.residual_from_norm) cuda::scale_bf16(att, cfg_.full_beta, T * H * hd, cs);
  const bf16* in = att;
  int64_t width = H * hd;
  if (cfg_.mla && cfg_.v_head_dim < hd) {  // drop the values' padding: rows [H, dv] for o_proj (qg is free now)
    const int64_t dv = cfg_.v_head_dim;
    HYPIC_CUDA_CHECK(cudaMemcpy2DAsync(s.qg.get(), sizeof(bf16) * dv, att, sizeof(bf16) * hd, sizeof(bf16) * dv, T * H,
                                       cudaMemcpyDeviceToDevice, cs));
    in = s.qg.as<bf16>();
    width = H * dv;
  }
  gemm(in, T, width, o, s.hp(), DType::F32, /*accumulate=*/true);  // residual add
}

bool CudaModel::ffn_one_row(int layer, CudaActivations& s) {
  const DeviceLayer& L = w_.layers[layer];
  const DeviceMoe& M = L.moe_w;
  const int64_t D = cfg_.hidden_size, E = cfg_.num_experts, K = cfg_.experts_per_tok;
  const int64_t I = cfg_.moe_intermediate_size, Is = cfg_.shared_expert_intermediate_size;
  if (!s.norm_pending || !L.moe || !M.has_shared || cfg_.router != RouterKind::SoftmaxTopK || !small_moe(1) ||
      Is % 8 != 0 || Is > cuda::kGemvMaxK)
    return false;
  cudaStream_t cs = stream_;
  if (s.moe_barrier.get() && M.router.out == E && M.shared.gate_up.in == D && M.shared.down.in == Is &&
      cuda::moe_layer_decode_supported(E, K, D, I, Is)) {
    // The whole sublayer in one launch (same bits as the three below).
    cuda::MoeLayerDecodeArgs a;
    a.h = s.hp();
    a.norm_w = s.norm_pending;
    a.eps = cfg_.rms_norm_eps;
    a.zero_centred = cfg_.zero_centred_norms;
    s.norm_pending = nullptr;
    a.x = s.xp();
    a.D = D;
    a.router = M.router.w;
    a.logits = s.router.as<float>();
    a.E = E;
    a.K = K;
    a.normalize = cfg_.norm_topk_prob;
    a.shared_gate_up = M.shared.gate_up.w;
    a.shared_act = s.sgu.as<bf16>();
    a.shared_gate_w = M.shared_gate.w;
    a.shared_gate = M.shared_gate.w ? s.sg.as<float>() : nullptr;
    a.shared_down = M.shared.down.w;
    a.Is = Is;
    a.gate_up = M.gate_up;
    a.down = M.down;
    a.I = I;
    a.act = s.eact.as<bf16>();
    a.barrier = s.moe_barrier.as<unsigned long long>();
    cuda::moe_layer_decode(a, cs);
    if (active_profile_) active_profile_->mark("ffn_experts", cs);
    return true;
  }
  // The norm, the router, the shared expert's gate/up with its SwiGLU and its gate logit: one launch.
  cuda::GemvTarget first[3] = {{M.router.w, M.router.out, s.router.get(), DType::F32},
                               {M.shared.gate_up.w, Is, s.sgu.get(), DType::BF16, cuda::GemvEpilogue::SwiGlu}};
  int n = 2;
  if (M.shared_gate.w) first[n++] = {M.shared_gate.w, M.shared_gate.out, s.sg.get(), DType::F32};
  cuda::gemv(gemv_input(s), D, first, n, cs);
  if (cuda::moe_decode_supported(E, K, D, I, Is)) {
    // Routing, routed experts, shared down, the sum and the residual add: two more launches.
    cuda::MoeDecodeArgs a;
    a.logits = s.router.as<float>();
    a.E = E;
    a.K = K;
    a.normalize = cfg_.norm_topk_prob;
    a.x = s.xp();
    a.D = D;
    a.gate_up = M.gate_up;
    a.I = I;
    a.act = s.eact.as<bf16>();
    a.down = M.down;
    a.shared_act = s.sgu.as<bf16>();
    a.shared_down = M.shared.down.w;
    a.Is = Is;
    a.shared_gate = M.shared_gate.w ? s.sg.as<float>() : nullptr;
    a.h = s.hp();
    cuda::moe_decode(a, cs);
    if (active_profile_) active_profile_->mark("ffn_experts", cs);
    return true;
  }
  cuda::moe_route(s.router.as<float>(), 1, E, K, cfg_.norm_topk_prob, s.sel.as<int32_t>(), s.wts.as<float>(), cs);
  if (active_profile_) active_profile_->mark("ffn_router", cs);
  bf16* y = s.y.as<bf16>();
  cuda::moe_small_gate_up(s.xp(), 1, D, D, s.sel.as<int32_t>(), K, M.gate_up, I, s.eact.as<bf16>(), cs);
  cuda::moe_small_down_combine(s.eact.as<bf16>(), 1, K, I, s.sel.as<int32_t>(), s.wts.as<float>(), M.down, D, y, cs);
  if (active_profile_) active_profile_->mark("ffn_experts", cs);
  // The shared expert's down projection, its gate, the routed sum and the residual add: one launch.
  cuda::GemvInput act;
  act.x = s.sgu.as<bf16>();
  cuda::GemvTarget down{M.shared.down.w, D, s.hp(), DType::F32, cuda::GemvEpilogue::MoeResidual};
  down.routed = y;
  down.gate = M.shared_gate.w ? s.sg.as<float>() : nullptr;
  cuda::gemv(act, Is, &down, 1, cs);
  return true;
}

void CudaModel::ffn_local(int layer, CudaActivations& s) {
  if (ffn_one_row(layer, s)) return;
  run_pending_norm(s);
  const int64_t T = s.T;
  const DeviceLayer& L = w_.layers[layer];
  const int64_t D = cfg_.hidden_size;
  cudaStream_t cs = stream_;
  if (!L.moe) {
    const int64_t I = cfg_.intermediate_size;
    bf16* gu = s.gu.as<bf16>();
    gemm(s.xp(), T, D, L.mlp.gate_up, gu, DType::BF16);
    cuda::swiglu(gu, 2 * I, gu + I, 2 * I, gu, 2 * I, T, I, cs);
    gemm(gu, T, 2 * I, L.mlp.down, s.hp(), DType::F32, /*accumulate=*/true);
    return;
  }
  const DeviceMoe& M = L.moe_w;
  const int64_t E = cfg_.num_experts, K = cfg_.experts_per_tok, I = cfg_.moe_intermediate_size;
  // With the few-row products on, the shared expert's gate/up and its one-column gate ride in the router's
  // launch (all read x).
  const bool shared_early =
      M.has_shared && T > 1 && skinny_rows(T) && M.shared.gate_up.in == D;
  if (shared_early && M.shared_gate.w)
    gemm_same_rows(s.xp(), T, D, {{&M.router, s.router.get(), DType::F32},
                                  {&M.shared.gate_up, s.sgu.get(), DType::BF16},
                                  {&M.shared_gate, s.sg.get(), DType::F32}});
  else if (shared_early)
    gemm_same_rows(s.xp(), T, D, {{&M.router, s.router.get(), DType::F32},
                                  {&M.shared.gate_up, s.sgu.get(), DType::BF16}});
  else
    gemm(s.xp(), T, D, M.router, s.router.get(), DType::F32);
  if (cfg_.router == RouterKind::SigmoidGroupTopK) {
    const bool renorm = cfg_.norm_topk_prob && (K > 1 || cfg_.router_mask_inf);
    cuda::moe_route_sigmoid_group(s.router.as<float>(), M.expert_bias, T, E, K, cfg_.n_group, cfg_.topk_group,
                                  cfg_.router_mask_inf, renorm, cfg_.routed_scaling_factor, s.sel.as<int32_t>(),
                                  s.wts.as<float>(), cs);
  } else {
    cuda::moe_route(s.router.as<float>(), T, E, K, cfg_.norm_topk_prob, s.sel.as<int32_t>(), s.wts.as<float>(), cs);
  }
  if (active_profile_) active_profile_->mark("ffn_router", cs);
  bf16* y = s.y.as<bf16>();
  cuda::MoePlan plan{};
  bool combine_pending = false;
  const bool tiled_first = tiled_moe_first(T);  // on Hopper, ahead of the few-row and expert-major forms
  if (!tiled_first && small_moe(T)) {
    cuda::moe_small_gate_up(s.xp(), T, D, D, s.sel.as<int32_t>(), K, M.gate_up, I, s.eact.as<bf16>(), cs);
    cuda::moe_small_down_combine(s.eact.as<bf16>(), T, K, I, s.sel.as<int32_t>(), s.wts.as<float>(), M.down, D, y,
                                 cs);
  } else if (!tiled_first && grouped_moe_on_device(T)) {
    // Expert-major: each routed expert's weights read once for all its rows, the plan kept on the device.
    const int64_t slots = std::min(E, T * K);
    plan = cuda::moe_plan_from_workspace(s.plan_ws.get(), T, K, E);
    // Fused (HYPIC_CUDA_DECODE_FUSION, default on): the plan and expert list in one launch, the products
    // reading the rows through the plan (no gathered copy), the weighted sum in the residual add below.
    const bool fused = fusion_on_ && moe_mma_;
    if (fused) {
      cuda::moe_plan_device(s.sel.as<int32_t>(), T, K, E, plan, s.moe_list.as<int32_t>(), slots, cs);
    } else {
      cuda::moe_plan(s.sel.as<int32_t>(), T, K, E, plan, nullptr, cs);
      cuda::moe_expert_list(plan.offsets, E, slots, s.moe_list.as<int32_t>(), cs);
    }
    const int32_t* list = s.moe_list.as<int32_t>();
    if (fused) {
      cuda::moe_grouped_gate_up_mma(s.xp(), D, plan.offsets, list, slots, M.gate_up, I, s.eact.as<bf16>(), cs,
                                    plan.src_token);
      cuda::moe_grouped_down_mma(s.eact.as<bf16>(), I, plan.offsets, list, slots, M.down, D, s.ys.as<bf16>(), cs);
    } else if (moe_mma_) {
      cuda::moe_gather(s.xp(), T, K, D, plan, s.xs.as<bf16>(), cs);
      cuda::moe_grouped_gate_up_mma(s.xs.as<bf16>(), D, plan.offsets, list, slots, M.gate_up, I, s.eact.as<bf16>(), cs);
      cuda::moe_grouped_down_mma(s.eact.as<bf16>(), I, plan.offsets, list, slots, M.down, D, s.ys.as<bf16>(), cs);
    } else {
      cuda::moe_gather(s.xp(), T, K, D, plan, s.xs.as<bf16>(), cs);
      cuda::moe_grouped_gate_up(s.xs.as<bf16>(), D, plan.offsets, list, slots, M.gate_up, I, s.eact.as<bf16>(), cs);
      cuda::moe_grouped_down(s.eact.as<bf16>(), I, plan.offsets, list, slots, M.down, D, s.ys.as<bf16>(), cs);
    }
    // The weighted sum waits for the residual add below (one pass for both) unless scaled first.
    combine_pending = fused && !cfg_.residual_from_norm;
    if (!combine_pending) cuda::moe_combine(s.ys.as<bf16>(), T, K, D, plan, s.wts.as<float>(), y, false, cs);
  } else if (tiled_first || tiled_moe(T)) {
    // A long prefill (on Hopper any from kTiledFirstMoeTokens tokens): tiles of 128 rows of one expert, the plan
    // and the tile list on the device, the input rows read through the plan, SwiGLU in the gate/up kernel,
    // the weighted sum in the residual add.
    const int64_t slots = cuda::moe_tile_slots(T * K, E);
    plan = cuda::moe_plan_from_workspace(s.plan_ws.get(), T, K, E);
    int2* tiles = s.moe_tiles.as<int2>();
    if (fusion_on_) {  // the plan and the tile list in one launch
      cuda::moe_plan_tiles_device(s.sel.as<int32_t>(), T, K, E, plan, tiles, slots, cuda::kMoeTileRows, cs);
    } else {
      cuda::moe_plan(s.sel.as<int32_t>(), T, K, E, plan, nullptr, cs);
      cuda::moe_tile_list(plan.offsets, E, tiles, slots, cs);
    }
    cuda::moe_tiled_gate_up(s.xp(), D, plan.src_token, plan.offsets, E, tiles, slots, M.gate_up, I, s.eact.as<bf16>(),
                            cs);
    cuda::moe_tiled_down(s.eact.as<bf16>(), I, plan.offsets, E, tiles, slots, M.down, D, s.ys.as<bf16>(), cs);
    combine_pending = !cfg_.residual_from_norm;
    if (!combine_pending) cuda::moe_combine(s.ys.as<bf16>(), T, K, D, plan, s.wts.as<float>(), y, false, cs);
  } else {
    moe_grouped(layer, s, y);
  }
  if (active_profile_) active_profile_->mark("ffn_experts", cs);
  const float beta = cfg_.residual_from_norm ? cfg_.mlp_beta : 1.0f;  // MiniMax's factor on the MoE output
  cuda::scale_bf16(y, beta, T * D, cs);
  if (!M.has_shared) {
    if (combine_pending)
      combine_residual(layer, s, plan, nullptr, nullptr);
    else
      cuda::residual_add(s.hp(), y, nullptr, nullptr, T, D, cs);
    return;
  }
  const int64_t Is = cfg_.shared_expert_intermediate_size;
  bf16* sgu = s.sgu.as<bf16>();
  if (!shared_early) gemm(s.xp(), T, D, M.shared.gate_up, sgu, DType::BF16);
  cuda::swiglu(sgu, 2 * Is, sgu + Is, 2 * Is, sgu, 2 * Is, T, Is, cs);
  gemm(sgu, T, 2 * Is, M.shared.down, s.sh.get(), DType::BF16);
  cuda::scale_bf16(s.sh.as<bf16>(), beta, T * D, cs);
  const float* gate = nullptr;  // Ring and Kimi add the shared expert ungated
  if (M.shared_gate.w) {
    if (!shared_early) gemm(s.xp(), T, D, M.shared_gate, s.sg.get(), DType::F32);
    gate = s.sg.as<float>();
  }
  if (combine_pending)
    combine_residual(layer, s, plan, s.sh.as<bf16>(), gate);
  else
    cuda::residual_add(s.hp(), y, s.sh.as<bf16>(), gate, T, D, cs);
}

void CudaModel::combine_residual(int layer, CudaActivations& s, const cuda::MoePlan& plan, const bf16* shared,
                                 const float* gate) {
  const int64_t T = s.T, K = cfg_.experts_per_tok, D = cfg_.hidden_size;
  // The next layer's input norm in the same pass where nothing else writes h before it (a plain norm: not
  // MiniMax's norm into the residual; not under tensor parallelism, whose reduce of h comes after this).
  const bool fuse = prefill_fusion_ && layer + 1 < cfg_.num_layers && !tensor_parallel() &&
                    !cfg_.residual_from_norm && !one_row(s);
  if (fuse) {
    const float* next = w_.layers[layer + 1].input_norm;
    if (cuda::moe_combine_residual_norm(s.ys.as<bf16>(), T, K, D, plan, s.wts.as<float>(), s.hp(), shared, gate, next,
                                        cfg_.rms_norm_eps, cfg_.zero_centred_norms, s.xp(), stream_)) {
      s.x_normed_with = next;
      return;
    }
  }
  cuda::moe_combine_residual(s.ys.as<bf16>(), T, K, D, plan, s.wts.as<float>(), s.hp(), shared, gate, stream_);
}

void CudaModel::moe_grouped(int layer, CudaActivations& s, bf16* y) {
  const int64_t T = s.T, D = cfg_.hidden_size;
  const DeviceMoe& M = w_.layers[layer].moe_w;
  const int64_t E = cfg_.num_experts, K = cfg_.experts_per_tok, I = cfg_.moe_intermediate_size;
  cudaStream_t cs = stream_;
  const cuda::MoePlan plan = cuda::moe_plan_from_workspace(s.plan_ws.get(), T, K, E);
  cuda::moe_plan(s.sel.as<int32_t>(), T, K, E, plan, counts_host_.data(), cs);
  bf16 *xs = s.xs.as<bf16>(), *egu = s.egu.as<bf16>(), *eact = s.eact.as<bf16>(), *ys = s.ys.as<bf16>();
  cuda::moe_gather(s.xp(), T, K, D, plan, xs, cs);
  cuda::moe_grouped_gemm(blas_, xs, D, M.gate_up_ptrs.data(), 2 * I, counts_host_.data(), E, egu, cs);
  cuda::swiglu(egu, 2 * I, egu + I, 2 * I, eact, I, T * K, I, cs);
  cuda::moe_grouped_gemm(blas_, eact, I, M.down_ptrs.data(), D, counts_host_.data(), E, ys, cs);
  cuda::moe_combine(ys, T, K, D, plan, s.wts.as<float>(), y, false, cs);
}

std::vector<float> CudaModel::decode_step(int id, CudaSequenceState& st) {
  if (!graphs_on_ || !qwen_layers()) return {};  // the other families take the launched step
  const int64_t V = cfg_.vocab_size, row = cfg_.num_kv_heads * cfg_.head_dim;
  if (id < 0 || id >= V)
    throw InvalidArgument("token id " + std::to_string(id) + " at index 0 is outside the vocabulary [0, " +
                          std::to_string(V) + ")");
  bool any_moe = false;
  for (int64_t l = 0; l < cfg_.num_layers; ++l) any_moe = any_moe || cfg_.layer_is_moe[l];
  if (any_moe && !small_moe(1)) return {};  // the grouped MoE synchronises with the host: not capturable
  // Every attention layer of a sequence holds the same rows; a state where they differ takes the
  // launched path.
  int64_t rows = -1;
  for (int l = 0; l < cfg_.num_layers; ++l) {
    if (cfg_.layer_kinds[l] != LayerKind::FullAttention) continue;
    if (rows >= 0 && st.attn[l].rows != rows) return {};
    rows = st.attn[l].rows;
  }
  if (rows + 1 > INT32_MAX) return {};
  cudaStream_t cs = stream_;
  int64_t capacity = 0;
  std::vector<const void*> bound;
  for (int l = 0; l < cfg_.num_layers; ++l) {
    if (cfg_.layer_kinds[l] == LayerKind::LinearAttention) {
      bound.push_back(st.lin[l].S.get());
      bound.push_back(st.lin[l].conv_tail.get());
    } else {
      CudaAttentionLayerState& kv = st.attn[l];
      kv.reserve(rows + 1, row, cs);
      capacity = capacity == 0 ? kv.capacity : std::min(capacity, kv.capacity);
      bound.push_back(kv.k.get());
      bound.push_back(kv.v.get());
      bound.push_back(kv.pos.get());
    }
  }
  // A few sequences may take turns (an agent's sessions): keep the graphs of the last kDecodeGraphs.
  auto hit = std::find_if(graphs_.begin(), graphs_.end(),
                          [&](const auto& g) { return g->bound == bound && g->capacity == capacity; });
  if (hit != graphs_.end()) {
    std::rotate(hit, hit + 1, graphs_.end());  // most recently used last
  } else {
    try {
      if (graphs_.size() >= kDecodeGraphs) graphs_.erase(graphs_.begin());
      graphs_.push_back(capture_decode(st, capacity, bound));
    } catch (const std::exception& e) {
      // Nothing captured has run, so the step can still be launched; graphs stay off for this model.
      (void)cudaGetLastError();
      std::fprintf(stderr, "hypic: CUDA graph capture of the decode step failed (%s); launching kernels instead\n",
                   e.what());
      set_decode_graphs(false);
      return {};
    }
    ++graph_captures_;
  }
  DecodeGraph& g = *graphs_.back();
  g.host->id = id;
  g.host->rows_end = static_cast<int32_t>(rows + 1);
  g.host->pos = st.length;
  HYPIC_CUDA_CHECK(cudaMemcpyAsync(g.a.ids.get(), &g.host->id, sizeof(int32_t), cudaMemcpyHostToDevice, cs));
  HYPIC_CUDA_CHECK(cudaMemcpyAsync(g.rows_end.get(), &g.host->rows_end, sizeof(int32_t), cudaMemcpyHostToDevice, cs));
  HYPIC_CUDA_CHECK(cudaMemcpyAsync(g.a.pos.get(), &g.host->pos, sizeof(int64_t), cudaMemcpyHostToDevice, cs));
  HYPIC_CUDA_CHECK(cudaGraphLaunch(g.exec, cs));
  std::vector<float> out(static_cast<size_t>(V));
  HYPIC_CUDA_CHECK(cudaMemcpyAsync(out.data(), g.logits.get(), sizeof(float) * V, cudaMemcpyDeviceToHost, cs));
  HYPIC_CUDA_CHECK(cudaStreamSynchronize(cs));
  for (int l = 0; l < cfg_.num_layers; ++l)
    if (cfg_.layer_kinds[l] == LayerKind::FullAttention) st.attn[l].rows = rows + 1;
  st.length += 1;
  return out;
}

std::unique_ptr<CudaModel::DecodeGraph> CudaModel::capture_decode(CudaSequenceState& st, int64_t capacity,
                                                                  std::vector<const void*> bound) {
  auto g = std::make_unique<DecodeGraph>();
  const int64_t D = cfg_.hidden_size, V = cfg_.vocab_size, row = cfg_.num_kv_heads * cfg_.head_dim;
  g->a = activations(1);
  g->rows_end = DeviceBuffer(pool_, sizeof(int32_t));
  g->kbuf = DeviceBuffer(pool_, sizeof(bf16) * row);
  g->vbuf = DeviceBuffer(pool_, sizeof(bf16) * row);
  g->att_ws = DeviceBuffer(pool_, cuda::attention_decode_workspace_bytes(
                                      {1, std::max<int64_t>(capacity, 1), cfg_.num_heads, cfg_.num_kv_heads,
                                       cfg_.head_dim}));
  g->logits = DeviceBuffer(pool_, sizeof(float) * V);
  g->bound = std::move(bound);
  g->capacity = capacity;
  HYPIC_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&g->host), sizeof(DecodeGraph::Step)));
  cudaStream_t cs = stream_;
  CudaActivations& a = g->a;
  cudaGraph_t graph = nullptr;
  HYPIC_CUDA_CHECK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal));
  try {
    cuda::embed_rows(w_.embed.w, a.ids.as<int32_t>(), 1, D, a.hp(), cs);
    for (int l = 0; l < cfg_.num_layers; ++l) {
      input_norm(l, a);
      if (cfg_.layer_kinds[l] == LayerKind::LinearAttention) {
        linear_project(l, a);
        linear_recur(l, a, 0, 1, st.lin[l]);
        linear_output(l, a);
      } else {
        attention_step(l, a, st.attn[l], *g);
      }
      post_norm(l, a);
      ffn(l, a);
    }
    final_logits(a, g->logits.as<float>());
  } catch (...) {
    cudaStreamEndCapture(cs, &graph);
    if (graph) cudaGraphDestroy(graph);
    throw;
  }
  HYPIC_CUDA_CHECK(cudaStreamEndCapture(cs, &graph));
  const cudaError_t err = cudaGraphInstantiate(&g->exec, graph, 0);
  cudaGraphDestroy(graph);
  HYPIC_CUDA_CHECK(err);
  return g;
}

void CudaModel::attention_step(int layer, CudaActivations& s, CudaAttentionLayerState& kv, DecodeGraph& g) {
  const int64_t H = cfg_.num_heads, Hkv = cfg_.num_kv_heads, hd = cfg_.head_dim;
  cudaStream_t cs = stream_;
  bf16 *kn = g.kbuf.as<bf16>(), *vn = g.vbuf.as<bf16>();
  attention_project_into(layer, s, kn, vn);
  const int32_t* rows_end = g.rows_end.as<int32_t>();
  cuda::kv_append(kn, vn, s.posp(), 1, Hkv * hd, rows_end, kv.capacity, kv.k.as<bf16>(), kv.v.as<bf16>(),
                  kv.pos.as<int64_t>(), cs);
  // The launch is sized by the capacity the workspace was sized for; the keys read stop at rows_end.
  const cuda::AttentionShape shape{1, g.capacity, H, Hkv, hd};
  cuda::attention_decode(shape, queries(s), kv.k.as<bf16>(), kv.v.as<bf16>(), s.posp(), kv.pos.as<int64_t>(),
                         1.0f / std::sqrt(static_cast<float>(hd)), s.att.as<bf16>(), g.att_ws.get(), cs, rows_end);
  attention_output_local(layer, s);
}

}  // namespace hypic
