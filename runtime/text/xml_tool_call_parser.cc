#include "runtime/text/xml_tool_call_parser.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>

namespace hypic {

namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kFunctionOpen = "<function=";
constexpr std::string_view kFunctionClose = "</function>";
constexpr std::string_view kParamOpen = "<parameter=";
constexpr std::string_view kParamClose = "</parameter>";

std::string_view trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  const size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

bool starts_with(const std::string& s, std::string_view p) { return s.compare(0, p.size(), p) == 0; }

// The schema's type name, lower case: the first non-null entry of a type list, or of anyOf/oneOf
// alternatives; "" when the schema names none.
std::string schema_type(const Json& schema) {
  if (!schema.is_object()) return "";
  if (schema.contains("type")) {
    const Json& t = schema["type"];
    if (t.is_string()) return lower(t.get_ref<const std::string&>());
    if (t.is_array())
      for (const auto& x : t)
        if (x.is_string() && x.get_ref<const std::string&>() != "null") return lower(x.get_ref<const std::string&>());
  }
  for (const char* k : {"anyOf", "oneOf"})
    if (schema.contains(k) && schema[k].is_array())
      for (const auto& alt : schema[k]) {
        const std::string t = schema_type(alt);
        if (!t.empty() && t != "null") return t;
      }
  if (schema.contains("enum")) return "enum";
  return "";
}

ReplyEvent error_event(ToolCallError::Kind k, std::string msg, std::string_view body) {
  return ReplyEvent{ReplyEvent::Kind::kError, {}, {}, {k, std::move(msg), std::string(body)}};
}

class XmlBodyParser : public ToolCallBodyParser {
 public:
  explicit XmlBodyParser(Json tools) : tools_(std::move(tools)) {}

  ReplyEvent parse(std::string_view body) const override {
    using K = ToolCallError::Kind;
    const size_t fn = body.find(kFunctionOpen);
    if (fn == std::string_view::npos)
      return error_event(K::kBadShape, "tool call has no <function=NAME> block", body);
    if (!trim(body.substr(0, fn)).empty())
      return error_event(K::kBadShape, "tool call has text before <function=NAME>", body);
    const size_t name_end = body.find('>', fn);
    if (name_end == std::string_view::npos)
      return error_event(K::kBadShape, "<function= is not closed by '>'", body);
    const std::string name(trim(body.substr(fn + kFunctionOpen.size(), name_end - fn - kFunctionOpen.size())));
    if (name.empty() || name.find_first_of("<\n") != std::string::npos)
      return error_event(K::kBadShape, "tool call has an empty or malformed function name", body);
    // The function body ends at </function>; a missing closer is tolerated (the reference parsers do).
    size_t fn_end = body.find(kFunctionClose, name_end);
    std::string_view tail;
    if (fn_end == std::string_view::npos) {
      fn_end = body.size();
    } else {
      tail = body.substr(fn_end + kFunctionClose.size());
    }
    if (!trim(tail).empty())
      return error_event(K::kBadShape, "one <function=...> per <tool_call>: text follows </function>", body);

    const Json* tool = tools_.empty() ? nullptr : find_tool(tools_, name);
    if (!tools_.empty() && !tool) {
      ReplyEvent ev{ReplyEvent::Kind::kError, {}, {}, unknown_tool_error(tools_, name, body)};
      return ev;
    }
    const Json* props = nullptr;
    if (tool && tool->contains("parameters") && (*tool)["parameters"].is_object() &&
        (*tool)["parameters"].contains("properties") && (*tool)["parameters"]["properties"].is_object())
      props = &(*tool)["parameters"]["properties"];

    ReplyEvent ev{ReplyEvent::Kind::kToolCall, {}, {name, Json::object()}, {}};
    const std::string_view params = body.substr(name_end + 1, fn_end - name_end - 1);
    size_t pos = 0;
    for (;;) {
      const size_t p = params.find(kParamOpen, pos);
      if (p == std::string_view::npos) break;
      const size_t key_end = params.find('>', p);
      if (key_end == std::string_view::npos)
        return error_event(K::kBadShape, "<parameter= is not closed by '>'", body);
      const std::string key(trim(params.substr(p + kParamOpen.size(), key_end - p - kParamOpen.size())));
      if (key.empty() || key.find_first_of("<\n") != std::string::npos)
        return error_event(K::kBadShape, "tool call has an empty or malformed parameter name", body);
      const size_t vbegin = key_end + 1;
      // A value ends at </parameter>, or (the closer forgotten) where the next parameter or the end of
      // the function comes first.
      const size_t close = params.find(kParamClose, vbegin);
      const size_t vend = std::min({close, params.find(kParamOpen, vbegin), params.size()});
      const size_t next = vend == close ? close + kParamClose.size() : vend;
      std::string_view value = params.substr(vbegin, vend - vbegin);
      // The format puts the value on its own lines: one newline after the tag and one before the closer.
      if (!value.empty() && value.front() == '\n') value.remove_prefix(1);
      if (!value.empty() && value.back() == '\n') value.remove_suffix(1);
      if (ev.call.arguments.contains(key))
        return error_event(K::kBadShape, "parameter '" + key + "' is given twice", body);
      const Json* schema = props && props->contains(key) ? &(*props)[key] : nullptr;
      ev.call.arguments[key] = typed_parameter_value(value, schema);
      pos = next;
    }
    return ev;
  }

 private:
  Json tools_;
};

}  // namespace

Json typed_parameter_value(std::string_view value, const Json* schema) {
  if (!schema) return std::string(value);
  const std::string type = schema_type(*schema);
  if (type.empty() || type == "string" || type == "str" || type == "text" || type == "varchar" || type == "char" ||
      type == "enum")
    return std::string(value);
  const std::string_view v = trim(value);
  if (lower(v) == "null") return nullptr;
  if (type == "integer" || starts_with(type, "int") || starts_with(type, "uint") || type == "long" || type == "short") {
    long long n = 0;
    const auto r = std::from_chars(v.data(), v.data() + v.size(), n);
    if (r.ec == std::errc() && r.ptr == v.data() + v.size()) return n;
    return std::string(value);
  }
  if (type == "number" || starts_with(type, "float") || type == "double" || starts_with(type, "num")) {
    Json j;
    if (!parse_bounded_json(v, &j) || !j.is_number()) return std::string(value);
    // An integral number is an integer (as the reference parsers return it).
    if (j.is_number_float()) {
      const double d = j.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9007199254740992.0)
        return static_cast<long long>(d);
    }
    return j;
  }
  if (type == "boolean" || type == "bool" || type == "binary") {
    const std::string l = lower(v);
    if (l == "true") return true;
    if (l == "false") return false;
    return std::string(value);
  }
  // object, array and any other type: the value is JSON text.
  Json j;
  if (parse_bounded_json(v, &j)) return j;
  return std::string(value);
}

std::unique_ptr<ToolCallBodyParser> xml_tool_call_body_parser(const Json& tools) {
  return std::make_unique<XmlBodyParser>(tools.is_array() ? tools : Json::array());
}

}  // namespace hypic
