#include "runtime/text/decoder.h"

#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "runtime/text/byte_level.h"
#include "runtime/text/utf8.h"

namespace hypic {

namespace {

class ByteLevelDecoder : public Decoder {
 public:
  void decode(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) t = byte_level::to_bytes(t);
  }
  bool is_byte_level() const override { return true; }
};

// "<0xAB>" tokens become the byte 0xAB; a run of them must form valid UTF-8, otherwise each byte
// becomes U+FFFD (the reference's rule).
class ByteFallbackDecoder : public Decoder {
 public:
  void decode(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string run;
    size_t run_count = 0;
    auto flush = [&] {
      if (run_count == 0) return;
      if (utf8::find_invalid(run) == std::string::npos) {
        out.push_back(run);
      } else {
        for (size_t i = 0; i < run_count; ++i) out.push_back("\xEF\xBF\xBD");
      }
      run.clear();
      run_count = 0;
    };
    for (auto& t : tokens) {
      int b = byte_of(t);
      if (b >= 0) {
        run += static_cast<char>(b);
        ++run_count;
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens.swap(out);
  }

 private:
  static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  static int byte_of(const std::string& t) {
    if (t.size() != 6 || t[0] != '<' || t[1] != '0' || t[2] != 'x' || t[5] != '>') return -1;
    const int h = hex(t[3]), l = hex(t[4]);
    return (h < 0 || l < 0) ? -1 : h * 16 + l;
  }
};

class FuseDecoder : public Decoder {
 public:
  void decode(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(std::string from, std::string to) : from_(std::move(from)), to_(std::move(to)) {}
  void decode(std::vector<std::string>& tokens) const override {
    if (from_.empty()) return;
    for (auto& t : tokens) {
      std::string out;
      size_t i = 0;
      for (size_t j; (j = t.find(from_, i)) != std::string::npos; i = j + from_.size()) out += t.substr(i, j - i) + to_;
      out += t.substr(i);
      t.swap(out);
    }
  }

 private:
  std::string from_, to_;
};

// Removes up to `start` leading and `stop` trailing copies of one character from every token.
class StripDecoder : public Decoder {
 public:
  StripDecoder(std::string content, size_t start, size_t stop) : c_(std::move(content)), start_(start), stop_(stop) {}
  void decode(std::vector<std::string>& tokens) const override {
    if (c_.empty()) return;
    for (auto& t : tokens) {
      size_t b = 0, e = t.size();
      for (size_t k = 0; k < start_ && e - b >= c_.size() && t.compare(b, c_.size(), c_) == 0; ++k) b += c_.size();
      for (size_t k = 0; k < stop_ && e - b >= c_.size() && t.compare(e - c_.size(), c_.size(), c_) == 0; ++k)
        e -= c_.size();
      t = t.substr(b, e - b);
    }
  }

 private:
  std::string c_;
  size_t start_, stop_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  void decode(std::vector<std::string>& tokens) const override {
    for (const auto& p : parts_) p->decode(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

}  // namespace

std::unique_ptr<Decoder> make_decoder(const nlohmann::json& spec, const std::string& where) {
  if (spec.is_null()) return nullptr;
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string())
    throw FormatError(where + ": decoder without a \"type\"");
  const std::string type = spec["type"];
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Replace") {
    const auto& pat = spec.at("pattern");
    if (!pat.contains("String")) throw ModelError(where + ": Replace decoder with a Regex pattern is not supported");
    return std::make_unique<ReplaceDecoder>(pat["String"].get<std::string>(), spec.value("content", std::string()));
  }
  if (type == "Strip")
    return std::make_unique<StripDecoder>(spec.value("content", std::string(" ")), spec.value("start", size_t{0}),
                                          spec.value("stop", size_t{0}));
  if (type == "Sequence") {
    if (!spec.contains("decoders") || !spec["decoders"].is_array())
      throw FormatError(where + ": Sequence decoder without a \"decoders\" array");
    std::vector<std::unique_ptr<Decoder>> parts;
    for (const auto& d : spec["decoders"]) {
      auto p = make_decoder(d, where);
      if (p) parts.push_back(std::move(p));
    }
    return std::make_unique<SequenceDecoder>(std::move(parts));
  }
  throw ModelError(where + ": unsupported decoder type \"" + type + "\"");
}

}  // namespace hypic
