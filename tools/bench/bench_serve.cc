// Load and trace-replay client for `hypic serve` (docs/serving.md), on plain loopback sockets.
//
//   load:  --clients C concurrent clients send --requests N chat requests in all (streamed, each a system
//          prompt, a few retrieved chunks and a question); every response must be a 200 whose stream
//          ends with [DONE]. Prints one JSON object: failures, requests/s, TTFT and latency percentiles,
//          and the server's resident memory before and after (from /metrics). Exit status 1 on any failure.
//   trace: a RAG trace replayed open-loop: Poisson arrivals at --rate requests/s for --requests requests;
//          each has the shared system and tool-docs text, --chunks-min..--chunks-max chunks drawn from a
//          pool of --pool chunks with Zipf(--zipf) popularity (each chunk a content part marked `cache`),
//          and a fresh question. Prints TTFT p50/p90/p99 (client-side: request sent to first content
//          token), the server's computed/prompt tokens and failures. Run it once per server --mode
//          (full, prefix, hypic) and rate to find the sustainable QPS at a TTFT SLO.
// Both modes also print the inter-token latency (client-side gaps between consecutive streamed content
// pieces of a reply): over all gaps, and over the gaps during which another request was waiting for its
// first token (its prompt queued or being admitted: what chunked admission, --prefill-chunk, bounds),
// and the server's decode stalls from /metrics (hypic_decode_stall_seconds over the run).
//
// Usage: hypic_bench_serve --url http://127.0.0.1:8000 [--mode load|trace] [--clients 64] [--requests 256]
//        [--rate 2] [--pool 200] [--chunks-min 8] [--chunks-max 16] [--chunk-words 120] [--zipf 1.0]
//        [--system-words 150] [--tools-words 300]
//        [--max-tokens 16] [--api-key K] [--seed 1]
#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/common/options.h"

namespace {

using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string url = "http://127.0.0.1:8000", mode = "load", api_key;
  int clients = 64, requests = 256, pool = 200, chunks_min = 8, chunks_max = 16, chunk_words = 120, max_tokens = 16;
  int system_words = 150, tools_words = 300;
  double rate = 2.0, zipf = 1.0;
  uint64_t seed = 1;
  uint64_t request_seed = 0;  // 0: seed + 1
};

struct Result {
  bool ok = false;
  int status = 0;
  double ttft_s = -1, total_s = 0;
  Clock::time_point sent, first;          // request sent; first content piece (sent when none came)
  std::vector<Clock::time_point> pieces;  // arrival of every content piece
  int64_t prompt_tokens = 0, computed_tokens = 0, completion_tokens = 0;
  std::string error;
};

struct Target {
  std::string host;
  int port = 80;
};

Target parse_url(const std::string& url) {
  Target t;
  std::string rest = url.rfind("http://", 0) == 0 ? url.substr(7) : url;
  if (auto s = rest.find('/'); s != std::string::npos) rest.resize(s);
  if (auto c = rest.rfind(':'); c != std::string::npos) {
    t.port = std::stoi(rest.substr(c + 1));
    rest.resize(c);
  }
  t.host = rest;
  return t;
}

// One HTTP/1.1 request on a fresh connection; `on_data` sees the de-chunked body as it arrives.
template <class OnData>
int http_request(const Target& t, const std::string& method, const std::string& path, const std::string& key,
                 const std::string& body, OnData on_data, std::string* error) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(t.host.c_str(), std::to_string(t.port).c_str(), &hints, &res) != 0 || !res) {
    *error = "cannot resolve " + t.host;
    return 0;
  }
  const int fd = socket(res->ai_family, res->ai_socktype, res->ai_protocol);
  if (fd < 0 || connect(fd, res->ai_addr, res->ai_addrlen) != 0) {
    freeaddrinfo(res);
    if (fd >= 0) close(fd);
    *error = "cannot connect";
    return 0;
  }
  freeaddrinfo(res);
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: " + t.host + "\r\nConnection: close\r\n";
  if (!key.empty()) req += "Authorization: Bearer " + key + "\r\n";
  if (!body.empty()) req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  req += "\r\n" + body;
  for (size_t sent = 0; sent < req.size();) {
    const ssize_t n = send(fd, req.data() + sent, req.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) {
      close(fd);
      *error = "send failed";
      return 0;
    }
    sent += static_cast<size_t>(n);
  }
  std::string in, pending;
  bool head = true, chunked = false;
  int status = 0;
  size_t chunk_left = 0;
  bool in_size = true;
  char buf[16384];
  for (;;) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    in.append(buf, static_cast<size_t>(n));
    if (head) {
      const size_t e = in.find("\r\n\r\n");
      if (e == std::string::npos) continue;
      const std::string h = in.substr(0, e);
      status = std::atoi(h.c_str() + 9);
      std::string lower = h;
      std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
      chunked = lower.find("transfer-encoding: chunked") != std::string::npos;
      in.erase(0, e + 4);
      head = false;
    }
    if (!chunked) {
      on_data(in);
      in.clear();
      continue;
    }
    // De-chunk what is complete.
    for (;;) {
      if (in_size) {
        const size_t e = in.find("\r\n");
        if (e == std::string::npos) break;
        chunk_left = std::strtoul(in.substr(0, e).c_str(), nullptr, 16);
        in.erase(0, e + 2);
        in_size = false;
        if (chunk_left == 0) break;
      }
      if (in.size() < chunk_left + 2) break;
      on_data(in.substr(0, chunk_left));
      in.erase(0, chunk_left + 2);
      in_size = true;
    }
  }
  close(fd);
  return status;
}

std::string random_words(std::mt19937_64& rng, int n) {
  static const char* syll[] = {"ka", "lo", "mi", "ra", "te", "vu", "sen", "dor", "pal", "qui", "ne", "sto"};
  std::string s;
  for (int i = 0; i < n; ++i) {
    if (i) s += (i % 15 == 14) ? ". " : " ";
    const int k = 1 + static_cast<int>(rng() % 3);
    for (int j = 0; j < k; ++j) s += syll[rng() % 12];
  }
  return s + ".";
}

struct Workload {
  std::string system, tools_text;
  std::vector<std::string> pool;
  std::vector<double> cdf;  // Zipf popularity over the pool
};

Workload make_workload(const Options& o) {
  std::mt19937_64 rng(o.seed);
  Workload w;
  w.system = "You answer questions using the documents. " + random_words(rng, o.system_words);
  w.tools_text = "Tools you may mention: " + random_words(rng, o.tools_words);
  for (int i = 0; i < o.pool; ++i) w.pool.push_back("Document " + std::to_string(i) + ": " + random_words(rng, o.chunk_words));
  double sum = 0;
  for (int i = 0; i < o.pool; ++i) w.cdf.push_back(sum += 1.0 / std::pow(i + 1.0, o.zipf));
  for (auto& c : w.cdf) c /= sum;
  return w;
}

std::string make_request(const Options& o, const Workload& w, std::mt19937_64& rng) {
  const int k = o.chunks_min + static_cast<int>(rng() % static_cast<uint64_t>(o.chunks_max - o.chunks_min + 1));
  std::vector<int> picked;
  std::uniform_real_distribution<double> u(0, 1);
  while (static_cast<int>(picked.size()) < std::min(k, o.pool)) {
    const int i = static_cast<int>(std::lower_bound(w.cdf.begin(), w.cdf.end(), u(rng)) - w.cdf.begin());
    if (std::find(picked.begin(), picked.end(), i) == picked.end()) picked.push_back(i);
  }
  Json parts = Json::array();
  for (int i : picked) parts.push_back({{"type", "text"}, {"text", w.pool[std::min<size_t>(i, w.pool.size() - 1)]}, {"cache", true}});
  parts.push_back({{"type", "text"}, {"text", "Question " + std::to_string(rng() % 100000) + ": what do the documents say?"}});
  Json body = {{"messages", {{{"role", "system"}, {"content", w.system + "\n" + w.tools_text}}, {{"role", "user"}, {"content", parts}}}},
               {"max_tokens", o.max_tokens},
               {"temperature", 0},
               {"ignore_eos", true},  // every reply --max-tokens long
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  return body.dump();
}

Result run_one(const Target& t, const Options& o, const std::string& body) {
  Result r;
  const auto t0 = Clock::now();
  r.sent = r.first = t0;
  std::string events, error;
  bool done = false;
  r.status = http_request(t, "POST", "/v1/chat/completions", o.api_key, body, [&](const std::string& piece) {
    events += piece;
    size_t e;
    while ((e = events.find("\n\n")) != std::string::npos) {
      const std::string ev = events.substr(0, e);
      events.erase(0, e + 2);
      if (ev.rfind("data: ", 0) != 0) continue;
      if (ev == "data: [DONE]") {
        done = true;
        continue;
      }
      const Json j = Json::parse(ev.substr(6), nullptr, false);
      if (j.is_discarded()) continue;
      if (j.contains("error")) error = j["error"].value("message", "error");
      if (j.contains("usage") && j["usage"].is_object()) {
        r.prompt_tokens = j["usage"].value("prompt_tokens", 0);
        r.computed_tokens = j["usage"]["hypic"].value("computed_tokens", 0);
        r.completion_tokens = j["usage"].value("completion_tokens", 0);
      }
      if (j.contains("choices") && !j["choices"].empty()) {
        const Json& d = j["choices"][0]["delta"];
        const bool content = d.contains("content") && d["content"].is_string() && !d["content"].get<std::string>().empty();
        const auto now = Clock::now();
        if (content) r.pieces.push_back(now);
        if (r.ttft_s < 0 && (content || !j["choices"][0]["finish_reason"].is_null())) {
          r.ttft_s = std::chrono::duration<double>(now - t0).count();
          r.first = now;
        }
      }
    }
  }, &error);
  r.total_s = std::chrono::duration<double>(Clock::now() - t0).count();
  r.ok = r.status == 200 && done && error.empty();
  r.error = r.ok ? "" : (error.empty() ? "status " + std::to_string(r.status) + (done ? "" : ", no [DONE]") : error);
  return r;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5))];
}

// Inter-token gaps in ms: every gap between consecutive content pieces of a reply, and those during which
// another request was waiting for its first token (sent before the gap ended, first token after it began).
void inter_token_gaps(const std::vector<Result>& results, std::vector<double>& all, std::vector<double>& admitting) {
  for (size_t j = 0; j < results.size(); ++j) {
    const Result& r = results[j];
    if (!r.ok) continue;
    for (size_t k = 1; k < r.pieces.size(); ++k) {
      const Clock::time_point a = r.pieces[k - 1], b = r.pieces[k];
      const double ms = std::chrono::duration<double, std::milli>(b - a).count();
      all.push_back(ms);
      for (size_t i = 0; i < results.size(); ++i)
        if (i != j && results[i].sent < b && results[i].first > a) {
          admitting.push_back(ms);
          break;
        }
    }
  }
}

double server_metric(const Target& t, const Options& o, const std::string& name) {
  std::string text, error;
  http_request(t, "GET", "/metrics", o.api_key, "", [&](const std::string& p) { text += p; }, &error);
  const size_t at = text.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::atof(text.c_str() + at + name.size() + 2);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("hypic_bench_serve: load test and RAG trace replay against hypic serve", "hypic_bench_serve");
  hypic::tools::configure(app, false);
  app.add_option("--url", o.url, "server base URL");
  app.add_option("--mode", o.mode, "load or trace")->check(CLI::IsMember({"load", "trace"}));
  app.add_option("--api-key", o.api_key, "API key to send");
  hypic::tools::add_int(app, "--clients", o.clients, "load: concurrent clients", 1, 4096);
  hypic::tools::add_int(app, "--requests", o.requests, "requests in all", 1, 10000000);
  app.add_option("--rate", o.rate, "trace: mean arrivals per second (Poisson)")->check(CLI::PositiveNumber);
  hypic::tools::add_int(app, "--pool", o.pool, "chunks in the pool", 1, 1000000);
  hypic::tools::add_int(app, "--chunks-min", o.chunks_min, "fewest chunks per request", 0, 1000);
  hypic::tools::add_int(app, "--chunks-max", o.chunks_max, "most chunks per request", 0, 1000);
  hypic::tools::add_int(app, "--chunk-words", o.chunk_words, "words per chunk", 1, 100000);
  hypic::tools::add_int(app, "--system-words", o.system_words, "words of the shared system prompt", 1, 1000000);
  hypic::tools::add_int(app, "--tools-words", o.tools_words, "words of the shared tool docs", 1, 1000000);
  app.add_option("--zipf", o.zipf, "Zipf exponent of chunk popularity")->check(CLI::NonNegativeNumber);
  hypic::tools::add_int(app, "--max-tokens", o.max_tokens, "tokens generated per request", 1, 100000);
  hypic::tools::add_u64(app, "--seed", o.seed, "workload seed (the system text, tools and the document pool)");
  hypic::tools::add_u64(app, "--request-seed", o.request_seed,
                        "seed of the requests drawn from the pool (0: --seed + 1); vary it to replay new requests "
                        "over the same documents");
  hypic::tools::parse_or_exit(app, argc, argv);
  if (o.chunks_min > o.chunks_max) {
    std::fprintf(stderr, "hypic_bench_serve: --chunks-min exceeds --chunks-max\n");
    return 2;
  }
  const Target t = parse_url(o.url);
  const Workload w = make_workload(o);
  std::mt19937_64 rng(o.request_seed != 0 ? o.request_seed : o.seed + 1);
  std::vector<std::string> bodies;
  for (int i = 0; i < o.requests; ++i) bodies.push_back(make_request(o, w, rng));
  const double rss_before = server_metric(t, o, "hypic_resident_memory_bytes");
  const double stall_n0 = server_metric(t, o, "hypic_decode_stall_seconds_count");
  const double stall_s0 = server_metric(t, o, "hypic_decode_stall_seconds_sum");
  const double chunks0 = server_metric(t, o, "hypic_prefill_chunks_total");

  std::vector<Result> results(bodies.size());
  const auto t0 = Clock::now();
  if (o.mode == "load") {
    std::atomic<size_t> next{0};
    std::vector<std::thread> threads;
    for (int c = 0; c < o.clients; ++c)
      threads.emplace_back([&] {
        for (size_t i; (i = next.fetch_add(1)) < bodies.size();) results[i] = run_one(t, o, bodies[i]);
      });
    for (auto& th : threads) th.join();
  } else {
    std::exponential_distribution<double> gap(o.rate);
    std::vector<std::thread> threads;
    auto at = Clock::now();
    for (size_t i = 0; i < bodies.size(); ++i) {
      std::this_thread::sleep_until(at);
      threads.emplace_back([&, i] { results[i] = run_one(t, o, bodies[i]); });
      at += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap(rng)));
    }
    for (auto& th : threads) th.join();
  }
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();

  std::vector<double> ttft, total;
  int failed = 0;
  int64_t prompt = 0, computed = 0, completion = 0;
  std::string first_error;
  for (auto& r : results) {
    if (!r.ok) {
      ++failed;
      if (first_error.empty()) first_error = r.error;
      continue;
    }
    ttft.push_back(r.ttft_s * 1000);
    total.push_back(r.total_s * 1000);
    prompt += r.prompt_tokens;
    computed += r.computed_tokens;
    completion += r.completion_tokens;
  }
  std::vector<double> itl, itl_admitting;
  inter_token_gaps(results, itl, itl_admitting);
  auto spread = [](const std::vector<double>& v) {
    return Json{{"n", v.size()}, {"p50", percentile(v, 0.5)}, {"p99", percentile(v, 0.99)}, {"max", percentile(v, 1.0)}};
  };
  const double stalls = server_metric(t, o, "hypic_decode_stall_seconds_count") - stall_n0;
  const double stall_s = server_metric(t, o, "hypic_decode_stall_seconds_sum") - stall_s0;
  Json out = {{"mode", o.mode},
              {"requests", o.requests},
              {"failed", failed},
              {"wall_s", wall},
              {"requests_per_s", static_cast<double>(o.requests - failed) / wall},
              {"ttft_ms", {{"p50", percentile(ttft, 0.5)}, {"p90", percentile(ttft, 0.9)}, {"p99", percentile(ttft, 0.99)}}},
              {"latency_ms", {{"p50", percentile(total, 0.5)}, {"p90", percentile(total, 0.9)}, {"max", percentile(total, 1.0)}}},
              {"itl_ms", spread(itl)},
              {"itl_during_admission_ms", spread(itl_admitting)},
              {"server_decode_stalls", {{"n", stalls},
                                        {"mean_ms", stalls > 0 ? 1000 * stall_s / stalls : 0},
                                        {"prefill_chunks", server_metric(t, o, "hypic_prefill_chunks_total") - chunks0}}},
              {"prompt_tokens", prompt},
              {"computed_tokens", computed},
              {"completion_tokens", completion},
              {"completion_tokens_per_s", static_cast<double>(completion) / wall},
              {"server_rss_mb_before", rss_before / 1048576.0},
              {"server_rss_mb_after", server_metric(t, o, "hypic_resident_memory_bytes") / 1048576.0}};
  if (o.mode == "load") out["clients"] = o.clients;
  else out["rate"] = o.rate;
  if (failed) out["first_error"] = first_error;
  std::printf("%s\n", out.dump(2).c_str());
  return failed ? 1 : 0;
}
