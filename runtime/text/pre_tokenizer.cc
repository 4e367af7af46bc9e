#include "runtime/text/pre_tokenizer.h"

#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "runtime/text/regex.h"
#include "runtime/text/utf8.h"

namespace hypic {

namespace {

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct Span {
  size_t begin, end;
  bool match;
};

// Finds the delimiter matches of one piece: a regex or a literal string.
class Finder {
 public:
  virtual ~Finder() = default;
  virtual bool find(std::string_view text, size_t start, size_t* b, size_t* e) const = 0;
};

class RegexFinder : public Finder {
 public:
  RegexFinder(const std::string& pattern, const std::string& where) : re_(pattern, where) {}
  bool find(std::string_view text, size_t start, size_t* b, size_t* e) const override {
    return re_.find(text, start, b, e);
  }

 private:
  Regex re_;
};

class StringFinder : public Finder {
 public:
  explicit StringFinder(std::string s) : s_(std::move(s)) {}
  bool find(std::string_view text, size_t start, size_t* b, size_t* e) const override {
    if (s_.empty()) return false;
    const size_t j = text.find(s_, start);
    if (j == std::string_view::npos) return false;
    *b = j;
    *e = j + s_.size();
    return true;
  }

 private:
  std::string s_;
};

// Cuts `text` into alternating match / non-match spans covering it entirely.
void spans_of(const Finder& f, std::string_view text, bool invert, std::vector<Span>& out) {
  out.clear();
  if (text.empty()) return;
  size_t pos = 0, search = 0;
  while (search <= text.size()) {
    size_t b = 0, e = 0;
    if (!f.find(text, search, &b, &e)) break;
    if (e == b) {  // empty match: not a delimiter; step over one character
      if (b >= text.size()) break;
      int len = 0;
      utf8::decode_at(text, b, &len);
      search = b + len;
      continue;
    }
    if (b > pos) out.push_back({pos, b, invert});
    out.push_back({b, e, !invert});
    pos = search = e;
  }
  if (pos < text.size()) out.push_back({pos, text.size(), invert});
}

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(std::unique_ptr<Finder> f, Behavior b, bool invert)
      : finder_(std::move(f)), behavior_(b), invert_(invert) {}

  void split(PieceBuffer& buf) const override {
    std::vector<std::string_view> out;
    out.reserve(buf.pieces.size() * 4);
    std::vector<Span> spans, merged;
    for (std::string_view piece : buf.pieces) {
      spans_of(*finder_, piece, invert_, spans);
      merged.clear();
      apply_behavior(spans, merged);
      for (const Span& s : merged)
        if (s.end > s.begin) out.push_back(piece.substr(s.begin, s.end - s.begin));
    }
    buf.pieces.swap(out);
  }

 private:
  void apply_behavior(const std::vector<Span>& spans, std::vector<Span>& out) const {
    switch (behavior_) {
      case Behavior::kIsolated:
        out = spans;
        return;
      case Behavior::kRemoved:
        for (const Span& s : spans)
          if (!s.match) out.push_back(s);
        return;
      case Behavior::kMergedWithPrevious: {
        bool prev_match = false;
        for (const Span& s : spans) {
          if (s.match && !prev_match && !out.empty())
            out.back().end = s.end;
          else
            out.push_back(s);
          prev_match = s.match;
        }
        return;
      }
      case Behavior::kMergedWithNext: {
        bool next_match = false;  // walking backwards: a match joins the span after it
        std::vector<Span> rev;
        for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
          if (it->match && !next_match && !rev.empty())
            rev.back().begin = it->begin;
          else
            rev.push_back(*it);
          next_match = it->match;
        }
        out.assign(rev.rbegin(), rev.rend());
        return;
      }
      case Behavior::kContiguous: {
        bool prev_match = false;
        for (const Span& s : spans) {
          if (s.match && prev_match && !out.empty())
            out.back().end = s.end;
          else
            out.push_back(s);
          prev_match = s.match;
        }
        return;
      }
    }
  }

  std::unique_ptr<Finder> finder_;
  Behavior behavior_;
  bool invert_;
};

// GPT-2's pattern, used by ByteLevel when use_regex is set.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Byte-level: hypic's BPE runs on raw bytes, so the byte-to-char remapping of the HF format is
// implicit and this step only adds the optional prefix space and regex split.
class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex, const std::string& where)
      : add_prefix_space_(add_prefix_space) {
    if (use_regex)
      split_ = std::make_unique<SplitPreTokenizer>(std::make_unique<RegexFinder>(kGpt2Pattern, where),
                                                   Behavior::kIsolated, false);
  }
  void split(PieceBuffer& buf) const override {
    if (add_prefix_space_) {
      for (auto& p : buf.pieces) {
        if (!p.empty() && p.front() != ' ') {
          buf.storage.push_back(" " + std::string(p));
          p = buf.storage.back();
        }
      }
    }
    if (split_) split_->split(buf);
  }
  bool ends_byte_level() const override { return true; }

 private:
  bool add_prefix_space_;
  std::unique_ptr<SplitPreTokenizer> split_;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void split(PieceBuffer& buf) const override {
    for (const auto& p : parts_) p->split(buf);
  }
  bool ends_byte_level() const override { return !parts_.empty() && parts_.back()->ends_byte_level(); }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

Behavior parse_behavior(const std::string& s, const std::string& where) {
  if (s == "Removed") return Behavior::kRemoved;
  if (s == "Isolated") return Behavior::kIsolated;
  if (s == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (s == "MergedWithNext") return Behavior::kMergedWithNext;
  if (s == "Contiguous") return Behavior::kContiguous;
  throw FormatError(where + ": unknown Split behavior \"" + s + "\"");
}

bool contains_byte_level(const PreTokenizer& p) { return p.ends_byte_level(); }

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& spec, const std::string& where) {
  if (spec.is_null()) return nullptr;
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string())
    throw FormatError(where + ": pre_tokenizer without a \"type\"");
  const std::string type = spec["type"];
  if (type == "Split") {
    const auto& pat = spec.at("pattern");
    std::unique_ptr<Finder> f;
    if (pat.contains("Regex"))
      f = std::make_unique<RegexFinder>(pat["Regex"].get<std::string>(), where);
    else if (pat.contains("String"))
      f = std::make_unique<StringFinder>(pat["String"].get<std::string>());
    else
      throw FormatError(where + ": Split pattern must hold \"Regex\" or \"String\"");
    return std::make_unique<SplitPreTokenizer>(std::move(f), parse_behavior(spec.value("behavior", "Isolated"), where),
                                               spec.value("invert", false));
  }
  if (type == "ByteLevel")
    return std::make_unique<ByteLevelPreTokenizer>(spec.value("add_prefix_space", false),
                                                   spec.value("use_regex", true), where);
  if (type == "Digits") {
    // HF tests digits with Rust's char::is_numeric, i.e. every category N: \p{N}. individual_digits isolates
    // each one, otherwise runs stay together.
    const bool individual = spec.value("individual_digits", false);
    return std::make_unique<SplitPreTokenizer>(std::make_unique<RegexFinder>(individual ? R"(\p{N})" : R"(\p{N}+)", where),
                                               Behavior::kIsolated, false);
  }
  if (type == "Sequence") {
    if (!spec.contains("pretokenizers") || !spec["pretokenizers"].is_array())
      throw FormatError(where + ": Sequence pre_tokenizer without a \"pretokenizers\" array");
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (const auto& p : spec["pretokenizers"]) {
      auto t = make_pre_tokenizer(p, where);
      if (!t) continue;
      if (!parts.empty() && contains_byte_level(*parts.back()))
        throw ModelError(where + ": a pre_tokenizer after ByteLevel is not supported");
      parts.push_back(std::move(t));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(parts));
  }
  throw ModelError(where + ": unsupported pre_tokenizer type \"" + type + "\"");
}

}  // namespace hypic
