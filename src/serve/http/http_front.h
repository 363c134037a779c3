// The HTTP/1.1 connection layer (issue 20): one event-driven I/O thread (Boost.Asio, with
// Boost.Beast's strict request parser) holds every connection, so that slow, idle or hostile
// clients cost a socket and a few KiB each, never a thread; complete requests go to a pool of
// handler threads. Per connection it enforces a deadline for the whole request head and one for
// the whole body, reaps idle keep-alive connections, caps header size and count, the body
// (chunked or not, while it is read), connections in total and per client address, and refuses
// ambiguous framing (400 and close). Pipelined requests are answered in order. What is shed gets
// a JSON error where the client can still read one (408, 413, 431, 503) and a count by reason.
//
// Two hops through the handler pool per request: the head first (authentication decides whether
// the body is read at all, and how much of it), then the whole request. Optionally TLS
// (FrontOptions::tls_cert_file), with the certificate reloaded when its files change; handshakes
// run on a thread of their own, never on the I/O thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"
#include "serve/http/http_message.h"

namespace vlmd::serve {

struct FrontOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port
  int handler_threads = 64;          // requests handled at once
  size_t max_queued_requests = 1024;  // waiting for a handler thread (and heads for their check); beyond: 503
  size_t max_connections = 8192;     // open at once, in total; beyond: 503 and close
  size_t max_connections_per_address = 256;  // from one client address; 0: no cap
  // Request body bytes held at once, over all connections (0: no bound): a body is counted as its
  // bytes arrive (a step ahead of them) until its handler is done with it or its connection
  // closes. One whose whole length (its Content-Length, or the route's limit when chunked) does
  // not fit beside the bytes counted gets 503 body_budget from its head, one that outgrows the
  // room left while it arrives gets it then.
  uint64_t max_body_bytes_in_flight = 0;
  size_t max_header_bytes = 64 << 10;
  size_t max_header_lines = 100;
  size_t max_requests_per_connection = 1000;
  std::chrono::milliseconds head_timeout{10000};   // a whole request head, from its first byte
  std::chrono::milliseconds body_timeout{60000};   // a whole body, from the end of its head
  std::chrono::milliseconds idle_timeout{5000};    // kept-alive with no request started
  std::chrono::milliseconds write_timeout{30000};  // one write (a reply, one streamed chunk)
  // TLS (OpenSSL through Boost.Asio): with both files set (PEM: the certificate chain, the
  // private key) the port speaks HTTPS only, TLS 1.2 and 1.3. The files are checked every
  // tls_reload_interval: when either changed, new connections get the new certificate (open
  // ones keep theirs); a pair that does not load leaves the previous one serving.
  std::string tls_cert_file;
  std::string tls_key_file;
  std::chrono::milliseconds tls_reload_interval{10000};
};

// What the server plugs into the front. Called on handler threads, concurrently.
class FrontHandler {
 public:
  virtual ~FrontHandler() = default;
  // The request head is complete; no byte of its body has been read. Return true to read the
  // body, at most *body_limit bytes (over it: 413 and close); false when `res` is the answer (a
  // body the client announced is then never read, and the connection closes after the answer).
  // What it notes in `head` (route, matches) is in OnRequest's request.
  virtual bool OnHead(HttpRequest& head, HttpResponse& res, size_t* body_limit) = 0;
  // The whole request (head and body): fill `res`.
  virtual void OnRequest(HttpRequest& req, HttpResponse& res) = 0;
  // A refusal by the front itself (framing, limits, deadlines, shedding): the JSON error body it
  // sends, and a place to count it. `head` is null when no head was read. `code` is short and
  // stable (e.g. "head_timeout"), `message` says what was wrong.
  virtual HttpResponse FrontRefusal(const HttpRequest* head, int status, std::string_view code,
                                    std::string_view message) = 0;
  // The audit of a refusal with a head (FrontRefusal's `res` for it), on a handler thread before
  // the refusal is written: FrontRefusal runs on the I/O thread, which must never wait on a disk
  // (an audit log with fdatasync stalled every connection once per refusal).
  virtual void AuditFrontRefusal(const HttpRequest& head, const HttpResponse& res, int status,
                                 std::string_view code) {}
  // The same refusal when no thread is free to write its line (the pool's queue is full, or it
  // has stopped): counted as left out, on the I/O thread, without touching a disk.
  virtual void LeaveOutFrontRefusal(const HttpRequest& head) {}
  // A connection dropped without a reply ("idle_reaped", "head_timeout" before any byte,
  // "write_timeout", "accept_failed"), for metrics.
  virtual void OnDropped(std::string_view reason) = 0;
  // Which threads answer the request (its head): the handler threads, or one of two small pools
  // of their own, so that requests holding every handler thread (long generations) cannot delay
  // a probe: kHealth for the ones orchestrators restart a server over (/health, /ready), kMetrics
  // for heavier ones (/metrics renders every series), which a flood of them cannot then turn
  // into failed health checks.
  enum class Lane { kRequests, kHealth, kMetrics };
  virtual Lane LaneOf(const HttpRequest& head) const { return Lane::kRequests; }
  // Open connections changed (a gauge).
  virtual void OnConnections(size_t open) = 0;
  // The TLS certificate files changed and were loaded (ok) or not (the previous pair serves on).
  virtual void OnTlsReload(bool ok) = 0;
};

class HttpFront {
 public:
  HttpFront(FrontOptions options, FrontHandler* handler);
  ~HttpFront();  // Stop()s

  // Loads the TLS files when set (INVALID_ARGUMENT when they do not load), binds and listens
  // (UNAVAILABLE when it cannot), starts the I/O and handler threads.
  Status Start();
  int port() const;
  bool tls() const;
  // Requests waiting for a handler thread and heads waiting for their check (probes not counted).
  size_t queued_requests() const;
  // Stops accepting, closes idle connections, lets handlers running and requests queued for one
  // finish (their replies are written), then closes everything. Idempotent.
  void Stop();

  struct Impl;  // opaque: the acceptor, I/O thread, handler pool and connections (http_front_impl.h)

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace vlmd::serve
