#include "sdk/runtime.h"

#include <filesystem>

#include "runtime/backends.h"
#include "runtime/text/tokenizer_fingerprint.h"
#include "runtime/error.h"
#include "runtime/regular_file.h"

namespace hypic::sdk {
namespace fs = std::filesystem;

std::unique_ptr<Runtime> Runtime::open(const RuntimeOptions& options) {
  std::unique_ptr<Runtime> rt(new Runtime());
  rt->options_ = options;
  const Device device = resolve_device(options.device);
  rt->backend_ = options.random_weights
                     ? random_backend(ModelConfig::load((fs::path(options.model_dir) / "config.json").string()),
                                      options.seed, device)
                     : open_backend(options.model_dir, device);
  rt->tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::from_file((fs::path(options.model_dir) / "tokenizer.json").string()));
  rt->chat_ = load_chat_format(options.model_dir, options.chat_template_file);
  EngineOptions eo;
  eo.seam_width = options.seam_width;
  eo.cache_budget_bytes = options.cache_bytes;
  eo.tokenizer_fingerprint = rt->tokenizer_fingerprint();
  eo.tiers.host_budget_bytes = options.host_cache_bytes;
  eo.tiers.codec = options.cache_format;
  eo.verify_hits_rate = options.verify_hits_rate;
  eo.warm_up_rows = options.warm_up_rows >= 0 ? options.warm_up_rows : (device == Device::Cuda ? 8192 : 0);
  if (!options.cache_dir.empty()) {
    rt->cache_dir_ = CacheDir::open(options.cache_dir, static_cast<int64_t>(options.disk_cache_bytes));
    eo.tiers.disk = rt->cache_dir_;
  }
  rt->engine_ = std::make_unique<Engine>(*rt->backend_, options.mode, eo);
  rt->stop_ids_ = chat_stop_ids(*rt->chat_, *rt->tokenizer_, options.model_dir);
  return rt;
}

Runtime::~Runtime() = default;

std::string Runtime::tokenizer_fingerprint() const { return hypic::tokenizer_fingerprint(*tokenizer_); }

}  // namespace hypic::sdk
