// Chat markup in variable text: any special token written <|name|> (every ChatML role token among
// them) and the chat format's reserved markers (its structural tags: tool calls, tool responses,
// reasoning, passed as `extra`). Substituted text must never carry them, or a document or a user
// could forge a turn or a tool call.
#pragma once
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace hypic::dsl {

enum class MarkupPolicy {
  kReject,      // default: a variable whose text carries markup is an InjectionError
  kNeutralize,  // a U+200B (zero-width space) goes after the marker's first character
  kRaw,         // the template author opted in: the text is inserted unchanged
};

struct MarkupMatch {
  size_t offset = 0;
  std::string marker;
};

// First marker in `text`: any <|name|> token, or one of `extra` (the chat format's reserved markers).
std::optional<MarkupMatch> find_chat_markup(std::string_view text, std::span<const std::string> extra = {});

// `text` with every marker broken by a zero-width space; the result has no marker left.
std::string neutralize_chat_markup(std::string_view text, std::span<const std::string> extra = {});

}  // namespace hypic::dsl
