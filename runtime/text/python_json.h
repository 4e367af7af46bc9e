// JSON text exactly as Python's json.dumps(x, ensure_ascii=False) writes it: the `tojson` filter of
// Hugging Face chat templates, which puts tool schemas and tool-call arguments into prompts.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace hypic {

// ", " and ": " separators, keys in the given order, non-ASCII kept, floats in Python repr form.
// InvalidArgument if nesting is deeper than 512 (a guard against runaway recursion).
std::string python_json_dumps(const nlohmann::ordered_json& value);

// Python's str() of a JSON scalar (Jinja's `|string` filter): strings as they are, True/False, None,
// integers, floats in repr form. InvalidArgument for arrays and objects.
std::string python_str(const nlohmann::ordered_json& value);

}  // namespace hypic
