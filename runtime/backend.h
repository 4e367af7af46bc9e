// The layer-level device backend the one engine (runtime/engine.h) drives (docs/engine.md): the model's
// layers split into steps over a set of rows (tokens), plus the state and cache-entry operations of the
// caching mechanism. The engine owns the layer loop and the plan (which rows continue which sequence,
// where cached segments are composed, what is recorded); a backend only knows how to run one step on its
// device. Two implementations: CpuBackend (fp32, the reference) and, in CUDA builds, CudaBackend (bf16
// weights and activations, fp32 states).
//
// Handles are opaque: a State is one sequence's running state, Rows the buffers of one pass, Memory a
// block the backend allocated (host or device) that cache entries point into. Pointers handed to the
// entry operations point into Memory of the same backend. Element types of entry arrays:
//   recurrent states and transfer operators: fp32 on every backend;
//   conv tails and K/V rows: kv_dtype() (F32 on the CPU, BF16 on CUDA).
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/packed_expand.h"
#include "kernels/sampling.h"
#include "runtime/model_config.h"

namespace hypic {

class Communicator;
class SequenceState;

enum class Device { Cpu, Cuda };
inline const char* device_name(Device d) { return d == Device::Cuda ? "cuda" : "cpu"; }

// One sequence's running state: per linear layer the conv tail and the recurrent state, per attention
// layer its K/V rows with their global positions (rows in any order; attention masks by position).
class State {
 public:
  virtual ~State() = default;
  int64_t length = 0;  // the next position
  virtual size_t bytes() const = 0;
};

// The buffers of one pass over T rows: the residual stream and every intermediate of the layers.
class Rows {
 public:
  virtual ~Rows() = default;
  int64_t T = 0;
};

// A block of backend memory; freed when the handle goes.
class Memory {
 public:
  virtual ~Memory() = default;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 protected:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

enum class Composition {
  Transfer,  // S = T_body S + S_body  (hypic)
  NaiveSum,  // S = S + S_body         (ablation: what simple linear-attention PIC does)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual const ModelConfig& config() const = 0;
  virtual const std::string& fingerprint() const = 0;
  virtual DType kv_dtype() const = 0;

  // ---- memory and states ----
  virtual std::unique_ptr<Memory> allocate(size_t bytes) = 0;
  virtual std::unique_ptr<State> new_state() = 0;
  virtual std::unique_ptr<State> clone(const State& s) = 0;
  // Back to new_state()'s contents, keeping what the state allocated (for reuse as scratch).
  virtual void reset(State& s) = 0;
  // States for short-lived sequences (isolated prefills), reused across requests and engines so that a
  // cold request allocates nothing once the process has served one: an empty state, and its return.
  std::unique_ptr<State> scratch_state();
  void return_scratch_state(std::unique_ptr<State> s);
  // Another backend over the same weights (no second copy of them) with its own queue and scratch (CUDA:
  // its own stream, cuBLAS handle and buffer pool), so that two host threads can run passes on the two at
  // once (runtime/cold_scatter.h). null where there is none. Each of the two stays one caller at a time.
  virtual std::unique_ptr<Backend> worker() { return nullptr; }
  // Whether arrays in memory `other` allocated can be read and written by this backend as they are (the
  // same address space: both on the host, or both on one CUDA device), once `other` finished its work.
  virtual bool shares_memory_with(const Backend& other) const { return &other == this; }
  // Copies `bytes` bytes between arrays this backend can address (its own memory or that of a backend it
  // shares memory with), ordered after the work queued here; complete by the next sync().
  virtual void copy_shared(const void* src, void* dst, size_t bytes);
  // Copies `bytes` bytes from `src` in `from`'s memory to `dst` in this backend's memory directly (CUDA:
  // a peer copy between two devices), ordered after the work queued here, complete by the next sync(),
  // once `from` finished its work. false: no direct path (nothing done; copy through host memory).
  virtual bool copy_from_peer(const Backend& from, const void* src, void* dst, size_t bytes) { return false; }

  // ---- one pass (rows are tokens; every step adds its sublayer output to the residual stream) ----
  virtual std::unique_ptr<Rows> rows(int64_t T) = 0;
  // Embeddings of `ids` at global positions `pos` (both [T]). Throws InvalidArgument for an id outside
  // the vocabulary.
  virtual void embed(std::span<const int> ids, std::span<const int64_t> pos, Rows& r) = 0;
  virtual void input_norm(int layer, Rows& r) = 0;
  virtual void post_norm(int layer, Rows& r) = 0;
  // Gated DeltaNet: projections and gates of every row; then conv + delta rule over rows
  // [row0, row0 + n) continuing `st` (if `transfer` is non-null — [Hv, dk, dk] fp32 in backend memory,
  // holding an operator — it is left-multiplied by the transition of these rows: S(C | S0) = T_C S0 + S(C | 0)); then the
  // gated norm and output projection of every row.
  virtual void linear_project(int layer, Rows& r) = 0;
  virtual void linear_recur(int layer, Rows& r, int64_t row0, int64_t n, State& st, float* transfer) = 0;
  // linear_recur over a segment body that is being cached: continues `st` as linear_recur does, and
  // writes the body's transfer operator T (fp32 [Hv, dk, dk]) and its zero-start state S(body | 0)
  // (fp32 [Hv, dk, dv]) read with the same conv context. How S(body | 0) is formed is the backend's
  // precision choice (directly, or as S_full - T S_start where the arithmetic allows the cancellation).
  virtual void linear_body(int layer, Rows& r, int64_t row0, int64_t n, State& st, float* T, float* body) = 0;
  // Isolated prefills of several blocks at once, each from a zero state at local positions: item i's rows
  // [row0, row0 + seam + n) are its seam then its body, and its entry's T, S(body | 0), state after the
  // block and conv tail are written (`entry`, fp32 / kv_dtype() arrays in backend memory). The items'
  // states are not continued (an isolated lane ends with its block). The default runs them one after
  // another with linear_recur / linear_body; a backend may batch them (CUDA: packed sequences).
  struct IsolatedBlock {
    int64_t row0 = 0, seam = 0, n = 0;
    State* st = nullptr;
    float *T = nullptr, *body = nullptr, *full = nullptr;
    void* conv_tail = nullptr;
  };
  virtual void linear_isolated(int layer, Rows& r, std::span<const IsolatedBlock> items);
  // A lane's whole linear layer as a chain of steps over `st`, in order: Rows — linear_recur over rows
  // [row0, row0 + n) (the rows of successive Rows steps are consecutive); Compose — compose_linear with a
  // cached body (T, body) then its conv tail loaded; Load — load_linear of a whole state (body) and conv
  // tail; Save — save_linear into (S, conv_tail). Two Rows steps
  // are never adjacent without a Compose between them unless a Save separates them. The default runs the
  // steps one by one; a backend may batch them (CUDA: every Rows step one packed sequence, the state
  // carried across the chain by its affine maps in one launch).
  struct ChainStep {
    enum class Kind { Rows, Compose, Save, Load } kind = Kind::Rows;
    int64_t row0 = 0, n = 0;                                                   // Rows
    const float *T = nullptr, *body = nullptr;                                 // Compose, Load (body)
    const void* conv_tail = nullptr;                                           // Compose, Load
    int64_t rotate = 0;                                                        // Compose
    float* S_out = nullptr;                                                    // Save
    void* tail_out = nullptr;                                                  // Save
  };
  virtual void linear_chain(int layer, Rows& r, State& st, std::span<const ChainStep> steps, Composition how);
  virtual void linear_output(int layer, Rows& r) = 0;
  // Full attention: q/k/v of every row (normed, rotated at the rows' positions); then the K/V of rows
  // [row0, row0 + n) are appended to `st` and their queries attend over every row of `st` visible by
  // position; then the output gate and projection of every row.
  virtual void attention_project(int layer, Rows& r) = 0;
  virtual void attention_core(int layer, Rows& r, int64_t row0, int64_t n, State& st) = 0;
  virtual void attention_output(int layer, Rows& r) = 0;
  // Isolated prefills' attention: item i's rows [row0, row0 + n) attend causally over themselves only,
  // and their K/V rows are written to (k, v) (the entry's, [n, Hkv, hd] kv_dtype). The items' states are
  // not continued. The default appends each to its state and saves it; a backend may skip the state.
  struct IsolatedAttention {
    int64_t row0 = 0, n = 0;
    State* st = nullptr;
    void *k = nullptr, *v = nullptr;
  };
  virtual void attention_isolated(int layer, Rows& r, std::span<const IsolatedAttention> items);
  virtual void ffn(int layer, Rows& r) = 0;
  // Final norm + LM head of the given rows -> host [rows.size(), V] fp32.
  virtual std::vector<float> logits(Rows& r, std::span<const int64_t> rows) = 0;
  // A one-token step of `st` on a faster path (a replayed CUDA graph); empty when there is none, and
  // then the engine runs the step as a pass.
  virtual std::vector<float> decode_step(int id, State& st) { return {}; }
  // One-token steps of several sequences at once ([N, V] logits) on a faster path; empty when there is
  // none, and then the engine runs them as one pass with a lane per sequence.
  virtual std::vector<float> decode_batch(std::span<State* const> states, std::span<const int> ids) { return {}; }
  // How a row's next token is drawn where its logits are (Engine::decode_batch_drawn): kernels/sampling.h's
  // rule with the caller's uniform draw u, over ids [0, vocab) only.
  struct TokenDraw {
    SamplingParams params;
    double u = 0;
    int64_t vocab = 0;
  };
  // decode_batch where rows with draws[i] get their next token drawn on the backend (sampled[i]; logits[i]
  // left empty) and the others return their logits row (logits[i], [V]). false: no such path (nothing
  // done; the engine draws on the host).
  virtual bool decode_batch_drawn(std::span<State* const> states, std::span<const int> ids,
                                  std::span<const TokenDraw* const> draws, std::span<int> sampled,
                                  std::vector<std::vector<float>>& logits) {
    return false;
  }

  // ---- linear-layer state (S fp32 [Hv, dk, dv]; conv tail kv_dtype [K-1, conv_dim]) ----
  virtual void save_linear(int layer, const State& st, float* S, void* conv_tail) = 0;
  virtual void load_linear(int layer, State& st, const float* S, const void* conv_tail) = 0;
  // load_linear of several layers (a cached prefix's states). The default loads them one by one; a
  // backend may move them in one launch.
  struct LinearLoad {
    int layer = 0;
    const float* S = nullptr;
    const void* conv_tail = nullptr;
  };
  virtual void load_linear_layers(State& st, std::span<const LinearLoad> items);
  // S = T S + R(rotate) body (Transfer) or S = S + R(rotate) body (NaiveSum). R re-rotates the body's keys
  // by `rotate` positions where the linear layers apply RoPE (Ring: the body was computed at local
  // positions, reference §6.3); it is the identity for the other families.
  virtual void compose_linear(int layer, State& st, const float* T, const float* body, Composition how,
                              int64_t rotate) = 0;
  // T = I and S = 0: the operator and state of an empty body.
  virtual void empty_body(float* T, float* body) = 0;
  // Moves a linear-layer state in this backend's memory (fp32 [Hv, dk, dv]) by `delta` positions: R(delta)
  // on the key rows where the linear layers apply RoPE (Ring), nothing for the other families. The
  // default has no rotation: backends that run such a family override it.
  virtual void shift_linear_state(float* S, int64_t delta);

  // ---- attention-layer K/V (rows [n, Hkv, hd] kv_dtype) ----
  // Appends n cached rows at positions pos[0..n) (host), keys re-rotated by `rotate` positions.
  virtual void append_kv(int layer, State& st, const void* k, const void* v, int64_t n,
                         std::span<const int64_t> pos, int64_t rotate) = 0;
  // Several cached ranges appended in order: range i's n rows at positions pos0 .. pos0 + n - 1, keys
  // re-rotated by its `rotate`. The default appends them one by one; a backend may do it in one launch.
  struct KvAppend {
    const void *k = nullptr, *v = nullptr;
    int64_t n = 0, pos0 = 0, rotate = 0;
  };
  virtual void append_kv_ranges(int layer, State& st, std::span<const KvAppend> items);
  // Copies rows [row, row + n) of the state's layer into k/v at row `at`, keys re-rotated by `rotate`.
  virtual void save_kv(int layer, const State& st, int64_t row, int64_t n, void* k, void* v, int64_t at,
                       int64_t rotate) = 0;
  // save_kv of several ranges of one layer (a pass's snapshot and entries). Their destinations must not
  // overlap. The default saves them one by one; a backend may copy them in one launch.
  struct KvSave {
    int64_t row = 0, n = 0;
    void *k = nullptr, *v = nullptr;
    int64_t at = 0, rotate = 0;
  };
  virtual void save_kv_ranges(int layer, const State& st, std::span<const KvSave> items);
  virtual int64_t kv_rows(int layer, const State& st) const = 0;
  // Makes room for `rows` K/V rows in every attention layer of `st` at once (growing a device cache in
  // the middle of a pass costs a reallocation and a synchronisation per layer).
  virtual void reserve_kv(State& st, int64_t rows) {}

  // Makes this backend one rank of a tensor-parallel group (runtime/tensor_parallel.h): its weights are
  // the rank's slice of every layer (shard_weights), and the outputs of every mixer and feed-forward are
  // summed over the group (comm) before they join the residual stream. InvalidArgument where the backend
  // has no such path.
  virtual void set_communicator(std::shared_ptr<Communicator> comm);
  // Prepares the calling thread to use this backend (CUDA: makes its device the thread's current one).
  // Called by whoever drives a backend from a thread of its own (tensor-parallel ranks, scatter workers).
  virtual void bind_thread() {}

  // Waits for the device's queued work (a no-op on the CPU).
  virtual void sync() {}
  // Makes `bytes` of memory ready for allocate() ahead of use, as far as the device has room (CUDA: maps
  // it into the allocator's pool once, ~3 ms a GB, where growing the pool on a request's path would cost
  // that at the first kernel's expense). The engine asks for its cache budget. A no-op on the CPU.
  virtual void prepare_memory(size_t bytes) {}

  // Results that do not depend on how a sequence is split into passes (a reused prefix, a prompt fed in
  // pieces), at a cost in speed: CUDA then runs every linear-layer span without a transfer operator on the
  // recurrent kernels, whose arithmetic is token by token whatever the split (the chunked kernels' bf16
  // tiles round differently at other chunk boundaries, and at a router's near-tied token that alone can
  // flip an expert), and attention on the one-block-per-query-tile prefill kernel for any row count. The
  // MoE's kernels still depend on the pass's row count (a few-row path and grouped GEMMs). The CPU's fp32
  // results agree across splits to ~1e-6: a no-op there.
  virtual void set_split_invariant(bool on) {}

  // ---- raw copies between this backend's memory and host memory (the cache tiers below it) ----
  // Both return once the copy is complete (CUDA: ordered after the work queued on the model's stream).
  virtual void copy_to_host(const void* src, void* host_dst, size_t bytes) = 0;
  virtual void copy_from_host(const void* host_src, void* dst, size_t bytes) = 0;

  // ---- the cache tiers below this backend's memory (docs/cache_tiers.md) ----
  // Host memory for encoded records: pinned on CUDA (copies from it to the device are asynchronous DMA),
  // ordinary memory on the CPU. Contents undefined.
  virtual std::unique_ptr<Memory> allocate_host(size_t bytes);
  // Whether records are packed and expanded on the device (pack_to_host, expand_from_host), so that a
  // promotion ships the packed record instead of an entry decoded on the host, and an encoding copies out
  // the packed record instead of the whole entry (false on the CPU, whose codec is the reference).
  virtual bool records_on_device() const { return false; }
  // Copies `bytes` bytes of host memory at `packed` (best from allocate_host) to the backend and applies
  // `pieces` (byte offsets into `packed`, destinations in this backend's memory; kernels/packed_expand.h).
  // Ordered before later work on the model's stream; returns without waiting for it: `keep` (which holds
  // `packed`) is kept until the copy is done (the next sync()). The default expands on the host.
  virtual void expand_from_host(std::shared_ptr<const void> keep, const char* packed, size_t bytes,
                                std::span<const ExpandPiece> pieces);
  // The reverse: `pieces` (arrays in this backend's memory, byte offsets into `packed`) packed into host
  // memory `packed` of `bytes` bytes (best from allocate_host); returns once it is there. Bytes no piece
  // writes are undefined afterwards. The default packs on the host.
  virtual void pack_to_host(std::span<const PackPiece> pieces, char* packed, size_t bytes);
  // The largest |x| of each of `heads` rows of `per_head` fp32 elements at `x` (this backend's memory).
  virtual std::vector<float> head_max_abs(const float* x, size_t heads, size_t per_head);

  // ---- host copies, for verification and tests ----
  // The state in the CPU layout (fp32).
  virtual std::unique_ptr<SequenceState> to_host(const State& s) = 0;
  // n elements of type t (F32 or kv_dtype()) at `data` in this backend's memory, as fp32.
  virtual std::vector<float> to_host(const void* data, size_t n, DType t) = 0;

 private:
  std::mutex spare_mu_;
  std::vector<std::unique_ptr<State>> spare_;
};

}  // namespace hypic
