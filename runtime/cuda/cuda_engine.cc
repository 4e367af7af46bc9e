#include "runtime/cuda/cuda_engine.h"

#include <algorithm>
#include <chrono>
#include <numeric>

#include "kernels/cuda/check.h"
#include "runtime/cuda/cuda_segment_prefill.h"
#include "runtime/cuda/cuda_stitch.h"
#include "runtime/error.h"

namespace hypic {

CudaEngine::CudaEngine(CudaModel& model, CacheMode mode, EngineOptions opt)
    : model_(model),
      mode_(mode),
      opt_(std::move(opt)),
      keys_(engine_key_context(model.fingerprint(), opt_, mode)),
      store_(opt_.cache_budget_bytes) {}

CudaPromptResult CudaEngine::run(const std::vector<std::vector<int>>& blocks) { return run(cacheable_blocks(blocks)); }

CudaPromptResult CudaEngine::run(const std::vector<PromptBlock>& blocks) {
  check_prompt(blocks);
  const auto t0 = std::chrono::steady_clock::now();
  CudaPromptResult r;
  switch (mode_) {
    case CacheMode::Full: r = run_full(blocks); break;
    case CacheMode::Prefix: r = run_prefix(blocks); break;
    default: r = run_pic(blocks); break;
  }
  HYPIC_CUDA_CHECK(cudaStreamSynchronize(model_.stream()));
  r.ttft_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  r.prompt_tokens = prompt_length(blocks);
  return r;
}

CudaPromptResult CudaEngine::run_full(const std::vector<PromptBlock>& blocks) {
  CudaPromptResult r;
  const std::vector<int> all = prompt_tokens(blocks);
  r.state = model_.new_state();
  r.logits = model_.forward(all, r.state);
  r.computed_tokens = static_cast<int64_t>(all.size());
  r.blocks = computed_outcomes(blocks);
  return r;
}

CudaPromptResult CudaEngine::run_prefix(const std::vector<PromptBlock>& blocks) {
  const ModelConfig& cfg = model_.config();
  const int64_t kv_row = cfg.num_kv_heads * cfg.head_dim;
  cudaStream_t cs = model_.stream();
  const size_t k = blocks.size() - 1;
  const std::vector<SegmentKey> chain = chain_keys(keys_, blocks);
  // Longest run of cached block ends from the start; rebuild the exact state from it.
  CudaPromptResult r;
  r.state = model_.new_state();
  std::vector<std::shared_ptr<const CudaPrefixEntry>> held;  // alive until the copies below ran
  size_t j = 0;
  for (; j < k; ++j) {
    if (blocks[j].cache == BlockCache::None) break;
    auto e = store_.find_chain(chain[j]);
    if (!e) break;
    std::vector<int64_t> pos(static_cast<size_t>(e->length));
    std::iota(pos.begin(), pos.end(), e->start);
    for (int l = 0; l < cfg.num_layers; ++l) {
      if (cfg.layer_kinds[l] == LayerKind::LinearAttention) {
        CudaLinearLayerState& ls = r.state.lin[l];
        HYPIC_CUDA_CHECK(cudaMemcpyAsync(ls.S.get(), e->state[l], ls.S.bytes(), cudaMemcpyDeviceToDevice, cs));
        HYPIC_CUDA_CHECK(
            cudaMemcpyAsync(ls.conv_tail.get(), e->conv_tail[l], ls.conv_tail.bytes(), cudaMemcpyDeviceToDevice, cs));
      } else {
        r.state.attn[l].append(e->k[l], e->v[l], pos.data(), e->length, kv_row, cs);
      }
    }
    r.state.length = e->start + e->length;
    r.blocks.push_back({true, e->length});
    held.push_back(std::move(e));
  }
  // The missing blocks and the query run in ONE pass (one layer loop over all their rows): the linear
  // recurrence is split at block ends, where each cacheable block's state is snapshotted, and each block's
  // KV rows are a slice of the attention layer's rows.
  const int64_t start0 = r.state.length;
  std::vector<int> ids;
  std::vector<int64_t> len;  // rows of blocks j..k-1, then the query
  std::vector<std::shared_ptr<CudaPrefixEntry>> snap;
  for (size_t i = j; i <= k; ++i) {
    const int64_t n = static_cast<int64_t>(blocks[i].tokens.size());
    if (i < k && blocks[i].cache != BlockCache::None)
      snap.push_back(std::make_shared<CudaPrefixEntry>(
          CudaPrefixEntry::allocate(cfg, start0 + static_cast<int64_t>(ids.size()), n)));
    else
      snap.push_back(nullptr);
    ids.insert(ids.end(), blocks[i].tokens.begin(), blocks[i].tokens.end());
    len.push_back(n);
    if (i < k) r.blocks.push_back({false, n});
  }
  const int64_t T = static_cast<int64_t>(ids.size());
  cfg.check_length(start0 + T);
  CudaActivations a = model_.activations(T);
  std::vector<int64_t> pos(static_cast<size_t>(T));
  std::iota(pos.begin(), pos.end(), start0);
  model_.embed(ids, pos, a);
  for (int l = 0; l < cfg.num_layers; ++l) {
    model_.input_norm(l, a);
    if (cfg.layer_kinds[l] == LayerKind::LinearAttention) {
      CudaLinearLayerState& ls = r.state.lin[l];
      model_.linear_project(l, a);
      int64_t row = 0;
      for (size_t p = 0; p < len.size(); ++p) {
        model_.linear_recur(l, a, row, len[p], ls);
        row += len[p];
        if (!snap[p]) continue;
        HYPIC_CUDA_CHECK(cudaMemcpyAsync(snap[p]->state[l], ls.S.get(), ls.S.bytes(), cudaMemcpyDeviceToDevice, cs));
        HYPIC_CUDA_CHECK(cudaMemcpyAsync(snap[p]->conv_tail[l], ls.conv_tail.get(), ls.conv_tail.bytes(),
                                         cudaMemcpyDeviceToDevice, cs));
      }
      model_.linear_output(l, a);
    } else {
      CudaAttentionLayerState& kv = r.state.attn[l];
      int64_t row = kv.rows;
      model_.attention_mixer(l, a, kv);
      for (size_t p = 0; p < len.size(); ++p) {
        if (snap[p]) {
          const size_t bytes = sizeof(cuda::bf16) * len[p] * kv_row;
          HYPIC_CUDA_CHECK(
              cudaMemcpyAsync(snap[p]->k[l], kv.k.as<cuda::bf16>() + row * kv_row, bytes, cudaMemcpyDeviceToDevice, cs));
          HYPIC_CUDA_CHECK(
              cudaMemcpyAsync(snap[p]->v[l], kv.v.as<cuda::bf16>() + row * kv_row, bytes, cudaMemcpyDeviceToDevice, cs));
        }
        row += len[p];
      }
    }
    model_.post_norm(l, a);
    model_.ffn(l, a);
  }
  r.logits = model_.logits(a, 1);  // synchronises: the snapshots are complete
  r.state.length = start0 + T;
  r.computed_tokens += T;
  for (size_t i = j; i < k; ++i)
    if (snap[i - j]) store_.put_chain(chain[i], std::move(snap[i - j]), blocks[i].cache == BlockCache::Pin);
  return r;
}

CudaPromptResult CudaEngine::run_pic(const std::vector<PromptBlock>& blocks) {
  const size_t k = blocks.size() - 1;
  if (k == 0) return run_full(blocks);  // nothing to reuse
  CudaPromptResult r;
  std::vector<std::shared_ptr<const CudaSegmentEntry>> segs;
  for (size_t i = 0; i < k; ++i) {
    const int64_t n = static_cast<int64_t>(blocks[i].tokens.size());
    if (blocks[i].cache == BlockCache::None) {
      // Never stored: the stitch recomputes all of its tokens under the true prefix (all seam).
      segs.push_back(std::make_shared<CudaSegmentEntry>(CudaSegmentEntry::pass_through(blocks[i].tokens)));
      r.blocks.push_back({false, n});
      continue;
    }
    const SegmentKey key = content_key(keys_, blocks[i].tokens);
    auto e = store_.find_content(key);
    const bool hit = e != nullptr;
    if (!hit) {
      auto built = std::make_shared<CudaSegmentEntry>(prefill_segment(model_, blocks[i].tokens, seam_width()));
      r.computed_tokens += built->size();
      store_.put_content(key, built, blocks[i].cache == BlockCache::Pin);
      e = built;
    }
    r.blocks.push_back({hit, e->size()});
    segs.push_back(std::move(e));
  }
  // The first block starts at position 0: its isolated run is exact, so its whole state is reused.
  const bool first_cached = blocks[0].cache != BlockCache::None;
  CudaSequenceState base = first_cached ? state_from_first_segment(model_, *segs.front()) : model_.new_state();
  if (first_cached) segs.erase(segs.begin());
  CudaStitchResult s = stitch(model_, std::move(base), segs, blocks.back().tokens,
                              mode_ == CacheMode::Naive ? Composition::NaiveSum : Composition::Transfer);
  r.logits = std::move(s.logits);
  r.state = std::move(s.state);
  r.computed_tokens += s.computed_tokens;
  return r;
}

std::vector<int> CudaEngine::greedy_decode(CudaPromptResult& r, int n) {
  std::vector<int> out;
  std::vector<float> logits = r.logits;
  for (int i = 0; i < n; ++i) {
    const int next = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(next);
    if (i + 1 == n) break;
    const int one[1] = {next};
    logits = model_.forward(one, r.state);
  }
  return out;
}

}  // namespace hypic
