// JSON POSTs to outbound endpoints (see json_post.h).
#include "serve/http/json_post.h"

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "serve/api/image_inputs.h"

namespace vlmd::serve {

Result<JsonEndpoint> ParseJsonEndpoint(std::string_view url) {
  auto parsed = api::internal::ParseHttpUrl(url);
  if (!parsed.ok()) return parsed.status();
  const int port = parsed->port > 0 ? parsed->port : (parsed->scheme == "https" ? 443 : 80);
  const std::string host =
      parsed->host.find(':') != std::string::npos ? "[" + parsed->host + "]" : parsed->host;
  return JsonEndpoint{parsed->scheme + "://" + host + ":" + std::to_string(port),
                      api::internal::RequestPath(url)};
}

namespace {

void Configure(httplib::Client& client, int timeout_s) {
  client.set_connection_timeout(timeout_s, 0);
  client.set_read_timeout(timeout_s, 0);
  client.set_write_timeout(timeout_s, 0);
  client.set_follow_location(false);
  client.enable_server_certificate_verification(true);
  client.set_tcp_nodelay(true);  // head and body are separate writes: no wait for a delayed ACK
}

std::string Outcome(const httplib::Result& res) {
  if (!res) return httplib::to_string(res.error());
  if (res->status < 200 || res->status >= 300) return "HTTP " + std::to_string(res->status);
  return "";
}

}  // namespace

std::string PostJson(const JsonEndpoint& endpoint, const std::string& body, int timeout_s) {
  httplib::Client client(endpoint.base);
  Configure(client, timeout_s);
  return Outcome(client.Post(endpoint.path, body, "application/json"));
}

struct CancellablePoster::InFlight {
  std::mutex mu;
  std::condition_variable done_cv;
  httplib::Client* client = nullptr;  // the post in flight, if any
  bool cancelled = false;
};

CancellablePoster::CancellablePoster(JsonEndpoint endpoint)
    : endpoint_(std::move(endpoint)), state_(std::make_unique<InFlight>()) {}

CancellablePoster::~CancellablePoster() = default;

std::string CancellablePoster::Post(const std::string& body, int timeout_s) {
  httplib::Client client(endpoint_.base);
  Configure(client, timeout_s);
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->cancelled) return "cancelled";
    state_->client = &client;
  }
  // The whole post's bound: a watchdog stops the client at the deadline.
  bool done = false, expired = false;
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> lock(state_->mu);
    if (!state_->done_cv.wait_for(lock, std::chrono::seconds(2 * timeout_s), [&] { return done; })) {
      expired = true;
      client.stop();
    }
  });
  std::string outcome = Outcome(client.Post(endpoint_.path, body, "application/json"));
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    done = true;
    state_->client = nullptr;
  }
  state_->done_cv.notify_all();
  watchdog.join();
  std::lock_guard<std::mutex> lock(state_->mu);
  if (outcome.empty()) return outcome;
  return state_->cancelled ? "cancelled" : expired ? "timeout" : outcome;
}

void CancellablePoster::Cancel() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->cancelled = true;
  if (state_->client != nullptr) state_->client->stop();
}

}  // namespace vlmd::serve
