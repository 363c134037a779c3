// The HTTP front's insides shared by http_front.cpp (accepting, shedding, Start/Stop) and
// http_connection.cpp (one connection's requests): HttpFront::Impl and what a connection is to
// it. Private to those two files.
#pragma once

#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>

#include "serve/http/handler_pool.h"
#include "serve/http/http_front.h"

namespace vlmd::serve {

namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;
using tcp = asio::ip::tcp;

// What Stop needs of a connection, whatever its stream (plain TCP or TLS).
class ConnectionBase {
 public:
  virtual ~ConnectionBase() = default;
  // On the I/O thread, at Stop: closes the connection unless a handler thread owns its request
  // or its reply is being written.
  virtual void CloseIfIdle() = 0;
  // At Stop, once no handler thread is left.
  virtual void ForceClose() = 0;
};

struct HttpFront::Impl {
  Impl(FrontOptions o, FrontHandler* h) : options(std::move(o)), handler(h) {}

  void Accept();
  // One accepted socket: shed over a cap, else a connection started.
  void AcceptConnection(tcp::socket socket, const tcp::endpoint& peer);
  void Shed(tcp::socket socket, int status, std::string_view code, std::string message);
  void Register(const std::shared_ptr<ConnectionBase>& c, const std::string& address);
  void Unregister(ConnectionBase* c, const std::string& address);
  // Reloads the certificate and key when either file changed (every tls_reload_interval).
  void WatchTlsFiles();
  // Makes `context` the one new connections take, refusing handshakes at their ClientHello once
  // stopping is set or their connection was given up (HandshakeAbandonedIndex).
  void UseTlsContext(std::shared_ptr<ssl::context> context);

  const FrontOptions options;
  FrontHandler* const handler;
  // Before io: connections still queued in io when it is destroyed unregister here.
  std::mutex conns_mu;  // connections register on the I/O thread, may end on a handler thread
  std::unordered_map<ConnectionBase*, std::weak_ptr<ConnectionBase>> conns;
  std::unordered_map<std::string, size_t> per_address;
  std::atomic<bool> stopping{false};
  // Shed connections draining (I/O thread only); before io: ShedLingers left in it at
  // destruction count themselves out here.
  size_t shed_lingering = 0;
  asio::io_context io{1};
  // Keeps io.run() going while no operation is pending (a stream between two chunks).
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  // TLS handshakes run here, on a thread of their own (tls_thread): a handshake's key exchange
  // and signature cost up to a few ms of CPU each, and on io a flood of new TLS connections
  // would hold every established connection behind them. Their sockets stay io's (its reactor
  // waits on them); the handshake's steps and its socket operations run on this lane until it
  // ends, then the connection is io's. After io: destroyed first, while io (the sockets' and
  // timers' home) still exists.
  asio::io_context tls_lane{1};
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> tls_work;
  std::optional<tcp::acceptor> acceptor;
  std::optional<asio::steady_timer> accept_retry;
  std::optional<HandlerPool> pool;
  std::optional<HandlerPool> head_pool;     // the heads of FrontHandler::Lane::kRequests
  std::optional<HandlerPool> health_pool;   // FrontHandler::Lane::kHealth's requests
  std::optional<HandlerPool> metrics_pool;  // FrontHandler::Lane::kMetrics's requests
  std::atomic<uint64_t> body_bytes{0};     // reserved by bodies held (max_body_bytes_in_flight)
  // TLS: the context new connections take (a connection keeps the one it started with), the
  // files' stamps it was loaded from, the stamps of a failed reload (not retried until they
  // change again). I/O thread only, after Start.
  std::shared_ptr<ssl::context> tls;
  std::pair<std::pair<int64_t, int64_t>, std::pair<int64_t, int64_t>> tls_stamps, tls_failed_stamps;
  std::optional<asio::steady_timer> tls_watch;
  std::thread io_thread;
  std::thread tls_thread;  // runs tls_lane when TLS is on
  int port = 0;
  bool stopped = false;
};

// The index of a TLS connection's SSL ex_data slot holding its std::atomic<bool> "abandoned"
// flag: set once its handshake's deadline passed or it was closed, so that a handshake step
// still queued on the TLS lane refuses at the ClientHello instead of signing for nobody.
int HandshakeAbandonedIndex();

// Makes a connection for an accepted socket (TLS when front.tls is set), registers it with the
// front and starts reading its first request. On the I/O thread.
void StartConnection(HttpFront::Impl& front, tcp::socket socket, std::string address, int port);

}  // namespace vlmd::serve
