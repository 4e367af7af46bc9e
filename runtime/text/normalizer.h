// Normalizers of the Hugging Face tokenizer.json format: the text transform applied before pre-tokenizing.
#pragma once
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace hypic {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // `text` is valid UTF-8; the result is valid UTF-8.
  virtual std::string normalize(std::string_view text) const = 0;
};

// Builds the normalizer described by a tokenizer.json "normalizer" object (null gives nullptr).
// Supported: NFC, NFD, NFKC, NFKD, Sequence, Prepend, Replace (String pattern), Strip.
// `where` names the file for error messages; unsupported types raise ModelError.
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& spec, const std::string& where);

}  // namespace hypic
