// The prompts file of `hypic eval-pic`: JSON Lines, one {"blocks": ["text", ...], "answer": "..."} per line
// (answer optional), blank lines ignored.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hypic {

struct EvalPrompt {
  std::vector<std::string> blocks;
  std::optional<std::string> answer;
};

// Throws FormatError naming `where`:line for a malformed line, or when there are no prompts.
std::vector<EvalPrompt> parse_eval_prompts(std::string_view text, const std::string& where);
// Reads `path` (a regular file; IoError otherwise) and parses it.
std::vector<EvalPrompt> load_eval_prompts(const std::string& path);

}  // namespace hypic
