// eval-pic's JSONL prompts: good lines parse; each malformed line is a FormatError naming file:line.
#include "runtime/eval_prompts.h"

#include <gtest/gtest.h>

#include "runtime/error.h"

namespace hypic {
namespace {

std::string error_of(const std::string& text) {
  try {
    parse_eval_prompts(text, "p.jsonl");
  } catch (const FormatError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(EvalPrompts, ParsesBlocksAndOptionalAnswers) {
  const auto p = parse_eval_prompts("{\"blocks\": [\"a\", \"b\"], \"answer\": \"x\"}\n\n  \r\n{\"blocks\": [\"c\"]}", "p.jsonl");
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].blocks, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(p[0].answer, "x");
  EXPECT_FALSE(p[1].answer.has_value());
}

TEST(EvalPrompts, MalformedLinesNameTheLine) {
  EXPECT_EQ(error_of(""), "p.jsonl: no prompts");
  EXPECT_EQ(error_of("\n{\"blocks\": []}"), "p.jsonl:2: expected {\"blocks\": [\"text\", ...], \"answer\": \"...\"}");
  EXPECT_EQ(error_of("{\"blocks\": [1]}"), "p.jsonl:1: every block must be a string");
  EXPECT_EQ(error_of("{\"blocks\": [\"a\"], \"answer\": 3}"), "p.jsonl:1: 'answer' must be a string");
  EXPECT_EQ(error_of("{\"blocks\": [\"\\ud800\"]}").rfind("p.jsonl:1: not valid JSON", 0), 0u);  // lone surrogate
  EXPECT_EQ(error_of("{\"blocks\": [\"a\"]}\n{\"blocks\": [\"a\"]"). rfind("p.jsonl:2: not valid JSON", 0), 0u);
  EXPECT_EQ(error_of(std::string(100000, '[')).rfind("p.jsonl:1: not valid JSON", 0), 0u);
  // Found by eval_prompts_fuzz: a number too large for a double is out_of_range, not parse_error.
  EXPECT_EQ(error_of("{\"blocks\": 8E8888}").rfind("p.jsonl:1: not valid JSON", 0), 0u);
}

}  // namespace
}  // namespace hypic
