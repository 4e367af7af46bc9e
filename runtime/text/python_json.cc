#include "runtime/text/python_json.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "runtime/error.h"

namespace hypic {

namespace {

constexpr int kMaxDepth = 512;

void dump_string(const std::string& s, std::string& out) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

// Python's float repr: the shortest digits that round-trip, fixed notation for decimal exponents
// -4..15, otherwise d.ddde+XX; integral values keep a ".0".
void dump_float(double x, std::string& out) {
  if (std::isnan(x)) {
    out += "NaN";
    return;
  }
  if (std::isinf(x)) {
    out += x > 0 ? "Infinity" : "-Infinity";
    return;
  }
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), x, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t e = sci.find('e');
  const int exp = std::atoi(sci.c_str() + e + 1);
  std::string digits;
  for (size_t i = 0; i < e; ++i)
    if (sci[i] != '.') digits += sci[i];
  out += sign;
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      if (digits.size() <= static_cast<size_t>(exp) + 1) {
        out += digits + std::string(static_cast<size_t>(exp) + 1 - digits.size(), '0') + ".0";
      } else {
        out += digits.substr(0, static_cast<size_t>(exp) + 1) + "." + digits.substr(static_cast<size_t>(exp) + 1);
      }
    } else {
      out += "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += eb;
  }
}

void dump(const nlohmann::ordered_json& v, std::string& out, int depth) {
  if (depth > kMaxDepth) throw InvalidArgument("JSON value nested deeper than 512 levels");
  switch (v.type()) {
    case nlohmann::ordered_json::value_t::null: out += "null"; break;
    case nlohmann::ordered_json::value_t::boolean: out += v.get<bool>() ? "true" : "false"; break;
    case nlohmann::ordered_json::value_t::number_integer: out += std::to_string(v.get<int64_t>()); break;
    case nlohmann::ordered_json::value_t::number_unsigned: out += std::to_string(v.get<uint64_t>()); break;
    case nlohmann::ordered_json::value_t::number_float: dump_float(v.get<double>(), out); break;
    case nlohmann::ordered_json::value_t::string: dump_string(v.get_ref<const std::string&>(), out); break;
    case nlohmann::ordered_json::value_t::array: {
      out += '[';
      bool first = true;
      for (const auto& x : v) {
        if (!first) out += ", ";
        first = false;
        dump(x, out, depth + 1);
      }
      out += ']';
      break;
    }
    case nlohmann::ordered_json::value_t::object: {
      out += '{';
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) out += ", ";
        first = false;
        dump_string(it.key(), out);
        out += ": ";
        dump(it.value(), out, depth + 1);
      }
      out += '}';
      break;
    }
    default: throw InvalidArgument("JSON value of a kind Python's json.dumps cannot write (binary)");
  }
}

}  // namespace

std::string python_json_dumps(const nlohmann::ordered_json& value) {
  std::string out;
  dump(value, out, 0);
  return out;
}

std::string python_str(const nlohmann::ordered_json& value) {
  switch (value.type()) {
    case nlohmann::ordered_json::value_t::string: return value.get<std::string>();
    case nlohmann::ordered_json::value_t::null: return "None";
    case nlohmann::ordered_json::value_t::boolean: return value.get<bool>() ? "True" : "False";
    case nlohmann::ordered_json::value_t::number_float: {
      const double x = value.get<double>();
      if (std::isnan(x)) return "nan";
      if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
      std::string out;
      dump_float(x, out);
      return out;
    }
    case nlohmann::ordered_json::value_t::array:
    case nlohmann::ordered_json::value_t::object:
      throw InvalidArgument("python_str is for scalars; containers are written with python_json_dumps");
    default: return python_json_dumps(value);  // integers
  }
}

}  // namespace hypic
