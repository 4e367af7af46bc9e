#include "dsl/python_json.h"

#include <cmath>
#include <cstdio>

namespace hypic::dsl {
namespace {

void dump_string(const std::string& s, std::string& out) {
  out.push_back('"');
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
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out.push_back(char(c));
        }
    }
  }
  out.push_back('"');
}

// Python's float repr: shortest round-trip digits, always with a '.' or an exponent.
std::string dump_float(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  std::string s = nlohmann::json(v).dump();
  return s;
}

void dump(const nlohmann::ordered_json& j, std::string& out) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::object: {
      out.push_back('{');
      bool first = true;
      for (const auto& [k, v] : j.items()) {
        if (!first) out += ", ";
        first = false;
        dump_string(k, out);
        out += ": ";
        dump(v, out);
      }
      out.push_back('}');
      break;
    }
    case nlohmann::ordered_json::value_t::array: {
      out.push_back('[');
      for (size_t i = 0; i < j.size(); ++i) {
        if (i) out += ", ";
        dump(j[i], out);
      }
      out.push_back(']');
      break;
    }
    case nlohmann::ordered_json::value_t::string:
      dump_string(j.get_ref<const std::string&>(), out);
      break;
    case nlohmann::ordered_json::value_t::boolean:
      out += j.get<bool>() ? "true" : "false";
      break;
    case nlohmann::ordered_json::value_t::null:
      out += "null";
      break;
    case nlohmann::ordered_json::value_t::number_float:
      out += dump_float(j.get<double>());
      break;
    default:
      out += j.dump();
  }
}

}  // namespace

std::string python_json_dumps(const nlohmann::ordered_json& j) {
  std::string out;
  dump(j, out);
  return out;
}

}  // namespace hypic::dsl
