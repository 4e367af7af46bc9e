// Flag values of the benchmarks: a number parses whole or not at all (garbage, trailing characters,
// a sign on an unsigned value, overflow and non-finite values give nullopt), so a typo never becomes 0.
#pragma once
#include <charconv>
#include <cmath>
#include <optional>
#include <string>
#include <type_traits>

namespace hypic::bench {

template <class T>
std::optional<T> parse_whole(const std::string& v) {
  T x{};
  const char* end = v.data() + v.size();
  const auto [p, ec] = std::from_chars(v.data(), end, x);
  if (v.empty() || ec != std::errc() || p != end) return std::nullopt;
  if constexpr (std::is_floating_point_v<T>) {
    if (!std::isfinite(x)) return std::nullopt;
  }
  return x;
}

}  // namespace hypic::bench
