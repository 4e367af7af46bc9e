#include "dsl/markup.h"

#include <cctype>

namespace hypic::dsl {
namespace {

constexpr std::string_view kZeroWidthSpace = "\xE2\x80\x8B";

// Length of a marker starting at text[i], or 0.
size_t marker_at(std::string_view text, size_t i, std::span<const std::string> extra) {
  for (const auto& m : extra)
    if (!m.empty() && text.compare(i, m.size(), m) == 0) return m.size();
  if (text[i] != '<' || i + 1 >= text.size()) return 0;
  // <|name|>: every special token of the ChatML family (and Llama 3's header tokens).
  if (text[i + 1] == '|') {
    size_t j = i + 2;
    while (j < text.size() && j - i < 64 &&
           (std::isalnum(static_cast<unsigned char>(text[j])) || text[j] == '_' || text[j] == '-' ||
            text[j] == '.' || text[j] == ':' || text[j] == ' '))
      ++j;
    if (j > i + 2 && j + 1 < text.size() && text[j] == '|' && text[j + 1] == '>') return j + 2 - i;
    return 0;
  }
  return 0;
}

}  // namespace

std::optional<MarkupMatch> find_chat_markup(std::string_view text, std::span<const std::string> extra) {
  for (size_t i = 0; i < text.size(); ++i) {
    if (size_t n = marker_at(text, i, extra)) return MarkupMatch{i, std::string(text.substr(i, n))};
  }
  return std::nullopt;
}

std::string neutralize_chat_markup(std::string_view text, std::span<const std::string> extra) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t n = marker_at(text, i, extra);
    if (n == 0) {
      out.push_back(text[i++]);
      continue;
    }
    // Keep the marker readable but split it so neither the tokenizer nor a tag parser matches it.
    out.push_back(text[i]);
    out.append(kZeroWidthSpace);
    out.append(text.substr(i + 1, n - 1));
    i += n;
  }
  return out;
}

}  // namespace hypic::dsl
