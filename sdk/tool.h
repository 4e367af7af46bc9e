// Tools: C++ callables with a JSON-schema description, and the registry the agent calls them through.
// Nothing a tool or the model does can crash the loop: every failure becomes a ToolOutcome with an
// error text that goes back to the model as the tool message.
#pragma once
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace hypic::sdk {

using Json = nlohmann::ordered_json;

struct Tool {
  std::string name;
  std::string description;
  Json parameters = Json{{"type", "object"}, {"properties", Json::object()}};  // JSON schema of the arguments
  // Returns the result: a JSON string is passed to the model verbatim, anything else serialized.
  std::function<Json(const Json& arguments)> fn;

  Json openai_schema() const;  // {"type": "function", "function": {name, description, parameters}}
};

struct ToolOutcome {
  bool ok = false;
  std::string content;  // the tool message text (the result, or the error explained)
};

// Checks arguments against the schema subset tools use: type object, properties with type
// (string, number, integer, boolean, array, object), required, enum, additionalProperties: false.
// Returns the first problem, or nullopt.
std::optional<std::string> validate_arguments(const Json& schema, const Json& arguments);

class ToolRegistry {
 public:
  void add(Tool tool);  // replaces a tool of the same name
  const Tool* find(const std::string& name) const;
  std::vector<std::string> names() const;
  Json openai_schemas() const;
  // Runs a call: unknown tool, invalid arguments and exceptions become error outcomes.
  ToolOutcome call(const std::string& name, const Json& arguments) const;

 private:
  std::map<std::string, Tool> tools_;
};

}  // namespace hypic::sdk
