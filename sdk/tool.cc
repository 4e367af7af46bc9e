#include "sdk/tool.h"

#include <exception>

namespace hypic::sdk {

Json Tool::openai_schema() const {
  return Json{{"type", "function"},
              {"function", Json{{"name", name}, {"description", description}, {"parameters", parameters}}}};
}

namespace {

bool has_type(const Json& v, const std::string& type) {
  if (type == "string") return v.is_string();
  if (type == "number") return v.is_number();
  if (type == "integer") return v.is_number_integer() || (v.is_number_float() && v.get<double>() == static_cast<long long>(v.get<double>()));
  if (type == "boolean") return v.is_boolean();
  if (type == "array") return v.is_array();
  if (type == "object") return v.is_object();
  if (type == "null") return v.is_null();
  return true;  // a type this subset does not check
}

}  // namespace

std::optional<std::string> validate_arguments(const Json& schema, const Json& args) {
  if (!args.is_object()) return "arguments must be a JSON object";
  if (!schema.is_object()) return std::nullopt;
  const Json props = schema.value("properties", Json::object());
  if (schema.contains("required") && schema["required"].is_array())
    for (auto& r : schema["required"])
      if (r.is_string() && !args.contains(r.get<std::string>()))
        return "missing required argument '" + r.get<std::string>() + "'";
  for (auto& [k, v] : args.items()) {
    if (!props.contains(k)) {
      if (schema.value("additionalProperties", true) == false) return "unknown argument '" + k + "'";
      continue;
    }
    const Json& p = props[k];
    if (p.contains("type")) {
      const Json& t = p["type"];
      bool ok = false;
      if (t.is_string()) ok = has_type(v, t.get<std::string>());
      else if (t.is_array())
        for (auto& one : t) ok = ok || (one.is_string() && has_type(v, one.get<std::string>()));
      else ok = true;
      if (!ok) return "argument '" + k + "' must be of type " + t.dump() + ", got " + v.dump();
    }
    if (p.contains("enum") && p["enum"].is_array()) {
      bool found = false;
      for (auto& e : p["enum"]) found = found || e == v;
      if (!found) return "argument '" + k + "' must be one of " + p["enum"].dump();
    }
  }
  return std::nullopt;
}

void ToolRegistry::add(Tool tool) {
  std::string name = tool.name;
  tools_[name] = std::move(tool);
}

const Tool* ToolRegistry::find(const std::string& name) const {
  auto it = tools_.find(name);
  return it == tools_.end() ? nullptr : &it->second;
}

std::vector<std::string> ToolRegistry::names() const {
  std::vector<std::string> v;
  for (auto& [k, t] : tools_) v.push_back(k);
  return v;
}

Json ToolRegistry::openai_schemas() const {
  Json a = Json::array();
  for (auto& [k, t] : tools_) a.push_back(t.openai_schema());
  return a;
}

ToolOutcome ToolRegistry::call(const std::string& name, const Json& arguments) const {
  const Tool* t = find(name);
  if (!t || !t->fn) {
    std::string avail;
    for (auto& n : names()) avail += (avail.empty() ? "" : ", ") + n;
    return {false, "error: unknown tool '" + name + "'" + (avail.empty() ? "" : "; available tools: " + avail)};
  }
  if (auto problem = validate_arguments(t->parameters, arguments))
    return {false, "error: bad arguments for tool '" + name + "': " + *problem};
  try {
    Json r = t->fn(arguments);
    return {true, r.is_string() ? r.get<std::string>() : r.dump()};
  } catch (const std::exception& e) {
    return {false, std::string("error: tool '") + name + "' failed: " + e.what()};
  } catch (...) {
    return {false, "error: tool '" + name + "' failed with an unknown exception"};
  }
}

}  // namespace hypic::sdk
