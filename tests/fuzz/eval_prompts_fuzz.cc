// eval-pic's JSONL prompts file: prompts with string blocks, or a FormatError naming file:line.
#include "runtime/error.h"
#include "runtime/eval_prompts.h"
#include "runtime/text/utf8.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto prompts = hypic::parse_eval_prompts(hypic::fuzz::as_text(data, size), "prompts.jsonl");
    if (prompts.empty()) __builtin_trap();
    for (const auto& p : prompts) {
      if (p.blocks.empty()) __builtin_trap();
      for (const auto& b : p.blocks)
        if (hypic::utf8::find_invalid(b) != std::string::npos) __builtin_trap();
    }
  } catch (const hypic::FormatError&) {
  }
  return 0;
}
