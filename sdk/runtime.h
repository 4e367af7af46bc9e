// hypic::sdk::Runtime — what an application opens once: the model on a device (CPU or CUDA), its
// tokenizer and chat format, and the caching engine with its segment store.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/engine.h"
#include "runtime/text/chat_format.h"
#include "runtime/text/tokenizer.h"
#include "sdk/cache_dir.h"

namespace hypic::sdk {

struct RuntimeOptions {
  std::string model_dir;  // config.json, safetensors, tokenizer.json, tokenizer_config.json
  // cpu | cuda | auto: CUDA where this build has the backend and a GPU is present, else the CPU.
  std::string device = "auto";
  CacheMode mode = CacheMode::Hypic;
  int64_t seam_width = 8;
  size_t cache_bytes = size_t{1} << 30;  // segment store budget, in bytes of the device's memory
  // Tiers below the device (docs/cache_tiers.md): host memory for evicted entries (0: none), and a
  // cache directory whose entries outlive the process ("" : none; disk budget 0: unlimited). Entries
  // below the device are stored as records of `cache_format` (runtime/entry_codec.h: fp32, bf16, compact).
  size_t host_cache_bytes = 0;
  std::string cache_dir;
  size_t disk_cache_bytes = 0;
  EntryCodecOptions cache_format;
  // A fraction of the requests with cache hits recomputed in full mode and compared (HitCheck).
  double verify_hits_rate = 0;
  // A Jinja chat template file to use instead of the model directory's own (its family is detected
  // from its text, as for the model's).
  std::string chat_template_file;
  // Random weights of model_dir's config.json shape instead of its checkpoint (timing production shapes
  // without one; CUDA only). The tokenizer and chat template still come from model_dir.
  bool random_weights = false;
  uint64_t seed = 0;
  // EngineOptions::warm_up_rows: throwaway passes at open so that the first requests of each size do not
  // load the GPU's GEMM kernels. -1: 8192 rows on CUDA, none on the CPU (hypic serve: its prefill chunk).
  int64_t warm_up_rows = -1;
};

class Runtime {
 public:
  // Throws hypic::Error subclasses naming the file that is missing or malformed, or the device that is
  // not available.
  static std::unique_ptr<Runtime> open(const RuntimeOptions& options);
  ~Runtime();

  Backend& backend() { return *backend_; }
  const ModelConfig& config() const { return backend_->config(); }
  Device device() const { return backend_->device(); }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const ChatFormat& chat_format() const { return *chat_; }
  Engine& engine() { return *engine_; }
  // The disk tier (null without options.cache_dir).
  CacheDir* cache_dir() { return cache_dir_.get(); }
  const RuntimeOptions& options() const { return options_; }
  // Ids that end an assistant turn: the chat format's stop tokens and the tokenizer config's eos.
  const std::vector<int>& stop_ids() const { return stop_ids_; }
  std::string tokenizer_fingerprint() const;

 private:
  Runtime() = default;
  RuntimeOptions options_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ChatFormat> chat_;
  std::shared_ptr<CacheDir> cache_dir_;
  std::unique_ptr<Engine> engine_;
  std::vector<int> stop_ids_;
};

}  // namespace hypic::sdk
