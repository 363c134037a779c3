// JSON POSTs to outbound endpoints (see json_post.h).
#include "serve/http/json_post.h"

#include <httplib.h>
#include <sys/socket.h>

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

// The post in flight is cut short by shutting its socket down from the other thread: the one
// thing that is safe beside a read or write in progress (httplib's stop() from another thread
// is not: ThreadSanitizer reported its mutex unlocked by the wrong thread). The client keeps
// its connection open (keep-alive) until it is destroyed, after `socket` is cleared, so a
// shutdown never reaches a descriptor number that was closed and reused.
struct CancellablePoster::InFlight {
  std::mutex mu;
  std::condition_variable done_cv;
  int socket = -1;  // the post in flight's connection, once it is connected
  bool cancelled = false;
};

CancellablePoster::CancellablePoster(JsonEndpoint endpoint)
    : endpoint_(std::move(endpoint)), state_(std::make_unique<InFlight>()) {}

CancellablePoster::~CancellablePoster() = default;

std::string CancellablePoster::Post(const std::string& body, int timeout_s) {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (state_->cancelled) return "cancelled";
  }
  httplib::Client client(endpoint_.base);
  Configure(client, timeout_s);
  client.set_keep_alive(true);  // the socket outlives the post: closed with the client, below
  InFlight* state = state_.get();
  client.set_socket_options([state](socket_t sock) {
    int on = 1;  // httplib's default option, which this callback replaces
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    std::lock_guard<std::mutex> lock(state->mu);
    state->socket = sock;
    if (state->cancelled) ::shutdown(sock, SHUT_RDWR);
  });
  // The whole post's bound: a watchdog shuts the connection down at the deadline.
  bool done = false, expired = false;
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> lock(state->mu);
    if (!state->done_cv.wait_for(lock, std::chrono::seconds(2 * timeout_s), [&] { return done; })) {
      expired = true;
      if (state->socket >= 0) ::shutdown(state->socket, SHUT_RDWR);
    }
  });
  std::string outcome = Outcome(client.Post(endpoint_.path, body, "application/json"));
  {
    std::lock_guard<std::mutex> lock(state->mu);
    done = true;
    state->socket = -1;  // before the client (and the socket) goes
  }
  state->done_cv.notify_all();
  watchdog.join();
  std::lock_guard<std::mutex> lock(state->mu);
  if (outcome.empty()) return outcome;
  return state->cancelled ? "cancelled" : expired ? "timeout" : outcome;
}

void CancellablePoster::Cancel() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->cancelled = true;
  if (state_->socket >= 0) ::shutdown(state_->socket, SHUT_RDWR);
}

}  // namespace vlmd::serve
