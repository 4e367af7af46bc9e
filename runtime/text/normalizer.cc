#include "runtime/text/normalizer.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>

#include <nlohmann/json.hpp>
#include <vector>

#include "runtime/error.h"
#include "runtime/text/utf8.h"

namespace hypic {

namespace {

enum class Form { kNFC, kNFD, kNFKC, kNFKD };

class UnicodeForm : public Normalizer {
 public:
  UnicodeForm(Form form, const std::string& where) : form_(form) {
    UErrorCode st = U_ZERO_ERROR;
    switch (form) {
      case Form::kNFC: impl_ = icu::Normalizer2::getNFCInstance(st); break;
      case Form::kNFD: impl_ = icu::Normalizer2::getNFDInstance(st); break;
      case Form::kNFKC: impl_ = icu::Normalizer2::getNFKCInstance(st); break;
      case Form::kNFKD: impl_ = icu::Normalizer2::getNFKDInstance(st); break;
    }
    if (U_FAILURE(st) || !impl_) throw ModelError(where + ": ICU normalizer unavailable: " + u_errorName(st));
  }

  std::string normalize(std::string_view text) const override {
    // Fast path for the hot case. ASCII is stable under all four forms. For NFC, every code point below
    // U+0300 is stable and only composes with a following mark at or above U+0300 (lead byte >= 0xCC),
    // so text whose bytes are all below 0xCC is already NFC.
    const unsigned char limit = form_ == Form::kNFC ? 0xCC : 0x80;
    bool simple = true;
    for (unsigned char c : text) {
      if (c >= limit) {
        simple = false;
        break;
      }
    }
    if (simple) return std::string(text);
    UErrorCode st = U_ZERO_ERROR;
    const icu::StringPiece sp(text.data(), static_cast<int32_t>(text.size()));
    if (impl_->isNormalizedUTF8(sp, st) && U_SUCCESS(st)) return std::string(text);
    st = U_ZERO_ERROR;
    std::string out;
    icu::StringByteSink<std::string> sink(&out, static_cast<int32_t>(text.size()));
    impl_->normalizeUTF8(0, sp, sink, nullptr, st);
    if (U_FAILURE(st)) throw InvalidArgument(std::string("Unicode normalization failed: ") + u_errorName(st));
    return out;
  }

 private:
  Form form_;
  const icu::Normalizer2* impl_ = nullptr;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  std::string normalize(std::string_view text) const override {
    std::string cur(text);
    for (const auto& p : parts_) cur = p->normalize(cur);
    return cur;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

class Prepend : public Normalizer {
 public:
  explicit Prepend(std::string p) : prefix_(std::move(p)) {}
  std::string normalize(std::string_view text) const override {
    if (text.empty()) return {};  // HF leaves empty strings alone
    return prefix_ + std::string(text);
  }

 private:
  std::string prefix_;
};

class Replace : public Normalizer {
 public:
  Replace(std::string from, std::string to) : from_(std::move(from)), to_(std::move(to)) {}
  std::string normalize(std::string_view text) const override {
    std::string out;
    size_t i = 0;
    while (true) {
      const size_t j = text.find(from_, i);
      if (j == std::string_view::npos) break;
      out.append(text.substr(i, j - i));
      out += to_;
      i = j + from_.size();
    }
    out.append(text.substr(i));
    return out;
  }

 private:
  std::string from_, to_;
};

class Strip : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  std::string normalize(std::string_view text) const override {
    // White_Space property, as Rust's char::is_whitespace.
    size_t b = 0, e = text.size();
    if (left_) {
      while (b < e) {
        int len = 0;
        const char32_t cp = utf8::decode_at(text, b, &len);
        if (!u_hasBinaryProperty(static_cast<UChar32>(cp), UCHAR_WHITE_SPACE)) break;
        b += len;
      }
    }
    if (right_) {
      while (e > b) {
        size_t s = e - 1;
        while (s > b && (static_cast<unsigned char>(text[s]) & 0xC0) == 0x80) --s;
        int len = 0;
        const char32_t cp = utf8::decode_at(text, s, &len);
        if (!u_hasBinaryProperty(static_cast<UChar32>(cp), UCHAR_WHITE_SPACE)) break;
        e = s;
      }
    }
    return std::string(text.substr(b, e - b));
  }

 private:
  bool left_, right_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& spec, const std::string& where) {
  if (spec.is_null()) return nullptr;
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string())
    throw FormatError(where + ": normalizer without a \"type\"");
  const std::string type = spec["type"];
  if (type == "NFC") return std::make_unique<UnicodeForm>(Form::kNFC, where);
  if (type == "NFD") return std::make_unique<UnicodeForm>(Form::kNFD, where);
  if (type == "NFKC") return std::make_unique<UnicodeForm>(Form::kNFKC, where);
  if (type == "NFKD") return std::make_unique<UnicodeForm>(Form::kNFKD, where);
  if (type == "Sequence") {
    if (!spec.contains("normalizers") || !spec["normalizers"].is_array())
      throw FormatError(where + ": Sequence normalizer without a \"normalizers\" array");
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (const auto& p : spec["normalizers"]) {
      auto n = make_normalizer(p, where);
      if (n) parts.push_back(std::move(n));
    }
    return std::make_unique<SequenceNormalizer>(std::move(parts));
  }
  if (type == "Prepend") return std::make_unique<Prepend>(spec.value("prepend", std::string()));
  if (type == "Replace") {
    const auto& pat = spec.at("pattern");
    if (!pat.contains("String"))
      throw ModelError(where + ": Replace normalizer with a Regex pattern is not supported");
    return std::make_unique<Replace>(pat["String"].get<std::string>(), spec.value("content", std::string()));
  }
  if (type == "Strip") return std::make_unique<Strip>(spec.value("strip_left", true), spec.value("strip_right", true));
  throw ModelError(where + ": unsupported normalizer type \"" + type + "\"");
}

}  // namespace hypic
