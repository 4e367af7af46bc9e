// Pre-tokenizers of the Hugging Face tokenizer.json format: split normalized text into the pieces
// that the model (BPE) encodes independently.
#pragma once
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace hypic {

// Pieces point into the caller's text or into `storage` (for pieces a pre-tokenizer had to rewrite,
// e.g. a prepended space); storage must outlive the pieces.
struct PieceBuffer {
  std::vector<std::string_view> pieces;
  std::deque<std::string> storage;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces buf.pieces by their splits (in order). Pieces are valid UTF-8; empty pieces are dropped.
  virtual void split(PieceBuffer& buf) const = 0;
  // True if this step leaves byte-level pieces for the model (ByteLevel is the last step).
  virtual bool ends_byte_level() const { return false; }
};

// Builds the pre-tokenizer of a tokenizer.json "pre_tokenizer" object (null gives nullptr).
// Supported: Split (Regex or String pattern, every behavior, invert), ByteLevel, Digits, Sequence.
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& spec, const std::string& where);

}  // namespace hypic
