#include "tools/hypic/serve/http_server.h"

#include <sys/socket.h>

#include <cerrno>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <mutex>
#include <random>
#include <thread>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "runtime/segment_key.h"
#include "tools/hypic/serve/chat_service.h"
#include "tools/hypic/serve/web_page.h"

namespace hypic::serve {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using net::awaitable;
using net::use_awaitable;
using Request = http::request<http::string_body>;

bool api_key_matches(const std::vector<std::string>& keys, const std::string& presented) {
  const Sha256Digest p = sha256(presented);
  bool any = false;
  for (const std::string& k : keys) {
    const Sha256Digest d = sha256(k);
    unsigned diff = 0;
    for (size_t i = 0; i < d.size(); ++i) diff |= static_cast<unsigned>(d[i] ^ p[i]);
    any |= diff == 0;  // every key is compared, whichever matches
  }
  return any;
}

namespace {

// Events of one job, handed from the engine thread to the connection's strand.
class Channel : public std::enable_shared_from_this<Channel> {
 public:
  explicit Channel(net::any_io_executor ex) : timer_(ex) { timer_.expires_at(net::steady_timer::time_point::max()); }
  void push(JobEvent e) {
    {
      std::lock_guard<std::mutex> l(mu_);
      q_.push_back(std::move(e));
    }
    wake();
  }
  // Wakes next() without an event (the client went away).
  void wake() {
    net::post(timer_.get_executor(), [self = shared_from_this()] { self->timer_.cancel(); });
  }
  // The next event, or none when woken without one.
  awaitable<std::optional<JobEvent>> next() {
    for (int round = 0; round < 2; ++round) {
      {
        std::lock_guard<std::mutex> l(mu_);
        if (!q_.empty()) {
          JobEvent e = std::move(q_.front());
          q_.pop_front();
          co_return e;
        }
      }
      if (round == 0) {
        boost::system::error_code ec;
        co_await timer_.async_wait(net::redirect_error(use_awaitable, ec));
      }
    }
    co_return std::nullopt;
  }

 private:
  std::mutex mu_;
  std::deque<JobEvent> q_;
  net::steady_timer timer_;
};

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string random_id(const char* prefix) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}();
  char buf[40];
  std::snprintf(buf, sizeof buf, "%016llx%04llx", static_cast<unsigned long long>(salt),
                static_cast<unsigned long long>(counter.fetch_add(1) & 0xffff));
  return std::string(prefix) + buf;
}

}  // namespace

struct HttpServer::Impl {
  ServerOptions opt;
  sdk::Runtime& rt;
  Scheduler& scheduler;
  Metrics& metrics;
  net::io_context ioc;
  tcp::acceptor acceptor{ioc};
  int64_t created = unix_now();

  Impl(ServerOptions o, sdk::Runtime& r, Scheduler& s, Metrics& m) : opt(std::move(o)), rt(r), scheduler(s), metrics(m) {}

  // ---- responses ----
  static http::response<http::string_body> make(const Request& req, http::status st, std::string body,
                                                const char* type) {
    http::response<http::string_body> res{st, req.version()};
    res.set(http::field::server, "hypic");
    res.set(http::field::content_type, type);
    res.keep_alive(req.keep_alive());
    res.body() = std::move(body);
    res.prepare_payload();
    return res;
  }
  static http::response<http::string_body> json(const Request& req, int status, const Json& j) {
    return make(req, static_cast<http::status>(status), j.dump(-1, ' ', false, Json::error_handler_t::replace),
                "application/json");
  }

  awaitable<void> listener() {
    for (;;) {
      boost::system::error_code ec;
      tcp::socket sock = co_await acceptor.async_accept(net::make_strand(ioc), net::redirect_error(use_awaitable, ec));
      if (ec) {
        if (!acceptor.is_open()) co_return;
        continue;
      }
      auto ex = sock.get_executor();
      net::co_spawn(ex, connection(std::move(sock)), net::detached);
    }
  }

  awaitable<void> connection(tcp::socket sock) {
    beast::tcp_stream stream(std::move(sock));
    beast::flat_buffer buf;
    for (;;) {
      http::request_parser<http::string_body> parser;
      parser.body_limit(opt.max_body_bytes);
      parser.header_limit(64 * 1024);
      stream.expires_after(std::chrono::seconds(120));
      boost::system::error_code ec;
      co_await http::async_read(stream, buf, parser, net::redirect_error(use_awaitable, ec));
      if (ec == http::error::body_limit) {
        Request head;
        head.version(11);
        auto res = json(head, 413, error_body(ApiError(413, "invalid_request_error",
                                                          "the request body is larger than " +
                                                              std::to_string(opt.max_body_bytes) + " bytes")));
        res.keep_alive(false);
        metrics.request("body_limit", 413);
        co_await http::async_write(stream, res, net::redirect_error(use_awaitable, ec));
        // Read (and drop) what the client is still sending, a bounded amount for a bounded time: closing
        // with unread input would reset the connection before the client reads the 413.
        stream.socket().shutdown(tcp::socket::shutdown_send, ec);
        std::vector<char> sink(64 * 1024);
        size_t drained = 0;
        stream.expires_after(std::chrono::seconds(5));
        while (!ec && drained < (size_t{64} << 20)) {
          drained += co_await stream.async_read_some(net::buffer(sink), net::redirect_error(use_awaitable, ec));
        }
        break;
      }
      if (ec) break;  // closed, timed out or not HTTP
      stream.expires_never();  // generation may take long; disconnects are noticed by the watcher
      Request req = parser.release();
      bool keep = false;
      try {
        keep = co_await handle(stream, req);
      } catch (const std::exception&) {
        keep = false;  // a failed write: the client is gone
      }
      if (!keep) break;
    }
    boost::system::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
  }

  // Writes a whole response; returns whether the connection stays open.
  awaitable<bool> send(beast::tcp_stream& stream, http::response<http::string_body> res, std::string endpoint) {
    metrics.request(endpoint, res.result_int());
    const bool keep = res.keep_alive();
    co_await http::async_write(stream, res, use_awaitable);
    co_return keep;
  }

  std::string tenant_of(const Request& req, const std::string& cache_salt) const {
    std::string t;
    if (!opt.api_keys.empty()) {
      auto it = req.find(http::field::authorization);
      if (it != req.end()) t = sha256_hex(std::string(it->value()));
    }
    if (!cache_salt.empty()) t += "/salt:" + sha256_hex(cache_salt);
    return t;
  }

  bool authorized(const Request& req) const {
    if (opt.api_keys.empty()) return true;
    auto it = req.find(http::field::authorization);
    if (it == req.end()) return false;
    const std::string v(it->value());
    if (v.size() < 7 || v.compare(0, 7, "Bearer ") != 0) return false;
    return api_key_matches(opt.api_keys, v.substr(7));
  }

  void check_model(const std::string& model) const {
    if (!model.empty() && model != opt.model_name)
      throw ApiError(404, "not_found_error", "the model '" + model + "' does not exist (this server serves '" +
                                                opt.model_name + "')", "model");
  }

  awaitable<bool> handle(beast::tcp_stream& stream, const Request& req) {
    std::string path(req.target());
    if (auto q = path.find('?'); q != std::string::npos) path.resize(q);
    const bool get = req.method() == http::verb::get, post = req.method() == http::verb::post;
    // (C++20 allows no co_await inside a handler: the error response is built there and sent after.)
    std::optional<http::response<http::string_body>> res;
    std::string endpoint = path;
    try {
      if (get && path == "/health") {
        res = json(req, 200, {{"status", "ok"}});
      } else if (get && (path == "/" || path == "/index.html")) {
        res = make(req, http::status::ok, std::string(web_page_html()), "text/html; charset=utf-8");
      } else if (!authorized(req)) {
        throw ApiError(401, "authentication_error", "a valid API key is required (Authorization: Bearer KEY)");
      } else if (get && path == "/v1/models") {
        res = json(req, 200, models_json(opt.model_name, created));
      } else if (get && path == "/v1/templates") {
        res = json(req, 200, opt.templates.list_json());
      } else if (get && path == "/metrics") {
        res = make(req, http::status::ok, metrics.render(), "text/plain; version=0.0.4");
      } else if (post && path == "/tokenize") {
        res = json(req, 200, tokenize(parse_body(req.body())));
      } else if (post && path == "/detokenize") {
        res = json(req, 200, detokenize(parse_body(req.body())));
      } else if (post && path == "/v1/chat/completions") {
        ChatRequest cr = parse_chat_request(parse_body(req.body()), opt.sampling);
        check_model(cr.model);
        check_token_ids(cr.sampling, rt.config().vocab_size);
        PreparedPrompt prompt = cr.template_ref
                                    ? prepare_template_chat(cr, opt.templates, rt.chat_format(), rt.tokenizer())
                                    : prepare_chat(cr, rt.chat_format(), rt.tokenizer());
        co_return co_await chat(stream, req, std::move(cr), std::move(prompt));
      } else if (post && path == "/v1/completions") {
        CompletionRequest cr = parse_completion_request(parse_body(req.body()), opt.sampling);
        check_model(cr.model);
        check_token_ids(cr.sampling, rt.config().vocab_size);
        PreparedPrompt prompt = prepare_completion(cr, rt.tokenizer());
        co_return co_await completion(stream, req, std::move(cr), std::move(prompt));
      } else {
        throw ApiError(404, "not_found_error", "no endpoint " + std::string(req.method_string()) + " " + path);
      }
    } catch (const ApiError& e) {
      res = json(req, e.status, error_body(e));
      if (e.status == 401) res->set(http::field::www_authenticate, "Bearer");
      if (e.status == 404 && e.param.empty()) endpoint = "unknown";
    } catch (const Error& e) {
      res = json(req, 400, error_body(bad_request(e.what())));
    }
    co_return co_await send(stream, std::move(*res), endpoint);
  }

  Json tokenize(const Json& body) {
    std::vector<int> ids;
    if (body.contains("messages") && body.contains("hypic")) {
      // The prompt a chat request naming a template gets: its blocks in order.
      const ChatRequest cr = parse_chat_request(body);
      for (const PromptBlock& b : prepare_template_chat(cr, opt.templates, rt.chat_format(), rt.tokenizer()).blocks)
        ids.insert(ids.end(), b.tokens.begin(), b.tokens.end());
    } else if (body.contains("messages")) {
      ChatRequest cr = parse_chat_request(body);
      RenderOptions ro;
      ro.enable_thinking = cr.enable_thinking;
      try {
        ids = rt.tokenizer().encode(rt.chat_format().render(cr.conversation, ro).text);
      } catch (const Error& e) {
        throw bad_request(e.what(), "messages");
      }
    } else {
      auto it = body.find("prompt");
      if (it == body.end() || !it->is_string()) throw bad_request("'prompt' must be a string (or give 'messages')", "prompt");
      ids = rt.tokenizer().encode(it->get<std::string>());
    }
    return Json{{"tokens", ids}, {"count", ids.size()}, {"max_model_len", rt.config().max_positions}};
  }

  Json detokenize(const Json& body) {
    auto it = body.find("tokens");
    if (it == body.end() || !it->is_array()) throw bad_request("'tokens' must be an array of token ids", "tokens");
    std::vector<int> ids;
    const int64_t V = static_cast<int64_t>(rt.tokenizer().vocab_size());
    for (const Json& x : *it) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= V)
        throw bad_request("'tokens' holds a value that is not a token id in [0, " + std::to_string(V) + ")", "tokens");
      ids.push_back(static_cast<int>(x.get<int64_t>()));
    }
    return Json{{"prompt", rt.tokenizer().decode(ids)}};
  }

  // The wire form of sampled tokens' logprobs: each id's text is its bytes as the tokenizer decodes it alone.
  std::vector<LogprobEntry> entries(const std::vector<sdk::TokenLogprob>& lps) const {
    std::vector<LogprobEntry> out;
    for (const sdk::TokenLogprob& lp : lps) {
      LogprobEntry e;
      const int one[1] = {lp.id};
      e.token = rt.tokenizer().decode(one);
      e.logprob = lp.logprob;
      for (const auto& [id, v] : lp.top) {
        const int alt[1] = {id};
        e.top.emplace_back(rt.tokenizer().decode(alt), v);
      }
      out.push_back(std::move(e));
    }
    return out;
  }

  // Submits the job and watches the socket: a client that closes it cancels the job.
  std::shared_ptr<Channel> start(beast::tcp_stream& stream, std::shared_ptr<Job> job, net::any_io_executor ex) {
    auto ch = std::make_shared<Channel>(ex);
    job->sink = [ch](JobEvent e) { ch->push(std::move(e)); };
    scheduler.submit(job);
    watch(stream.socket(), job, ch);
    return ch;
  }

  static void watch(tcp::socket& sock, std::shared_ptr<Job> job, std::shared_ptr<Channel> ch) {
    sock.async_wait(tcp::socket::wait_read, [&sock, job, ch](boost::system::error_code ec) {
      if (ec == net::error::operation_aborted) return;  // the response is done
      if (!ec) {
        char c;
        const ssize_t n = ::recv(sock.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n > 0) return;  // bytes of a next request, not a disconnect
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
          watch(sock, job, ch);  // a spurious wake-up: the connection is still there
          return;
        }
      }
      job->cancel = true;
      ch->wake();
    });
  }

  // The SSE response: headers now, then one chunk per event.
  struct Sse {
    beast::tcp_stream& stream;
    bool started = false;
    awaitable<void> begin(const Request& req) {
      http::response<http::empty_body> res{http::status::ok, req.version()};
      res.set(http::field::server, "hypic");
      res.set(http::field::content_type, "text/event-stream");
      res.set(http::field::cache_control, "no-cache");
      res.chunked(true);
      res.keep_alive(false);
      http::response_serializer<http::empty_body> sr{res};
      co_await http::async_write_header(stream, sr, use_awaitable);
      started = true;
    }
    awaitable<void> event(const std::string& data) {
      co_await net::async_write(stream, http::make_chunk(net::buffer(data)), use_awaitable);
    }
    awaitable<void> end() {
      const std::string done = "data: [DONE]\n\n";
      co_await event(done);
      co_await net::async_write(stream, http::make_chunk_last(), use_awaitable);
    }
  };

  awaitable<bool> chat(beast::tcp_stream& stream, const Request& req, ChatRequest cr, PreparedPrompt prompt) {
    const std::string model = opt.model_name;
    auto job = std::make_shared<Job>();
    job->tenant = tenant_of(req, cr.cache_salt);
    job->blocks = std::move(prompt.blocks);
    job->block_kinds = prompt.kinds;
    job->block_ids = prompt.ids;
    job->sampling = cr.sampling;
    const std::string id = random_id("chatcmpl-");
    const int64_t created = unix_now();
    ReplyAssembler reply(rt.chat_format(), prompt, "call_" + id.substr(9, 12) + "_");
    auto ch = start(stream, job, co_await net::this_coro::executor);
    // However this response ends (a failed write included), the job stops and the watch ends.
    struct Unwatch {
      beast::tcp_stream& s;
      Job& job;
      ~Unwatch() {
        job.cancel = true;
        boost::system::error_code ig;
        s.socket().cancel(ig);
      }
    } unwatch{stream, *job};
    Sse sse{stream};
    PromptReport report;
    const bool want_lp = cr.sampling.logprobs >= 0;
    std::vector<LogprobEntry> all_lp, unsent_lp;  // the reply's; those not yet in a streamed chunk
    // A streamed chunk's logprobs: the entries not yet sent, or null (none asked for, or none pending).
    auto chunk_lp = [&]() -> Json {
      if (!want_lp || unsent_lp.empty()) return nullptr;
      Json j = chat_logprobs_json(unsent_lp);
      unsent_lp.clear();
      return j;
    };
    for (;;) {
      std::optional<JobEvent> ev = co_await ch->next();
      if (!ev) continue;  // woken by the watcher: the job ends with Done(cancelled)
      if (want_lp && !ev->logprobs.empty()) {
        std::vector<LogprobEntry> e = entries(ev->logprobs);
        all_lp.insert(all_lp.end(), e.begin(), e.end());
        unsent_lp.insert(unsent_lp.end(), e.begin(), e.end());
      }
      if (ev->kind == JobEvent::Kind::Error) {
        ApiError e(ev->status, ev->status == 400 ? "invalid_request_error" : "server_error", ev->message);
        if (!sse.started) co_return co_await send(stream, json(req, e.status, error_body(e)), std::string("/v1/chat/completions"));
        co_await sse.event(sse_event(error_body(e)));
        co_await sse.end();
        metrics.request("/v1/chat/completions", e.status);
        co_return false;
      }
      if (ev->kind == JobEvent::Kind::Prompt) {
        report = ev->prompt;
        if (cr.stream) {
          co_await sse.begin(req);
          // (GCC 12 miscompiles string literals inside a co_await expression: values are built before.)
          const std::string first = sse_event(chat_chunk_json(id, created, model, Json{{"role", "assistant"}, {"content", ""}}));
          co_await sse.event(first);
        }
        continue;
      }
      if (ev->kind == JobEvent::Kind::Text) {
        std::vector<Json> deltas = reply.push(ev->text);
        if (cr.stream)
          for (auto& d : deltas) {
            const std::string chunk = sse_event(chat_chunk_json(id, created, model, d, {}, chunk_lp()));
            co_await sse.event(chunk);
          }
        continue;
      }
      // Done
      if (job->cancel.load() && ev->finish == "cancelled") {  // nobody is listening
        metrics.request("/v1/chat/completions", 499);
        co_return false;
      }
      std::vector<Json> deltas = reply.finish();
      const ChatReply r = reply.reply(ev->finish);
      const Json usage = usage_json(report, ev->completion_tokens);
      if (!cr.stream) {
        const Json lp = want_lp ? chat_logprobs_json(all_lp) : Json(nullptr);
        auto res = json(req, 200, chat_completion_json(id, created, model, r, usage, lp));
        res.keep_alive(false);
        co_return co_await send(stream, std::move(res), std::string("/v1/chat/completions"));
      }
      for (auto& d : deltas) {
        const std::string chunk = sse_event(chat_chunk_json(id, created, model, d, {}, chunk_lp()));
        co_await sse.event(chunk);
      }
      const std::string last = sse_event(chat_chunk_json(id, created, model, Json::object(), r.finish_reason, chunk_lp()));
      co_await sse.event(last);
      if (cr.include_usage) {
        const std::string u = sse_event(usage_chunk_json(id, created, model, "chat.completion.chunk", usage));
        co_await sse.event(u);
      }
      co_await sse.end();
      metrics.request("/v1/chat/completions", 200);
      co_return false;
    }
  }

  awaitable<bool> completion(beast::tcp_stream& stream, const Request& req, CompletionRequest cr,
                              PreparedPrompt prompt) {
    const std::string model = opt.model_name;
    auto job = std::make_shared<Job>();
    job->tenant = tenant_of(req, cr.cache_salt);
    job->blocks = std::move(prompt.blocks);
    job->block_kinds = prompt.kinds;
    job->sampling = cr.sampling;
    const std::string id = random_id("cmpl-");
    const int64_t created = unix_now();
    auto ch = start(stream, job, co_await net::this_coro::executor);
    // However this response ends (a failed write included), the job stops and the watch ends.
    struct Unwatch {
      beast::tcp_stream& s;
      Job& job;
      ~Unwatch() {
        job.cancel = true;
        boost::system::error_code ig;
        s.socket().cancel(ig);
      }
    } unwatch{stream, *job};
    Sse sse{stream};
    PromptReport report;
    std::string text;
    const bool want_lp = cr.sampling.logprobs >= 0;
    std::vector<LogprobEntry> all_lp;
    size_t lp_offset = 0;  // text bytes before the entries a streamed chunk carries
    for (;;) {
      std::optional<JobEvent> ev = co_await ch->next();
      if (!ev) continue;
      std::vector<LogprobEntry> new_lp;
      if (want_lp && !ev->logprobs.empty()) {
        new_lp = entries(ev->logprobs);
        all_lp.insert(all_lp.end(), new_lp.begin(), new_lp.end());
      }
      // A streamed chunk's logprobs: this event's entries, their offsets counted on from the last chunk's.
      auto chunk_lp = [&]() -> Json {
        if (!want_lp || new_lp.empty()) return nullptr;
        Json j = completion_logprobs_json(new_lp, lp_offset);
        for (const LogprobEntry& e : new_lp) lp_offset += e.token.size();
        return j;
      };
      if (ev->kind == JobEvent::Kind::Error) {
        ApiError e(ev->status, ev->status == 400 ? "invalid_request_error" : "server_error", ev->message);
        if (!sse.started) co_return co_await send(stream, json(req, e.status, error_body(e)), std::string("/v1/completions"));
        co_await sse.event(sse_event(error_body(e)));
        co_await sse.end();
        co_return false;
      }
      if (ev->kind == JobEvent::Kind::Prompt) {
        report = ev->prompt;
        if (cr.stream) co_await sse.begin(req);
        continue;
      }
      if (ev->kind == JobEvent::Kind::Text) {
        text += ev->text;
        if (cr.stream) {
          const std::string chunk = sse_event(completion_chunk_json(id, created, model, ev->text, {}, chunk_lp()));
          co_await sse.event(chunk);
        }
        continue;
      }
      if (job->cancel.load() && ev->finish == "cancelled") {
        metrics.request("/v1/completions", 499);
        co_return false;
      }
      const std::string fr = finish_reason(ev->finish, false);
      const Json usage = usage_json(report, ev->completion_tokens);
      if (!cr.stream) {
        const Json lp = want_lp ? completion_logprobs_json(all_lp, 0) : Json(nullptr);
        auto res = json(req, 200, completion_json(id, created, model, text, fr, usage, lp));
        res.keep_alive(false);
        co_return co_await send(stream, std::move(res), std::string("/v1/completions"));
      }
      const std::string last = sse_event(completion_chunk_json(id, created, model, std::string(), fr, chunk_lp()));
      co_await sse.event(last);
      if (cr.include_usage) {
        const std::string u = sse_event(usage_chunk_json(id, created, model, "text_completion", usage));
        co_await sse.event(u);
      }
      co_await sse.end();
      metrics.request("/v1/completions", 200);
      co_return false;
    }
  }
};

HttpServer::HttpServer(ServerOptions opt, sdk::Runtime& rt, Scheduler& scheduler, Metrics& metrics)
    : impl_(std::make_unique<Impl>(std::move(opt), rt, scheduler, metrics)) {}

HttpServer::~HttpServer() = default;

int HttpServer::listen() {
  Impl& m = *impl_;
  boost::system::error_code ec;
  const auto addr = net::ip::make_address(m.opt.host, ec);
  if (ec) throw InvalidArgument("--host '" + m.opt.host + "' is not an IP address");
  const tcp::endpoint ep(addr, static_cast<unsigned short>(m.opt.port));
  const std::string where = m.opt.host + ":" + std::to_string(m.opt.port);
  m.acceptor.open(ep.protocol(), ec);
  if (!ec) m.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) m.acceptor.bind(ep, ec);
  if (!ec) m.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) throw IoError("cannot listen on " + where + ": " + ec.message());
  return m.acceptor.local_endpoint().port();
}

void HttpServer::run(bool handle_signals) {
  Impl& m = *impl_;
  net::co_spawn(m.ioc, m.listener(), net::detached);
  net::signal_set signals(m.ioc);
  if (handle_signals) {
    signals.add(SIGINT);
    signals.add(SIGTERM);
    signals.async_wait([this](boost::system::error_code ec, int) {
      if (!ec) stop();
    });
  }
  std::vector<std::thread> threads;
  for (int i = 1; i < std::max(1, m.opt.io_threads); ++i) threads.emplace_back([&m] { m.ioc.run(); });
  m.ioc.run();
  for (auto& t : threads) t.join();
}

void HttpServer::stop() {
  Impl& m = *impl_;
  net::post(m.ioc, [&m] {
    boost::system::error_code ig;
    m.acceptor.close(ig);
    m.ioc.stop();
  });
}

}  // namespace hypic::serve
