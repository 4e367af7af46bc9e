// The few Python string operations chat templates apply to message text, with Python's exact
// semantics, so native renderers produce the same bytes as the Jinja templates.
#pragma once
#include <string>
#include <string_view>

namespace hypic {

// str.strip() / Jinja's `trim`: removes leading and trailing Unicode whitespace (str.isspace: ASCII
// whitespace, U+001C..U+001F, U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029, U+202F,
// U+205F, U+3000). `skipped`, when given, receives how many leading bytes were removed.
std::string python_strip(std::string_view s, size_t* skipped = nullptr);

// str.lstrip('\n') / str.rstrip('\n').
std::string lstrip_newlines(std::string_view s);
std::string rstrip_newlines(std::string_view s);

// s.split(sep)[0] and s.split(sep)[-1].
std::string split_first(std::string_view s, std::string_view sep);
std::string split_last(std::string_view s, std::string_view sep);

bool starts_with(std::string_view s, std::string_view prefix);
bool ends_with(std::string_view s, std::string_view suffix);

}  // namespace hypic
