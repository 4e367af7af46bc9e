#include "runtime/cold_scatter.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <numeric>
#include <thread>
#include <unordered_map>

#include "runtime/error.h"
#include "runtime/segment_entry.h"
#include "runtime/segment_key.h"

namespace hypic {

const char* placement_name(Placement p) { return p == Placement::Lpt ? "lpt" : "round-robin"; }

Placement parse_placement(const std::string& s) {
  if (s == "lpt") return Placement::Lpt;
  if (s == "round-robin" || s == "rr") return Placement::RoundRobin;
  throw InvalidArgument("unknown placement '" + s + "' (expected lpt or round-robin)");
}

int64_t BlockPlacement::makespan() const { return load.empty() ? 0 : *std::max_element(load.begin(), load.end()); }

BlockPlacement place_blocks(std::span<const int64_t> cost, int workers, Placement how) {
  if (workers < 1) throw InvalidArgument("a placement needs at least one worker, got " + std::to_string(workers));
  for (size_t i = 0; i < cost.size(); ++i)
    if (cost[i] < 0) throw InvalidArgument("job " + std::to_string(i) + " has a negative cost");
  BlockPlacement p;
  p.worker.assign(cost.size(), 0);
  p.load.assign(static_cast<size_t>(workers), 0);
  if (how == Placement::RoundRobin) {
    for (size_t i = 0; i < cost.size(); ++i) {
      p.worker[i] = static_cast<int>(i % static_cast<size_t>(workers));
      p.load[static_cast<size_t>(p.worker[i])] += cost[i];
    }
    return p;
  }
  std::vector<size_t> order(cost.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return cost[a] > cost[b]; });
  for (size_t i : order) {
    const size_t w = static_cast<size_t>(std::min_element(p.load.begin(), p.load.end()) - p.load.begin());
    p.worker[i] = static_cast<int>(w);
    p.load[w] += cost[i];
  }
  return p;
}

int64_t prefill_cost(const ModelConfig& c, int64_t n) {
  const double D = static_cast<double>(c.hidden_size);
  double per_token = 0, attention_pair = 0;  // multiply-adds per token; per query-key pair
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (c.layer_kinds[static_cast<size_t>(l)] == LayerKind::LinearAttention) {
      per_token += D * static_cast<double>(c.lin_conv_dim() + c.lin_value_dim() + 2 * c.lin_v_heads) +
                   static_cast<double>(c.lin_value_dim()) * D +
                   2.0 * static_cast<double>(c.lin_v_heads * c.lin_k_dim * c.lin_v_dim);  // state update + read
    } else {
      const double q = static_cast<double>(c.num_heads * c.head_dim);
      per_token += D * (q * (c.attn_output_gate ? 2 : 1) + 2.0 * static_cast<double>(c.num_kv_heads * c.head_dim)) +
                   q * D;
      attention_pair += 2.0 * q;  // q.k and p.v
    }
    const bool moe = static_cast<size_t>(l) < c.layer_is_moe.size() && c.layer_is_moe[static_cast<size_t>(l)];
    if (moe) {
      per_token += D * static_cast<double>(c.num_experts) +
                   3.0 * D * static_cast<double>(c.moe_intermediate_size * c.experts_per_tok +
                                                 c.shared_expert_intermediate_size);
    } else {
      per_token += 3.0 * D * static_cast<double>(c.intermediate_size);
    }
  }
  const double N = static_cast<double>(n);
  return static_cast<int64_t>((per_token * N + attention_pair * N * (N + 1) / 2) / 1024.0);
}

ColdScatter::ColdScatter(Engine& engine, std::vector<Backend*> workers, Placement how)
    : engine_(engine), workers_(std::move(workers)), how_(how) {
  if (workers_.empty()) throw InvalidArgument("the cold scatter needs at least one worker");
  const CacheMode m = engine_.mode();
  if (m == CacheMode::Full || m == CacheMode::Prefix)
    throw InvalidArgument(std::string("the cold scatter stores position-independent entries; the engine's mode is ") +
                          mode_name(m));
  Backend& main = engine_.backend();
  EngineOptions opt;
  opt.seam_width = engine_.seam_width();
  opt.tokenizer_fingerprint = engine_.keys().tokenizer_fingerprint;
  opt.cache_budget_bytes = 0;  // worker engines only build entries; nothing is stored there
  for (size_t i = 0; i < workers_.size(); ++i) {
    Backend* w = workers_[i];
    HYPIC_ASSERT(w, "null worker");
    if (w->fingerprint() != main.fingerprint())
      throw InvalidArgument("worker " + std::to_string(i) + " holds other weights than the engine's backend");
    if (w->kv_dtype() != main.kv_dtype())
      throw InvalidArgument("worker " + std::to_string(i) + " keeps K/V rows in another element type than the engine");
    worker_engines_.push_back(w == &main ? nullptr : std::make_unique<Engine>(*w, m, opt));
  }
}

ColdScatter::~ColdScatter() = default;

ScatterReport ColdScatter::prefill_missing(const std::vector<PromptBlock>& blocks, const std::string& key_namespace) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto ms_since = [](std::chrono::steady_clock::time_point a) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count();
  };
  Backend& main = engine_.backend();
  check_prompt_for(main.config(), blocks);

  // The missing blocks, each once.
  const KeyContext keys = engine_.keys_for(key_namespace);
  SegmentStore& store = engine_.store();
  struct Job {
    size_t block;
    SegmentKey key;
    bool pinned;
  };
  std::vector<Job> jobs;
  for (size_t i = 0; i + 1 < blocks.size(); ++i) {
    if (blocks[i].cache == BlockCache::None) continue;
    SegmentKey key = content_key(keys, blocks[i].tokens);
    const bool pinned = blocks[i].cache == BlockCache::Pin;
    auto same = std::find_if(jobs.begin(), jobs.end(), [&](const Job& j) { return j.key == key; });
    if (same != jobs.end()) {
      same->pinned = same->pinned || pinned;
      continue;
    }
    if (store.contains_content(key)) continue;
    if (engine_.tiers() && store.find_content(key)) continue;  // promoted from a tier below
    jobs.push_back({i, std::move(key), pinned});
  }

  const int W = workers();
  ScatterReport rep;
  rep.missing_blocks = static_cast<int64_t>(jobs.size());
  rep.worker_blocks.assign(static_cast<size_t>(W), 0);
  rep.worker_tokens.assign(static_cast<size_t>(W), 0);
  rep.worker_ms.assign(static_cast<size_t>(W), 0.0);
  if (jobs.empty()) {
    rep.scatter_ms = ms_since(t0);
    return rep;
  }
  std::vector<int64_t> cost;
  for (const Job& j : jobs) cost.push_back(prefill_cost(main.config(), static_cast<int64_t>(blocks[j.block].tokens.size())));
  const BlockPlacement place = place_blocks(cost, W, how_);
  rep.makespan_cost = place.makespan();

  // One pass per worker over its blocks, all workers at once.
  std::vector<std::vector<size_t>> mine(static_cast<size_t>(W));  // job indices per worker
  for (size_t j = 0; j < jobs.size(); ++j) mine[static_cast<size_t>(place.worker[j])].push_back(j);
  std::vector<std::shared_ptr<SegmentEntry>> built(jobs.size());
  std::vector<std::exception_ptr> failed(static_cast<size_t>(W));
  auto run_worker = [&](size_t w) {
    if (mine[w].empty()) return;
    const auto tw = std::chrono::steady_clock::now();
    try {
      workers_[w]->bind_thread();
      std::vector<std::vector<int>> toks;
      for (size_t j : mine[w]) toks.push_back(blocks[jobs[j].block].tokens);
      Engine& e = worker_engines_[w] ? *worker_engines_[w] : engine_;
      std::vector<std::shared_ptr<SegmentEntry>> out = e.prefill_segments(toks);  // synchronised at the end
      for (size_t k = 0; k < mine[w].size(); ++k) built[mine[w][k]] = std::move(out[k]);
    } catch (...) {
      failed[w] = std::current_exception();
    }
    rep.worker_ms[w] = ms_since(tw);
  };
  std::vector<std::thread> threads;
  for (size_t w = 1; w < static_cast<size_t>(W); ++w)
    if (!mine[w].empty()) threads.emplace_back(run_worker, w);
  run_worker(0);  // the calling thread is worker 0
  for (auto& t : threads) t.join();
  for (size_t w = 0; w < static_cast<size_t>(W); ++w)
    for (size_t j : mine[w]) {
      rep.worker_blocks[w] += 1;
      rep.worker_tokens[w] += static_cast<int64_t>(blocks[jobs[j].block].tokens.size());
    }

  // Gather into the engine's backend memory, then store.
  const auto tg = std::chrono::steady_clock::now();
  std::vector<char> host;
  std::vector<std::shared_ptr<SegmentEntry>> sources;  // read by copies still queued: freed after the sync
  for (size_t j = 0; j < jobs.size(); ++j) {
    if (!built[j]) continue;
    rep.missing_tokens += built[j]->size();
    Backend& from = *workers_[static_cast<size_t>(place.worker[j])];
    std::shared_ptr<SegmentEntry> e = std::move(built[j]);
    if (&from != &main) {
      auto copy = std::make_shared<SegmentEntry>(SegmentEntry::allocate(main, e->tokens, e->seam));
      HYPIC_ASSERT(copy->mem && e->mem && copy->mem->bytes() == e->mem->bytes(), "entry layouts differ across workers");
      if (main.shares_memory_with(from)) {
        main.copy_shared(e->mem->data(), copy->mem->data(), e->mem->bytes());
      } else if (!main.copy_from_peer(from, e->mem->data(), copy->mem->data(), e->mem->bytes())) {
        host.resize(e->mem->bytes());
        from.copy_to_host(e->mem->data(), host.data(), host.size());
        main.copy_from_host(host.data(), copy->mem->data(), host.size());
      }
      copy->has_full = e->has_full;
      sources.push_back(std::move(e));
      e = std::move(copy);
    }
    store.put_content(jobs[j].key, std::move(e), jobs[j].pinned);
  }
  main.sync();  // the copies are complete before a worker's memory goes
  sources.clear();
  rep.gather_ms = ms_since(tg);
  rep.scatter_ms = ms_since(t0);
  for (auto& f : failed)
    if (f) std::rethrow_exception(f);
  return rep;
}

}  // namespace hypic
