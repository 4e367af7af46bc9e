// Decoders of the Hugging Face tokenizer.json format: turn the model's token strings back into text.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace hypic {

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Rewrites the per-token strings in place. Strings may hold raw bytes that are not UTF-8 yet
  // (byte-level output); the caller joins them and repairs invalid UTF-8 at the end.
  virtual void decode(std::vector<std::string>& tokens) const = 0;
  // True for a plain ByteLevel decoder: token -> bytes is then a fixed per-token map.
  virtual bool is_byte_level() const { return false; }
};

// Builds the decoder of a tokenizer.json "decoder" object (null gives nullptr: tokens are joined as is).
// Supported: ByteLevel, ByteFallback, Fuse, Replace (String pattern), Strip, Sequence.
std::unique_ptr<Decoder> make_decoder(const nlohmann::json& spec, const std::string& where);

}  // namespace hypic
