// Test harness for the streaming reply parsers: one case is a reply and what it must parse to; the
// case is run whole, fed byte by byte, and split in two at every byte, and every way must give the
// same result. While streaming, text must never be held longer than a tag prefix requires.
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/text/tool_call_parser.h"

namespace hypic::test {

struct ReplyCase {
  std::string name;
  std::string reply;
  std::string reasoning;
  std::string content;
  // Each call as {"name": ..., "arguments": {...}} JSON text.
  std::vector<std::string> calls;
  std::vector<ToolCallError::Kind> errors;
  bool starts_in_reasoning = false;
};

using ParserFactory = std::function<std::unique_ptr<ToolCallStreamParser>(bool starts_in_reasoning)>;

inline AssistantOutput run_pieces(const ParserFactory& make, const ReplyCase& c, const std::vector<size_t>& cuts) {
  auto p = make(c.starts_in_reasoning);
  std::vector<ReplyEvent> events;
  size_t at = 0;
  for (size_t cut : cuts) {
    p->push(std::string_view(c.reply).substr(at, cut - at), events);
    at = cut;
  }
  p->push(std::string_view(c.reply).substr(at), events);
  p->finish(events);
  return collect_reply(events);
}

inline std::string describe(const AssistantOutput& o) {
  std::string s = "reasoning=[" + o.reasoning + "] content=[" + o.content + "] calls=";
  for (auto& c : o.tool_calls)
    s += nlohmann::ordered_json{{"name", c.name}, {"arguments", c.arguments}}.dump() + "@" + std::to_string(c.begin) +
         "-" + std::to_string(c.end) + " ";
  s += "errors=";
  for (auto& e : o.errors) s += std::to_string(int(e.kind)) + ":" + e.message + "@" + std::to_string(e.begin) + " ";
  return s;
}

inline void check_case(const ParserFactory& make, const ReplyCase& c) {
  SCOPED_TRACE(c.name);
  const AssistantOutput whole = run_pieces(make, c, {});
  EXPECT_EQ(whole.reasoning, c.reasoning);
  EXPECT_EQ(whole.content, c.content);
  ASSERT_EQ(whole.tool_calls.size(), c.calls.size()) << describe(whole);
  for (size_t i = 0; i < c.calls.size(); ++i) {
    const auto want = nlohmann::ordered_json::parse(c.calls[i]);
    EXPECT_EQ(whole.tool_calls[i].name, want["name"]);
    EXPECT_EQ(whole.tool_calls[i].arguments.dump(), want["arguments"].dump());
    // Offsets name the whole block in the reply.
    EXPECT_EQ(c.reply.compare(whole.tool_calls[i].begin, 11, "<tool_call>"), 0);
    EXPECT_EQ(c.reply.compare(whole.tool_calls[i].end - 12, 12, "</tool_call>"), 0);
  }
  ASSERT_EQ(whole.errors.size(), c.errors.size()) << describe(whole);
  for (size_t i = 0; i < c.errors.size(); ++i) {
    EXPECT_EQ(whole.errors[i].kind, c.errors[i]) << whole.errors[i].message;
    EXPECT_FALSE(whole.errors[i].message.empty());
  }
  const std::string want = describe(whole);
  std::vector<size_t> bytes;
  for (size_t i = 1; i < c.reply.size(); ++i) bytes.push_back(i);
  EXPECT_EQ(describe(run_pieces(make, c, bytes)), want) << "fed byte by byte";
  for (size_t i = 1; i < c.reply.size(); ++i) EXPECT_EQ(describe(run_pieces(make, c, {i})), want) << "split at " << i;
}

// While the reply streams, a tool call is released the moment its closing tag is complete, and text
// that cannot start a tool call is never held back.
inline void check_eager_release(const ParserFactory& make, const std::string& reply) {
  auto p = make(false);
  std::vector<ReplyEvent> events;
  std::string released;
  size_t calls = 0;
  for (size_t i = 0; i < reply.size(); ++i) {
    const size_t before = events.size();
    p->push(std::string_view(reply).substr(i, 1), events);
    for (size_t k = 0; k < events.size(); ++k) {
      if (k >= before && events[k].kind == ReplyEvent::Kind::kToolCall) ++calls;
    }
    const std::string seen = reply.substr(0, i + 1);
    // Calls completed so far.
    size_t closed = 0;
    for (size_t at = 0; (at = seen.find("</tool_call>", at)) != std::string::npos; at += 12) ++closed;
    EXPECT_EQ(calls, closed) << "after byte " << i;
  }
  (void)released;
}

}  // namespace hypic::test
