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
#include "kernels/cuda/kv_cache.h"
#include "kernels/cuda/model_glue.h"
#include "kernels/cuda/moe.h"
#include "kernels/cuda/moe_small.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/rope.h"
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

CudaModel::CudaModel(ModelConfig cfg, std::string fingerprint)
    : cfg_(std::move(cfg)), fingerprint_(std::move(fingerprint)) {
  const char* env = std::getenv("HYPIC_CUDA_GRAPHS");
  graphs_on_ = !(env && std::strcmp(env, "0") == 0);
}

CudaModel::~CudaModel() = default;

void CudaModel::set_decode_graphs(bool on) {
  graphs_on_ = on;
  if (!on) graphs_.clear();
}

bool CudaModel::small_moe(int64_t T) const {
  const int64_t K = cfg_.experts_per_tok, I = cfg_.moe_intermediate_size, D = cfg_.hidden_size;
  return T * K <= kSmallMoeRows && D % 8 == 0 && I % 8 == 0 && K * I <= 16384;
}

std::unique_ptr<CudaModel> CudaModel::load(const std::string& dir) {
  if (!fs::is_directory(dir)) throw IoError("model directory '" + dir + "' does not exist");
  ModelConfig cfg = ModelConfig::load((fs::path(dir) / "config.json").string());
  const ModelWeights w = ModelWeights::load(cfg, dir);
  return upload(cfg, w);
}

std::unique_ptr<CudaModel> CudaModel::upload(const ModelConfig& cfg, const ModelWeights& w) {
  std::unique_ptr<CudaModel> m(new CudaModel(cfg, w.fingerprint));
  m->w_ = DeviceWeights::upload(cfg, w, m->stream_);
  return m;
}

std::unique_ptr<CudaModel> CudaModel::random(const ModelConfig& cfg, uint64_t seed) {
  std::unique_ptr<CudaModel> m(new CudaModel(cfg, "random-" + cfg.fingerprint + "-" + std::to_string(seed)));
  m->w_ = DeviceWeights::random(cfg, seed, m->stream_);
  return m;
}

void CudaModel::gemm(const bf16* x, int64_t T, int64_t ldx, const DeviceLinear& w, void* y, DType yt,
                     bool accumulate) {
  cuda::gemm_xwt(blas_, x, T, w.in, ldx, w.w, w.out, y, yt, w.out, accumulate, stream_);
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
    s.qkv = buf(sizeof(bf16) * t * C);
    s.conv = buf(sizeof(bf16) * t * C);
    s.z = buf(sizeof(bf16) * t * vd);
    s.ba = buf(sizeof(float) * t * 2 * Hv);
    s.q = buf(sizeof(bf16) * t * kd);
    s.k = buf(sizeof(bf16) * t * kd);
    s.v = buf(sizeof(bf16) * t * vd);
    s.g = buf(sizeof(float) * t * Hv);
    s.beta = buf(sizeof(float) * t * Hv);
    s.o = buf(sizeof(bf16) * t * vd);
    // Sized for all rows: any piece of them may run chunked (long pieces, or with a transfer operator).
    s.gdn_ws = buf(cuda::gdn_chunked_workspace_bytes(
        {T, 1, cfg_.lin_v_heads, cfg_.lin_k_heads, cfg_.lin_k_dim, cfg_.lin_v_dim}));
  }
  if (any_attn) {
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
  cudaStream_t cs = stream_;
  // Pageable host copies return once the data is staged, so the host vectors may go out of scope.
  const std::vector<int32_t> ids32(ids.begin(), ids.end());
  HYPIC_CUDA_CHECK(cudaMemcpyAsync(a.ids.get(), ids32.data(), sizeof(int32_t) * T, cudaMemcpyHostToDevice, cs));
  HYPIC_CUDA_CHECK(cudaMemcpyAsync(a.pos.get(), pos.data(), sizeof(int64_t) * T, cudaMemcpyHostToDevice, cs));
  cuda::embed_rows(w_.embed.w, a.ids.as<int32_t>(), T, cfg_.hidden_size, a.hp(), cs);
}

void CudaModel::input_norm(int layer, CudaActivations& a) {
  cuda::rmsnorm(a.hp(), a.xp(), a.T, cfg_.hidden_size, w_.layers[layer].input_norm, cfg_.rms_norm_eps, true,
                stream_);
}

void CudaModel::post_norm(int layer, CudaActivations& a) {
  cuda::rmsnorm(a.hp(), a.xp(), a.T, cfg_.hidden_size, w_.layers[layer].post_norm, cfg_.rms_norm_eps, true,
                stream_);
}

std::vector<float> CudaModel::logits(CudaActivations& a, int64_t row0, int64_t rows) {
  const int64_t D = cfg_.hidden_size, V = cfg_.vocab_size;
  HYPIC_ASSERT(rows >= 1 && row0 >= 0 && row0 + rows <= a.T, "logits: rows out of range");
  cudaStream_t cs = stream_;
  // The normed rows go to the front of x (x is free once the last layer ran).
  cuda::rmsnorm(a.hp() + row0 * D, a.xp(), rows, D, w_.final_norm, cfg_.rms_norm_eps, true, cs);
  DeviceBuffer out_dev(pool_, sizeof(float) * rows * V);
  gemm(a.xp(), rows, D, w_.lm_head, out_dev.get(), DType::F32);
  std::vector<float> out(static_cast<size_t>(rows * V));
  HYPIC_CUDA_CHECK(cudaMemcpyAsync(out.data(), out_dev.get(), sizeof(float) * out.size(), cudaMemcpyDeviceToHost, cs));
  HYPIC_CUDA_CHECK(cudaStreamSynchronize(cs));
  return out;
}

void CudaModel::linear_project(int layer, CudaActivations& s) {
  const DeviceGdn& G = w_.layers[layer].lin;
  const int64_t T = s.T, Hv = cfg_.lin_v_heads, D = cfg_.hidden_size;
  gemm(s.xp(), T, D, G.qkv, s.qkv.get(), DType::BF16);
  gemm(s.xp(), T, D, G.z, s.z.get(), DType::BF16);
  gemm(s.xp(), T, D, G.ba, s.ba.get(), DType::F32);  // fp32: the gates are sensitive to rounding of a
  cuda::gdn_gates(s.ba.as<float>(), T, Hv, G.A_log, G.dt_bias, s.g.as<float>(), s.beta.as<float>(), stream_);
}

void CudaModel::linear_recur(int layer, CudaActivations& s, int64_t row0, int64_t n, CudaLinearLayerState& st,
                             float* transfer) {
  HYPIC_ASSERT(row0 >= 0 && n > 0 && row0 + n <= s.T, "linear_recur: rows out of range");
  const DeviceGdn& G = w_.layers[layer].lin;
  const int64_t Hk = cfg_.lin_k_heads, Hv = cfg_.lin_v_heads, dk = cfg_.lin_k_dim, dv = cfg_.lin_v_dim;
  const int64_t C = cfg_.lin_conv_dim(), vd = cfg_.lin_value_dim(), kd = cfg_.lin_key_dim();
  cudaStream_t cs = stream_;
  bf16* conv = s.conv.as<bf16>() + row0 * C;
  bf16 *q = s.q.as<bf16>() + row0 * kd, *k = s.k.as<bf16>() + row0 * kd, *v = s.v.as<bf16>() + row0 * vd;
  const float *g = s.g.as<float>() + row0 * Hv, *beta = s.beta.as<float>() + row0 * Hv;
  bf16* o = s.o.as<bf16>() + row0 * vd;
  cuda::causal_conv1d_silu(s.qkv.as<bf16>() + row0 * C, n, C, G.conv_w, cfg_.conv_kernel, st.conv_tail.as<bf16>(),
                           conv, cs);
  cuda::gdn_split_qkv(conv, n, Hk, dk, Hv, dv, 1.0f / std::sqrt(static_cast<float>(dk)), 1e-6f, q, k, v, cs);
  const cuda::GdnShape shape{n, 1, Hv, Hk, dk, dv};
  // Only the chunked kernel builds the transfer operator.
  if (n >= kChunkedMinTokens || transfer)
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
  const float *g = s.g.as<float>() + row0 * Hv, *beta = s.beta.as<float>() + row0 * Hv;
  cuda::identity_operators(T, Hv, dk, cs);
  HYPIC_CUDA_CHECK(cudaMemsetAsync(body, 0, sizeof(float) * Hv * dk * dv, cs));
  cuda::gdn_chunked_prefill({n, 1, Hv, Hk, dk, dv}, q, k, v, g, beta, nullptr, n, body, nullptr, T, s.gdn_ws.get(),
                            cs);
}

void CudaModel::linear_isolated(int layer, CudaActivations& s, const std::vector<IsolatedBlock>& blocks) {
  if (blocks.empty()) return;
  const DeviceGdn& G = w_.layers[layer].lin;
  const int64_t Hk = cfg_.lin_k_heads, Hv = cfg_.lin_v_heads, dk = cfg_.lin_k_dim, dv = cfg_.lin_v_dim;
  const int64_t C = cfg_.lin_conv_dim(), vd = cfg_.lin_value_dim(), kd = cfg_.lin_key_dim();
  const size_t state = sizeof(float) * Hv * dk * dv, op = sizeof(float) * Hv * dk * dk;
  const size_t tail = sizeof(bf16) * (cfg_.conv_kernel - 1) * C;
  cudaStream_t cs = stream_;
  const int64_t r0 = blocks.front().row0;
  const int64_t N = static_cast<int64_t>(blocks.size());
  std::vector<int32_t> cu(1, 0);
  int64_t longest = 0;
  for (const IsolatedBlock& b : blocks) {
    HYPIC_ASSERT(b.row0 == r0 + cu.back(), "linear_isolated: blocks must be consecutive rows");
    cu.push_back(cu.back() + static_cast<int32_t>(b.seam + b.n));
    longest = std::max(longest, b.seam + b.n);
  }
  const int64_t total = cu.back();
  // The conv of each block from a zero tail; the tail left behind is the block's conv tail.
  for (const IsolatedBlock& b : blocks) {
    HYPIC_CUDA_CHECK(cudaMemsetAsync(b.conv_tail, 0, tail, cs));
    cuda::causal_conv1d_silu(s.qkv.as<bf16>() + b.row0 * C, b.seam + b.n, C, G.conv_w, cfg_.conv_kernel, b.conv_tail,
                             s.conv.as<bf16>() + b.row0 * C, cs);
  }
  bf16 *q = s.q.as<bf16>() + r0 * kd, *k = s.k.as<bf16>() + r0 * kd, *v = s.v.as<bf16>() + r0 * vd;
  const float *g = s.g.as<float>() + r0 * Hv, *beta = s.beta.as<float>() + r0 * Hv;
  cuda::gdn_split_qkv(s.conv.as<bf16>() + r0 * C, total, Hk, dk, Hv, dv, 1.0f / std::sqrt(static_cast<float>(dk)),
                      1e-6f, q, k, v, cs);
  // Outputs and the states after the blocks: every block one packed sequence from zero.
  DeviceBuffer cu_dev(pool_, sizeof(int32_t) * cu.size()), states(pool_, state * N);
  HYPIC_CUDA_CHECK(cudaMemcpyAsync(cu_dev.get(), cu.data(), sizeof(int32_t) * cu.size(), cudaMemcpyHostToDevice, cs));
  HYPIC_CUDA_CHECK(cudaMemsetAsync(states.get(), 0, state * N, cs));
  const cuda::GdnShape all{total, N, Hv, Hk, dk, dv};
  DeviceBuffer ws(pool_, cuda::gdn_chunked_workspace_bytes(all));
  cuda::gdn_chunked_prefill(all, q, k, v, g, beta, cu_dev.as<int32_t>(), longest, states.as<float>(),
                            s.o.as<bf16>() + r0 * vd, nullptr, ws.get(), cs);
  for (int64_t i = 0; i < N; ++i)
    HYPIC_CUDA_CHECK(cudaMemcpyAsync(blocks[i].full, states.as<char>() + i * state, state, cudaMemcpyDeviceToDevice, cs));
  // T and S(body | 0): the same packed sequences again, from zero and state only, with every seam token
  // made a no-op (g = 0, beta = 0: its transition is the identity and it adds nothing), so each block's
  // run is its body's alone, read with the conv context its seam gave it.
  DeviceBuffer g0(pool_, sizeof(float) * total * Hv), beta0(pool_, sizeof(float) * total * Hv);
  HYPIC_CUDA_CHECK(cudaMemcpyAsync(g0.get(), g, sizeof(float) * total * Hv, cudaMemcpyDeviceToDevice, cs));
  HYPIC_CUDA_CHECK(cudaMemcpyAsync(beta0.get(), beta, sizeof(float) * total * Hv, cudaMemcpyDeviceToDevice, cs));
  for (const IsolatedBlock& b : blocks) {
    if (b.seam == 0) continue;
    const size_t at = sizeof(float) * (b.row0 - r0) * Hv, bytes = sizeof(float) * b.seam * Hv;
    HYPIC_CUDA_CHECK(cudaMemsetAsync(g0.as<char>() + at, 0, bytes, cs));
    HYPIC_CUDA_CHECK(cudaMemsetAsync(beta0.as<char>() + at, 0, bytes, cs));
  }
  DeviceBuffer ops(pool_, op * N);
  HYPIC_CUDA_CHECK(cudaMemsetAsync(states.get(), 0, state * N, cs));
  cuda::identity_operators(ops.as<float>(), N * Hv, dk, cs);
  cuda::gdn_chunked_prefill(all, q, k, v, g0.as<float>(), beta0.as<float>(), cu_dev.as<int32_t>(), longest,
                            states.as<float>(), nullptr, ops.as<float>(), ws.get(), cs);
  for (int64_t i = 0; i < N; ++i) {
    HYPIC_CUDA_CHECK(cudaMemcpyAsync(blocks[i].T, ops.as<char>() + i * op, op, cudaMemcpyDeviceToDevice, cs));
    HYPIC_CUDA_CHECK(cudaMemcpyAsync(blocks[i].body, states.as<char>() + i * state, state, cudaMemcpyDeviceToDevice, cs));
  }
}

void CudaModel::linear_output(int layer, CudaActivations& s) {
  const DeviceGdn& G = w_.layers[layer].lin;
  const int64_t T = s.T, Hv = cfg_.lin_v_heads, dv = cfg_.lin_v_dim, vd = cfg_.lin_value_dim();
  bf16* o = s.o.as<bf16>();
  cuda::rmsnorm_gated_silu(o, s.z.as<bf16>(), o, T * Hv, dv, G.norm_w, cfg_.rms_norm_eps, stream_);
  gemm(o, T, vd, G.out, s.hp(), DType::F32, /*accumulate=*/true);  // residual add
}

void CudaModel::attention_project(int layer, CudaActivations& s) {
  const int64_t T = s.T;
  const DeviceAttention& A = w_.layers[layer].attn;
  const int64_t H = cfg_.num_heads, Hkv = cfg_.num_kv_heads, hd = cfg_.head_dim, D = cfg_.hidden_size;
  const bool gated = cfg_.attn_output_gate;
  cudaStream_t cs = stream_;
  bf16* qg = s.qg.as<bf16>();
  gemm(s.xp(), T, D, A.q, qg, DType::BF16);
  // Per head the projection holds the query then the gate: copy the queries out as [T, H, hd] rows.
  bf16* q = qg;
  if (gated) {
    q = s.aq.as<bf16>();
    HYPIC_CUDA_CHECK(cudaMemcpy2DAsync(q, sizeof(bf16) * hd, qg, sizeof(bf16) * 2 * hd, sizeof(bf16) * hd, T * H,
                                       cudaMemcpyDeviceToDevice, cs));
  }
  bf16 *kn = s.kn.as<bf16>(), *vn = s.vn.as<bf16>();
  gemm(s.xp(), T, D, A.k, kn, DType::BF16);
  gemm(s.xp(), T, D, A.v, vn, DType::BF16);
  cuda::rmsnorm(q, q, T * H, hd, A.q_norm, cfg_.rms_norm_eps, true, cs);
  cuda::rmsnorm(kn, kn, T * Hkv, hd, A.k_norm, cfg_.rms_norm_eps, true, cs);
  cuda::rope_apply(q, T, H, hd, cfg_.rotary_dim, s.posp(), cfg_.rope_theta, cs);
  cuda::rope_apply(kn, T, Hkv, hd, cfg_.rotary_dim, s.posp(), cfg_.rope_theta, cs);
}

void CudaModel::attention_core(int layer, CudaActivations& s, int64_t row0, int64_t n, CudaAttentionLayerState& kv) {
  HYPIC_ASSERT(row0 >= 0 && n > 0 && row0 + n <= s.T, "attention_core: rows out of range");
  const int64_t H = cfg_.num_heads, Hkv = cfg_.num_kv_heads, hd = cfg_.head_dim, row = Hkv * hd;
  cudaStream_t cs = stream_;
  kv.append(s.kn.as<bf16>() + row0 * row, s.vn.as<bf16>() + row0 * row, s.posp() + row0, n, row, cs);
  const bf16* q = (cfg_.attn_output_gate ? s.aq.as<bf16>() : s.qg.as<bf16>()) + row0 * H * hd;
  bf16* att = s.att.as<bf16>() + row0 * H * hd;
  const int64_t* qpos = s.posp() + row0;
  const cuda::AttentionShape shape{n, kv.rows, H, Hkv, hd};
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  if (n <= kDecodeMaxRows) {
    DeviceBuffer ws(pool_, cuda::attention_decode_workspace_bytes(shape));
    cuda::attention_decode(shape, q, kv.k.as<bf16>(), kv.v.as<bf16>(), qpos, kv.pos.as<int64_t>(), scale, att,
                           ws.get(), cs);
  } else {
    cuda::attention_prefill(shape, q, kv.k.as<bf16>(), kv.v.as<bf16>(), qpos, kv.pos.as<int64_t>(), scale, att, cs);
  }
}

void CudaModel::attention_output(int layer, CudaActivations& s) {
  const int64_t T = s.T, H = cfg_.num_heads, hd = cfg_.head_dim;
  bf16* att = s.att.as<bf16>();
  if (cfg_.attn_output_gate) cuda::sigmoid_mul(att, hd, s.qg.as<bf16>() + hd, 2 * hd, T * H, hd, stream_);
  gemm(att, T, H * hd, w_.layers[layer].attn.o, s.hp(), DType::F32, /*accumulate=*/true);  // residual add
}

void CudaModel::ffn(int layer, CudaActivations& s) {
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
  gemm(s.xp(), T, D, M.router, s.router.get(), DType::F32);
  cuda::moe_route(s.router.as<float>(), T, E, K, cfg_.norm_topk_prob, s.sel.as<int32_t>(), s.wts.as<float>(), cs);
  bf16* y = s.y.as<bf16>();
  if (small_moe(T)) {
    cuda::moe_small_gate_up(s.xp(), T, D, D, s.sel.as<int32_t>(), K, M.gate_up, I, s.eact.as<bf16>(), cs);
    cuda::moe_small_down_combine(s.eact.as<bf16>(), T, K, I, s.sel.as<int32_t>(), s.wts.as<float>(), M.down, D, y,
                                 cs);
  } else {
    moe_grouped(layer, s, y);
  }
  if (!M.has_shared) {
    cuda::residual_add(s.hp(), y, nullptr, nullptr, T, D, cs);
    return;
  }
  const int64_t Is = cfg_.shared_expert_intermediate_size;
  bf16* sgu = s.sgu.as<bf16>();
  gemm(s.xp(), T, D, M.shared.gate_up, sgu, DType::BF16);
  cuda::swiglu(sgu, 2 * Is, sgu + Is, 2 * Is, sgu, 2 * Is, T, Is, cs);
  gemm(sgu, T, 2 * Is, M.shared.down, s.sh.get(), DType::BF16);
  gemm(s.xp(), T, D, M.shared_gate, s.sg.get(), DType::F32);
  cuda::residual_add(s.hp(), y, s.sh.as<bf16>(), s.sg.as<float>(), T, D, cs);
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
  if (!graphs_on_) return {};
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
    cuda::rmsnorm(a.hp(), a.xp(), 1, D, w_.final_norm, cfg_.rms_norm_eps, true, cs);
    gemm(a.xp(), 1, D, w_.lm_head, g->logits.get(), DType::F32);
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
  const DeviceAttention& A = w_.layers[layer].attn;
  const int64_t H = cfg_.num_heads, Hkv = cfg_.num_kv_heads, hd = cfg_.head_dim, D = cfg_.hidden_size;
  const bool gated = cfg_.attn_output_gate;
  cudaStream_t cs = stream_;
  bf16* qg = s.qg.as<bf16>();
  gemm(s.xp(), 1, D, A.q, qg, DType::BF16);
  bf16* q = qg;
  if (gated) {
    q = s.aq.as<bf16>();
    HYPIC_CUDA_CHECK(cudaMemcpy2DAsync(q, sizeof(bf16) * hd, qg, sizeof(bf16) * 2 * hd, sizeof(bf16) * hd, H,
                                       cudaMemcpyDeviceToDevice, cs));
  }
  bf16 *kn = g.kbuf.as<bf16>(), *vn = g.vbuf.as<bf16>();
  gemm(s.xp(), 1, D, A.k, kn, DType::BF16);
  gemm(s.xp(), 1, D, A.v, vn, DType::BF16);
  cuda::rmsnorm(q, q, H, hd, A.q_norm, cfg_.rms_norm_eps, true, cs);
  cuda::rmsnorm(kn, kn, Hkv, hd, A.k_norm, cfg_.rms_norm_eps, true, cs);
  cuda::rope_apply(q, 1, H, hd, cfg_.rotary_dim, s.posp(), cfg_.rope_theta, cs);
  cuda::rope_apply(kn, 1, Hkv, hd, cfg_.rotary_dim, s.posp(), cfg_.rope_theta, cs);
  const int32_t* rows_end = g.rows_end.as<int32_t>();
  cuda::kv_append(kn, vn, s.posp(), 1, Hkv * hd, rows_end, kv.capacity, kv.k.as<bf16>(), kv.v.as<bf16>(),
                  kv.pos.as<int64_t>(), cs);
  bf16* att = s.att.as<bf16>();
  // The launch is sized by the capacity the workspace was sized for; the keys read stop at rows_end.
  const cuda::AttentionShape shape{1, g.capacity, H, Hkv, hd};
  cuda::attention_decode(shape, q, kv.k.as<bf16>(), kv.v.as<bf16>(), s.posp(), kv.pos.as<int64_t>(),
                         1.0f / std::sqrt(static_cast<float>(hd)), att, g.att_ws.get(), cs, rows_end);
  if (gated) cuda::sigmoid_mul(att, hd, qg + hd, 2 * hd, H, hd, cs);
  gemm(att, 1, H * hd, A.o, s.hp(), DType::F32, /*accumulate=*/true);
}

}  // namespace hypic
