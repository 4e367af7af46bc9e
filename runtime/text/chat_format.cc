#include "runtime/text/chat_format.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <algorithm>

#include "runtime/error.h"
#include "runtime/text/qwen35_chat_format.h"
#include "runtime/regular_file.h"
#include "runtime/text/qwen_chat_format.h"
#include "runtime/text/tokenizer.h"

namespace hypic {

namespace {

std::string read_text(const std::string& path) { return read_regular_file(path, "file"); }

// A string field that may be absent or null ("" then); anything else is an error at `where`.
std::string opt_string(const nlohmann::ordered_json& obj, const char* key, const std::string& where) {
  if (!obj.contains(key) || obj[key].is_null()) return {};
  if (!obj[key].is_string()) throw InvalidArgument(where + "." + key + " must be a string or null");
  return obj[key].get<std::string>();
}

ToolCall parse_tool_call(const nlohmann::ordered_json& tc, const std::string& where) {
  if (!tc.is_object()) throw InvalidArgument(where + " must be an object");
  ToolCall out;
  out.id = opt_string(tc, "id", where);
  // Chat templates unwrap {"function": {...}} when present and read name/arguments from the call itself otherwise.
  const bool wrapped = tc.contains("function") && tc["function"].is_object() && !tc["function"].empty();
  const auto& fn = wrapped ? tc["function"] : tc;
  const std::string fwhere = wrapped ? where + ".function" : where;
  if (!fn.contains("name") || !fn["name"].is_string()) throw InvalidArgument(fwhere + ".name must be a string");
  out.name = fn["name"].get<std::string>();
  if (!fn.contains("arguments") || fn["arguments"].is_null())
    throw InvalidArgument(fwhere + ".arguments is missing (give a JSON object or a JSON string)");
  out.arguments = fn["arguments"];
  return out;
}

}  // namespace

Conversation parse_openai_conversation(const nlohmann::ordered_json& j, const std::string& where) {
  if (!j.is_object()) throw FormatError(where + ": expected an object {\"messages\": [...], \"tools\": [...]}");
  if (!j.contains("messages") || !j["messages"].is_array()) throw FormatError(where + ": \"messages\" must be an array");
  Conversation conv;
  if (j.contains("tools") && !j["tools"].is_null()) {
    if (!j["tools"].is_array()) throw FormatError(where + ": \"tools\" must be an array");
    conv.tools = j["tools"];
  }
  const auto& msgs = j["messages"];
  for (size_t i = 0; i < msgs.size(); ++i) {
    const std::string mw = where + ": messages[" + std::to_string(i) + "]";
    const auto& m = msgs[i];
    if (!m.is_object()) throw InvalidArgument(mw + " must be an object");
    ChatMessage msg;
    if (!m.contains("role") || !m["role"].is_string()) throw InvalidArgument(mw + ".role must be a string");
    msg.role = m["role"].get<std::string>();
    if (m.contains("content") && !m["content"].is_null() && !m["content"].is_string())
      throw InvalidArgument(mw + ".content must be a string or null (content parts are not supported)");
    msg.content = opt_string(m, "content", mw);
    // transformers reads reasoning under these names, first non-null wins.
    for (const char* k : {"reasoning_content", "thinking", "reasoning"}) {
      if (m.contains(k) && !m[k].is_null()) {
        if (!m[k].is_string()) throw InvalidArgument(mw + "." + k + " must be a string");
        msg.reasoning_content = m[k].get<std::string>();
        break;
      }
    }
    if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
      if (!m["tool_calls"].is_array()) throw InvalidArgument(mw + ".tool_calls must be an array");
      for (size_t k = 0; k < m["tool_calls"].size(); ++k)
        msg.tool_calls.push_back(parse_tool_call(m["tool_calls"][k], mw + ".tool_calls[" + std::to_string(k) + "]"));
    }
    msg.tool_call_id = opt_string(m, "tool_call_id", mw);
    conv.messages.push_back(std::move(msg));
  }
  return conv;
}

AssistantOutput ChatFormat::parse_reply(std::string_view text, const nlohmann::ordered_json& tools,
                                       bool starts_in_reasoning) const {
  const auto parser = tool_call_parser(tools, starts_in_reasoning);
  std::vector<ReplyEvent> events;
  parser->push(text, events);
  parser->finish(events);
  return collect_reply(events);
}

std::unique_ptr<ChatFormat> make_chat_format(const std::string& chat_template, const std::string& where) {
  // Qwen3.5 first: its templates also carry every fragment the Qwen3 rule looks for but one.
  if (Qwen35ChatFormat::matches(chat_template)) return std::make_unique<Qwen35ChatFormat>();
  if (QwenChatFormat::matches(chat_template)) return std::make_unique<QwenChatFormat>();
  throw ModelError(where + ": the chat template is not one hypic implements (supported: " +
                   std::string(QwenChatFormat::kName) + ", " + Qwen35ChatFormat::kName + ")");
}

const ChatFormat& default_chat_format() {
  static const QwenChatFormat format;
  return format;
}

const std::vector<std::string>& all_reserved_markers() {
  static const std::vector<std::string> all = [] {
    std::vector<std::string> v;
    const QwenChatFormat qwen3;
    const Qwen35ChatFormat qwen35;
    for (const ChatFormat* f : {static_cast<const ChatFormat*>(&qwen3), static_cast<const ChatFormat*>(&qwen35)})
      for (auto& m : f->reserved_markers())
        if (std::find(v.begin(), v.end(), m) == v.end()) v.push_back(m);
    return v;
  }();
  return all;
}

std::unique_ptr<ChatFormat> load_chat_format(const std::string& model_dir, const std::string& template_file) {
  if (!template_file.empty()) {
    if (!std::filesystem::is_regular_file(template_file))
      throw IoError("chat template '" + template_file + "' is not a readable file");
    return make_chat_format(read_text(template_file), template_file);
  }
  const std::string cfg_path = model_dir + "/tokenizer_config.json";
  const std::string jinja_path = model_dir + "/chat_template.jinja";
  std::string tmpl;
  std::string where;
  if (std::filesystem::exists(cfg_path)) {
    nlohmann::json cfg;
    try {
      cfg = nlohmann::json::parse(read_text(cfg_path));
    } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for a number too large
      throw FormatError(cfg_path + ": not valid JSON: " + e.what());
    }
    if (cfg.contains("chat_template")) {
      const auto& ct = cfg["chat_template"];
      where = cfg_path;
      if (ct.is_string()) {
        tmpl = ct.get<std::string>();
      } else if (ct.is_array()) {  // [{"name": "default", "template": "..."}, ...]
        for (const auto& e : ct)
          if (e.is_object() && e.value("name", "") == "default" && e.contains("template") && e["template"].is_string())
            tmpl = e["template"].get<std::string>();
        if (tmpl.empty()) throw FormatError(cfg_path + ": chat_template list has no \"default\" entry");
      } else {
        throw FormatError(cfg_path + ": chat_template must be a string or a list");
      }
    }
  }
  if (tmpl.empty() && std::filesystem::is_regular_file(jinja_path)) {
    tmpl = read_text(jinja_path);
    where = jinja_path;
  }
  if (tmpl.empty())
    throw IoError(model_dir + ": no chat template (neither tokenizer_config.json \"chat_template\" nor chat_template.jinja)");
  return make_chat_format(tmpl, where);
}

std::vector<int> chat_stop_ids(const ChatFormat& format, const Tokenizer& tokenizer, const std::string& model_dir) {
  std::vector<std::string> names = format.stop_tokens();
  const std::string cfg_path = model_dir + "/tokenizer_config.json";
  if (std::filesystem::is_regular_file(cfg_path)) {
    try {
      const auto j = nlohmann::json::parse(read_text(cfg_path));
      if (j.is_object() && j.contains("eos_token")) {
        const auto& e = j["eos_token"];
        if (e.is_string()) names.push_back(e.get<std::string>());
        else if (e.is_object() && e.contains("content") && e["content"].is_string())
          names.push_back(e["content"].get<std::string>());
      }
    } catch (const nlohmann::json::exception& e) {
      throw FormatError("'" + cfg_path + "' is not valid JSON: " + e.what());
    }
  }
  std::vector<int> ids;
  for (auto& name : names)
    if (auto id = tokenizer.token_to_id(name))
      if (std::find(ids.begin(), ids.end(), *id) == ids.end()) ids.push_back(*id);
  return ids;
}

}  // namespace hypic
