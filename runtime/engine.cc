#include "runtime/engine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <numeric>
#include <optional>

#include "kernels/sampling.h"
#include "runtime/error.h"

namespace hypic {

const char* mode_name(CacheMode m) {
  switch (m) {
    case CacheMode::Full: return "full";
    case CacheMode::Prefix: return "prefix";
    case CacheMode::Hypic: return "hypic";
    case CacheMode::Naive: return "naive";
    case CacheMode::NoSeam: return "noseam";
  }
  return "?";
}

CacheMode parse_mode(const std::string& s) {
  for (CacheMode m : {CacheMode::Full, CacheMode::Prefix, CacheMode::Hypic, CacheMode::Naive, CacheMode::NoSeam})
    if (s == mode_name(m)) return m;
  throw InvalidArgument("unknown mode '" + s + "' (expected full, prefix, hypic, naive or noseam)");
}

void check_prompt(const std::vector<PromptBlock>& blocks) {
  if (blocks.empty() || blocks.back().tokens.empty()) throw InvalidArgument("a prompt needs a non-empty query tail");
  for (size_t i = 0; i + 1 < blocks.size(); ++i)
    if (blocks[i].tokens.empty()) throw InvalidArgument("block " + std::to_string(i) + " is empty");
}

void check_token_ids(const ModelConfig& cfg, std::span<const int> ids, const std::string& where) {
  for (size_t t = 0; t < ids.size(); ++t)
    if (ids[t] < 0 || ids[t] >= cfg.vocab_size)
      throw InvalidArgument("token id " + std::to_string(ids[t]) + " at index " + std::to_string(t) + " of " + where +
                            " is outside the vocabulary [0, " + std::to_string(cfg.vocab_size) + ")");
}

void check_prompt_for(const ModelConfig& cfg, const std::vector<PromptBlock>& blocks) {
  check_prompt(blocks);
  int64_t total = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    check_token_ids(cfg, blocks[i].tokens, "block " + std::to_string(i));
    total += static_cast<int64_t>(blocks[i].tokens.size());
  }
  cfg.check_length(total);
}

std::vector<int> greedy_tokens(std::vector<float> logits, int64_t n, int64_t eos,
                               const std::function<std::vector<float>(int)>& step) {
  std::vector<int> out;
  for (int64_t i = 0; i < n; ++i) {
    const int next = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(next);
    if (next == eos || i + 1 == n) break;
    logits = step(next);
  }
  return out;
}

std::vector<PromptBlock> cacheable_blocks(const std::vector<std::vector<int>>& blocks) {
  std::vector<PromptBlock> b;
  for (auto& t : blocks) b.push_back({t, BlockCache::Cache});
  return b;
}

std::vector<int> prompt_tokens(const std::vector<PromptBlock>& blocks) {
  std::vector<int> all;
  for (auto& b : blocks) all.insert(all.end(), b.tokens.begin(), b.tokens.end());
  return all;
}

namespace {

KeyContext key_context(const std::string& model_fingerprint, const EngineOptions& opt, CacheMode m) {
  if (opt.seam_width < 0) throw InvalidArgument("seam width must be >= 0");
  KeyContext k;
  k.model_fingerprint = model_fingerprint;
  k.tokenizer_fingerprint = opt.tokenizer_fingerprint;
  k.seam_width = m == CacheMode::NoSeam ? 0 : static_cast<int>(opt.seam_width);
  return k;
}

// One step of a lane, in order. Rows: the lane's next n rows continue its state; with `build` they are
// the body of that segment (its seam rows are the piece before) and its entry is recorded. Compose: the
// cached body of `entry` (first token at global position `start`) is applied to the state; with `load`
// the entry is the prompt's first block, computed this pass by an isolated lane at position 0 (its true
// run), and its whole state and every K/V row are taken as they are. `snap` records the state after the
// piece and the K/V rows since the lane's previous snapshot.
struct Piece {
  enum class Kind { Rows, Compose } kind = Kind::Rows;
  bool load = false;
  int64_t n = 0;
  SegmentEntry* build = nullptr;
  const SegmentEntry* entry = nullptr;
  int64_t start = 0;
  std::vector<int64_t> body_pos;  // Compose: positions of the cached body rows
  PrefixEntry* snap = nullptr;
};

// A sequence of the pass: a contiguous run of rows continuing one state.
struct Lane {
  State* st = nullptr;
  std::vector<int> ids;
  std::vector<int64_t> pos;
  std::vector<Piece> pieces;
  int64_t row0 = 0;
  size_t last_snap = 0;  // pieces before this index are covered by an earlier snapshot
  bool isolated = false;  // an isolated prefill: [seam rows,] body rows with its entry, nothing else
  // A lane run in chunks (PromptJob): the snapshot its rows after the last `snap` piece belong to (taken
  // by a later chunk), and the K/V rows earlier chunks already saved into its first snapshot.
  PrefixEntry* open_snap = nullptr;
  int64_t snap_put = 0;

  int64_t rows() const { return static_cast<int64_t>(ids.size()); }
  void add_rows(std::span<const int> t, int64_t start, SegmentEntry* build = nullptr) {
    if (t.empty() && !build) return;
    ids.insert(ids.end(), t.begin(), t.end());
    for (size_t j = 0; j < t.size(); ++j) pos.push_back(start + static_cast<int64_t>(j));
    // Consecutive plain rows are one piece: one recurrence call, as a plain forward would make.
    if (!build && !pieces.empty()) {
      Piece& last = pieces.back();
      if (last.kind == Piece::Kind::Rows && !last.build && !last.snap && last.start + last.n == start) {
        last.n += static_cast<int64_t>(t.size());
        return;
      }
    }
    Piece p;
    p.n = static_cast<int64_t>(t.size());
    p.build = build;
    p.start = start;
    pieces.push_back(std::move(p));
  }
  void add_compose(const SegmentEntry* e, int64_t start, bool load = false) {
    Piece p;
    p.kind = Piece::Kind::Compose;
    p.load = load;
    p.entry = e;
    p.start = start;
    for (int64_t j = load ? 0 : e->seam; j < e->size(); ++j) p.body_pos.push_back(start + j);
    pieces.push_back(std::move(p));
  }
  // Positions of the K/V rows a snapshot taken now would hold, in the order they are saved.
  std::vector<int64_t> rows_since_snapshot() const {
    std::vector<int64_t> out;
    for (size_t i = last_snap; i < pieces.size(); ++i) {
      const Piece& p = pieces[i];
      if (p.kind == Piece::Kind::Compose) {
        out.insert(out.end(), p.body_pos.begin(), p.body_pos.end());
      } else {
        for (int64_t j = 0; j < p.n; ++j) out.push_back(p.start + j);
      }
    }
    return out;
  }
};

}  // namespace

struct Engine::Plan {
  std::vector<Lane> lanes;  // isolated prefills first: the stitch lane composes what they build
  Composition how = Composition::Transfer;
  std::vector<int64_t> logit_rows;  // within the pass
  int64_t rows = 0;
  std::vector<int> ids;
  std::vector<int64_t> pos;

  // Lays the lanes' rows out one after another.
  void finalize() {
    rows = 0;
    for (auto& l : lanes) {
      l.row0 = rows;
      rows += l.rows();
      ids.insert(ids.end(), l.ids.begin(), l.ids.end());
      pos.insert(pos.end(), l.pos.begin(), l.pos.end());
    }
  }
};

struct Engine::Profile {
  std::vector<std::pair<std::string, double>> ms;  // step -> total, in first-seen order
  std::chrono::steady_clock::time_point last;
  bool host = false;  // HYPIC_PROFILE=host: the host's time to issue each step, no synchronisation
};

Engine::Engine(Backend& backend, CacheMode mode, EngineOptions opt)
    : backend_(backend),
      mode_(mode),
      opt_(std::move(opt)),
      keys_(key_context(backend.fingerprint(), opt_, mode)),
      store_(opt_.cache_budget_bytes) {
  backend_.prepare_memory(opt_.cache_budget_bytes);
  if (opt_.tiers.host_budget_bytes > 0 || opt_.tiers.disk) {
    tiers_ = std::make_shared<EntryTiers>(backend_, keys_, opt_.tiers);
    store_.set_lower(tiers_);
  }
  const char* env = std::getenv("HYPIC_PROFILE");
  if (env && *env && std::string(env) != "0") {
    prof_ = std::make_unique<Profile>();
    prof_->host = std::string(env) == "host";
  }
  if (opt_.warm_up_rows > 0) warm_up(opt_.warm_up_rows);
}

int Engine::warm_up(int64_t max_rows) {
  const ModelConfig& cfg = backend_.config();
  if (cfg.max_positions > 0) max_rows = std::min(max_rows, cfg.max_positions);
  int passes = 0;
  for (int64_t n = std::min<int64_t>(32, max_rows); n > 0;) {
    const std::vector<int> ids(static_cast<size_t>(n), 0);
    std::unique_ptr<State> st = backend_.new_state();
    forward(ids, *st);
    ++passes;
    if (n >= max_rows) break;
    n = std::min(2 * n, max_rows);
  }
  backend_.sync();
  return passes;
}

Engine::~Engine() = default;

void Engine::report_profile(double total_ms) {
  std::fprintf(stderr, "[profile%s %s] %.1f ms:", prof_->host ? " host" : "", mode_name(mode_), total_ms);
  for (auto& [name, ms] : prof_->ms) std::fprintf(stderr, " %s %.2f", name.c_str(), ms);
  std::fprintf(stderr, "\n");
  prof_->ms.clear();
}

void Engine::mark(const char* step) {
  if (!prof_) return;
  if (!prof_->host) backend_.sync();
  const auto now = std::chrono::steady_clock::now();
  const double ms = std::chrono::duration<double, std::milli>(now - prof_->last).count();
  prof_->last = now;
  for (auto& [name, total] : prof_->ms)
    if (name == step) {
      total += ms;
      return;
    }
  prof_->ms.push_back({step, ms});
}

std::vector<float> Engine::execute(Plan& plan) {
  Backend& b = backend_;
  const ModelConfig& cfg = b.config();
  // Every lane's K/V cache grows once, to what this pass appends: cached bodies and its own rows.
  for (Lane& lane : plan.lanes) {
    if (lane.isolated) continue;  // attention_isolated keeps no K/V in the lane's state
    int64_t add = lane.rows();
    for (const Piece& p : lane.pieces) add += static_cast<int64_t>(p.body_pos.size());
    int64_t have = 0;
    for (int l = 0; l < cfg.num_layers; ++l)
      if (cfg.layer_kinds[l] == LayerKind::FullAttention) have = std::max(have, b.kv_rows(l, *lane.st));
    b.reserve_kv(*lane.st, have + add);
  }
  mark("reserve_kv");
  std::unique_ptr<Rows> rows = b.rows(plan.rows);
  mark("activations");
  b.embed(plan.ids, plan.pos, *rows);
  mark("embed");
  for (int l = 0; l < cfg.num_layers; ++l) {
    b.input_norm(l, *rows);
    if (cfg.layer_kinds[l] == LayerKind::LinearAttention) {
      b.linear_project(l, *rows);
      mark("linear_project");
      std::vector<Backend::IsolatedBlock> iso;
      for (Lane& lane : plan.lanes) {
        if (!lane.isolated) continue;
        const Piece& body = lane.pieces.back();
        const LinearSegmentState& e = body.build->linear[l];
        iso.push_back({lane.row0, body.build->seam, body.n, lane.st, e.transfer, e.body, e.full, e.conv_tail});
      }
      if (!iso.empty()) b.linear_isolated(l, *rows, iso);
      mark("linear_isolated");
      for (Lane& lane : plan.lanes) {
        if (lane.isolated) continue;
        State& st = *lane.st;
        int64_t row = lane.row0;
        if (std::none_of(lane.pieces.begin(), lane.pieces.end(), [](const Piece& p) { return p.build; })) {
          // No entry built here: the lane is a chain of rows, compositions and saves (the backend may
          // batch it).
          std::vector<Backend::ChainStep> steps;
          for (const Piece& p : lane.pieces) {
            Backend::ChainStep c;
            if (p.kind == Piece::Kind::Rows) {
              c.row0 = row;
              c.n = p.n;
              row += p.n;
              if (p.n > 0) steps.push_back(c);
            } else if (p.load || p.entry->size() > p.entry->seam) {  // all seam: the running state is exact
              const LinearSegmentState& e = p.entry->linear[l];
              c.kind = p.load ? Backend::ChainStep::Kind::Load : Backend::ChainStep::Kind::Compose;
              c.T = e.transfer;
              c.body = p.load ? e.full : e.body;
              c.conv_tail = e.conv_tail;
              c.rotate = p.start;  // the body was computed at local positions
              steps.push_back(c);
            }
            if (p.snap) {
              Backend::ChainStep sv;
              sv.kind = Backend::ChainStep::Kind::Save;
              sv.S_out = p.snap->state[l];
              sv.tail_out = p.snap->conv_tail[l];
              steps.push_back(sv);
            }
          }
          b.linear_chain(l, *rows, st, steps, plan.how);
          continue;
        }
        for (Piece& p : lane.pieces) {
          if (p.kind == Piece::Kind::Rows) {
            if (p.build) {
              const LinearSegmentState& e = p.build->linear[l];
              if (p.n > 0) b.linear_body(l, *rows, row, p.n, st, e.transfer, e.body);
              else b.empty_body(e.transfer, e.body);
              // Built under a prefix at global positions; entries hold bodies at local positions.
              b.shift_linear_state(e.body, -(p.start - p.build->seam));
              b.save_linear(l, st, e.full, e.conv_tail);
            } else if (p.n > 0) {
              b.linear_recur(l, *rows, row, p.n, st, nullptr);
            }
            row += p.n;
          } else if (p.load) {
            const LinearSegmentState& e = p.entry->linear[l];
            b.load_linear(l, st, e.full, e.conv_tail);
          } else if (p.entry->size() > p.entry->seam) {  // all seam: the running state is already exact
            const LinearSegmentState& e = p.entry->linear[l];
            b.compose_linear(l, st, e.transfer, e.body, plan.how, p.start);
            b.load_linear(l, st, nullptr, e.conv_tail);
          }
          if (p.snap) b.save_linear(l, st, p.snap->state[l], p.snap->conv_tail[l]);
        }
      }
      mark("linear_lanes");
      b.linear_output(l, *rows);
      mark("linear_output");
    } else {
      b.attention_project(l, *rows);
      mark("attention_project");
      std::vector<Backend::IsolatedAttention> iso;
      for (Lane& lane : plan.lanes) {
        if (!lane.isolated) continue;
        const SegmentEntry& e = *lane.pieces.back().build;
        iso.push_back({lane.row0, lane.rows(), lane.st, e.attention[l].k, e.attention[l].v});
      }
      if (!iso.empty()) b.attention_isolated(l, *rows, iso);
      mark("attention_isolated");
      for (Lane& lane : plan.lanes) {
        if (lane.isolated) continue;
        State& st = *lane.st;
        // Where each piece's K/V rows sit in the state: cached bodies are appended first, then the lane's
        // fresh rows (attention masks by position, so the order of rows does not matter).
        std::vector<std::pair<int64_t, int64_t>> at(lane.pieces.size(), {0, 0});
        std::vector<Backend::KvAppend> bodies;
        int64_t next = b.kv_rows(l, st);
        for (size_t i = 0; i < lane.pieces.size(); ++i) {
          const Piece& p = lane.pieces[i];
          if (p.kind != Piece::Kind::Compose || p.body_pos.empty()) continue;
          const SegmentEntry& e = *p.entry;
          const int64_t n = static_cast<int64_t>(p.body_pos.size());
          at[i] = {next, n};
          next += n;
          const int64_t skip = p.load ? 0 : e.seam;
          bodies.push_back({kv_row(e.attention[l].k, b, skip), kv_row(e.attention[l].v, b, skip), n,
                            p.body_pos.front(), p.start});
        }
        b.append_kv_ranges(l, st, bodies);
        const int64_t fresh0 = b.kv_rows(l, st);
        if (lane.rows() > 0) b.attention_core(l, *rows, lane.row0, lane.rows(), st);
        int64_t off = 0;
        for (size_t i = 0; i < lane.pieces.size(); ++i) {
          const Piece& p = lane.pieces[i];
          if (p.kind == Piece::Kind::Rows) {
            at[i] = {fresh0 + off, p.n};
            off += p.n;
          }
        }
        size_t from = 0;
        int64_t put = lane.snap_put;
        std::vector<Backend::KvSave> saves;  // all of the lane's, in one call (one launch on CUDA)
        // The K/V rows of pieces [from, to) go to `snap` from row `put` on.
        auto save_snapshot_rows = [&](size_t to, PrefixEntry& snap) {
          for (size_t j = from; j < to; ++j) {
            if (at[j].second == 0) continue;
            saves.push_back({at[j].first, at[j].second, snap.k[l], snap.v[l], put, 0});
            put += at[j].second;
          }
          from = to;
        };
        for (size_t i = 0; i < lane.pieces.size(); ++i) {
          const Piece& p = lane.pieces[i];
          if (p.build) {  // the segment's rows: its seam (the rows just before) and its body
            const AttentionSegmentKV& e = p.build->attention[l];
            saves.push_back({at[i].first - p.build->seam, p.build->size(), e.k, e.v, 0, -(p.start - p.build->seam)});
          }
          if (p.snap) {
            save_snapshot_rows(i + 1, *p.snap);
            put = 0;
          }
        }
        if (lane.open_snap) save_snapshot_rows(lane.pieces.size(), *lane.open_snap);
        b.save_kv_ranges(l, st, saves);
      }
      mark("attention_lanes");
      b.attention_output(l, *rows);
      mark("attention_output");
    }
    b.post_norm(l, *rows);
    b.ffn(l, *rows);
    mark("ffn");
  }
  if (plan.logit_rows.empty()) return {};  // a chunk before a prompt's last
  std::vector<float> out = b.logits(*rows, plan.logit_rows);
  mark("logits");
  return out;
}

std::vector<float> Engine::forward(std::span<const int> ids, State& st, bool all_logits) {
  const int64_t T = static_cast<int64_t>(ids.size());
  if (T == 0) throw InvalidArgument("forward: no tokens to run");
  backend_.config().check_length(st.length + T);
  if (T == 1 && !all_logits) {
    std::vector<float> fast = backend_.decode_step(ids[0], st);
    if (!fast.empty()) return fast;
  }
  std::chrono::steady_clock::time_point t0;
  if (prof_) {
    if (!prof_->host) backend_.sync();
    t0 = prof_->last = std::chrono::steady_clock::now();
  }
  Plan plan;
  Lane lane;
  lane.st = &st;
  lane.add_rows(ids, st.length);
  plan.lanes.push_back(std::move(lane));
  plan.finalize();
  if (all_logits) {
    plan.logit_rows.resize(T);
    std::iota(plan.logit_rows.begin(), plan.logit_rows.end(), 0);
  } else {
    plan.logit_rows = {T - 1};
  }
  std::vector<float> out = execute(plan);
  st.length += T;
  if (prof_) report_profile(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  return out;
}

void Engine::decode_batch_drawn(std::span<State* const> states, std::span<const int> ids,
                                std::span<const TokenDraw* const> draws, std::span<int> sampled,
                                std::vector<std::vector<float>>& logits) {
  const int64_t V = backend_.config().vocab_size;
  if (draws.size() != states.size() || sampled.size() != states.size())
    throw InvalidArgument("decode_batch_drawn: " + std::to_string(states.size()) + " sequences but " +
                          std::to_string(draws.size()) + " draws and " + std::to_string(sampled.size()) + " outputs");
  for (size_t i = 0; i < draws.size(); ++i)
    if (draws[i] && (draws[i]->vocab < 1 || draws[i]->vocab > V))
      throw InvalidArgument("decode_batch_drawn: the draw of sequence " + std::to_string(i) + " covers " +
                            std::to_string(draws[i]->vocab) + " ids, outside [1, " + std::to_string(V) + "]");
  check_batch(states, ids);
  logits.assign(states.size(), {});
  if (backend_.decode_batch_drawn(states, ids, draws, sampled, logits)) {
    for (State* st : states) st->length += 1;
    return;
  }
  const std::vector<float> all = decode_batch(states, ids);
  for (size_t i = 0; i < states.size(); ++i) {
    const float* row = all.data() + i * V;
    if (draws[i]) sampled[i] = static_cast<int>(cpu::sample(row, draws[i]->vocab, draws[i]->params, draws[i]->u));
    else logits[i].assign(row, row + V);
  }
}

void Engine::check_batch(std::span<State* const> states, std::span<const int> ids) const {
  if (states.size() != ids.size())
    throw InvalidArgument("decode_batch: " + std::to_string(states.size()) + " sequences but " +
                          std::to_string(ids.size()) + " tokens");
  if (states.empty()) throw InvalidArgument("decode_batch: no sequences");
  const int64_t V = backend_.config().vocab_size;
  for (size_t i = 0; i < states.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= V)
      throw InvalidArgument("decode_batch: token id " + std::to_string(ids[i]) + " of sequence " + std::to_string(i) +
                            " is outside the vocabulary [0, " + std::to_string(V) + ")");
    backend_.config().check_length(states[i]->length + 1);
    for (size_t j = 0; j < i; ++j)
      if (states[j] == states[i]) throw InvalidArgument("decode_batch: sequence " + std::to_string(i) + " repeats " + std::to_string(j));
  }
}

std::vector<float> Engine::decode_batch(std::span<State* const> states, std::span<const int> ids) {
  check_batch(states, ids);
  std::vector<float> fast = backend_.decode_batch(states, ids);
  if (fast.empty()) {
    Plan plan;
    for (size_t i = 0; i < states.size(); ++i) {
      Lane lane;
      lane.st = states[i];
      lane.add_rows(ids.subspan(i, 1), states[i]->length);
      plan.lanes.push_back(std::move(lane));
      plan.logit_rows.push_back(static_cast<int64_t>(i));
    }
    plan.finalize();
    fast = execute(plan);
  }
  for (State* st : states) st->length += 1;
  return fast;
}

// The work of a prompt: the lanes of its one-pass plan, run in steps. Isolated lanes run whole (in
// order, several per step); the main lane runs in chunks of rows, each continuing the state.
struct PromptJob::Work {
  explicit Work(Engine& e) : eng(e) {}
  Engine& eng;
  std::chrono::steady_clock::time_point t0;
  std::vector<int> all;  // the prompt's tokens
  PromptResult r;
  Composition how = Composition::Transfer;
  int64_t end = 0;  // the state's length once the prompt has run

  std::vector<Lane> isolated;  // missing blocks' isolated prefills; [next_iso, ...) still to run
  size_t next_iso = 0;
  struct Built {
    SegmentKey key;
    std::shared_ptr<SegmentEntry> entry;
    bool pinned;
  };
  std::vector<Built> built;                         // one per isolated lane, in order
  std::vector<std::unique_ptr<State>> iso_states;   // one per isolated lane; returned once it ran
  std::vector<std::shared_ptr<const SegmentEntry>> used;  // hits the stitch reads: held until done

  Lane main;  // the main sequence; its pieces from next_piece on (piece_done rows of it run) are left
  size_t next_piece = 0;
  int64_t piece_done = 0;
  int64_t next_row = 0;  // into main.ids
  int64_t snap_put = 0;  // K/V rows of the main lane's open snapshot that earlier steps saved
  struct Snap {
    PrefixEntry* entry;  // owned by `owned`
    SegmentKey key;
    bool pinned;
    std::shared_ptr<PrefixEntry> owned;
  };
  std::vector<Snap> snaps;

  int64_t total = 0, left = 0, steps = 0;
  bool done = false, failed = false, finished = false;

  void count_rows() {
    total = main.rows();
    for (const Lane& l : isolated) total += l.rows();
    left = total;
  }
  ~Work() {
    for (auto& st : iso_states)
      if (st) eng.backend().return_scratch_state(std::move(st));
  }
};

PromptJob::PromptJob(std::unique_ptr<Work> w) : w_(std::move(w)) {}
PromptJob::~PromptJob() = default;
bool PromptJob::done() const { return w_->done; }
int64_t PromptJob::remaining_tokens() const { return w_->left; }
int64_t PromptJob::total_tokens() const { return w_->total; }
int64_t PromptJob::steps() const { return w_->steps; }
const std::vector<int>& PromptJob::prompt() const { return w_->all; }

bool PromptJob::step(int64_t token_budget) {
  Work& w = *w_;
  if (w.failed) throw InvalidArgument("prompt job: an earlier step failed; the job cannot continue");
  if (token_budget < 1) throw InvalidArgument("prompt job: the token budget must be at least 1");
  if (w.done) return false;
  Engine& eng = w.eng;
  Backend& b = eng.backend_;
  if (eng.prof_) {
    b.sync();
    eng.prof_->last = std::chrono::steady_clock::now();
  }
  Engine::Plan plan;
  plan.how = w.how;
  int64_t rows = 0;
  // Whole isolated prefills while they fit (at least one).
  const size_t iso_from = w.next_iso;
  while (w.next_iso < w.isolated.size()) {
    const int64_t n = w.isolated[w.next_iso].rows();
    if (rows > 0 && n > token_budget - rows) break;
    plan.lanes.push_back(w.isolated[w.next_iso]);
    rows += n;
    ++w.next_iso;
  }
  const size_t iso_to = w.next_iso;
  // Then the main lane's next rows, once every entry it composes has been built.
  std::vector<const PrefixEntry*> closed;  // snapshots this step completes
  bool last = false;
  std::optional<int64_t> main_length;
  if (w.next_iso == w.isolated.size() && rows < token_budget) {
    const Lane& m = w.main;
    Lane chunk;
    chunk.st = m.st;
    chunk.snap_put = w.snap_put;
    int64_t open_rows = w.snap_put;  // K/V rows of the open snapshot once this chunk has run
    int64_t chunk_end = -1;
    while (w.next_piece < m.pieces.size() && rows < token_budget) {
      const Piece& p = m.pieces[w.next_piece];
      Piece part = p;
      int64_t kv = static_cast<int64_t>(p.body_pos.size());
      if (p.kind == Piece::Kind::Rows) {
        const int64_t take = std::min(p.n - w.piece_done, token_budget - rows);
        part.start = p.start + w.piece_done;
        part.n = take;
        kv = take;
        chunk.ids.insert(chunk.ids.end(), m.ids.begin() + w.next_row, m.ids.begin() + w.next_row + take);
        chunk.pos.insert(chunk.pos.end(), m.pos.begin() + w.next_row, m.pos.begin() + w.next_row + take);
        rows += take;
        w.next_row += take;
        w.piece_done += take;
        if (w.piece_done < p.n) part.snap = nullptr;  // the snapshot follows the piece's last row
      }
      if (part.kind == Piece::Kind::Compose || w.piece_done == p.n) {
        ++w.next_piece;
        w.piece_done = 0;
      }
      open_rows += kv;
      // The state holds the prompt up to here once the chunk has run.
      chunk_end = part.kind == Piece::Kind::Rows ? part.start + part.n : part.start + part.entry->size();
      if (part.snap) {
        closed.push_back(part.snap);
        open_rows = 0;
      }
      chunk.pieces.push_back(std::move(part));
    }
    // Rows after the chunk's last snapshot belong to the next one (a later chunk takes it).
    for (size_t i = w.next_piece; i < m.pieces.size() && !chunk.open_snap; ++i) chunk.open_snap = m.pieces[i].snap;
    w.snap_put = open_rows;
    last = w.next_piece == m.pieces.size();
    if (chunk_end >= 0) main_length = chunk_end;
    plan.lanes.push_back(std::move(chunk));
  }
  plan.finalize();
  if (last) plan.logit_rows = {plan.rows - 1};
  eng.mark("plan");
  w.failed = true;  // until the pass has run: a failed pass leaves the job unusable
  std::vector<float> out = eng.execute(plan);
  b.sync();  // entries are complete before anyone else may read them
  w.failed = false;
  ++w.steps;
  w.left -= rows;
  for (size_t i = iso_from; i < iso_to; ++i) {
    eng.store_.put_content(w.built[i].key, w.built[i].entry, w.built[i].pinned);
    b.return_scratch_state(std::move(w.iso_states[i]));
  }
  if (main_length) w.r.state->length = *main_length;
  for (const Work::Snap& s : w.snaps)
    if (std::find(closed.begin(), closed.end(), s.entry) != closed.end()) eng.store_.put_chain(s.key, s.owned, s.pinned);
  if (last) {
    w.r.logits = std::move(out);
    w.r.state->length = w.end;
    w.r.ttft_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - w.t0).count();
    w.done = true;
    w.used.clear();
  }
  return !w.done;
}

PromptResult PromptJob::finish() {
  Work& w = *w_;
  if (!w.done || w.finished) throw InvalidArgument(w.finished ? "prompt job: finish() was already called"
                                                              : "prompt job: finish() before the last step");
  w.finished = true;
  Engine& eng = w.eng;
  PromptResult r = std::move(w.r);
  if (eng.prof_) {
    eng.mark("finish");
    eng.report_profile(r.ttft_ms);
  }
  r.prompt_tokens = static_cast<int64_t>(w.all.size());
  int64_t hits = 0;
  for (const BlockOutcome& o : r.blocks) hits += o.hit;
  if (eng.opt_.verify_hits_rate > 0 && hits > 0 && (eng.verify_credit_ += eng.opt_.verify_hits_rate) >= 1) {
    eng.verify_credit_ -= 1;
    std::unique_ptr<State> st = eng.backend_.new_state();
    const std::vector<float> full = eng.forward(w.all, *st);
    r.verify.checked = true;
    r.verify.hit_blocks = hits;
    r.verify.kl = cpu::kl_divergence(full.data(), r.logits.data(), static_cast<int64_t>(full.size()));
    r.verify.top1_agrees = std::max_element(full.begin(), full.end()) - full.begin() ==
                           std::max_element(r.logits.begin(), r.logits.end()) - r.logits.begin();
  }
  return r;
}

PromptResult Engine::run(const std::vector<std::vector<int>>& blocks) { return run(cacheable_blocks(blocks)); }

PromptResult Engine::run(const std::vector<PromptBlock>& blocks, LiveSequence* live, const std::string& key_namespace) {
  std::unique_ptr<PromptJob> job = begin(blocks, live, key_namespace);
  while (job->step(std::numeric_limits<int64_t>::max())) {
  }
  return job->finish();
}

std::unique_ptr<PromptJob> Engine::begin(const std::vector<PromptBlock>& blocks, LiveSequence* live,
                                         const std::string& key_namespace) {
  // Every id is checked before any state is touched: a refused prompt leaves a live sequence intact.
  check_prompt_for(backend_.config(), blocks);
  auto w = std::make_unique<PromptJob::Work>(*this);
  w->t0 = std::chrono::steady_clock::now();
  if (prof_) {
    backend_.sync();
    prof_->last = std::chrono::steady_clock::now();
  }
  w->all = prompt_tokens(blocks);
  backend_.config().check_length(static_cast<int64_t>(w->all.size()));
  if (mode_ == CacheMode::Full) {
    plan_full(*w, blocks);
  } else {
    plan_cached(*w, blocks, live, keys_for(key_namespace));
  }
  w->count_rows();
  return std::unique_ptr<PromptJob>(new PromptJob(std::move(w)));
}

void Engine::plan_full(PromptJob::Work& w, const std::vector<PromptBlock>& blocks) {
  PromptResult& r = w.r;
  r.state = backend_.new_state();
  w.main.st = r.state.get();
  w.main.add_rows(w.all, 0);
  w.end = static_cast<int64_t>(w.all.size());
  r.computed_tokens = w.end;
  for (size_t i = 0; i + 1 < blocks.size(); ++i)
    r.blocks.push_back({false, static_cast<int64_t>(blocks[i].tokens.size())});
}

void Engine::plan_cached(PromptJob::Work& work, const std::vector<PromptBlock>& blocks, LiveSequence* live,
                         const KeyContext& keys) {
  Backend& b = backend_;
  const ModelConfig& cfg = b.config();
  const std::vector<int>& all = work.all;
  const size_t k = blocks.size() - 1;
  const bool pic = mode_ != CacheMode::Prefix;
  std::vector<int64_t> start(k + 1, 0);
  for (size_t i = 0; i < k; ++i) start[i + 1] = start[i] + static_cast<int64_t>(blocks[i].tokens.size());

  // Each block's content key once (a hash over its tokens: ~0.1 ms for 8k tokens), and the chain keys on them.
  std::vector<SegmentKey> content(k), chain(k);
  for (size_t i = 0; i < k; ++i) {
    content[i] = content_key(keys, blocks[i].tokens);
    chain[i] = chain_key(i ? std::optional<SegmentKey>(chain[i - 1]) : std::nullopt, content[i]);
  }

  // ---- the longest exact prefix: a live sequence this prompt extends, or chain entries ----
  int64_t live_len = 0;
  if (live && live->state && !live->tokens.empty() && live->tokens.size() < all.size() &&
      std::equal(live->tokens.begin(), live->tokens.end(), all.begin()))
    live_len = static_cast<int64_t>(live->tokens.size());
  // Chain entries are walked back from block j (each holds the rows of blocks first_block..j); in the
  // PIC modes the first block's content entry stands for its chain entry (at position 0 it is exact).
  std::vector<std::shared_ptr<const PrefixEntry>> chained;  // oldest first
  std::shared_ptr<const SegmentEntry> base0;
  size_t chain_blocks = 0;
  for (size_t j = k; j-- > 0 && chain_blocks == 0;) {
    if (start[j + 1] <= live_len) break;  // the live sequence covers at least as much
    if (blocks[j].cache == BlockCache::None) continue;
    std::vector<std::shared_ptr<const PrefixEntry>> walk;
    std::shared_ptr<const SegmentEntry> first_entry;
    bool whole = true;
    for (int64_t at = static_cast<int64_t>(j); at >= 0;) {
      auto e = store_.find_chain(chain[at]);
      if (!e && at == 0 && pic && blocks[0].cache != BlockCache::None)
        first_entry = store_.find_content(content[0]);
      if (!e) {
        whole = first_entry != nullptr;
        break;
      }
      const int64_t first = e->first_block;
      walk.push_back(std::move(e));
      at = first - 1;
    }
    if (!whole || walk.empty()) continue;
    std::reverse(walk.begin(), walk.end());
    chained = std::move(walk);
    base0 = std::move(first_entry);
    chain_blocks = j + 1;
  }

  PromptResult& r = work.r;
  const bool from_live = chain_blocks == 0 && live_len > 0;
  r.state = from_live ? std::move(live->state) : b.new_state();
  // A new state's K/V cache takes the whole prompt's rows at once: loaded prefix rows would otherwise be
  // copied again when the pass grows it.
  if (!from_live) b.reserve_kv(*r.state, static_cast<int64_t>(all.size()));
  int64_t p = 0;    // next position
  size_t bi = 0;    // first block not wholly reused
  int64_t off = 0;  // tokens of block bi already reused
  // Loads the first block's content entry as the exact state of positions [0, n) (only its K/V rows
  // when a chain entry after it brings the linear states: then an entry without `full` serves too).
  auto load_first = [&](const SegmentEntry& e, bool linear = true) {
    std::vector<Backend::LinearLoad> loads;
    for (int l = 0; l < cfg.num_layers; ++l) {
      if (cfg.layer_kinds[l] == LayerKind::LinearAttention) {
        if (linear) loads.push_back({l, e.linear[l].full, e.linear[l].conv_tail});
      } else {
        const Backend::KvAppend rows{e.attention[l].k, e.attention[l].v, e.size(), 0, 0};  // positions 0 .. n - 1
        b.append_kv_ranges(l, *r.state, {&rows, 1});
      }
    }
    b.load_linear_layers(*r.state, loads);
  };
  if (chain_blocks > 0) {
    int64_t rows = base0 ? base0->size() : 0;
    for (auto& e : chained) rows += e->rows();
    b.reserve_kv(*r.state, rows);
    if (base0) load_first(*base0, /*linear=*/false);  // chained.back() holds the linear states
    for (auto& e : chained)
      for (int l = 0; l < cfg.num_layers; ++l)
        if (cfg.layer_kinds[l] == LayerKind::FullAttention)
          b.append_kv(l, *r.state, e->k[l], e->v[l], e->rows(), e->pos, 0);
    std::vector<Backend::LinearLoad> loads;
    for (int l = 0; l < cfg.num_layers; ++l)
      if (cfg.layer_kinds[l] == LayerKind::LinearAttention)
        loads.push_back({l, chained.back()->state[l], chained.back()->conv_tail[l]});
    b.load_linear_layers(*r.state, loads);
    p = start[chain_blocks];
    bi = chain_blocks;
  } else if (from_live) {
    p = live_len;
    while (bi < k && start[bi + 1] <= p) ++bi;
    off = p - start[bi];
  }
  r.reused_tokens = p;
  for (size_t i = 0; i < bi; ++i) r.blocks.push_back({true, static_cast<int64_t>(blocks[i].tokens.size())});

  // ---- the rest: the lanes of one pass (isolated prefills of the missing blocks, then the main sequence) ----
  work.how = mode_ == CacheMode::Naive ? Composition::NaiveSum : Composition::Transfer;
  Lane& main = work.main;
  main.st = r.state.get();
  // A snapshot must be whole: its chain back to block 0 made of entries. Rows of a live sequence are in
  // no entry, so a request that continued one takes no snapshot.
  const bool can_snap = !from_live;
  // After a live sequence the rest is a continuation of a conversation: computed exactly (only the new
  // tokens), not composed.
  const bool compose = pic && !from_live;
  size_t snap_from = bi;  // the first block the next snapshot covers
  auto take_snapshot = [&](size_t i) {
    if (!can_snap || blocks[i].cache == BlockCache::None || main.pieces.empty()) return;
    std::vector<int64_t> pos = main.rows_since_snapshot();
    auto e = std::make_shared<PrefixEntry>(PrefixEntry::allocate(b, static_cast<int64_t>(pos.size())));
    e->pos = std::move(pos);
    e->first_block = static_cast<int64_t>(snap_from);
    main.pieces.back().snap = e.get();
    main.last_snap = main.pieces.size();
    work.snaps.push_back({e.get(), chain[i], blocks[i].cache == BlockCache::Pin, e});
    snap_from = i + 1;
  };
  auto& built = work.built;
  // A missing block's entry, built this pass by an isolated lane (from zero, at local positions).
  auto prefill_isolated = [&](const SegmentKey& key, const std::vector<int>& toks, int64_t w, bool pinned) {
    built.push_back({key, std::make_shared<SegmentEntry>(SegmentEntry::allocate(b, toks, w)), pinned});
    work.iso_states.push_back(b.scratch_state());
    Lane iso;
    iso.st = work.iso_states.back().get();
    iso.add_rows(std::span<const int>(toks).first(w), 0);
    iso.add_rows(std::span<const int>(toks).subspan(w), w, built.back().entry.get());
    iso.isolated = true;
    work.isolated.push_back(std::move(iso));
    return built.back().entry;
  };

  for (size_t i = bi; i < k; ++i) {
    const std::vector<int>& toks = blocks[i].tokens;
    const int64_t n = static_cast<int64_t>(toks.size());
    const int64_t skip = i == bi ? off : 0;
    if (!compose || skip > 0 || blocks[i].cache == BlockCache::None) {
      // Computed under the true prefix (all of it, or the rest of a block a live sequence began).
      main.add_rows(std::span<const int>(toks).subspan(skip), p);
      r.computed_tokens += n - skip;
      r.blocks.push_back({false, n});
      p = start[i + 1];
      if (!pic && skip == 0) take_snapshot(i);
      continue;
    }
    const SegmentKey& key = content[i];
    std::shared_ptr<const SegmentEntry> e = store_.find_content(key);
    const bool hit = e != nullptr;
    if (e) work.used.push_back(e);  // the pass reads it: held even if the store could not keep it
    for (auto& bt : built)
      if (!e && bt.key == key) e = bt.entry;
    const int64_t w = std::min<int64_t>(keys_.seam_width, n);
    const bool pinned = blocks[i].cache == BlockCache::Pin;
    if (p == 0 && (!e || e->has_full)) {
      // The first block starts at position 0: its isolated run is the true run.
      if (e) {
        load_first(*e);
        r.reused_tokens = n;
        snap_from = i + 1;  // the walk back stands on this content entry
      } else {
        // Computed by an isolated lane like any missing block (the main lane then holds no entry to
        // build, and its linear layers stay one batched chain), and taken whole by the main lane.
        main.add_compose(prefill_isolated(key, toks, w, pinned).get(), 0, /*load=*/true);
        r.computed_tokens += n;
      }
    } else {
      if (!e) {
        e = prefill_isolated(key, toks, w, pinned);
        r.computed_tokens += n;
      }
      main.add_rows(std::span<const int>(toks).first(w), p);
      main.add_compose(e.get(), p);
      r.computed_tokens += w;
    }
    r.blocks.push_back({hit, n});
    p = start[i + 1];
    if (i + 1 == k) take_snapshot(i);  // PIC modes keep one snapshot: where a next turn continues
  }
  const std::vector<int>& query = blocks.back().tokens;
  const int64_t qskip = bi == k ? off : 0;  // a live sequence may end inside the query
  main.add_rows(std::span<const int>(query).subspan(qskip), start[k] + qskip);
  r.computed_tokens += static_cast<int64_t>(query.size()) - qskip;
  work.end = start[k] + static_cast<int64_t>(query.size());
}


KeyContext Engine::keys_for(const std::string& key_namespace) const {
  KeyContext keys = keys_;
  // The namespace enters every content key (and through them every chain key) as part of its context.
  if (!key_namespace.empty()) keys.model_fingerprint += "\x1fnamespace:" + sha256_hex(key_namespace);
  return keys;
}

std::shared_ptr<SegmentEntry> Engine::prefill_segment(std::span<const int> tokens, const State* context) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) throw InvalidArgument("cannot cache an empty block");
  const int64_t w = std::min<int64_t>(keys_.seam_width, n);
  auto e = std::make_shared<SegmentEntry>(SegmentEntry::allocate(backend_, {tokens.begin(), tokens.end()}, w));
  std::unique_ptr<State> st = context ? backend_.clone(*context) : backend_.new_state();
  const int64_t start = st->length;
  backend_.config().check_length(start + n);
  Plan plan;
  Lane lane;
  lane.st = st.get();
  lane.add_rows(tokens.first(w), start);
  lane.add_rows(tokens.subspan(w), start + w, e.get());
  plan.lanes.push_back(std::move(lane));
  plan.finalize();
  plan.logit_rows = {plan.rows - 1};
  execute(plan);
  backend_.sync();
  return e;
}

std::vector<std::shared_ptr<SegmentEntry>> Engine::prefill_segments(const std::vector<std::vector<int>>& blocks) {
  std::vector<std::shared_ptr<SegmentEntry>> out;
  if (blocks.empty()) return out;
  Plan plan;
  std::vector<std::unique_ptr<State>> states;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const std::vector<int>& toks = blocks[i];
    const int64_t n = static_cast<int64_t>(toks.size());
    if (n == 0) throw InvalidArgument("cannot cache an empty block (block " + std::to_string(i) + ")");
    backend_.config().check_length(n);
    check_token_ids(backend_.config(), toks, "block " + std::to_string(i));
    const int64_t w = std::min<int64_t>(keys_.seam_width, n);
    out.push_back(std::make_shared<SegmentEntry>(SegmentEntry::allocate(backend_, toks, w)));
    states.push_back(backend_.scratch_state());
    Lane lane;
    lane.st = states.back().get();
    lane.add_rows(std::span<const int>(toks).first(w), 0);
    lane.add_rows(std::span<const int>(toks).subspan(w), w, out.back().get());
    lane.isolated = true;
    plan.lanes.push_back(std::move(lane));
  }
  plan.finalize();
  execute(plan);  // no logit rows: the entries are the result
  backend_.sync();
  for (auto& st : states) backend_.return_scratch_state(std::move(st));
  return out;
}

PromptResult Engine::stitch(std::unique_ptr<State> base, const std::vector<const SegmentEntry*>& segments,
                            std::span<const int> query, Composition how) {
  if (query.empty()) throw InvalidArgument("stitch: the query tail is empty");
  PromptResult r;
  r.state = std::move(base);
  Plan plan;
  plan.how = how;
  Lane lane;
  lane.st = r.state.get();
  int64_t p = r.state->length;
  for (const SegmentEntry* e : segments) {
    lane.add_rows(std::span<const int>(e->tokens).first(e->seam), p);
    lane.add_compose(e, p);
    p += e->size();
  }
  lane.add_rows(query, p);
  backend_.config().check_length(p + static_cast<int64_t>(query.size()));
  plan.lanes.push_back(std::move(lane));
  plan.finalize();
  plan.logit_rows = {plan.rows - 1};
  r.logits = execute(plan);
  r.state->length = p + static_cast<int64_t>(query.size());
  r.computed_tokens = plan.rows;
  backend_.sync();
  return r;
}

std::vector<int> Engine::greedy_decode(PromptResult& r, int n) {
  return greedy_tokens(r.logits, n, -1, [&](int next) {
    const int one[1] = {next};
    return forward(one, *r.state);
  });
}

}  // namespace hypic
