// Tool-call bodies in the XML style of Qwen3.5 (and Qwen3-Coder):
//   <function=NAME>
//   <parameter=KEY>
//   VALUE (any text, several lines)
//   </parameter>
//   </function>
// Values are text; they are typed by the tool's JSON schema the way the reference servers' qwen3_coder
// parsers do: integer/number/boolean parameters become JSON numbers/booleans, object/array parameters
// are parsed as JSON, "null" is null for non-string types, and strings (or parameters the schema does
// not describe) stay exactly as written. A value that does not parse as its type stays a string, so the
// tool can say what is wrong.
#pragma once
#include <memory>
#include <string_view>

#include <nlohmann/json.hpp>

#include "runtime/text/tool_call_parser.h"

namespace hypic {

// `tools`: the OpenAI tools array the prompt showed (names and parameter schemas); empty: any name.
std::unique_ptr<ToolCallBodyParser> xml_tool_call_body_parser(const nlohmann::ordered_json& tools);

// One parameter value typed by its property schema (null `schema`: kept as a string).
nlohmann::ordered_json typed_parameter_value(std::string_view value, const nlohmann::ordered_json* schema);

}  // namespace hypic
