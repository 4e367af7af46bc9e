#include "sdk/builtin_tools.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "runtime/error.h"

namespace hypic::sdk {
namespace {

class Parser {
 public:
  explicit Parser(const std::string& s) : s_(s) {}
  double parse() {
    const double v = sum();
    skip();
    if (i_ != s_.size()) fail("unexpected '" + std::string(1, s_[i_]) + "'");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw InvalidArgument("expression '" + s_ + "', position " + std::to_string(i_ + 1) + ": " + what);
  }
  void skip() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool eat(char c) {
    skip();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  double sum() {
    double v = product();
    for (;;) {
      if (eat('+')) v += product();
      else if (eat('-')) v -= product();
      else return v;
    }
  }
  double product() {
    double v = power();
    for (;;) {
      if (eat('*')) v *= power();
      else if (eat('/')) {
        const double d = power();
        if (d == 0) fail("division by zero");
        v /= d;
      } else return v;
    }
  }
  double power() {
    const double base = unary();
    if (eat('^')) return std::pow(base, power());
    return base;
  }
  double unary() {
    if (eat('-')) return -unary();
    if (eat('+')) return unary();
    return atom();
  }
  double atom() {
    if (++depth_ > 200) fail("too deeply nested");
    if (eat('(')) {
      const double v = sum();
      if (!eat(')')) fail("missing ')'");
      --depth_;
      return v;
    }
    skip();
    const size_t start = i_;
    while (i_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[i_])) || s_[i_] == '.')) ++i_;
    if (start == i_) fail(i_ < s_.size() ? "unexpected '" + std::string(1, s_[i_]) + "'" : "unexpected end");
    char* end = nullptr;
    const std::string num = s_.substr(start, i_ - start);
    const double v = std::strtod(num.c_str(), &end);
    if (*end) fail("bad number '" + num + "'");
    --depth_;
    return v;
  }
  const std::string& s_;
  size_t i_ = 0;
  int depth_ = 0;
};

std::string format_number(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<long long>(v));
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.12g", v);
  return buf;
}

}  // namespace

double evaluate_arithmetic(const std::string& expression) { return Parser(expression).parse(); }

Tool calculator_tool() {
  Tool t;
  t.name = "calculator";
  t.description = "Evaluate an arithmetic expression.";
  t.parameters = Json::parse(R"({"type": "object", "properties": {"expression": {"type": "string"}},
                                 "required": ["expression"]})");
  t.fn = [](const Json& args) -> Json { return format_number(evaluate_arithmetic(args["expression"].get<std::string>())); };
  return t;
}

Tool search_docs_tool(const Retriever& retriever, size_t default_k) {
  Tool t;
  t.name = "search_docs";
  t.description = "Search the document collection and return the best matching chunks.";
  t.parameters = Json::parse(R"({"type": "object", "properties": {"query": {"type": "string"},
                                 "k": {"type": "integer"}}, "required": ["query"]})");
  t.fn = [&retriever, default_k](const Json& args) -> Json {
    const long long k = args.contains("k") ? args["k"].get<long long>() : static_cast<long long>(default_k);
    if (k < 1 || k > 50) throw InvalidArgument("k must be between 1 and 50");
    std::string out;
    for (auto& c : retriever.search(args["query"].get<std::string>(), static_cast<size_t>(k)))
      out += (out.empty() ? "" : "\n\n") + ("[" + c.doc_path + "] " + c.text);
    return out.empty() ? std::string("no matching documents") : out;
  };
  return t;
}

}  // namespace hypic::sdk
