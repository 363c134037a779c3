// HttpFront (see http_front.h): accepting and shedding connections, the TLS files, Start and
// Stop. A connection's requests are http_connection.cpp's; HttpFront::Impl is in
// http_front_impl.h.
#include "serve/http/http_front.h"

#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "core/thread_name.h"
#include "serve/http/http_front_impl.h"
#include "serve/http/response_head.h"
#include "serve/http/tls_files.h"

namespace vlmd::serve {
namespace {

using boost::system::error_code;

// At Stop, how long replies already handed to the I/O thread may take to leave.
constexpr std::chrono::milliseconds kStopGrace{5000};
// A shed connection's input is drained this long, and at most this many at once (beyond: closed
// at once), so that shedding stays cheap under a connection flood.
constexpr std::chrono::milliseconds kShedLinger{500};
constexpr size_t kMaxShedLingering = 256;
// Threads of the pool that checks requests' heads (authentication, routing; its queue is
// max_queued_requests).
constexpr int kHeadThreads = 2;
// Threads and queue of the probes' pools (FrontHandler::Lane).
constexpr int kHealthThreads = 2;
constexpr size_t kMaxQueuedHealth = 256;
constexpr int kMetricsThreads = 1;
constexpr size_t kMaxQueuedMetrics = 64;
// At Stop, the longest the handshakes left may take to run out (each ends at its ClientHello).
constexpr std::chrono::seconds kTlsDrainBound{30};
// How long an accept waits before retrying when the process is out of descriptors.
constexpr std::chrono::milliseconds kAcceptRetry{100};

// A shed connection, half-closed after its 503: what the client already sent is read and dropped
// for kShedLinger at most, then it is closed. *count holds how many are lingering.
class ShedLinger : public std::enable_shared_from_this<ShedLinger> {
 public:
  ShedLinger(tcp::socket socket, asio::io_context& io, size_t* count)
      : socket_(std::move(socket)), timer_(io), count_(count) {
    ++*count_;
  }
  ~ShedLinger() { --*count_; }
  void Start() {
    timer_.expires_after(kShedLinger);
    timer_.async_wait([self = shared_from_this()](error_code ec) {
      if (!ec) self->Close();  // cancelled: the client closed first
    });
    Drop();
  }

 private:
  void Drop() {
    socket_.async_read_some(asio::buffer(sink_), [self = shared_from_this()](error_code ec, size_t) {
      if (!ec) return self->Drop();
      self->timer_.cancel();
      self->Close();
    });
  }
  void Close() {
    error_code ignored;
    socket_.close(ignored);
  }

  tcp::socket socket_;
  asio::steady_timer timer_;
  size_t* const count_;
  char sink_[4096];
};

// A TLS context's ClientHello callback: a handshake ends at the client's first message, before
// its key exchange and signature (the expensive part), once the front stops (Stop's last step
// runs out the handshakes queued on the TLS lane on its own thread) or once its connection was
// given up (HandshakeAbandonedIndex: under a flood the lane's queue outlasts the handshake
// deadline). Either way it signed for a connection already closed.
int RefuseStoppedOrAbandonedHandshakes(SSL* ssl, int* alert, void* stopping) {
  const auto* abandoned = static_cast<const std::atomic<bool>*>(SSL_get_ex_data(ssl, HandshakeAbandonedIndex()));
  if (!static_cast<const std::atomic<bool>*>(stopping)->load() && (abandoned == nullptr || !abandoned->load())) {
    return SSL_CLIENT_HELLO_SUCCESS;
  }
  *alert = SSL_AD_HANDSHAKE_FAILURE;
  return SSL_CLIENT_HELLO_ERROR;
}

// A thread named `name` that runs `io` until it is stopped or out of work. An exception out of a
// handler (std::bad_alloc) drops the operation it came from (its connection goes with its last
// handle) and the loop goes on: every connection runs on the I/O thread, and ending it ended
// the process.
std::thread RunOnThread(asio::io_context& io, const char* name) {
  return std::thread([&io, name] {
    SetThreadName(name);
    for (;;) {
      try {
        io.run();
        return;
      } catch (const std::exception& e) {
        spdlog::error("http: a handler on {} threw, its connection is dropped: {}", name, e.what());
      }
    }
  });
}

}  // namespace

int HandshakeAbandonedIndex() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

void HttpFront::Impl::UseTlsContext(std::shared_ptr<ssl::context> context) {
  SSL_CTX_set_client_hello_cb(context->native_handle(), RefuseStoppedOrAbandonedHandshakes, &stopping);
  tls = std::move(context);
}

void HttpFront::Impl::Register(const std::shared_ptr<ConnectionBase>& c, const std::string& address) {
  size_t open;
  {
    std::lock_guard<std::mutex> lock(conns_mu);
    conns.emplace(c.get(), c);
    try {
      ++per_address[address];
    } catch (...) {  // in neither, so that Unregister gives nothing back
      conns.erase(c.get());
      throw;
    }
    open = conns.size();
  }
  handler->OnConnections(open);
}

void HttpFront::Impl::Unregister(ConnectionBase* c, const std::string& address) {
  size_t open;
  {
    std::lock_guard<std::mutex> lock(conns_mu);
    // Only a connection Register counted gives its address's count back (one whose Register
    // threw would have taken another connection's).
    if (conns.erase(c) > 0) {
      if (auto it = per_address.find(address); it != per_address.end() && --it->second == 0) {
        per_address.erase(it);
      }
    }
    open = conns.size();
  }
  if (!stopping.load()) handler->OnConnections(open);  // at Stop the handler may be going away
}

// A connection over a cap: a 503 it can read, then closed (never held: it would count anyway).
void HttpFront::Impl::Shed(tcp::socket socket, int status, std::string_view code, std::string message) {
  HttpResponse res = handler->FrontRefusal(nullptr, status, code, message);
  res.status = status;
  error_code ec;
  if (tls) {  // a TLS client cannot read a plain reply before its handshake: closed, counted
    socket.close(ec);
    return;
  }
  const std::string reply =
      SerializeHead(res, "Content-Length: " + std::to_string(res.body.size()) + "\r\n", false, 11) + res.body;
  // Small and non-blocking: one send, or nothing when the client's window is shut.
  const ssize_t sent = ::send(socket.native_handle(), reply.data(), reply.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  (void)sent;
  socket.shutdown(tcp::socket::shutdown_send, ec);
  if (shed_lingering >= kMaxShedLingering) {
    socket.close(ec);
    return;
  }
  // What the client already sent is read and dropped for a moment: closing with unread bytes
  // would reset the connection, and the client would likely lose the 503 with it.
  std::make_shared<ShedLinger>(std::move(socket), io, &shed_lingering)->Start();
}

void HttpFront::Impl::WatchTlsFiles() {
  tls_watch->expires_after(options.tls_reload_interval);
  tls_watch->async_wait([this](error_code ec) {
    if (ec) return;  // cancelled: stopping
    const auto stamps = std::pair{FileStamp(options.tls_cert_file), FileStamp(options.tls_key_file)};
    if (stamps != tls_stamps && stamps != tls_failed_stamps) {
      auto fresh = LoadTlsContext(options.tls_cert_file, options.tls_key_file);
      if (fresh.ok()) {
        UseTlsContext(std::move(*fresh));  // new connections; open ones keep theirs
        tls_stamps = stamps;
        spdlog::info("TLS certificate reloaded from {}", options.tls_cert_file);
      } else {
        // Often a certificate written before its key: tried again when the files change again.
        tls_failed_stamps = stamps;
        spdlog::error("TLS reload failed, the previous certificate stays: {}", fresh.status().ToString());
      }
      handler->OnTlsReload(fresh.ok());
    }
    WatchTlsFiles();
  });
}

void HttpFront::Impl::Accept() {
  acceptor->async_accept([this](error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || stopping.load()) return;
    if (ec) {
      // Out of descriptors (EMFILE) or similar: retry shortly instead of spinning.
      handler->OnDropped("accept_failed");
      accept_retry->expires_after(kAcceptRetry);
      accept_retry->async_wait([this](error_code e) {
        if (!e) Accept();
      });
      return;
    }
    error_code peer_ec;
    const tcp::endpoint peer = socket.remote_endpoint(peer_ec);
    if (peer_ec) return Accept();  // gone already
    // A throw from here (std::bad_alloc) loses this connection, never the accepting: the next
    // accept is issued whatever happens (io.run()'s catch alone would leave none pending).
    try {
      AcceptConnection(std::move(socket), peer);
    } catch (const std::exception& e) {
      spdlog::error("http: accepting a connection failed: {}", e.what());
    }
    Accept();
  });
}

void HttpFront::Impl::AcceptConnection(tcp::socket socket, const tcp::endpoint& peer) {
  std::string address = peer.address().to_string();
  size_t open, from_address;
  {
    std::lock_guard<std::mutex> lock(conns_mu);
    open = conns.size();
    auto it = per_address.find(address);
    from_address = it == per_address.end() ? 0 : it->second;
  }
  if (open >= options.max_connections) {
    Shed(std::move(socket), 503, "too_many_connections",
         "the server holds its limit of " + std::to_string(options.max_connections) + " connections");
  } else if (options.max_connections_per_address > 0 && from_address >= options.max_connections_per_address) {
    Shed(std::move(socket), 503, "too_many_connections_from_address",
         "at most " + std::to_string(options.max_connections_per_address) +
             " connections from one address");
  } else {
    error_code opt_ec;
    // Replies and SSE events leave at once (no Nagle delay behind the client's delayed ACK).
    socket.set_option(tcp::no_delay(true), opt_ec);
    StartConnection(*this, std::move(socket), std::move(address), peer.port());
  }
}

HttpFront::HttpFront(FrontOptions options, FrontHandler* handler)
    : impl_(std::make_unique<Impl>(std::move(options), handler)) {}

HttpFront::~HttpFront() { Stop(); }

int HttpFront::port() const { return impl_->port; }

bool HttpFront::tls() const { return !impl_->options.tls_cert_file.empty(); }

size_t HttpFront::queued_requests() const {
  return (impl_->pool ? impl_->pool->queued() : 0) + (impl_->head_pool ? impl_->head_pool->queued() : 0);
}

Status HttpFront::Start() {
  Impl& f = *impl_;
  // Thousands of connections need thousands of descriptors: raise the soft limit to the hard one.
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &lim);
  }
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY &&
      lim.rlim_cur < f.options.max_connections + 256) {
    spdlog::warn("open-file limit {} is below --max-connections {} (+256): raise ulimit -n", lim.rlim_cur,
                 f.options.max_connections);
  }
  if (!f.options.tls_cert_file.empty() || !f.options.tls_key_file.empty()) {
    if (f.options.tls_cert_file.empty() || f.options.tls_key_file.empty()) {
      return InvalidArgumentError("TLS needs both a certificate and a private key file");
    }
    f.tls_stamps = {FileStamp(f.options.tls_cert_file), FileStamp(f.options.tls_key_file)};
    VLMD_ASSIGN_OR_RETURN(auto context, LoadTlsContext(f.options.tls_cert_file, f.options.tls_key_file));
    f.UseTlsContext(std::move(context));
    f.tls_watch.emplace(f.io);
    f.WatchTlsFiles();
  }
  error_code ec;
  tcp::resolver resolver(f.io);
  const auto endpoints = resolver.resolve(f.options.host, std::to_string(f.options.port),
                                          tcp::resolver::passive, ec);
  if (ec || endpoints.empty()) {
    return Status(StatusCode::kUnavailable, "cannot resolve " + f.options.host + ": " + ec.message());
  }
  const tcp::endpoint endpoint = *endpoints.begin();
  f.acceptor.emplace(f.io);
  f.accept_retry.emplace(f.io);
  f.acceptor->open(endpoint.protocol(), ec);
  if (!ec) f.acceptor->set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) f.acceptor->bind(endpoint, ec);
  if (!ec) f.acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return Status(StatusCode::kUnavailable, "cannot listen on " + f.options.host + ":" +
                                                std::to_string(f.options.port) + ": " + ec.message());
  }
  f.port = f.acceptor->local_endpoint().port();
  f.pool.emplace(std::max(1, f.options.handler_threads), std::max<size_t>(1, f.options.max_queued_requests),
                 "http-handler");
  f.head_pool.emplace(kHeadThreads, std::max<size_t>(1, f.options.max_queued_requests), "http-head");
  f.health_pool.emplace(kHealthThreads, kMaxQueuedHealth, "http-health");
  f.metrics_pool.emplace(kMetricsThreads, kMaxQueuedMetrics, "http-metrics");
  if (f.tls) {
    f.tls_work.emplace(f.tls_lane.get_executor());
    f.tls_thread = RunOnThread(f.tls_lane, "http-tls");
  }
  f.Accept();
  f.work.emplace(f.io.get_executor());
  f.io_thread = RunOnThread(f.io, "http-io");
  return Status::Ok();
}

void HttpFront::Stop() {
  Impl& f = *impl_;
  if (f.stopped || !f.io_thread.joinable()) return;
  f.stopped = true;
  f.stopping.store(true);
  // 1. No new connections; idle ones (no request head read) closed; the others get their answer
  // (a body still arriving is read first: step 3 waits for it, at most kStopGrace).
  asio::post(f.io, [&f] {
    error_code ignored;
    f.acceptor->close(ignored);
    f.accept_retry->cancel();
    if (f.tls_watch) f.tls_watch->cancel();
    std::vector<std::shared_ptr<ConnectionBase>> open;
    {
      std::lock_guard<std::mutex> lock(f.conns_mu);
      for (auto& [raw, weak] : f.conns) {
        if (auto c = weak.lock()) open.push_back(std::move(c));
      }
    }
    for (auto& c : open) c->CloseIfIdle();
  });
  // 2. Handlers running finish, and the queued ones run (their replies still go out through the
  // running I/O thread).
  f.head_pool->Stop();  // first: a head checked may still send its request to the handlers
  f.pool->Stop();
  f.health_pool->Stop();
  f.metrics_pool->Stop();
  // 3. The replies they left are written (each connection closes after its reply at shutdown);
  // a client that does not read gets kStopGrace.
  const auto until = std::chrono::steady_clock::now() + kStopGrace;
  while (std::chrono::steady_clock::now() < until) {
    {
      std::lock_guard<std::mutex> lock(f.conns_mu);
      if (f.conns.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // 4. Then the I/O thread (and the TLS lane); the connections left are closed here, their
  // handlers run out.
  f.work.reset();
  f.io.stop();
  f.io_thread.join();
  if (f.tls_thread.joinable()) {
    f.tls_work.reset();
    f.tls_lane.stop();
    f.tls_thread.join();
  }
  std::vector<std::shared_ptr<ConnectionBase>> left;
  {
    std::lock_guard<std::mutex> lock(f.conns_mu);
    for (auto& [raw, weak] : f.conns) {
      if (auto c = weak.lock()) left.push_back(std::move(c));
    }
  }
  for (auto& c : left) c->ForceClose();  // no thread runs either context: closed here
  left.clear();
  if (!f.tls) {
    f.io.restart();
    f.io.run_for(std::chrono::seconds(1));
    return;
  }
  // The handshakes' operations bounce between the two: io's reactor completes them and their
  // handlers run on the lane (holding work on it), which posts their end back to io. Both are
  // run out until neither has anything left to run, so that neither is destroyed holding an
  // operation with work on the other (io's queue outlives the lane: a use after free). Every
  // socket is closed and every handshake left refuses at its ClientHello (UseTlsContext), so
  // this ends; the bound is a last resort.
  const auto drain_until = std::chrono::steady_clock::now() + kTlsDrainBound;
  for (;;) {
    f.io.restart();
    f.tls_lane.restart();
    if (f.io.poll() + f.tls_lane.poll() == 0) break;
    if (std::chrono::steady_clock::now() >= drain_until) {
      spdlog::error("http: TLS handshakes still running {} s after the stop", kTlsDrainBound.count());
      break;
    }
  }
}

}  // namespace vlmd::serve
