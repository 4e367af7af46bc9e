// JSON text exactly as Python's json.dumps(x, ensure_ascii=False) writes it (", " and ": " separators,
// keys in insertion order): what HF chat templates produce with `| tojson`.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace hypic::dsl {

std::string python_json_dumps(const nlohmann::ordered_json& j);

}  // namespace hypic::dsl
