// The real Qwen3 tokenizer: encode any valid UTF-8 (ids must be in the vocabulary), decode any ids.
#include <cstdlib>
#include <vector>

#include "runtime/error.h"
#include "runtime/text/tokenizer.h"
#include "runtime/text/utf8.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const hypic::Tokenizer tok = [] {
    const char* dir = std::getenv("HYPIC_QWEN3_TOKENIZER_DIR");
    return hypic::Tokenizer::from_file(std::string(dir ? dir : HYPIC_QWEN3_TOKENIZER_DIR) + "/tokenizer.json");
  }();
  const std::string_view text = hypic::fuzz::as_text(data, size);
  try {
    const std::vector<int> ids = tok.encode(text);
    if (hypic::utf8::find_invalid(text) != std::string::npos) __builtin_trap();  // must have been refused
    for (int id : ids)
      if (id < 0 || static_cast<size_t>(id) >= tok.vocab_size()) __builtin_trap();
    tok.decode(ids);
  } catch (const hypic::InvalidArgument&) {
    if (hypic::utf8::find_invalid(text) == std::string::npos) __builtin_trap();  // valid text was refused
  }
  // The same bytes read as little-endian ids (some out of range: those must be refused, not read).
  std::vector<int> ids(size / 4);
  for (size_t i = 0; i < ids.size(); ++i)
    ids[i] = static_cast<int>(data[4 * i] | data[4 * i + 1] << 8 | data[4 * i + 2] << 16 | uint32_t(data[4 * i + 3]) << 24) %
             static_cast<int>(tok.vocab_size() + 64);
  try {
    tok.decode(ids, size % 2 == 0);
  } catch (const hypic::InvalidArgument&) {
  }
  return 0;
}
