// The HTTP side of `hypic serve`: Boost.Beast over Asio, one coroutine per connection on a few I/O
// threads (each connection on its own strand), routing OpenAI's endpoints and hypic's own. Model work
// never runs here: generation requests become scheduler jobs whose events come back through a channel,
// and a client that disconnects while its job waits or runs cancels it.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "sdk/runtime.h"
#include "tools/hypic/serve/metrics.h"
#include "tools/hypic/serve/scheduler.h"
#include "tools/hypic/serve/template_catalog.h"

namespace hypic::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (the one bound is printed)
  std::vector<std::string> api_keys;  // empty: no authentication
  size_t max_body_bytes = size_t{4} << 20;  // larger bodies are refused with 413
  int io_threads = 4;
  std::string model_name;  // what /v1/models lists and requests may name
  TemplateCatalog templates;  // --templates: what requests may name in {"hypic": {"template": ...}}
  SamplingDefaults sampling;  // what a request's omitted sampling fields take (--generation-config)
};

class HttpServer {
 public:
  HttpServer(ServerOptions opt, sdk::Runtime& rt, Scheduler& scheduler, Metrics& metrics);
  ~HttpServer();
  // Binds and listens; IoError naming host:port when that fails. Returns the bound port.
  int listen();
  // Serves until stop() (or SIGINT/SIGTERM when `handle_signals`).
  void run(bool handle_signals);
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Constant-time check of a presented API key against the configured ones (compares fixed-size digests,
// so neither the content nor the length of a key leaks through timing).
bool api_key_matches(const std::vector<std::string>& keys, const std::string& presented);

}  // namespace hypic::serve
