// The hybrid decoders' layers on one CUDA device (Qwen3-Next / Qwen3.5, Ring-linear, MiniMax, Kimi-Linear,
// Ring-2.5): the same steps as the CPU backend
// (runtime/cpu_backend.h) with bf16 weights and activations, fp32 accumulation, an fp32 residual
// stream, fp32 recurrent states and a bf16 KV cache (kernels/cuda).
//
// The engine (runtime/engine.h, through CudaBackend) drives the layer loop over these steps; the model
// itself only captures the one-token decode step as a CUDA graph. A CudaModel owns its stream, cuBLAS handles and scratch pool;
// it is not thread-safe (one caller at a time per model), while sequence states are independent of
// each other. All work is ordered on stream().
#pragma once
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/memory.h"
#include "kernels/cuda/moe.h"
#include "kernels/cuda/rope.h"
#include "kernels/cuda/sampling.h"
#include "runtime/cuda/cuda_activations.h"
#include "runtime/cuda/cuda_sequence_state.h"
#include "runtime/cuda/device_weights.h"
#include "runtime/communicator.h"
#include "runtime/model_config.h"
#include "runtime/model_weights.h"

namespace hypic {

class CudaModel {
 public:
  // Loads config.json and the safetensors weights from `dir` (the CPU loader's checks and errors) and
  // uploads them once; the host mapping is released afterwards.
  static std::unique_ptr<CudaModel> load(const std::string& dir);
  // Uploads already loaded weights (converted to bf16 on the device).
  static std::unique_ptr<CudaModel> upload(const ModelConfig& cfg, const ModelWeights& w);
  // A model of cfg's shape with random weights generated on the device (DeviceWeights::random), for
  // timing production shapes without a checkpoint.
  static std::unique_ptr<CudaModel> random(const ModelConfig& cfg, uint64_t seed);
  ~CudaModel();
  // A model over the same device weights (not copied) with its own stream, cuBLAS handle, scratch pool and
  // graphs, for passes run concurrently from another host thread (Backend::worker). The weights live as
  // long as either model.
  std::unique_ptr<CudaModel> sibling() const;
  // The CUDA device the model's weights are on.
  int device() const { return device_; }
  // One rank of a tensor-parallel group (Backend::set_communicator): every mixer's and feed-forward's
  // output is summed over the group before it joins the residual stream; the captured decode graphs and
  // the batched decode step are turned off (their steps do not reduce).
  void set_communicator(std::shared_ptr<Communicator> comm);
  bool tensor_parallel() const { return comm_ && comm_->size() > 1; }

  const ModelConfig& config() const { return cfg_; }
  const std::string& fingerprint() const { return fingerprint_; }
  size_t weight_bytes() const { return w_.bytes(); }
  CudaSequenceState new_state() const { return CudaSequenceState::empty_for(cfg_, stream_owner_); }

  // One-token steps of a sequence: decode_step replays a captured CUDA graph (the default;
  // HYPIC_CUDA_GRAPHS=0 in the environment or set_decode_graphs(false) turns it off, and the engine then
  // launches the step as a pass). Returns the logits, or nothing when this state cannot use the graph. The graph reads the token,
  // its position and the key count from device memory, so it is captured again only when the sequence's
  // buffers move (a KV cache that outgrew its capacity); the graphs of the last few sequences are kept.
  // Results equal the launched path's up to the order of the attention sums.
  void set_decode_graphs(bool on);
  // Linear-layer spans without a transfer operator on the recurrent kernels (Backend::set_split_invariant;
  // HYPIC_CUDA_SPLIT_INVARIANT=1 in the environment turns it on at load).
  void set_split_invariant(bool on) { split_invariant_ = on; }
  bool split_invariant() const { return split_invariant_; }
  // Qwen3-Next / Qwen3.5 layers: the families the captured decode step and the batched decode know (the
  // others take the launched step, a lane per sequence).
  bool qwen_layers() const;
  bool decode_graphs() const { return graphs_on_; }
  // How many times the decode graph was captured (a capture that fails turns graphs off, logged once).
  int64_t decode_graph_captures() const { return graph_captures_; }

  cudaStream_t stream() const { return stream_; }
  const std::shared_ptr<cuda::Stream>& stream_owner() const { return stream_owner_; }
  cuda::DevicePool& pool() { return pool_; }

  // ---- building blocks over device buffers (rows are tokens; each adds its output to the residual) ----
  // Buffers for T rows, from the scratch pool (returned when the activations are destroyed).
  CudaActivations activations(int64_t T);
  // h = embedding of `ids`, at global positions `pos` (both [a.T]). Throws InvalidArgument for an id
  // outside [0, vocab).
  void embed(std::span<const int> ids, std::span<const int64_t> pos, CudaActivations& a);
  void input_norm(int layer, CudaActivations& a);  // x = norm(h)
  void post_norm(int layer, CudaActivations& a);
  // Gated DeltaNet in three steps, so that the recurrence can run over pieces of the rows with the
  // caller's state edits between them (the stitch composes cached segments between seams):
  //   linear_project: projections and gates of every row;
  //   linear_recur: conv + delta rule over rows [row0, row0 + n) continuing `st`; if `transfer` is
  //     non-null ([Hv, dk, dk] fp32 on the device, holding an operator) it is left-multiplied by the
  //     transition of these n tokens (DESIGN §1.2);
  //   linear_output: gated norm and output projection of every row, h += out.
  void linear_project(int layer, CudaActivations& a);
  void linear_recur(int layer, CudaActivations& a, int64_t row0, int64_t n, CudaLinearLayerState& st,
                    float* transfer = nullptr);
  //   linear_body: linear_recur over a segment body being cached, plus its operator T and its zero-start
  //     state S(body | 0) from a second pass of the chunked kernel over the same rows started at zero
  //     (state only, no outputs). Forming S(body | 0) as S_full - T S_start instead would cancel two
  //     large terms that carry the bf16 error of T.
  void linear_body(int layer, CudaActivations& a, int64_t row0, int64_t n, CudaLinearLayerState& st, float* T,
                   float* body);
  //   linear_isolated: isolated prefills of several blocks whose rows are consecutive (block i at
  //     [row0_i, row0_i + seam_i + n_i), each from a zero state): one conv per block, then ONE packed
  //     (variable-length) chunked call over all blocks for the outputs and the states after the blocks
  //     that also walks every body (the rows after the seam) for its T and S(body | 0), sharing the
  //     forward's chunk preparation. Writes each block's T, body, full state and conv tail. Returns false
  //     (nothing done) for lightning and KDA layers: the engine then runs the blocks one by one.
  struct IsolatedBlock {
    int64_t row0, seam, n;
    float *T, *body, *full;
    cuda::bf16* conv_tail;
  };
  bool linear_isolated(int layer, CudaActivations& a, const std::vector<IsolatedBlock>& blocks);
  //   linear_chain: a lane's linear layer as ordered steps (Backend::ChainStep): Rows, Compose (a cached
  //     body), Save. Every Rows step becomes one packed sequence: one varlen conv (each from the conv tail
  //     before it), one chunked call from zero for each sequence's (T, S(rows | 0)), ONE launch carrying the
  //     state through the chain's affine maps S <- T S + B (recording each sequence's start state), and one
  //     chunked call from those start states for the outputs. ~8 launches per layer however many blocks
  //     the lane composes. Returns false (nothing done) for a chain it does not batch: two Rows steps with
  //     no Compose between them, a plain run of rows, or a lightning / KDA layer.
  struct ChainStep {
    enum class Kind { Rows, Compose, Save, Load } kind;
    int64_t row0, n;
    const float *T, *body;
    const cuda::bf16* conv_tail;
    float* S_out;
    cuda::bf16* tail_out;
  };
  bool linear_chain(int layer, CudaActivations& a, CudaLinearLayerState& st, const std::vector<ChainStep>& steps,
                    bool naive);
  void linear_output(int layer, CudaActivations& a);
  // Full attention in three steps, so that several sequences can share one pass:
  //   attention_project: queries, keys and values of every row (normed, rotated at a's positions);
  //   attention_core: the K/V of rows [row0, row0 + n) are appended to `kv` and those rows' queries attend
  //     over every row of `kv` visible by position (cached rows may come in any order);
  //   attention_output: output gate and projection of every row, h += out.
  // With append (a decode step, one row a sequence): the keys and values may go straight into the
  // sequences' caches (attention_project_into); true when they did.
  bool attention_project(int layer, CudaActivations& a, const cuda::QkAppend* append = nullptr,
                         cuda::DecodeNewRows* fold = nullptr);
  void attention_core(int layer, CudaActivations& a, int64_t row0, int64_t n, CudaAttentionLayerState& kv);
  void attention_output(int layer, CudaActivations& a);
  //   attention_isolated: isolated prefills' attention straight over the pass's own K/V rows (no state
  //     kept), item i's rows [row0, row0 + n) over themselves; their K/V rows then go to (k, v) in one
  //     batched copy each.
  struct IsolatedAttention {
    int64_t row0, n;
    cuda::bf16 *k, *v;
  };
  void attention_isolated(int layer, CudaActivations& a, const std::vector<IsolatedAttention>& items);
  //   append_kv_ranges: cached K/V ranges appended to `kv` in one launch (cuda::kv_append_ranges), range i
  //     at positions pos0_i.., keys re-rotated by rotate_i.
  struct KvRange {
    const cuda::bf16 *k, *v;
    int64_t n, pos0, rotate;
  };
  void append_kv_ranges(CudaAttentionLayerState& kv, const std::vector<KvRange>& ranges);
  void ffn(int layer, CudaActivations& a);  // h += ffn(x)
  // Final norm + LM head of rows [row0, row0 + n) -> host [n, V]. Synchronises the stream.
  std::vector<float> logits(CudaActivations& a, int64_t row0, int64_t n);
  std::vector<float> decode_step(int id, CudaSequenceState& st);
  // One-token steps of N sequences at once (continuous batching; runtime/cuda/batch_decode.cc): ids[i]
  // continues states[i]. One pass over N rows: projections, MoE and LM head run once over the batch, and
  // each layer's per-sequence work (conv + delta-rule step, K/V append + attention over the sequence's own
  // cache) is one launch over device pointer arrays. The pass is captured as a CUDA graph per (N, key
  // bound: a power of two >= the longest cache) when decode graphs are on and the MoE runs on device-side
  // kernels (N * top_k <= 1024: few-row or expert-major); otherwise launched. Returns [N, V] logits, or nothing when a state cannot
  // take this path (then the engine runs a lane per sequence). The caller advances each state's length.
  // HYPIC_CUDA_BATCH_DECODE=0 in the environment or set_batch_decode(false) turns the path off.
  std::vector<float> decode_batch(std::span<const int> ids, std::span<CudaSequenceState* const> states);
  // The same step where rows with an active draw get their next token drawn on the device
  // (kernels/cuda/sampling.h: draw_rows) into sampled[i] instead of copying their logits to the host;
  // the other rows' logits go to logits[i]. false: the path is off or a state cannot take it.
  bool decode_batch_drawn(std::span<const int> ids, std::span<CudaSequenceState* const> states,
                          std::span<const cuda::RowDraw> draws, std::span<int> sampled,
                          std::vector<std::vector<float>>& logits);
  void set_batch_decode(bool on);
  bool batch_decode() const { return batch_on_; }
  int64_t batch_graph_captures() const { return batch_captures_; }
  // Whether an MoE of T tokens takes the Hopper tiled wgmma GEMMs ahead of the few-row and expert-major
  // kernels: from kTiledFirstMoeTokens tokens (a stitch's or a short prefill's MoE, a decode batch of 8 or
  // more; device-side, so graphs capture it).
  bool tiled_moe_first(int64_t T) const;
  // With HYPIC_PROFILE_DECODE=1 in the environment, launched batched steps (graphs off) record where their
  // device time goes: milliseconds per part (projections, recurrence, attention, ffn, ...) summed over
  // the steps since the last reset.
  std::map<std::string, double> decode_profile(bool reset);

 private:
  // Runs an output step onto zeros, sums its partial over the group, adds the sum to the residual.
  template <class Step>
  void reduced(CudaActivations& a, Step&& step);
  void linear_output_local(int layer, CudaActivations& a);
  void attention_output_local(int layer, CudaActivations& a);
  void ffn_local(int layer, CudaActivations& a);
  // `shared`: a sibling's weights (null: new, empty ones).
  CudaModel(ModelConfig cfg, std::string fingerprint, std::shared_ptr<DeviceWeights> shared = nullptr);
  // The steps of the other families' layers (same contracts as the public steps they serve).
  void lightning_project(int layer, CudaActivations& a);
  void lightning_recur(int layer, CudaActivations& a, int64_t row0, int64_t n, CudaLinearLayerState& st,
                       float* transfer);
  void lightning_output(int layer, CudaActivations& a);
  void kda_project(int layer, CudaActivations& a);
  void kda_output(int layer, CudaActivations& a);
  void mla_project(int layer, CudaActivations& a);
  // Where attention_project leaves the queries ([T, H, hd] rows).
  const cuda::bf16* queries(const CudaActivations& a) const;
  // y = x W^T into a bf16 or fp32 buffer (rows of x `ldx` apart).
  void gemm(const cuda::bf16* x, int64_t T, int64_t ldx, const DeviceLinear& w, void* y, DType yt,
            bool accumulate = false);
  // The same rows through up to three weights (a layer's input projections): one launch where
  // cuda::gemm_skinny_many takes them all, one gemm each otherwise.
  struct Product {
    const DeviceLinear* w;
    void* y;
    DType yt;
  };
  void gemm_same_rows(const cuda::bf16* x, int64_t T, int64_t ldx, std::initializer_list<Product> products);
  // Whether products of T rows go to cuda::gemm_skinny (T <= its preferred rows, not in the split-invariant
  // mode, not turned off) rather than cuBLAS.
  bool skinny_rows(int64_t T) const;

  // One-row passes (decode) run their products through cuda::gemv: the sublayer input norm deferred
  // into the products that read it, neighbouring products in one launch, the small element-wise steps in
  // their epilogues (HYPIC_CUDA_DECODE_FUSION=0 turns it off, for comparison).
  bool one_row(const CudaActivations& a) const;
  // x = norm(h) with norm weights w (MiniMax: alpha * norm(h) also becomes the residual), or the norm
  // deferred for a one-row pass.
  void sublayer_norm(CudaActivations& a, const float* w, float alpha);
  // A GDN / KDA layer's causal conv over qkv rows and the split into q (normed, scaled), k (normed), v: one
  // launch where the shape allows, else the conv into `conv` then gdn_split_qkv. One sequence over `tail`
  // (cu null) or N packed ones (cu, tails_in / tails_out as causal_conv1d_silu_varlen takes them).
  void gdn_conv_split(const cuda::bf16* qkv, const int32_t* cu, int64_t N, int64_t total, const cuda::bf16* conv_w,
                      const cuda::bf16* const* tails_in, cuda::bf16* const* tails_out, cuda::bf16* tail,
                      cuda::bf16* conv, cuda::bf16* q, cuda::bf16* k, cuda::bf16* v);
  // The MoE's weighted sum, the shared expert's output and h in one pass; the next layer's input norm into x in
  // the same pass where that applies (a.x_normed_with).
  void combine_residual(int layer, CudaActivations& s, const cuda::MoePlan& plan, const cuda::bf16* shared,
                        const float* gate);
  // Runs a deferred input norm (x = norm(h)) for a step that reads x itself.
  void run_pending_norm(CudaActivations& a);
  // The input row of a one-row product: the deferred norm of h (taken, x written on the way), or x.
  cuda::GemvInput gemv_input(CudaActivations& a);
  // logits [a.T, V] fp32 = LM head of the final norm of every row.
  void final_logits(CudaActivations& a, float* logits);
  // attention_project (not MLA) with this pass's keys and values written to kn, vn; with append (a
  // decode step, one row a sequence) the keys and values may go straight into the caches instead
  // (cuda::qk_norm_rope's append): true when they did, false when the caller must still append kn, vn.
  // With fold as well, where cuda::attention_decode_folds allows, the norms, the rotation and the append are
  // left to the attention: fold is filled (q_src non-null) and true returned without running them.
  bool attention_project_into(int layer, CudaActivations& a, cuda::bf16* kn, cuda::bf16* vn,
                              const cuda::QkAppend* append = nullptr, cuda::DecodeNewRows* fold = nullptr);
  // The MoE feed-forward of one row with a shared expert on the one-row kernels (false: not this layer).
  bool ffn_one_row(int layer, CudaActivations& a);

  struct DecodeGraph;
  // Whether N one-token rows of a Gated DeltaNet layer take their conv, split and recurrent step in one launch
  // (cuda::gdn_conv_recurrent_rows) rather than two: where its grid fits one wave of the SMs (at the 35B-A3B
  // shape one row; H200, docs/benchmarks.md: batch 1 2.907 -> 2.817-2.821 ms a step, batch 8 and 32 1-2% slower).
  // HYPIC_CUDA_GDN_CONV_RECURRENT=1: wherever the kernel takes the shape; =0: never.
  bool conv_recurrent_rows(int64_t N) const;
  // Whether one-row passes take a MoE layer with a shared expert in one launch (cuda::moe_layer_decode: norm,
  // router, shared and routed experts, residual add) rather than gemv + moe_decode's three.
  // HYPIC_CUDA_MOE_ONE_LAUNCH=1 / 0 / unset.
  bool moe_one_launch() const;
  // MoE of T rows on the few-row kernels (device-side expert ids, no host round trip)?
  bool small_moe(int64_t T) const;
  // MoE of T rows on the expert-major kernels (up to device_moe_rows_ routed rows: device-side plan, no
  // host round trip; tensor cores where moe_mma_)?
  bool grouped_moe_on_device(int64_t T) const;
  // MoE of T rows on the tiled tensor-core GEMMs (a long prefill: device-side plan, no host round trip)?
  bool tiled_moe(int64_t T) const;
  // The routed experts of the T rows through the grouped GEMMs (one host sync for the group sizes).
  void moe_grouped(int layer, CudaActivations& a, cuda::bf16* y);
  std::unique_ptr<DecodeGraph> capture_decode(CudaSequenceState& st, int64_t capacity, std::vector<const void*> bound);
  // attention_mixer for the captured step: K/V appended at the device-side count, keys read up to it.
  void attention_step(int layer, CudaActivations& a, CudaAttentionLayerState& kv, DecodeGraph& g);
  struct BatchStep;
  std::unique_ptr<BatchStep> make_batch_step(int64_t N, int64_t bound);
  // Uploads the step's inputs and launches it (graph or kernels); nullptr when a state cannot take the path.
  BatchStep* enqueue_batch_step(std::span<const int> ids, std::span<CudaSequenceState* const> states);
  void finish_batch_step(BatchStep& b, std::span<CudaSequenceState* const> states);
  struct StepProfile;
  void record_batch_step(BatchStep& b, StepProfile* prof);

  ModelConfig cfg_;
  std::string fingerprint_;
  // Shared with the sequence states' stream-ordered memory (DeviceMemory), which is freed on it.
  std::shared_ptr<cuda::Stream> stream_owner_ = std::make_shared<cuda::Stream>();
  cudaStream_t stream_ = stream_owner_->get();
  cuda::Blas blas_;
  cuda::DevicePool pool_;  // per-forward scratch, reused across calls
  cuda::UploadRing upload_;  // small per-call arguments (offsets, pointer arrays) to the device
  std::shared_ptr<DeviceWeights> shared_w_;  // shared with siblings
  DeviceWeights& w_;
  int device_ = 0;
  std::shared_ptr<Communicator> comm_;
  std::vector<int32_t> counts_host_;  // MoE group sizes (host)
  bool graphs_on_ = true;
  bool split_invariant_ = false;
  bool fusion_on_ = true;
  // HYPIC_CUDA_PREFILL_FUSION=0: the unfused prefill kernels (conv then split; the MoE's residual sum then the
  // next layer's norm), for A/B runs.
  bool prefill_fusion_ = true;
  // HYPIC_CUDA_GDN_CONV_RECURRENT: 1 / 0 / unset (-1): conv_recurrent_rows.
  int conv_recurrent_ = -1;
  // HYPIC_CUDA_MOE_ONE_LAUNCH: 1 / 0 / unset (-1): moe_one_launch.
  int moe_one_launch_ = -1;
  bool moe_mma_ = false;            // the expert-major MoE on tensor cores (moe_grouped_mma.h) takes this shape
  int64_t device_moe_rows_ = 0;     // most routed rows for the expert-major MoE (HYPIC_CUDA_MOE_DEVICE_ROWS)
  bool moe_tiled_ = true;           // more rows: the tiled GEMMs (moe_tiled.h) where they take the shape, else
                                    // cuBLAS's grouped GEMM (HYPIC_CUDA_MOE_TILED=0: always cuBLAS)
  bool moe_tiled_first_ = false;    // tiled_moe_first may apply (Hopper forms take the shape; off when
                                    // HYPIC_CUDA_MOE_DEVICE_ROWS sets the expert-major bound)
  int64_t tiled_first_tokens_ = 0;   // its token bound (kTiledFirstMoeTokens; HYPIC_CUDA_MOE_TILED_TOKENS)
  int sm_count_ = 1;
  int64_t graph_captures_ = 0;
  std::vector<std::unique_ptr<DecodeGraph>> graphs_;
  bool batch_on_ = true;
  int64_t batch_captures_ = 0;
  std::vector<std::unique_ptr<BatchStep>> batch_steps_;
  std::unique_ptr<StepProfile> profile_;
  StepProfile* active_profile_ = nullptr;  // set while a profiled step is being enqueued
};

}  // namespace hypic
