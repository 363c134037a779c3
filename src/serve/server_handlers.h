// Internal to the server: the route handlers (server.cpp registers them; generation lives in
// server_generate.cpp, admin endpoints in server_admin.cpp). One instance per Server, called
// concurrently from httplib's threads.
#pragma once

#include <atomic>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "serve/api/errors.h"
#include "serve/guard.h"
#include "serve/job.h"
#include "serve/prepare_job.h"
#include "serve/responses.h"
#include "serve/server.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace vlmd::serve {

class Server::Handlers {
 public:
  explicit Handlers(Server* s) : s_(*s) {}

  void Register(httplib::Server& http);
  void RegisterAdmin(httplib::Server& http);

 private:
  enum class Kind { kInvoke, kChat };
  struct Call {  // one generation request in flight
    Kind kind;
    std::string route;          // HTTP path
    Clock::time_point t0;
    std::string remote_addr;
    Client client;
    std::shared_ptr<ModelHost> model;
    api::GenerationRequest request;
    std::vector<std::string> image_hashes;  // SHA-256 of the encoded images (audit)
    const char* allowlist_decision = "none";
    PreparedJob prepared;
    std::shared_ptr<Job> job;
    ReplyContext reply;
    std::unique_ptr<policy::StreamFilter> filter;  // nullptr: no word filter
    std::string sent_text;       // streamed text so far (after the filter)
    bool include_usage = false;  // chat stream_options.include_usage
  };

  void Generate(Kind kind, const httplib::Request& req, httplib::Response& res);
  // Picks the host for call->request.model (a model, a split route or a tier route).
  std::optional<api::ApiError> Resolve(Call* call);
  void Reply(Call& call, httplib::Response& res);
  void Stream(std::shared_ptr<Call> call, httplib::Response& res);
  // The job's result with the word filter applied to its text (non-streaming replies).
  JobResult Filtered(Call& call);
  // One audit line for the call; `r` is null for a request that failed before generating.
  Status AuditCall(const Call& call, int status, const JobResult* r, const std::string& error);
  void Observe(const std::string& route, int status, Clock::time_point t0);
  std::string NextId() { return "req-" + std::to_string(next_id_.fetch_add(1) + 1); }

  Server& s_;
  std::atomic<uint64_t> next_id_{0};
};

void SendError(httplib::Response& res, const api::ApiError& e);
double SecondsSince(Clock::time_point t0);

}  // namespace vlmd::serve
