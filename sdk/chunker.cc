#include "sdk/chunker.h"

#include <cctype>

#include "runtime/error.h"
#include "runtime/segment_key.h"

namespace hypic::sdk {
namespace {

bool is_space(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

std::vector<std::string> paragraphs(std::string_view text) {
  std::vector<std::string> out;
  std::string cur;
  size_t i = 0;
  auto flush = [&] {
    size_t b = 0, e = cur.size();
    while (b < e && is_space(cur[b])) ++b;
    while (e > b && is_space(cur[e - 1])) --e;
    if (e > b) out.push_back(cur.substr(b, e - b));
    cur.clear();
  };
  while (i < text.size()) {
    // A blank line (only whitespace between two newlines) ends a paragraph.
    if (text[i] == '\n') {
      size_t j = i + 1;
      while (j < text.size() && text[j] != '\n' && is_space(text[j])) ++j;
      if (j < text.size() && text[j] == '\n') {
        flush();
        i = j + 1;
        continue;
      }
    }
    cur.push_back(text[i++]);
  }
  flush();
  return out;
}

std::vector<std::string> words(std::string_view text) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && is_space(text[i])) ++i;
    size_t j = i;
    while (j < text.size() && !is_space(text[j])) ++j;
    if (j > i) out.emplace_back(text.substr(i, j - i));
    i = j;
  }
  return out;
}

class Packer {
 public:
  Packer(size_t max_tokens, const TokenCounter* counter) : max_(max_tokens), counter_(counter) {}

  size_t count(std::string_view s) const { return counter_ ? counter_->count(s) : count_words(s); }

  // Adds `unit` joined by `sep`; starts a new chunk when it would exceed the bound.
  void add(const std::string& unit, const char* sep) {
    if (!cur_.empty()) {
      const std::string joined = cur_ + sep + unit;
      const size_t n = count(joined);
      if (n <= max_) {
        cur_ = joined;
        cur_tokens_ = n;
        return;
      }
      flush();
    }
    const size_t n = count(unit);
    if (n <= max_) {
      cur_ = unit;
      cur_tokens_ = n;
    } else if (std::string_view(sep) == "\n\n") {
      for (const auto& w : words(unit)) add(w, " ");  // an oversized paragraph packs by words
    } else {
      cut_word(unit);
    }
  }

  std::vector<TextChunk> finish() {
    flush();
    return std::move(out_);
  }

 private:
  void flush() {
    if (!cur_.empty()) out_.push_back(TextChunk{cur_, cur_tokens_});
    cur_.clear();
    cur_tokens_ = 0;
  }

  // A single word over the bound: the longest prefixes that fit, cut between UTF-8 characters.
  void cut_word(std::string_view w) {
    while (!w.empty()) {
      size_t take = w.size();
      while (take > 1 && count(w.substr(0, take)) > max_) {
        take = take / 2;
        while (take > 1 && (static_cast<unsigned char>(w[take]) & 0xC0) == 0x80) --take;
      }
      // Grow back towards the bound one character at a time.
      size_t next = take;
      while (next < w.size()) {
        size_t n2 = next + 1;
        while (n2 < w.size() && (static_cast<unsigned char>(w[n2]) & 0xC0) == 0x80) ++n2;
        if (count(w.substr(0, n2)) > max_) break;
        next = n2;
      }
      const std::string piece(w.substr(0, next));
      out_.push_back(TextChunk{piece, count(piece)});
      w.remove_prefix(next);
    }
  }

  size_t max_;
  const TokenCounter* counter_;
  std::string cur_;
  size_t cur_tokens_ = 0;
  std::vector<TextChunk> out_;
};

}  // namespace

size_t count_words(std::string_view text) { return words(text).size(); }

std::vector<TextChunk> split_into_chunks(std::string_view text, size_t max_tokens, const TokenCounter* counter) {
  if (max_tokens == 0) throw InvalidArgument("chunk size must be at least 1 token");
  Packer p(max_tokens, counter);
  for (const auto& para : paragraphs(text)) p.add(para, "\n\n");
  return p.finish();
}

std::string chunk_id(const std::string& doc_path, const std::string& chunk_text) {
  std::string enc = doc_path;
  enc.push_back('\0');  // the path cannot run into the text
  enc += chunk_text;
  return sha256_hex(enc).substr(0, 16);
}

}  // namespace hypic::sdk
