// The server's counters, gauges and histograms, rendered as Prometheus text for GET /metrics.
// Thread-safe: connections and the engine thread record into it concurrently.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace hypic::serve {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  // Lines of a Prometheus histogram named `name`.
  void render(const std::string& name, const std::string& help, std::string& out) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative); the last is +Inf
  double sum_ = 0;
  uint64_t n_ = 0;
};

class Metrics {
 public:
  Metrics();
  void request(const std::string& endpoint, int status);
  void prompt(int64_t prompt_tokens, int64_t computed_tokens, int64_t block_hits, int64_t block_misses, double ttft_s);
  void completion_tokens(int64_t n);
  void inter_token(double seconds);
  void cancelled();
  // One chunk of an admitted prompt ran (`tokens` of it).
  void prefill_chunk(int64_t tokens);
  // Running generations waited `seconds` between two decode steps because a prompt chunk ran between them.
  void decode_stall(double seconds);
  // Gauges read when rendering (queue depth, running sessions, memory).
  void add_gauge(std::string name, std::string help, std::function<double()> read);
  std::string render() const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  uint64_t prompt_tokens_ = 0, computed_tokens_ = 0, completion_tokens_ = 0, block_hits_ = 0, block_misses_ = 0,
           cancelled_ = 0, prefill_chunks_ = 0, prefill_chunk_tokens_ = 0;
  Histogram ttft_, inter_token_, decode_stall_;
  struct Gauge {
    std::string name, help;
    std::function<double()> read;
  };
  std::vector<Gauge> gauges_;
};

// Resident memory of this process in bytes (/proc/self/statm), 0 where unavailable.
double resident_bytes();

}  // namespace hypic::serve
