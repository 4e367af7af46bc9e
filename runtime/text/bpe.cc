#include "runtime/text/bpe.h"

#include <algorithm>
#include <cstdio>
#include <queue>

#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "runtime/text/byte_level.h"
#include "runtime/text/utf8.h"

namespace hypic {

// Open-addressing map (left id, right id) -> (rank, merged id): the hot lookup of encoding.
struct BpeModel::MergeTable {
  struct Slot {
    uint64_t key = kEmpty;
    int32_t rank = 0;
    int32_t merged = 0;
  };
  static constexpr uint64_t kEmpty = ~0ull;
  std::vector<Slot> slots;
  uint64_t mask = 0;
  int shift = 64;

  explicit MergeTable(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    slots.resize(cap);
    mask = cap - 1;
    shift = 64 - __builtin_ctzll(cap);
  }
  static uint64_t key_of(int a, int b) { return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b); }
  size_t home(uint64_t k) const { return static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> shift); }
  // A repeated pair takes the later entry, as the reference builds its map by plain insertion.
  void insert(int a, int b, int rank, int merged) {
    const uint64_t k = key_of(a, b);
    for (size_t i = home(k);; i = (i + 1) & mask) {
      if (slots[i].key == k || slots[i].key == kEmpty) {
        slots[i] = {k, rank, merged};
        return;
      }
    }
  }
  const Slot* find(int a, int b) const {
    const uint64_t k = key_of(a, b);
    for (size_t i = home(k);; i = (i + 1) & mask) {
      if (slots[i].key == k) return &slots[i];
      if (slots[i].key == kEmpty) return nullptr;
    }
  }
};

namespace {

constexpr size_t kCacheMaxEntries = 1 << 18;
constexpr size_t kCacheMaxPieceBytes = 256;
constexpr size_t kShortWord = 48;  // below this, a rescan per merge beats a heap

// Splits a merges entry into its two parts: "a b" (legacy) or ["a", "b"].
void merge_parts(const nlohmann::json& m, size_t i, const std::string& where, std::string* a, std::string* b) {
  if (m.is_string()) {
    const std::string& s = m.get_ref<const std::string&>();
    const size_t sp = s.find(' ');
    if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
      throw FormatError(where + ": merges[" + std::to_string(i) + "] is not two space-separated tokens: \"" + s + "\"");
    *a = s.substr(0, sp);
    *b = s.substr(sp + 1);
  } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
    *a = m[0].get<std::string>();
    *b = m[1].get<std::string>();
  } else {
    throw FormatError(where + ": merges[" + std::to_string(i) + "] must be \"a b\" or [\"a\", \"b\"]");
  }
}

}  // namespace

BpeModel::BpeModel(const nlohmann::json& model, bool byte_level, const std::string& where) : byte_level_(byte_level) {
  if (!model.contains("vocab") || !model["vocab"].is_object())
    throw FormatError(where + ": model.vocab must be an object of token -> id");
  if (!model.contains("merges") || !model["merges"].is_array())
    throw FormatError(where + ": model.merges must be an array");
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(k) && model[k].is_string() && !model[k].get<std::string>().empty())
      throw ModelError(where + ": BPE with a non-empty " + std::string(k) + " is not supported");
  }
  if (model.contains("dropout") && model["dropout"].is_number() && model["dropout"].get<double>() > 0)
    throw ModelError(where + ": BPE dropout is not supported (encoding must be deterministic)");
  byte_fallback_ = model.value("byte_fallback", false);
  fuse_unk_ = model.value("fuse_unk", false);
  ignore_merges_ = model.value("ignore_merges", false);

  const auto& vocab = model["vocab"];
  int max_id = -1;
  vocab_.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_unsigned() || it.value().get<uint64_t>() >= static_cast<uint64_t>(kMaxTokenId))
      throw FormatError(where + ": model.vocab[\"" + it.key() + "\"] is not a valid id (an integer in [0, " +
                        std::to_string(kMaxTokenId) + "))");
    const int id = it.value().get<int>();
    vocab_.emplace(it.key(), id);
    max_id = std::max(max_id, id);
  }
  tokens_.assign(static_cast<size_t>(max_id + 1), std::string());
  for (const auto& [tok, id] : vocab_) tokens_[static_cast<size_t>(id)] = tok;

  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    const std::string unk = model["unk_token"];
    auto it = vocab_.find(unk);
    if (it == vocab_.end()) throw FormatError(where + ": unk_token \"" + unk + "\" is not in the vocab");
    unk_id_ = it->second;
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    auto it = vocab_.find(std::string_view(name));
    byte_fallback_id_[b] = it == vocab_.end() ? -1 : it->second;
    std::string ch;
    utf8::append(ch, byte_level::byte_to_char(static_cast<uint8_t>(b)));
    auto jt = vocab_.find(ch);
    byte_unit_[b] = jt == vocab_.end() ? -1 : jt->second;
  }
  if (byte_level_ && ignore_merges_) {
    for (const auto& [tok, id] : vocab_) {
      bool all = false;
      std::string bytes = byte_level::to_bytes(tok, &all);
      if (all) bytes_vocab_.emplace(std::move(bytes), id);
    }
  }

  const auto& merges = model["merges"];
  merges_ = std::make_unique<MergeTable>(merges.size());
  std::string a, b;
  for (size_t i = 0; i < merges.size(); ++i) {
    merge_parts(merges[i], i, where, &a, &b);
    auto ia = vocab_.find(a), ib = vocab_.find(b), im = vocab_.find(a + b);
    if (ia == vocab_.end() || ib == vocab_.end() || im == vocab_.end())
      throw FormatError(where + ": merges[" + std::to_string(i) + "] (\"" + a + "\", \"" + b +
                        "\") uses a token that is not in the vocab");
    merges_->insert(ia->second, ib->second, static_cast<int>(i), im->second);
  }
}

BpeModel::~BpeModel() = default;

std::optional<int> BpeModel::id_of(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

void BpeModel::initial_symbols(std::string_view piece, std::vector<int>& syms) const {
  syms.clear();
  int pending_unk_len = 0;  // fused unknowns collapse into one unk
  auto flush_unk = [&] {
    if (pending_unk_len > 0) syms.push_back(unk_id_);
    pending_unk_len = 0;
  };
  size_t i = 0;
  while (i < piece.size()) {
    size_t n = 1;
    int id = -1;
    if (byte_level_) {
      id = byte_unit_[static_cast<unsigned char>(piece[i])];
    } else {
      n = utf8::valid_char_length(piece, i);
      if (n == 0) n = 1;  // cannot happen on validated input; keep going byte by byte
      auto it = vocab_.find(piece.substr(i, n));
      if (it != vocab_.end()) id = it->second;
    }
    if (id >= 0) {
      flush_unk();
      syms.push_back(id);
      i += n;
      continue;
    }
    if (byte_fallback_ && !byte_level_) {
      bool all = true;
      for (size_t k = 0; k < n; ++k) all = all && byte_fallback_id_[static_cast<unsigned char>(piece[i + k])] >= 0;
      if (all) {
        flush_unk();
        for (size_t k = 0; k < n; ++k) syms.push_back(byte_fallback_id_[static_cast<unsigned char>(piece[i + k])]);
        i += n;
        continue;
      }
    }
    if (unk_id_ >= 0) {
      if (!fuse_unk_) flush_unk();
      pending_unk_len += static_cast<int>(n);
    }
    // Without an unk token the character is dropped, as in the reference implementation.
    i += n;
  }
  flush_unk();
}

// Repeatedly merges the lowest-ranked adjacent pair, leftmost first on ties.
void BpeModel::merge(std::vector<int>& syms) const {
  if (syms.size() < 2) return;
  if (syms.size() > kShortWord) return merge_long(syms);
  constexpr int kNone = 0x7fffffff;
  int ranks[kShortWord];
  int merged[kShortWord];
  size_t n = syms.size();
  for (size_t i = 0; i + 1 < n; ++i) {
    const auto* s = merges_->find(syms[i], syms[i + 1]);
    ranks[i] = s ? s->rank : kNone;
    merged[i] = s ? s->merged : -1;
  }
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i)
      if (ranks[i] < ranks[best]) best = i;
    if (ranks[best] == kNone) break;
    syms[best] = merged[best];
    for (size_t i = best + 1; i + 1 < n; ++i) syms[i] = syms[i + 1];
    for (size_t i = best + 1; i + 2 < n; ++i) {
      ranks[i] = ranks[i + 1];
      merged[i] = merged[i + 1];
    }
    --n;
    auto refresh = [&](size_t i) {
      const auto* s = merges_->find(syms[i], syms[i + 1]);
      ranks[i] = s ? s->rank : kNone;
      merged[i] = s ? s->merged : -1;
    };
    if (best > 0) refresh(best - 1);
    if (best + 1 < n) refresh(best);
  }
  syms.resize(n);
}

// Same result as merge(), in O(n log n) for long pieces: symbols in a linked list, candidate pairs in a
// min-heap ordered by (rank, position); stale candidates are skipped when popped.
void BpeModel::merge_long(std::vector<int>& syms) const {
  const size_t n = syms.size();
  std::vector<int> prev(n), next(n);
  std::vector<char> alive(n, 1);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int>(i + 1) : -1;
  }
  struct Cand {
    int rank, pos, left_id, right_pos, right_id, merged;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  // The first candidates are heapified at once (linear), not pushed one by one.
  std::vector<Cand> initial;
  initial.reserve(n);
  for (size_t i = 0; i + 1 < n; ++i)
    if (const auto* s = merges_->find(syms[i], syms[i + 1]))
      initial.push_back({s->rank, static_cast<int>(i), syms[i], static_cast<int>(i + 1), syms[i + 1], s->merged});
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap(std::greater<Cand>(), std::move(initial));
  auto push = [&](int l) {
    if (l < 0 || next[l] < 0) return;
    const int r = next[l];
    const auto* s = merges_->find(syms[l], syms[r]);
    if (s) heap.push({s->rank, l, syms[l], r, syms[r], s->merged});
  };
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    if (!alive[c.pos] || next[c.pos] != c.right_pos || syms[c.pos] != c.left_id || syms[c.right_pos] != c.right_id)
      continue;
    syms[c.pos] = c.merged;
    alive[c.right_pos] = 0;
    next[c.pos] = next[c.right_pos];
    if (next[c.pos] >= 0) prev[next[c.pos]] = c.pos;
    push(prev[c.pos]);
    push(c.pos);
  }
  size_t w = 0;
  for (int i = 0; i >= 0; i = next[i]) syms[w++] = syms[i];
  syms.resize(w);
}

void BpeModel::encode_piece(std::string_view piece, std::vector<int>& out) const {
  if (piece.empty()) return;
  const bool cacheable = piece.size() <= kCacheMaxPieceBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = cache_.find(piece);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int> syms;
  bool whole = false;
  if (ignore_merges_) {
    const StringMap& m = byte_level_ ? bytes_vocab_ : vocab_;
    auto it = m.find(piece);
    if (it != m.end()) {
      syms.push_back(it->second);
      whole = true;
    }
  }
  if (!whole) {
    initial_symbols(piece, syms);
    merge(syms);
  }
  out.insert(out.end(), syms.begin(), syms.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (cache_.size() >= kCacheMaxEntries) cache_.clear();  // bounded memory; refills with what recurs
    cache_.emplace(std::string(piece), std::move(syms));
  }
}

}  // namespace hypic
