// The chat page `hypic serve` answers GET / with: plain HTML and JavaScript in the binary, no build step.
#pragma once
#include <string_view>

namespace hypic::serve {

std::string_view web_page_html();

}  // namespace hypic::serve
