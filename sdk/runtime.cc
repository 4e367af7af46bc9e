#include "sdk/runtime.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "runtime/backends.h"
#include "runtime/error.h"
#include "runtime/regular_file.h"

namespace hypic::sdk {
namespace fs = std::filesystem;

std::unique_ptr<Runtime> Runtime::open(const RuntimeOptions& options) {
  std::unique_ptr<Runtime> rt(new Runtime());
  rt->options_ = options;
  rt->backend_ = open_backend(options.model_dir, resolve_device(options.device));
  rt->tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::from_file((fs::path(options.model_dir) / "tokenizer.json").string()));
  rt->chat_ = load_chat_format(options.model_dir);
  EngineOptions eo;
  eo.seam_width = options.seam_width;
  eo.cache_budget_bytes = options.cache_bytes;
  eo.tokenizer_fingerprint = rt->tokenizer_fingerprint();
  rt->engine_ = std::make_unique<Engine>(*rt->backend_, options.mode, eo);

  std::vector<std::string> names = {"<|im_end|>", "<|endoftext|>"};
  const fs::path cfg = fs::path(options.model_dir) / "tokenizer_config.json";
  if (std::error_code ec; fs::exists(cfg, ec)) {
    const std::string text = read_regular_file(cfg.string(), "tokenizer config");
    try {
      const auto j = nlohmann::json::parse(text);
      if (j.contains("eos_token")) {
        const auto& e = j["eos_token"];
        if (e.is_string()) names.push_back(e.get<std::string>());
        else if (e.is_object() && e.contains("content")) names.push_back(e["content"].get<std::string>());
      }
    } catch (const nlohmann::json::exception& e) {
      throw FormatError("'" + cfg.string() + "' is not valid JSON: " + e.what());
    }
  }
  for (auto& n : names)
    if (auto id = rt->tokenizer_->token_to_id(n))
      if (std::find(rt->stop_ids_.begin(), rt->stop_ids_.end(), *id) == rt->stop_ids_.end()) rt->stop_ids_.push_back(*id);
  return rt;
}

Runtime::~Runtime() = default;

std::string Runtime::tokenizer_fingerprint() const {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(tokenizer_->fingerprint()));
  return buf;
}

}  // namespace hypic::sdk
