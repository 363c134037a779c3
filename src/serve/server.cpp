// Server: HTTP routes over cpp-httplib, authentication, request -> job -> reply (see server.h).
#include "serve/server.h"

#include <httplib.h>
#include <openssl/crypto.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "serve/api/errors.h"
#include "serve/responses.h"

namespace vlmd::serve {
namespace {

using nlohmann::json;

void SendError(httplib::Response& res, const api::ApiError& e) {
  res.status = e.http_status;
  res.set_content(api::ErrorBody(e), "application/json");
}

double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Constant-time comparison of the bearer token with the configured key.
bool KeyMatches(const std::string& header, const std::string& key) {
  static constexpr std::string_view kBearer = "Bearer ";
  if (header.size() != kBearer.size() + key.size() || header.compare(0, kBearer.size(), kBearer) != 0) {
    return false;
  }
  return CRYPTO_memcmp(header.data() + kBearer.size(), key.data(), key.size()) == 0;
}

}  // namespace

// The route handlers; one instance per Server, called concurrently from httplib's threads.
class Server::Handlers {
 public:
  explicit Handlers(Server* s) : s_(*s) {}

  void Register(httplib::Server& http);

 private:
  enum class Kind { kInvoke, kChat };
  struct Call {  // one generation request in flight
    Kind kind;
    std::string route;
    Clock::time_point t0;
    std::shared_ptr<ModelHost> model;
    api::GenerationRequest request;
    PreparedJob prepared;
    std::shared_ptr<Job> job;
    ReplyContext reply;
    bool include_usage = false;  // chat stream_options.include_usage
  };

  void Generate(Kind kind, const httplib::Request& req, httplib::Response& res);
  void Reply(Call& call, httplib::Response& res);
  void Stream(std::shared_ptr<Call> call, httplib::Response& res);
  void Observe(const std::string& route, int status, Clock::time_point t0);
  std::string NextId() { return "req-" + std::to_string(next_id_.fetch_add(1) + 1); }

  Server& s_;
  std::atomic<uint64_t> next_id_{0};
};

void Server::Handlers::Observe(const std::string& route, int status, Clock::time_point t0) {
  const std::string code = std::to_string(status);
  s_.metrics_->requests.With({route, code}).Inc();
  s_.metrics_->request_duration.With({route, code}).Observe(SecondsSince(t0));
}

void Server::Handlers::Register(httplib::Server& http) {
  http.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  http.Get("/ready", [this](const httplib::Request&, httplib::Response& res) {
    auto m = s_.model();
    if (!m) {
      SendError(res, {503, "server_error", "not_ready", "the model is still loading"});
      return;
    }
    res.set_content(json{{"status", "ready"}, {"model", m->spec().name}}.dump(), "application/json");
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    s_.metrics_->UpdateProcessMemory();
    res.set_content(s_.registry_->Render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    json data = json::array();
    if (auto m = s_.model()) {
      json entry{{"id", m->spec().name}, {"object", "model"}, {"created", 0},
                 {"owned_by", "vlmd"},   {"model_hash", m->hash()},
                 {"vision", m->engine().vision() != nullptr}, {"demo", m->spec().demo}};
      if (m->spec().demo) {
        entry["description"] = "demo model with RANDOM weights: its answers are gibberish";
      }
      data.push_back(entry);
    }
    res.set_content(json{{"object", "list"}, {"data", data}}.dump(), "application/json");
  });
  http.Post("/v1/vlm/invoke", [this](const httplib::Request& req, httplib::Response& res) {
    Generate(Kind::kInvoke, req, res);
  });
  http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    Generate(Kind::kChat, req, res);
  });
}

void Server::Handlers::Generate(Kind kind, const httplib::Request& req, httplib::Response& res) {
  auto call = std::make_shared<Call>();
  call->kind = kind;
  call->route = kind == Kind::kInvoke ? "/v1/vlm/invoke" : "/v1/chat/completions";
  call->t0 = Clock::now();
  call->reply.id = NextId();
  call->reply.created = UnixNow();
  res.set_header("X-Request-Id", call->reply.id);
  auto fail = [&](const api::ApiError& e) {
    SendError(res, e);
    Observe(call->route, e.http_status, call->t0);
    spdlog::info("{} {} -> {} {}: {}", call->reply.id, call->route, e.http_status, e.code, e.message);
  };
  call->model = s_.model();
  if (!call->model) return fail({503, "server_error", "not_ready", "the model is still loading"});
  const api::RequestLimits& limits = s_.options_.limits;
  Result<api::GenerationRequest> parsed = InvalidArgumentError("unreachable");
  if (kind == Kind::kChat) {
    parsed = api::ParseChatCompletion(req.body, limits);
  } else if (req.is_multipart_form_data()) {
    std::vector<std::string> images;
    for (const auto& [name, part] : req.files) {
      if (name == "image") images.push_back(part.content);
    }
    const std::string request_json = req.has_file("request") ? req.get_file_value("request").content : "";
    parsed = api::ParseInvokeMultipart(request_json, std::move(images), limits);
  } else {
    const std::string ct = req.get_header_value("Content-Type");
    if (!ct.empty() && ct.rfind("application/json", 0) != 0) {
      return fail({415, "invalid_request_error", "unsupported_media_type",
                   "send application/json or multipart/form-data, not " + ct});
    }
    parsed = api::ParseInvokeJson(req.body, limits);
  }
  if (!parsed.ok()) return fail(api::FromStatus(parsed.status()));
  call->request = std::move(*parsed);
  const ModelSpec& spec = call->model->spec();
  if (!call->request.model.empty() && call->request.model != spec.name) {
    return fail({404, "invalid_request_error", "model_not_found",
                 "model '" + call->request.model + "' is not served here (serving '" + spec.name + "')"});
  }
  if (call->request.sampling.top_logprobs > 0) {
    return fail({400, "invalid_request_error", "unsupported_parameter",
                 "top_logprobs is not supported yet (logprobs of the chosen tokens are)"});
  }
  if (kind == Kind::kChat) {
    const json body = json::parse(req.body, nullptr, false);
    call->include_usage = body.is_object() && body.contains("stream_options") &&
                          body["stream_options"].is_object() &&
                          body["stream_options"].value("include_usage", false);
  }
  auto prepared = PrepareJob(*call->model, call->request, s_.options_.prepare);
  if (!prepared.ok()) return fail(api::FromStatus(prepared.status()));
  call->prepared = std::move(*prepared);
  call->reply.model = spec.name;
  call->reply.model_hash = call->model->hash();
  call->reply.logprobs = call->request.sampling.logprobs;
  call->job = std::make_shared<Job>(call->prepared.input);
  Status submitted = call->model->scheduler().Submit(call->job);
  if (!submitted.ok()) {
    if (submitted.code() == StatusCode::kResourceExhausted) {
      res.set_header("Retry-After", "1");
      return fail({429, "rate_limit_error", "queue_full", submitted.message()});
    }
    return fail(api::FromStatus(submitted));
  }
  if (call->request.stream) {
    Stream(call, res);
  } else {
    Reply(*call, res);
  }
}

void Server::Handlers::Reply(Call& call, httplib::Response& res) {
  // The scheduler enforces the deadline; the extra grace only guards against a stuck engine.
  const Clock::time_point give_up = call.prepared.input.deadline + std::chrono::seconds(5);
  while (!call.job->Wait(give_up, nullptr)) {
    if (Clock::now() >= give_up) {
      call.job->Cancel();
      SendError(res, {504, "server_error", "deadline_exceeded", "the request did not finish in time"});
      Observe(call.route, 504, call.t0);
      return;
    }
  }
  if (!call.job->status().ok()) {
    const api::ApiError e = api::FromStatus(call.job->status());
    SendError(res, e);
    Observe(call.route, e.http_status, call.t0);
    spdlog::info("{} {} -> {} {}", call.reply.id, call.route, e.http_status, e.message);
    return;
  }
  const JobResult& r = call.job->result();
  call.reply.latency_ms = SecondsSince(call.t0) * 1000.0;
  const auto& tok = call.model->engine().tokenizer();
  res.set_content(call.kind == Kind::kInvoke ? InvokeReply(call.reply, call.prepared, r, tok)
                                             : ChatReply(call.reply, r, tok),
                  "application/json");
  Observe(call.route, 200, call.t0);
  spdlog::info("{} {} -> 200 prompt={} image={} completion={} {:.1f} ms", call.reply.id, call.route,
               r.prompt_tokens, r.image_tokens, r.tokens.size(), call.reply.latency_ms);
}

// Server-sent events: `data: <json>\n\n` per chunk, then `data: [DONE]`. A write that fails
// (client gone) cancels the job, which frees its batch slot at the next decode step.
void Server::Handlers::Stream(std::shared_ptr<Call> call, httplib::Response& res) {
  res.set_header("Cache-Control", "no-cache");
  auto started = std::make_shared<bool>(false);
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, call, started](size_t, httplib::DataSink& sink) {
        auto send = [&](const std::string& payload) {
          const std::string ev = "data: " + payload + "\n\n";
          return sink.write(ev.data(), ev.size());
        };
        if (!*started) {
          *started = true;
          if (call->kind == Kind::kChat &&
              !send(ChatChunk(call->reply, "assistant", "", std::nullopt))) {
            call->job->Cancel();
            return false;
          }
        }
        std::string text;
        const bool over = call->job->Wait(Clock::now() + std::chrono::milliseconds(200), &text);
        if (!text.empty()) {
          const std::string payload =
              call->kind == Kind::kChat ? ChatChunk(call->reply, std::nullopt, text, std::nullopt)
                                        : json{{"text", text}}.dump(-1, ' ', false,
                                                                   json::error_handler_t::replace);
          if (!send(payload)) {
            call->job->Cancel();
            return false;
          }
        }
        if (!over) {
          if (!sink.is_writable()) {
            call->job->Cancel();
            return false;
          }
          return true;
        }
        call->reply.latency_ms = SecondsSince(call->t0) * 1000.0;
        if (!call->job->status().ok()) {
          // Headers (200) are already out: the error travels as an event, as OpenAI does.
          const api::ApiError e = api::FromStatus(call->job->status());
          send(api::ErrorBody(e));
          spdlog::info("{} {} (stream) -> error {} {}", call->reply.id, call->route, e.http_status,
                       e.message);
        } else {
          const JobResult& r = call->job->result();
          spdlog::info("{} {} (stream) -> 200 prompt={} image={} completion={} {:.1f} ms",
                       call->reply.id, call->route, r.prompt_tokens, r.image_tokens, r.tokens.size(),
                       call->reply.latency_ms);
          if (call->kind == Kind::kChat) {
            send(ChatChunk(call->reply, std::nullopt, std::nullopt, OpenAiFinishReason(r.finish_reason)));
            if (call->include_usage) send(ChatUsageChunk(call->reply, r));
          } else {
            send(InvokeReply(call->reply, call->prepared, r, call->model->engine().tokenizer()));
          }
        }
        send("[DONE]");
        sink.done();
        return true;
      },
      [this, call](bool success) {
        if (!success) call->job->Cancel();
        Observe(call->route, success ? 200 : 499, call->t0);
      });
}

Server::Server(ServerOptions options)
    : options_(std::move(options)),
      registry_(std::make_unique<obs::Registry>()),
      metrics_(std::make_unique<ServerMetrics>(registry_.get())),
      http_(std::make_unique<httplib::Server>()),
      handlers_(std::make_unique<Handlers>(this)) {
  httplib::Server& http = *http_;
  const int threads = options_.http_threads < 1 ? 1 : options_.http_threads;
  http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  http.set_payload_max_length(options_.max_body_bytes);
  http.set_read_timeout(options_.read_timeout_s, 0);
  http.set_write_timeout(options_.write_timeout_s, 0);
  http.set_keep_alive_timeout(options_.keep_alive_s);
  http.set_keep_alive_max_count(100);
  const std::string key = options_.api_key;
  http.set_pre_routing_handler([key](const httplib::Request& req, httplib::Response& res) {
    if (key.empty() || req.path.rfind("/v1/", 0) != 0) return httplib::Server::HandlerResponse::Unhandled;
    if (KeyMatches(req.get_header_value("Authorization"), key)) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    SendError(res, {401, "invalid_request_error", "invalid_api_key",
                    "missing or wrong API key (send Authorization: Bearer <key>)"});
    return httplib::Server::HandlerResponse::Handled;
  });
  // httplib's own rejections (404, 413 body too large, 400 malformed request line or multipart)
  // come without a body: give them the JSON error shape.
  http.set_error_handler(httplib::Server::HandlerWithResponse(
      [](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    api::ApiError e{res.status, res.status >= 500 ? "server_error" : "invalid_request_error", "", ""};
    switch (res.status) {
      case 404: e.code = "not_found"; e.message = "no route " + req.method + " " + req.path; break;
      case 405: e.code = "method_not_allowed"; e.message = "method not allowed"; break;
      case 413: e.code = "payload_too_large"; e.message = "request body too large"; break;
      case 414: e.code = "uri_too_long"; e.message = "request URI too long"; break;
      default: e.code = "bad_request"; e.message = "malformed HTTP request"; break;
    }
    SendError(res, e);
    return httplib::Server::HandlerResponse::Handled;
  }));
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    spdlog::error("handler exception: {}", what);
    SendError(res, {500, "server_error", "internal_error", "internal error"});
  });
  handlers_->Register(http);
}

Server::~Server() { Stop(); }

Status Server::Start() {
  if (options_.port == 0) {
    port_ = http_->bind_to_any_port(options_.host);
  } else {
    port_ = http_->bind_to_port(options_.host, options_.port) ? options_.port : -1;
  }
  if (port_ <= 0) {
    return Status(StatusCode::kUnavailable, "cannot listen on " + options_.host + ":" +
                                                std::to_string(options_.port));
  }
  listener_ = std::thread([this] { http_->listen_after_bind(); });
  spdlog::info("vlmd listening on http://{}:{}", options_.host, port_);
  return Status::Ok();
}

void Server::SetModel(std::shared_ptr<ModelHost> model) {
  std::lock_guard<std::mutex> lock(model_mu_);
  model_ = std::move(model);
}

std::shared_ptr<ModelHost> Server::model() const {
  std::lock_guard<std::mutex> lock(model_mu_);
  return model_;
}

void Server::Stop() {
  if (stopped_.exchange(true)) return;
  http_->stop();
  if (listener_.joinable()) listener_.join();
  SetModel(nullptr);
}

}  // namespace vlmd::serve
