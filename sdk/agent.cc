#include "sdk/agent.h"

#include <chrono>
#include <memory>

#include "dsl/compiler.h"
#include "dsl/hf_plan_tokenizer.h"
#include "runtime/error.h"

namespace hypic::sdk {

Agent::Agent(Runtime& rt, dsl::Template tpl, ToolRegistry tools)
    : rt_(rt), tpl_(std::move(tpl)), tools_(std::move(tools)) {}

void Agent::set_history(HistoryStore* store, std::string session_id) {
  history_ = store;
  history_session_ = std::move(session_id);
  if (history_ && !history_->has_session(history_session_)) history_->create_session(history_session_);
}

namespace {

BlockCache to_engine(dsl::CachePolicy p) {
  switch (p) {
    case dsl::CachePolicy::kPin: return BlockCache::Pin;
    case dsl::CachePolicy::kCache: return BlockCache::Cache;
    case dsl::CachePolicy::kNone: return BlockCache::None;
  }
  return BlockCache::Cache;
}

ChatMessage to_chat(const HistoryMessage& m) {
  ChatMessage c;
  c.role = m.role;
  c.content = m.content;
  c.tool_call_id = m.tool_call_id;
  if (m.tool_calls.is_array())
    for (auto& tc : m.tool_calls) {
      ToolCall call;
      call.id = tc.value("id", "");
      const Json& f = tc.contains("function") ? tc["function"] : tc;
      call.name = f.value("name", "");
      call.arguments = f.contains("arguments") ? f["arguments"] : Json::object();
      c.tool_calls.push_back(std::move(call));
    }
  return c;
}

}  // namespace

// The text that follows a generated assistant reply: the rest of its frame after the end-of-turn
// token, the tool messages, and the next generation prompt — taken from the chat format's own
// rendering so the transcript is what the model's template would produce.
std::string Agent::continuation_text(const std::vector<HistoryMessage>& step) const {
  Conversation conv;
  conv.messages.push_back(ChatMessage{"user", "continue"});
  for (auto& m : step) conv.messages.push_back(to_chat(m));
  RenderOptions ro;
  ro.add_generation_prompt = true;
  if (tpl_.agent.thinking) ro.enable_thinking = tpl_.agent.thinking;
  const RenderedChat r = rt_.chat_format().render(conv, ro);
  const TextSpan a = r.messages.at(1);
  const std::string assistant = r.text.substr(a.begin, a.size());
  const std::string eot = rt_.chat_format().end_of_turn();
  const size_t end_tok = assistant.rfind(eot);
  std::string trailer = end_tok == std::string::npos ? "" : assistant.substr(end_tok + eot.size());
  return trailer + r.text.substr(a.end);
}

AgentResult Agent::run(Json vars, const AgentRunOptions& options) {
  if (!vars.is_object()) throw InvalidArgument("agent variables must be a JSON object");
  // Fill the history slot from the store unless the caller supplied it.
  std::string stored_history_group;  // the history block declaration filled from the store
  if (history_)
    for (auto& b : tpl_.blocks)
      if (b.kind == dsl::BlockDecl::Kind::kHistory && !vars.contains(b.history)) {
        vars[b.history] = history_->history_variable(history_session_);
        if (stored_history_group.empty()) stored_history_group = b.id;
      }

  dsl::HfPlanTokenizer plan_tok(rt_.tokenizer());
  dsl::CompileOptions co;
  co.tokenizer = &plan_tok;
  co.format = &rt_.chat_format();
  co.model_fingerprint = rt_.backend().fingerprint();
  co.seam_width = static_cast<int>(rt_.engine().seam_width());
  const dsl::PromptPlan plan = dsl::compile(tpl_, vars, co);
  if (plan.blocks.empty()) throw InvalidArgument("template '" + tpl_.file + "' produced no blocks");

  std::vector<PromptBlock> blocks;
  for (auto& b : plan.blocks) blocks.push_back({*b.tokens, to_engine(b.cache)});
  // The last block and the generation prompt form the query tail (never cached). The part of the
  // generation prompt that a re-rendered reply does not start with runs after the session's checkpoint.
  const ChatFormat& format = rt_.chat_format();
  const std::string& header = format.history_rule().assistant_header;
  std::string gen_text = plan.generation_prompt, gen_rest;
  if (!header.empty() && gen_text.compare(0, header.size(), header) == 0) {
    gen_rest = gen_text.substr(header.size());
    gen_text.resize(header.size());
  }
  const std::vector<int> gen = rt_.tokenizer().encode(gen_text);
  const std::vector<int> rest = gen_rest.empty() ? std::vector<int>() : rt_.tokenizer().encode(gen_rest);
  blocks.back().tokens.insert(blocks.back().tokens.end(), gen.begin(), gen.end());
  blocks.back().cache = BlockCache::None;

  AgentResult res;
  if (!session_) session_ = std::make_unique<Session>(rt_);
  Session& session = *session_;
  const PromptResult pr = session.prefill(blocks, rest);
  res.ttft_ms = pr.ttft_ms;
  res.prompt_tokens = pr.prompt_tokens;
  res.computed_tokens = pr.computed_tokens;
  res.verify = pr.verify;
  res.step_reports.push_back({pr.computed_tokens, pr.reused_tokens, pr.ttft_ms});
  for (size_t i = 0; i < plan.blocks.size(); ++i) {
    const bool hit = i < pr.blocks.size() && pr.blocks[i].hit;
    res.blocks.push_back({plan.blocks[i].id, dsl::cache_policy_name(plan.blocks[i].cache),
                          static_cast<int64_t>(plan.blocks[i].tokens->size()), hit});
  }
  auto block_ref = [](const dsl::PlanBlock& b) {
    return BlockRef{b.id, b.content_key ? b.content_key->hex() : "", b.chain_key ? b.chain_key->hex() : ""};
  };
  // The turn's user message: the last plan block's message content, as the history will show it.
  if (plan.blocks.back().role == "user") {
    HistoryMessage user{"user", plan.blocks.back().content};
    user.blocks.push_back(block_ref(plan.blocks.back()));
    res.messages.push_back(std::move(user));
  }
  // Earlier messages replayed from the store became history blocks: record which.
  if (!stored_history_group.empty()) {
    std::vector<std::pair<int64_t, size_t>> where;  // message index -> (turn, message in turn)
    for (auto& t : history_->turns(history_session_))
      for (size_t m = 0; m < t.messages.size(); ++m) where.push_back({t.index, m});
    for (auto& b : plan.blocks) {
      if (b.group != stored_history_group || b.kind != "history") continue;
      const size_t i = std::stoul(b.id.substr(b.id.rfind('.') + 1));
      if (i < where.size()) history_->set_blocks(history_session_, where[i].first, where[i].second, {block_ref(b)});
    }
  }

  const dsl::AgentSettings& st = tpl_.agent;
  GenerateOptions go;
  go.max_tokens = st.max_tokens.value_or(512);
  go.sampling.temperature = static_cast<float>(st.temperature.value_or(0.0));
  go.sampling.top_k = st.top_k.value_or(0);
  go.sampling.top_p = static_cast<float>(st.top_p.value_or(1.0));
  go.presence_penalty = static_cast<float>(st.presence_penalty.value_or(0.0));
  go.frequency_penalty = static_cast<float>(st.frequency_penalty.value_or(0.0));
  go.repetition_penalty = static_cast<float>(st.repetition_penalty.value_or(1.0));
  go.seed = st.seed.value_or(0);
  for (auto& s : st.stop)
    if (!rt_.tokenizer().token_to_id(s)) go.stop.push_back(s);  // special tokens already end a turn
  go.cancel = options.cancel;
  const bool in_reasoning = format.generation_starts_in_reasoning(st.thinking);
  const int max_steps = std::max(1, options.max_steps.value_or(st.max_steps));
  const std::string& choice = st.tool_choice;

  for (int step = 1;; ++step) {
    res.steps = step;
    // The reply is parsed as it streams; a generator that does not stream is parsed at its end.
    auto parser = format.tool_call_parser(plan.tools, in_reasoning);
    std::vector<ReplyEvent> events;
    std::string fed;
    auto feed = [&](std::string_view piece) {
      const size_t before = events.size();
      parser->push(piece, events);
      fed.append(piece);
      if (options.on_event)
        for (size_t k = before; k < events.size(); ++k) options.on_event(events[k]);
    };
    go.on_text = [&](std::string_view t) {
      if (options.on_text) options.on_text(t);
      feed(t);
    };
    const Generation g = generator_ ? generator_(session, go) : session.generate(go);
    if (g.text.compare(0, fed.size(), fed) == 0) {
      feed(std::string_view(g.text).substr(fed.size()));
    } else {  // the stream and the final text disagree: the final text is the reply
      events.clear();
      parser.reset();
      const auto again = format.tool_call_parser(plan.tools, in_reasoning);
      again->push(g.text, events);
      again->finish(events);
    }
    if (parser) {
      const size_t before = events.size();
      parser->finish(events);
      if (options.on_event)
        for (size_t k = before; k < events.size(); ++k) options.on_event(events[k]);
    }
    const AssistantOutput out = collect_reply(events);
    res.answer = out.content;
    res.reasoning = out.reasoning;
    if (g.finish == Generation::Finish::Cancelled || g.finish == Generation::Finish::Length) {
      res.finish_reason = finish_name(g.finish);
      res.messages.push_back({"assistant", g.text});
      break;
    }
    const bool wants_tools = !out.tool_calls.empty() || !out.errors.empty();
    if (choice == "none" || (!wants_tools && choice != "required")) {
      res.finish_reason = "answered";
      res.messages.push_back({"assistant", out.content});
      break;
    }
    // Execute the calls; every failure becomes the tool message.
    HistoryMessage assistant{"assistant", out.content};
    assistant.tool_calls = Json::array();
    std::vector<HistoryMessage> tool_msgs;
    int n = 0;
    for (auto& c : out.tool_calls) {
      const std::string id = "call_" + std::to_string(step) + "_" + std::to_string(n++);
      assistant.tool_calls.push_back(
          Json{{"id", id}, {"type", "function"}, {"function", Json{{"name", c.name}, {"arguments", c.arguments}}}});
      ToolOutcome o;
      if (choice != "auto" && choice != "required" && c.name != choice)
        o = {false, "error: only the tool '" + choice + "' may be called here"};
      else
        o = tools_.call(c.name, c.arguments);
      res.tool_calls.push_back({c.name, c.arguments, o.ok, o.content});
      HistoryMessage tm{"tool", o.content};
      tm.tool_call_id = id;
      tm.name = c.name;
      tool_msgs.push_back(std::move(tm));
    }
    for (auto& e : out.errors) {
      HistoryMessage tm{"tool", "error: could not use your tool call: " + e.message};
      tool_msgs.push_back(std::move(tm));
      res.tool_calls.push_back({"", Json(e.body), false, tool_msgs.back().content});
    }
    if (!wants_tools) tool_msgs.push_back({"tool", "error: this step requires a tool call"});
    res.messages.push_back(assistant);
    for (auto& m : tool_msgs) res.messages.push_back(m);
    if (step >= max_steps) {
      res.finish_reason = "max_steps";
      break;
    }
    std::vector<HistoryMessage> step_msgs = {assistant};
    step_msgs.insert(step_msgs.end(), tool_msgs.begin(), tool_msgs.end());
    const auto t0 = std::chrono::steady_clock::now();
    const size_t before = session.transcript().size();
    session.append_text(continuation_text(step_msgs));
    res.step_reports.push_back({static_cast<int64_t>(session.transcript().size() - before), 0,
                                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count()});
  }
  if (history_) history_->append_turn(history_session_, res.messages);
  return res;
}

Agent::Generator scripted_generator(std::vector<std::string> replies) {
  auto shared = std::make_shared<std::vector<std::string>>(std::move(replies));
  auto next = std::make_shared<size_t>(0);
  return [shared, next](Session& s, const GenerateOptions& opt) {
    if (*next >= shared->size()) throw InvalidArgument("scripted generator: no reply left");
    const std::string text = (*shared)[(*next)++];
    Generation g;
    g.text = text;
    g.tokens = s.runtime().tokenizer().encode(text + s.runtime().chat_format().end_of_turn());
    g.finish = Generation::Finish::Stop;
    if (opt.on_text) opt.on_text(text);
    s.append_tokens(g.tokens);  // the same transcript a sampled reply leaves
    return g;
  };
}

}  // namespace hypic::sdk
