#include "runtime/eval_prompts.h"

#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "runtime/regular_file.h"
#include "runtime/text/utf8.h"

namespace hypic {

std::vector<EvalPrompt> parse_eval_prompts(std::string_view text, const std::string& where) {
  std::vector<EvalPrompt> out;
  size_t pos = 0;
  for (int ln = 1; pos < text.size(); ++ln) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    const std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::string at = where + ":" + std::to_string(ln);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number too large
      throw FormatError(at + ": not valid JSON: " + e.what());
    }
    if (!j.is_object() || !j.contains("blocks") || !j["blocks"].is_array() || j["blocks"].empty())
      throw FormatError(at + ": expected {\"blocks\": [\"text\", ...], \"answer\": \"...\"}");
    EvalPrompt p;
    for (auto& b : j["blocks"]) {
      if (!b.is_string()) throw FormatError(at + ": every block must be a string");
      p.blocks.push_back(b.get<std::string>());
      // The JSON parser accepts any \u escape; a lone surrogate decodes to bytes that are not UTF-8.
      if (utf8::find_invalid(p.blocks.back()) != std::string::npos)
        throw FormatError(at + ": block " + std::to_string(p.blocks.size() - 1) + " is not valid UTF-8");
    }
    if (j.contains("answer") && !j["answer"].is_null()) {
      if (!j["answer"].is_string()) throw FormatError(at + ": 'answer' must be a string");
      p.answer = j["answer"].get<std::string>();
    }
    out.push_back(std::move(p));
  }
  if (out.empty()) throw FormatError(where + ": no prompts");
  return out;
}

std::vector<EvalPrompt> load_eval_prompts(const std::string& path) {
  return parse_eval_prompts(read_regular_file(path, "prompts file"), path);
}

}  // namespace hypic
