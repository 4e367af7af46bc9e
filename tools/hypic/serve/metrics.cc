#include "tools/hypic/serve/metrics.h"

#include <cstdio>
#include <fstream>
#include <unistd.h>

namespace hypic::serve {

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++n_;
}

namespace {

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace

void Histogram::render(const std::string& name, const std::string& help, std::string& out) const {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    out += name + "_bucket{le=\"" + num(bounds_[i]) + "\"} " + std::to_string(cum) + "\n";
  }
  cum += counts_.back();
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(cum) + "\n";
  out += name + "_sum " + num(sum_) + "\n" + name + "_count " + std::to_string(n_) + "\n";
}

Metrics::Metrics()
    : ttft_({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}),
      inter_token_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}),
      decode_stall_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}) {}

void Metrics::request(const std::string& endpoint, int status) {
  std::lock_guard<std::mutex> l(mu_);
  ++requests_[{endpoint, status}];
}

void Metrics::prompt(int64_t prompt_tokens, int64_t computed_tokens, int64_t block_hits, int64_t block_misses,
                     double ttft_s) {
  std::lock_guard<std::mutex> l(mu_);
  prompt_tokens_ += static_cast<uint64_t>(prompt_tokens);
  computed_tokens_ += static_cast<uint64_t>(computed_tokens);
  block_hits_ += static_cast<uint64_t>(block_hits);
  block_misses_ += static_cast<uint64_t>(block_misses);
  ttft_.observe(ttft_s);
}

void Metrics::completion_tokens(int64_t n) {
  std::lock_guard<std::mutex> l(mu_);
  completion_tokens_ += static_cast<uint64_t>(n);
}

void Metrics::inter_token(double seconds) {
  std::lock_guard<std::mutex> l(mu_);
  inter_token_.observe(seconds);
}

void Metrics::cancelled() {
  std::lock_guard<std::mutex> l(mu_);
  ++cancelled_;
}

void Metrics::prefill_chunk(int64_t tokens) {
  std::lock_guard<std::mutex> l(mu_);
  ++prefill_chunks_;
  prefill_chunk_tokens_ += static_cast<uint64_t>(tokens);
}

void Metrics::decode_stall(double seconds) {
  std::lock_guard<std::mutex> l(mu_);
  decode_stall_.observe(seconds);
}

void Metrics::add_gauge(std::string name, std::string help, std::function<double()> read) {
  std::lock_guard<std::mutex> l(mu_);
  gauges_.push_back({std::move(name), std::move(help), std::move(read)});
}

std::string Metrics::render() const {
  std::lock_guard<std::mutex> l(mu_);
  std::string out;
  out += "# HELP hypic_requests_total HTTP requests by endpoint and status.\n# TYPE hypic_requests_total counter\n";
  for (auto& [k, n] : requests_)
    out += "hypic_requests_total{endpoint=\"" + k.first + "\",status=\"" + std::to_string(k.second) + "\"} " +
           std::to_string(n) + "\n";
  auto counter = [&](const char* name, const char* help, uint64_t v) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " counter\n" + name + " " +
           std::to_string(v) + "\n";
  };
  counter("hypic_prompt_tokens_total", "Prompt tokens of admitted requests.", prompt_tokens_);
  counter("hypic_computed_tokens_total", "Prompt tokens run through the model (the rest came from the cache).",
          computed_tokens_);
  counter("hypic_completion_tokens_total", "Generated tokens.", completion_tokens_);
  counter("hypic_cache_block_hits_total", "Prompt blocks served from the segment cache.", block_hits_);
  counter("hypic_cache_block_misses_total", "Cacheable prompt blocks that were computed.", block_misses_);
  counter("hypic_cancelled_total", "Requests stopped because the client went away.", cancelled_);
  counter("hypic_prefill_chunks_total", "Chunks of admitted prompts run between decode steps (--prefill-chunk).",
          prefill_chunks_);
  counter("hypic_prefill_chunk_tokens_total", "Prompt tokens run by those chunks.", prefill_chunk_tokens_);
  ttft_.render("hypic_ttft_seconds", "Time from a request's arrival to its first token.", out);
  inter_token_.render("hypic_inter_token_seconds", "Time between consecutive generated tokens of a request.", out);
  decode_stall_.render("hypic_decode_stall_seconds",
                       "Time running generations waited between two decode steps while a prompt chunk ran.", out);
  for (auto& g : gauges_)
    out += "# HELP " + g.name + " " + g.help + "\n# TYPE " + g.name + " gauge\n" + g.name + " " + num(g.read()) + "\n";
  return out;
}

double resident_bytes() {
  std::ifstream f("/proc/self/statm");
  double size = 0, resident = 0;
  if (!(f >> size >> resident)) return 0;
  return resident * static_cast<double>(sysconf(_SC_PAGESIZE));
}

}  // namespace hypic::serve
