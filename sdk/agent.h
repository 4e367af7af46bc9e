// hypic::sdk::Agent — a prompt template + tools + the tool-using loop. One run: compile the template
// with variables into a plan (every block a cache segment), prefill it through the engine, then
// generate; tool calls are executed and their results appended (only the new text is run), until the
// model answers without a tool call or the step bound is reached. The agent keeps its session between
// runs, so a run whose prompt extends the previous one (a conversation: history + new message)
// continues the live state and computes only the new tokens. Nothing a tool or the model does
// crashes the loop: errors go back to the model as tool messages.
#pragma once
#include <atomic>
#include <memory>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "dsl/template.h"
#include "sdk/history_store.h"
#include "sdk/session.h"
#include "sdk/tool.h"

namespace hypic::sdk {

struct AgentRunOptions {
  std::function<void(std::string_view)> on_text;  // streamed assistant text of every step, as generated
  // The same stream parsed by the chat format, as soon as each piece is final: reasoning, answer text
  // (never part of a tool call), each tool call when complete, each malformed call (what a server
  // turns into OpenAI deltas).
  std::function<void(const ReplyEvent&)> on_event;
  const std::atomic<bool>* cancel = nullptr;
  std::optional<int> max_steps;  // overrides the template's agent.max_steps
};

struct BlockReport {
  std::string id;
  std::string cache;  // pin | cache | none
  int64_t tokens = 0;
  bool hit = false;
};

struct ToolInvocation {
  std::string name;
  Json arguments;
  bool ok = false;
  std::string result;  // what the model was given
};

// One generation step of a run: the prompt (step 1) or the tool results appended before it.
struct StepReport {
  int64_t computed_tokens = 0;  // tokens run through the model before this step's first token
  int64_t reused_tokens = 0;    // step 1: leading tokens continued exactly (live state or chain entries)
  double ttft_ms = 0;           // from the step's start to its first token's logits
};

struct AgentResult {
  std::string answer;
  std::string reasoning;
  int steps = 0;
  std::string finish_reason;  // answered | max_steps | length | cancelled
  std::vector<ToolInvocation> tool_calls;
  std::vector<BlockReport> blocks;
  int64_t prompt_tokens = 0, computed_tokens = 0;  // of the prompt (step 1)
  double ttft_ms = 0;                               // of the prompt (step 1)
  HitCheck verify;                                  // of the prompt, with RuntimeOptions::verify_hits_rate
  std::vector<StepReport> step_reports;             // one per step
  std::vector<HistoryMessage> messages;  // this run's new messages (user, assistant, tool, ...)
};

class Agent {
 public:
  Agent(Runtime& rt, dsl::Template tpl, ToolRegistry tools);

  // Replaces sampling from the model (tests script the model's replies; the text still runs through
  // the model so the session's state stays the true transcript).
  using Generator = std::function<Generation(Session&, const GenerateOptions&)>;
  void set_generator(Generator g) { generator_ = std::move(g); }
  // Persists every run as one turn of `session_id` and fills the template's history slot from it.
  void set_history(HistoryStore* store, std::string session_id);

  AgentResult run(Json vars, const AgentRunOptions& options = {});

  const dsl::Template& template_() const { return tpl_; }
  // The session the runs continue (null before the first run).
  const Session* session() const { return session_.get(); }
  ToolRegistry& tools() { return tools_; }

 private:
  std::string continuation_text(const std::vector<HistoryMessage>& step_messages) const;

  Runtime& rt_;
  dsl::Template tpl_;
  ToolRegistry tools_;
  Generator generator_;
  std::unique_ptr<Session> session_;
  HistoryStore* history_ = nullptr;
  std::string history_session_;
};

// A generator that replays fixed replies (the first reply for step 1, ...); each reply is tokenized
// and run through the model as if sampled. For tests and demos of the loop.
Agent::Generator scripted_generator(std::vector<std::string> replies);

}  // namespace hypic::sdk
