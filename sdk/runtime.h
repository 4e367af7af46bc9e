// hypic::sdk::Runtime — what an application opens once: the model, its tokenizer and chat format,
// and the caching engine with its segment store.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "runtime/engine.h"
#include "runtime/hybrid_model.h"
#include "runtime/text/chat_format.h"
#include "runtime/text/tokenizer.h"

namespace hypic::sdk {

struct RuntimeOptions {
  std::string model_dir;  // config.json, safetensors, tokenizer.json, tokenizer_config.json
  CacheMode mode = CacheMode::Hypic;
  int64_t seam_width = 8;
  size_t cache_bytes = size_t{1} << 30;
};

class Runtime {
 public:
  // Throws hypic::Error subclasses naming the file that is missing or malformed.
  static std::unique_ptr<Runtime> open(const RuntimeOptions& options);

  const HybridModel& model() const { return *model_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const ChatFormat& chat_format() const { return *chat_; }
  Engine& engine() { return *engine_; }
  const RuntimeOptions& options() const { return options_; }
  // Ids that end an assistant turn (the tokenizer config's eos, <|im_end|>, <|endoftext|>).
  const std::vector<int>& stop_ids() const { return stop_ids_; }
  std::string tokenizer_fingerprint() const;

 private:
  Runtime() = default;
  RuntimeOptions options_;
  std::unique_ptr<HybridModel> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ChatFormat> chat_;
  std::unique_ptr<Engine> engine_;
  std::vector<int> stop_ids_;
};

}  // namespace hypic::sdk
