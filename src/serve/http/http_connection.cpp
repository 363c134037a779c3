// One client connection of the HTTP front (http_front_impl.h): its requests' heads, bodies,
// replies, streams, deadlines and lingering close. Threading: every Connection member is touched
// on the I/O thread only, except while a handler thread owns the request (phases kHeadCheck and
// kHandling): then the I/O thread has no operation pending on the connection and leaves it alone
// until the handler thread posts back. Posting through the pool's mutex and asio::post orders the
// two. A TLS connection's stream belongs to the TLS lane's thread during its handshake (Start,
// Handshaken); the I/O thread then only shuts its descriptor (ShutdownMidHandshake).
#include <poll.h>
#include <spdlog/spdlog.h>
#include <strings.h>
#include <sys/socket.h>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cstdio>
#include <future>
#include <type_traits>

#include "serve/http/http_front_impl.h"
#include "serve/http/response_head.h"

namespace vlmd::serve {
namespace {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using boost::system::error_code;

// After a reply that closes the connection, what the client still sends is read and dropped for
// this long (at most kLingerBytes), so that it reads the reply instead of a reset (the kernel
// resets a connection closed with unread bytes).
constexpr std::chrono::milliseconds kLinger{2000};
constexpr size_t kLingerBytes = 16u << 20;
// How long an operation cancelled at its deadline may still be pending before its socket side is
// shut down (Arm).
constexpr std::chrono::milliseconds kCancelGrace{200};

// The read buffer's bound: a whole request head, or a chunk-size line or trailer of as many bytes,
// plus the slack that one read may add past what the parser has taken.
constexpr size_t kReadBufferSlack = 64 << 10;

// A body's count against the body budget runs this far ahead of its bytes received.
constexpr uint64_t kBodyReservationStep = 256 << 10;
size_t ReadBufferLimit(const FrontOptions& o) { return o.max_header_bytes + kReadBufferSlack; }

std::string_view Trimmed(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// A request the parser found malformed or ambiguous (two Content-Lengths, Content-Length with
// Transfer-Encoding, a bad chunk size, ...), as opposed to a stream that ended or a limit.
bool IsMalformed(const error_code& ec) {
  if (ec.category() != bhttp::make_error_code(bhttp::error::bad_method).category()) return false;
  return ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message &&
         ec != bhttp::error::need_more && ec != bhttp::error::body_limit &&
         ec != bhttp::error::header_limit && ec != bhttp::error::buffer_overflow;
}

// One client connection; Stream is tcp::socket, or ssl::stream<tcp::socket> for TLS.
template <class Stream>
class Connection : public ConnectionBase, public std::enable_shared_from_this<Connection<Stream>> {
 public:
  static constexpr bool kTls = !std::is_same_v<Stream, tcp::socket>;

  Connection(HttpFront::Impl& front, Stream stream, std::shared_ptr<ssl::context> tls, std::string address,
             int port)
      : front_(front), tls_(std::move(tls)), stream_(std::move(stream)), timer_(front.io),
        address_(std::move(address)), port_(port), buffer_(ReadBufferLimit(front.options)) {}
  ~Connection() override {
    ReleaseBody();
    front_.Unregister(this, address_);
  }

  void Start() {
    if constexpr (kTls) {
      // The handshake is part of the first request's head; it writes too. It runs on the TLS
      // lane (HttpFront::Impl::tls_lane): issued there, its steps (the key exchange, the
      // signature) completed there, and its end posted back here. Meanwhile this thread leaves
      // the stream alone (Close and the deadline shut the descriptor: ShutdownMidHandshake).
      Arm(front_.options.head_timeout, Deadline::kWrite);
      on_tls_lane_ = true;
      lane_has_socket_ = true;
      handshake_fd_ = Raw().native_handle();
      SSL_set_ex_data(stream_.native_handle(), HandshakeAbandonedIndex(), &handshake_abandoned_);
      asio::post(front_.tls_lane, [self = this->shared_from_this()] {
        auto& lane = self->front_.tls_lane;
        self->stream_.async_handshake(ssl::stream_base::server, asio::bind_executor(lane, [self](error_code ec) {
          self->lane_has_socket_ = false;
          // (Should this post throw, bad_alloc, the connection ends with its deadline's chain.)
          asio::post(self->front_.io, [self, ec] { self->Handshaken(ec); });
        }));
      });
    } else {
      WaitForRequest();
    }
  }
  // At Stop: only a connection with no request head read yet closes. One whose head was read
  // is answered once its body is in (503 shutting_down when the handlers have stopped; closed
  // mid-body, a request the server had taken got no reply at all), unless the body timeout
  // refuses it first or Stop's grace (kStopGrace) ends. One closing after its reply (kClosing)
  // lingers as it would without Stop.
  void CloseIfIdle() override {
    if (phase_ == Phase::kIdle || phase_ == Phase::kHead) Close();
  }
  // At Stop, once neither the I/O thread nor the TLS lane runs: closes here, mid-handshake too.
  void ForceClose() override {
    on_tls_lane_ = false;
    Close();
  }
  // On the I/O thread: a handler thread's blocking write of one piece of a streamed reply.
  void WriteForHandler(std::shared_ptr<std::string> data, std::shared_ptr<std::promise<bool>> done) {
    Arm(front_.options.write_timeout, Deadline::kWrite);
    asio::async_write(stream_, asio::buffer(*data),
                      [self = this->shared_from_this(), data, done](error_code ec, size_t) {
                        self->Disarm();  // a timeout is counted when the stream ends
                        done->set_value(!ec);
                      });
  }
  // On the I/O thread: a streamed reply ended (its last chunk written, or a write failed).
  void StreamEnded(bool ok, bool keep_alive) {
    keep_alive = keep_alive && ++served_ < front_.options.max_requests_per_connection;
    AfterWrite(ok ? error_code() : asio::error::broken_pipe, keep_alive);
  }

 private:
  enum class Phase { kIdle, kHead, kHeadCheck, kBody, kHandling, kWriting, kClosing };

  // What a deadline shuts if its operation outlives the cancel: the reading side (the
  // connection may still answer 408) or both (a write, or a TLS handshake).
  enum class Deadline { kRead, kWrite };

  // The deadline of the operation pending: when it passes, the socket's operations are
  // cancelled and their handlers see timed_out_. A cancel reaches only an operation waiting in
  // the reactor: a composed read or write (Beast's, asio::async_write) whose step had just
  // completed issues its next one after it, with no deadline left. So if the operation is still
  // pending kCancelGrace later (nothing Disarmed), the side it uses is shut down and it fails at
  // once. Only then, so that the drain after a 408 (Linger) normally runs its course.
  void Arm(std::chrono::milliseconds timeout, Deadline what = Deadline::kRead) {
    timed_out_ = false;
    const uint64_t gen = ++timer_gen_;
    timer_.expires_after(timeout);
    timer_.async_wait([self = this->shared_from_this(), gen, what](error_code ec) {
      if (ec || gen != self->timer_gen_) return;  // re-armed or disarmed meanwhile
      self->timed_out_ = true;
      if (self->on_tls_lane_) {
        // A handshake past its deadline ends the connection whatever it was doing: shut at once,
        // here (a cancel posted to the lane would wait behind every handshake queued there).
        return self->ShutdownMidHandshake();
      }
      error_code ignored;
      self->Raw().cancel(ignored);
      self->timer_.expires_after(kCancelGrace);
      self->timer_.async_wait([self, gen, what](error_code ec2) {
        if (ec2 || gen != self->timer_gen_) return;  // the operation ended
        error_code ignored2;
        self->Raw().shutdown(what == Deadline::kRead ? tcp::socket::shutdown_receive : tcp::socket::shutdown_both,
                             ignored2);
      });
    });
  }
  void Disarm() {
    ++timer_gen_;
    timer_.cancel();
  }

  // The TCP socket under the stream.
  tcp::socket& Raw() {
    if constexpr (kTls) {
      return stream_.next_layer();
    } else {
      return stream_;
    }
  }

  // Closes without a TLS close_notify: every reply is length-delimited, so a client cannot
  // mistake a truncation for the end of one.
  void Close() {
    if (on_tls_lane_) {  // mid-handshake: shut here, closed on the lane (see ShutdownMidHandshake)
      if (phase_ == Phase::kClosing) return;
      phase_ = Phase::kClosing;
      Disarm();
      ShutdownMidHandshake();
      asio::post(front_.tls_lane, [self = this->shared_from_this()] {
        if (self->lane_has_socket_) return self->CloseSocket();
        // The handshake ended meanwhile: closed on the I/O thread, behind its Handshaken.
        asio::post(self->front_.io, [self] { self->CloseSocket(); });
      });
      return;
    }
    if (phase_ == Phase::kClosing && !Raw().is_open()) return;
    phase_ = Phase::kClosing;
    Disarm();
    CloseSocket();
  }
  void CloseSocket() {
    error_code ignored;
    Raw().shutdown(tcp::socket::shutdown_both, ignored);
    Raw().close(ignored);
  }

  // On the I/O thread, mid-handshake (the socket object is the lane's): both directions of the
  // descriptor shut with the system call itself, so that the handshake's pending operation
  // fails at once (a flood of handshakes queued on the lane would delay anything posted there).
  // The descriptor is still open: only CloseSocket closes it, and only Close posts that, after
  // which no deadline fires and Close does nothing more.
  void ShutdownMidHandshake() {
    handshake_abandoned_.store(true);  // a step still queued on the lane refuses at the ClientHello
    ::shutdown(handshake_fd_, SHUT_RDWR);
  }

  // Back on the I/O thread: the handshake ended (failed, cancelled at its deadline, or closed
  // at Stop).
  void Handshaken(error_code ec) {
    on_tls_lane_ = false;
    if (phase_ == Phase::kClosing) return;  // closed meanwhile (Stop)
    Disarm();
    if (ec) {
      front_.handler->OnDropped("tls_handshake_failed");
      return Close();
    }
    WaitForRequest();
  }

  // Idle until the next request's first byte (kept-alive or new), then its head.
  void WaitForRequest() {
    // A pipelined request already here is answered even at Stop (503 shutting_down once the
    // handlers have stopped): the reply before it, decided before Stop, said keep-alive.
    if (buffer_.size() > 0) return ReadHead();
    if (front_.stopping.load()) return Close();
    phase_ = Phase::kIdle;
    buffer_.shrink_to_fit();  // an idle connection keeps no read buffer from its last body
    Arm(front_.options.idle_timeout);
    auto on_first_bytes = [self = this->shared_from_this()](error_code ec, size_t n) {
      self->buffer_.commit(n);
      if (ec || self->timed_out_) {
        if (self->timed_out_) self->front_.handler->OnDropped("idle_reaped");
        return self->Close();
      }
      self->ReadHead();
    };
    if constexpr (kTls) {
      // A read, not a readiness wait: TLS may hold decrypted bytes the socket does not show.
      stream_.async_read_some(buffer_.prepare(1024), std::move(on_first_bytes));
    } else {
      // A readiness wait: an idle connection holds no read buffer (thousands of them may idle).
      Raw().async_wait(tcp::socket::wait_read,
                       [next = std::move(on_first_bytes)](error_code ec) mutable { next(ec, 0); });
    }
  }

  void ReadHead() {
    phase_ = Phase::kHead;
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(front_.options.max_header_bytes));
    parser_->body_limit(boost::none);  // set per route once the head is checked
    Arm(front_.options.head_timeout);  // the whole head, from its first byte
    bhttp::async_read_header(stream_, buffer_, *parser_,
                             [self = this->shared_from_this()](error_code ec, size_t) { self->OnHeadRead(ec); });
  }

  void OnHeadRead(error_code ec) {
    Disarm();
    if (ec) {
      const bool partial = parser_->got_some();
      if (timed_out_) {
        if (!partial) {
          front_.handler->OnDropped("idle_reaped");
          return Close();
        }
        return Refuse(nullptr, 408, "head_timeout",
                      "the request head did not arrive within " +
                          std::to_string(front_.options.head_timeout.count()) + " ms");
      }
      if (ec == bhttp::error::header_limit || ec == bhttp::error::buffer_overflow) {
        return Refuse(nullptr, 431, "header_too_large",
                      "request head over " + std::to_string(front_.options.max_header_bytes) + " bytes");
      }
      if (IsMalformed(ec)) {
        return Refuse(nullptr, 400, "bad_request", "malformed request head: " + ec.message());
      }
      return Close();  // the client went away (before or within a head)
    }
    const auto& msg = parser_->get();
    const size_t lines = static_cast<size_t>(std::distance(msg.begin(), msg.end()));
    if (lines > front_.options.max_header_lines) {
      return Refuse(nullptr, 431, "too_many_headers",
                    std::to_string(lines) + " header lines (at most " +
                        std::to_string(front_.options.max_header_lines) + ")");
    }
    // RFC 9112 6.3: a request whose Transfer-Encoding does not end in chunked has no reliable
    // length; the parser would read it as bodiless and the bytes as the next request. A coding
    // before chunked (gzip, chunked) would be read as the raw body: only chunked alone is taken.
    // 6.1: an HTTP/1.0 request with Transfer-Encoding has faulty framing whatever it says.
    if (msg.count(bhttp::field::transfer_encoding) > 0) {
      const std::string_view te = Trimmed(msg[bhttp::field::transfer_encoding]);
      if (msg.count(bhttp::field::transfer_encoding) != 1 || !parser_->chunked() ||
          te.size() != 7 || strncasecmp(te.data(), "chunked", 7) != 0) {
        return Refuse(nullptr, 400, "bad_framing", "Transfer-Encoding other than chunked alone");
      }
      if (msg.version() < 11) {
        return Refuse(nullptr, 400, "bad_framing", "Transfer-Encoding in an HTTP/1.0 request");
      }
    }
    ReleaseBody();  // the previous request's body is gone with it
    request_ = HttpRequest{};
    request_.method = std::string(msg.method_string());
    request_.target = std::string(msg.target());
    request_.version = static_cast<int>(msg.version());
    for (const auto& field : msg) {
      request_.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
    }
    request_.remote_addr = address_;
    request_.remote_port = port_;
    if (!DecodeTargetPath(request_.target, &request_.path, &request_.query) || request_.path.empty() ||
        request_.path[0] != '/') {
      return Refuse(&request_, 400, "bad_request", "malformed request target");
    }
    keep_alive_ = parser_->keep_alive();
    phase_ = Phase::kHeadCheck;
    auto self = this->shared_from_this();
    // A request's head goes to threads of its own (authentication and routing are quick): heads
    // queued behind long generations made a flood of keyless ones take the queue from clients
    // with keys. Its body then goes to the handler threads; a probe's head and body to its pool.
    HandlerPool* head_pool = nullptr;
    switch (front_.handler->LaneOf(request_)) {
      case FrontHandler::Lane::kHealth: pool_ = head_pool = &*front_.health_pool; break;
      case FrontHandler::Lane::kMetrics: pool_ = head_pool = &*front_.metrics_pool; break;
      case FrontHandler::Lane::kRequests:
        pool_ = &*front_.pool;
        head_pool = &*front_.head_pool;
        break;
    }
    const bool queued = head_pool->TryPost([self] {
      auto res = std::make_shared<HttpResponse>();
      size_t limit = 0;
      bool read_body = false;
      try {
        read_body = self->front_.handler->OnHead(self->request_, *res, &limit);
      } catch (const std::exception& e) {
        spdlog::error("request head handler: {}", e.what());
        *res = self->front_.handler->FrontRefusal(&self->request_, 500, "internal_error", "internal error");
        res->status = 500;
        res->close = true;
      }
      asio::post(self->front_.io, [self, res, read_body, limit] { self->AfterHeadCheck(read_body, limit, res); });
    });
    if (!queued) {
      RefuseUnqueued();
    }
  }

  void AfterHeadCheck(bool read_body, size_t limit, const std::shared_ptr<HttpResponse>& res) {
    if (!read_body) {
      if (!parser_->is_done()) res->close = true;  // its body is never read
      return Respond(std::move(*res));
    }
    phase_ = Phase::kBody;
    if (parser_->is_done()) return Dispatch();
    if (const auto length = parser_->content_length(); length && *length > limit) {
      return Refuse(&request_, 413, "payload_too_large",
                    "request body of " + std::to_string(*length) + " bytes over the limit of " +
                        std::to_string(limit) + " bytes");
    }
    parser_->body_limit(limit);  // chunked bodies: checked while they are read
    body_limit_ = limit;
    body_expected_ = parser_->content_length().value_or(limit);
    // Refused from the head when the whole body would not fit beside the bytes held now; counted
    // as its bytes arrive (ReadBody), so that a client declaring a large body and sending little
    // holds little: 32 connections declaring 32 MB and sending a byte each held the default
    // budget for the body timeout when a body counted its declared length from its head.
    if (!BodyFits(body_expected_) || !GrowBodyReservation(0)) return RefuseBodyBudget();
    const std::string_view expect = HeaderValue(request_.headers, "Expect");
    if (request_.version >= 11 && expect.size() == 12 && strncasecmp(expect.data(), "100-continue", 12) == 0 &&
        buffer_.size() == 0) {
      // The client waits for this before it sends the body (curl does for bodies over 1 KiB).
      auto cont = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
      Arm(front_.options.write_timeout, Deadline::kWrite);
      asio::async_write(stream_, asio::buffer(*cont), [self = this->shared_from_this(), cont](error_code ec, size_t) {
        self->Disarm();
        if (ec) return self->Close();
        self->ReadBody();
      });
      return;
    }
    ReadBody();
  }

  void ReadBody() {
    Arm(front_.options.body_timeout);  // the whole body
    ReadBodySome();
  }

  // Reads on until the body is whole, the reservation growing ahead of it (GrowBodyReservation).
  void ReadBodySome() {
    bhttp::async_read_some(stream_, buffer_, *parser_, [self = this->shared_from_this()](error_code ec, size_t) {
      if (!ec && !self->parser_->is_done() && !self->timed_out_) {
        if (!self->GrowBodyReservation(self->parser_->get().body().size())) {
          self->Disarm();
          return self->RefuseBodyBudget();
        }
        return self->ReadBodySome();
      }
      self->Disarm();
      if (!ec && self->parser_->is_done()) return self->Dispatch();
      if (self->timed_out_) {
        return self->Refuse(&self->request_, 408, "body_timeout",
                            "the request body did not arrive within " +
                                std::to_string(self->front_.options.body_timeout.count()) + " ms");
      }
      if (ec == bhttp::error::body_limit) {
        return self->Refuse(&self->request_, 413, "payload_too_large",
                            "request body over the limit of " + std::to_string(self->body_limit_) + " bytes");
      }
      if (ec == bhttp::error::buffer_overflow) {  // a chunk-size line or trailer without end
        return self->Refuse(&self->request_, 400, "bad_framing",
                            "a chunk header or trailer over " +
                                std::to_string(self->buffer_.max_size() - kReadBufferSlack) + " bytes");
      }
      if (IsMalformed(ec)) {
        return self->Refuse(&self->request_, 400, "bad_framing", "malformed request body: " + ec.message());
      }
      self->Close();  // the client went away mid-body
    });
  }

  // The whole request to a handler thread.
  void Dispatch() {
    request_.body = std::move(parser_->get().body());
    const int fd = Raw().native_handle();  // a client's FIN shows on the socket, TLS or not
    request_.peer_closed = [fd] {
      // POLLRDHUP: the client shut down its side, even with bytes still unread before the FIN
      // (a TLS client's close_notify alert; a peek saw those bytes and took it for a live
      // client). As for nginx, a client that half-closes counts as gone.
      pollfd p{fd, POLLRDHUP, 0};
      if (::poll(&p, 1, 0) <= 0) return false;
      return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
    };
    phase_ = Phase::kHandling;
    auto self = this->shared_from_this();
    const bool queued = pool_->TryPost([self] { self->Handle(); });
    if (!queued) {
      RefuseUnqueued();
    }
  }

  // Whether `bytes` more of body fit beside what the bodies held now have counted.
  bool BodyFits(uint64_t bytes) const {
    const uint64_t max = front_.options.max_body_bytes_in_flight;
    return max == 0 || (bytes <= max && front_.body_bytes.load() <= max - bytes);
  }

  // Makes this body's count against max_body_bytes_in_flight cover `received` bytes and one step
  // more (the next reads; at most the body's expected size); false (the count unchanged) when that
  // does not fit.
  bool GrowBodyReservation(uint64_t received) {
    const uint64_t max = front_.options.max_body_bytes_in_flight;
    if (max == 0) return true;
    const uint64_t want = std::min<uint64_t>(body_expected_, received + kBodyReservationStep);
    if (want <= body_reserved_) return true;
    const uint64_t more = want - body_reserved_;
    uint64_t held = front_.body_bytes.load();
    do {
      if (more > max || held > max - more) return false;
    } while (!front_.body_bytes.compare_exchange_weak(held, held + more));
    body_reserved_ = want;
    return true;
  }

  void RefuseBodyBudget() {
    Refuse(&request_, 503, "body_budget",
           "request bodies held by the server are at their limit of " +
               std::to_string(front_.options.max_body_bytes_in_flight >> 20) + " MB; retry shortly");
  }
  void ReleaseBody() {
    if (body_reserved_ == 0) return;
    front_.body_bytes.fetch_sub(body_reserved_);
    body_reserved_ = 0;
  }

  // The handler pool took no more work: full, or stopped with the server.
  void RefuseUnqueued() {
    if (front_.stopping.load()) {
      return Refuse(&request_, 503, "shutting_down", "the server is shutting down");
    }
    Refuse(&request_, 503, "overloaded", "too many requests waiting; retry shortly");
  }

  // On a handler thread.
  void Handle() {
    HttpResponse res;
    try {
      front_.handler->OnRequest(request_, res);
    } catch (const std::exception& e) {
      spdlog::error("request handler: {}", e.what());
      res = front_.handler->FrontRefusal(&request_, 500, "internal_error", "internal error");
      res.status = 500;
    }
    // Not needed any more; a kept-alive connection must not hold a body of up to --max-body-mb,
    // nor its count in the body budget (it held it until its next request or its close).
    std::string().swap(request_.body);
    ReleaseBody();
    const bool keep = keep_alive_ && !res.close;
    if (!res.stream) {
      auto shared = std::make_shared<HttpResponse>(std::move(res));
      asio::post(front_.io, [self = this->shared_from_this(), shared] { self->Respond(std::move(*shared)); });
      return;
    }
    // Streamed: written from here, each piece a blocking write through the I/O thread.
    class Writer : public ChunkWriter {
     public:
      Writer(std::shared_ptr<Connection> c, bool chunked) : c_(std::move(c)), chunked_(chunked) {}
      bool Send(std::string data) {
        if (failed_) return false;
        auto shared = std::make_shared<std::string>(std::move(data));
        auto done = std::make_shared<std::promise<bool>>();
        std::future<bool> ok = done->get_future();
        asio::post(c_->front_.io, [c = c_, shared, done] { c->WriteForHandler(shared, done); });
        try {
          failed_ = !ok.get();
        } catch (const std::future_error&) {  // the write's handler threw on the I/O thread
          failed_ = true;
        }
        return !failed_;
      }
      bool Write(std::string_view data) override {
        if (data.empty()) return !failed_;
        if (!chunked_) return Send(std::string(data));
        char size[24];
        std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
        std::string chunk = size;
        chunk.append(data);
        chunk += "\r\n";
        return Send(std::move(chunk));
      }
      bool failed() const { return failed_; }
      void Fail() { failed_ = true; }  // the body is incomplete: the connection must close

     private:
      std::shared_ptr<Connection> c_;
      const bool chunked_;
      bool failed_ = false;
    };
    // HTTP/1.0 has no chunked encoding: the body ends when the connection closes.
    const bool chunked = request_.version >= 11;
    const bool stream_keep = keep && chunked && !front_.stopping.load();
    Writer writer(this->shared_from_this(), chunked);
    writer.Send(SerializeHead(res, chunked ? "Transfer-Encoding: chunked\r\n" : "", stream_keep,
                              request_.version));
    // Called even when the head could not be written: the stream's own failure path (its first
    // write fails) cancels the job and accounts for the request.
    try {
      res.stream(writer);
    } catch (const std::exception& e) {
      spdlog::error("stream handler: {}", e.what());
      writer.Fail();
    }
    if (!writer.failed() && chunked) writer.Send("0\r\n\r\n");
    asio::post(front_.io, [self = this->shared_from_this(), ok = !writer.failed(), stream_keep] {
      self->StreamEnded(ok, stream_keep);
    });
  }

  // A refusal by the front: its JSON error, and the connection closes after it.
  void Refuse(const HttpRequest* head, int status, std::string_view code, const std::string& message) {
    Disarm();
    if (head == nullptr) request_ = HttpRequest{};  // no head read: answer as HTTP/1.1
    auto res = std::make_shared<HttpResponse>(front_.handler->FrontRefusal(head, status, code, message));
    res->status = status;
    res->close = true;
    if (head == nullptr || !res->audit_refusal) return Respond(std::move(*res));  // nothing to audit
    // Its audit line on a handler thread, then the reply (the line goes before it, as every
    // request's does); a handler thread holds the request meanwhile (CloseIfIdle leaves it).
    phase_ = Phase::kHeadCheck;
    auto self = this->shared_from_this();
    const bool posted = front_.head_pool->TryPost([self, res, status, code = std::string(code)] {
      try {
        self->front_.handler->AuditFrontRefusal(self->request_, *res, status, code);
      } catch (const std::exception& e) {
        spdlog::error("refusal audit: {}", e.what());
      }
      asio::post(self->front_.io, [self, res] { self->Respond(std::move(*res)); });
    });
    if (posted) return;
    // The pool is full (a flood) or stopped: the line is left out and counted (its address's
    // summary line tells of it), never written here.
    front_.handler->LeaveOutFrontRefusal(request_);
    Respond(std::move(*res));
  }

  void Respond(HttpResponse res) {
    const bool keep = keep_alive_ && !res.close && !front_.stopping.load() &&
                      ++served_ < front_.options.max_requests_per_connection;
    phase_ = Phase::kWriting;
    auto out = std::make_shared<std::string>(SerializeHead(
        res, "Content-Length: " + std::to_string(res.body.size()) + "\r\n", keep, request_.version));
    if (request_.method != "HEAD") out->append(res.body);  // HEAD: the length, never the body
    Arm(front_.options.write_timeout, Deadline::kWrite);
    asio::async_write(stream_, asio::buffer(*out), [self = this->shared_from_this(), out, keep](error_code ec, size_t) {
      self->AfterWrite(ec, keep);
    });
  }

  void AfterWrite(error_code ec, bool keep) {
    Disarm();
    if (ec) {
      if (timed_out_) front_.handler->OnDropped("write_timeout");
      return Close();
    }
    if (keep) return WaitForRequest();
    if (front_.stopping.load()) return Close();  // no lingering at shutdown
    Linger();
  }

  // Half-closes, then reads and drops what the client still sends (kLinger, kLingerBytes).
  void Linger() {
    phase_ = Phase::kClosing;
    error_code ignored;
    Raw().shutdown(tcp::socket::shutdown_send, ignored);
    Arm(kLinger);
    lingered_ = 0;
    DropInput();
  }
  void DropInput() {
    buffer_.consume(buffer_.size());
    Raw().async_read_some(buffer_.prepare(64 << 10), [self = this->shared_from_this()](error_code ec, size_t n) {
      self->lingered_ += n;
      if (ec || self->timed_out_ || self->lingered_ > kLingerBytes) return self->Close();
      self->DropInput();
    });
  }

  HttpFront::Impl& front_;
  const std::shared_ptr<ssl::context> tls_;  // kept alive for stream_ (nullptr: plain TCP)
  Stream stream_;
  asio::steady_timer timer_;
  const std::string address_;
  const int port_;
  // Bounded: the parser moves body bytes out as they arrive, but keeps a chunk-size line (its
  // extensions) or a trailer here until its CRLF, and counts neither against a limit (Beast
  // 1.81): a client streaming one endless extension grew the buffer by gigabytes.
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  HttpRequest request_;
  HandlerPool* pool_ = nullptr;  // the pool the whole request goes to (its head may go elsewhere)
  Phase phase_ = Phase::kIdle;
  bool keep_alive_ = true;
  bool timed_out_ = false;
  // The TLS handshake runs on the TLS lane, which owns the socket meanwhile: as the I/O thread
  // sees it (set at Start, cleared by Handshaken), and as the lane does (cleared when the
  // handshake's handler runs there; only the lane touches it after Start).
  bool on_tls_lane_ = false;
  bool lane_has_socket_ = false;
  int handshake_fd_ = -1;  // the socket's descriptor, for ShutdownMidHandshake
  std::atomic<bool> handshake_abandoned_{false};  // read by the lane (HandshakeAbandonedIndex)
  uint64_t timer_gen_ = 0;
  size_t served_ = 0;
  size_t body_limit_ = 0;
  uint64_t body_reserved_ = 0;  // of front_.body_bytes, for the current request's body
  uint64_t body_expected_ = 0;  // its Content-Length, or the route's limit when chunked
  size_t lingered_ = 0;
};

}  // namespace

void StartConnection(HttpFront::Impl& front, tcp::socket socket, std::string address, int port) {
  if (front.tls) {
    using TlsConnection = Connection<ssl::stream<tcp::socket>>;
    auto c = std::make_shared<TlsConnection>(front, ssl::stream<tcp::socket>(std::move(socket), *front.tls),
                                             front.tls, address, port);
    front.Register(c, address);
    c->Start();
  } else {
    auto c = std::make_shared<Connection<tcp::socket>>(front, std::move(socket), nullptr, address, port);
    front.Register(c, address);
    c->Start();
  }
}

}  // namespace vlmd::serve
