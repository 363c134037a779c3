// The connection layer (serve/http/http_front.h) over raw sockets on 127.0.0.1: idle and
// stalled connections cost no handler thread and are reaped or answered 408 at their deadline,
// connection caps shed with 503, pipelined requests are answered in order, bodies are bounded
// before they are read, Expect: 100-continue, bad chunking, HTTP/1.0.
#include <gtest/gtest.h>
#include <openssl/ssl.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "raw_socket.h"
#include "server_harness.h"
#include "server_test_servers.h"
#include "test_certs.h"

namespace vlmd::serve {
namespace {

using testing::Connect;
using testing::Harness;
using testing::HarnessOptions;
using testing::RawReply;
using testing::ReadUntilClosed;

const std::string kInvokeBody = R"({"prompt":"hi","max_tokens":2})";

std::string InvokeHead(size_t content_length, const std::string& extra = "") {
  return "POST /v1/vlm/invoke HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(content_length) + "\r\n" + extra + "\r\n";
}

bool SendAll(int fd, const std::string& bytes) {
  return send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
}

// Reads until `marker` has arrived (or 5 s pass without a byte).
std::string ReadUntil(int fd, const std::string& marker) {
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::string got;
  char buf[4096];
  while (got.find(marker) == std::string::npos) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  return got;
}

double Metric(Harness& h, const std::string& series) {
  return testing::MetricValue(h.Client()->Get("/metrics")->body, series);
}

// Two hundred idle connections with two handler threads: a normal request is served at once,
// and each idle connection is closed, with no reply, once --keep-alive passes.
TEST(ServerConnectionsTest, IdleConnectionsAreReapedAndHoldNoThread) {
  HarnessOptions o;
  o.server.http_threads = 2;
  o.server.keep_alive_s = 1;
  Harness h(o);
  std::vector<int> idle;
  for (int i = 0; i < 200; ++i) {
    const int fd = Connect(h.port());
    ASSERT_GE(fd, 0);
    idle.push_back(fd);
  }
  auto r = h.Client()->Post("/v1/vlm/invoke", kInvokeBody, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  for (int fd : idle) {
    const RawReply got = ReadUntilClosed(fd, 5);
    EXPECT_TRUE(got.closed) << "an idle connection was kept past --keep-alive";
    EXPECT_EQ(got.bytes, "") << "an idle connection is closed without a reply";
    close(fd);
  }
  EXPECT_GE(Metric(h, "vlm_http_dropped_connections_total{reason=\"idle_reaped\"}"), 200);
}

// Over --max-connections-per-address a client's new connection gets a 503 and is closed; other
// addresses are still served. Over --max-connections, everyone's is.
TEST(ServerConnectionsTest, ConnectionCapsShedWith503) {
  HarnessOptions o;
  o.server.max_connections_per_address = 3;
  o.server.max_connections = 6;
  Harness h(o);
  std::vector<int> held;
  for (int i = 0; i < 3; ++i) {
    const int fd = Connect(h.port(), "127.0.0.2");
    ASSERT_GE(fd, 0);
    held.push_back(fd);
  }
  for (int i = 0; i < 200 && h.server().metrics().http_connections.With().Value() != 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // all three accepted
  }
  const int over = Connect(h.port(), "127.0.0.2");
  ASSERT_GE(over, 0);
  const RawReply shed = ReadUntilClosed(over, 5);
  close(over);
  EXPECT_EQ(shed.bytes.rfind("HTTP/1.1 503", 0), 0u) << shed.bytes;
  EXPECT_NE(shed.bytes.find("too_many_connections_from_address"), std::string::npos) << shed.bytes;
  EXPECT_TRUE(shed.closed);
  // Another address is served beside them.
  const RawReply other = testing::Exchange(h.port(), "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(other.bytes.rfind("HTTP/1.1 200", 0), 0u) << other.bytes;
  // That connection closes (the server lingers until the client's close): three open again.
  auto open_now = [&] { return h.server().metrics().http_connections.With().Value(); };
  for (int i = 0; i < 200 && open_now() != 3; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(open_now(), 3);
  // Three more from other addresses reach the total cap of six; the seventh is shed.
  for (int i = 0; i < 3; ++i) {
    const int fd = Connect(h.port(), "127.0.0." + std::to_string(3 + i));
    ASSERT_GE(fd, 0);
    held.push_back(fd);
  }
  for (int i = 0; i < 200 && open_now() != 6; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(open_now(), 6);
  const RawReply full = testing::Exchange(h.port(), "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(full.bytes.rfind("HTTP/1.1 503", 0), 0u) << full.bytes;
  EXPECT_NE(full.bytes.find("\"too_many_connections\""), std::string::npos) << full.bytes;
  for (int fd : held) close(fd);
  // Once they are gone, connections are accepted again.
  std::string m;
  for (int i = 0; i < 50; ++i) {
    auto r = h.Client()->Get("/metrics");
    if (r && r->status == 200) {
      m = r->body;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_FALSE(m.empty()) << "the server did not accept connections again";
  EXPECT_EQ(testing::MetricValue(m, "vlm_http_refusals_total{reason=\"too_many_connections_from_address\"}"), 1);
  EXPECT_GE(testing::MetricValue(m, "vlm_http_refusals_total{reason=\"too_many_connections\"}"), 1);
}

// HTTP/1.1 pipelining: requests sent in one write are all answered, in order, on the connection.
TEST(ServerConnectionsTest, PipelinedRequestsAreAnsweredInOrder) {
  Harness h;
  const std::string raw = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n" + InvokeHead(kInvokeBody.size()) +
                          kInvokeBody + "GET /ready HTTP/1.1\r\nHost: x\r\n\r\n" +
                          "GET /v1/nothing-here HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  const RawReply r = testing::Exchange(h.port(), raw);
  EXPECT_EQ(r.replies(), 4) << r.bytes;
  EXPECT_TRUE(r.closed);
  const size_t health = r.bytes.find("{\"status\":\"ok\"}");
  const size_t invoke = r.bytes.find("\"text\"");
  const size_t ready = r.bytes.find("{\"status\":\"ready\"}");
  const size_t missing = r.bytes.find("HTTP/1.1 404");
  ASSERT_NE(health, std::string::npos) << r.bytes;
  ASSERT_NE(invoke, std::string::npos) << r.bytes;
  ASSERT_NE(ready, std::string::npos) << r.bytes;
  ASSERT_NE(missing, std::string::npos) << r.bytes;
  EXPECT_LT(health, invoke);
  EXPECT_LT(invoke, ready);
  EXPECT_LT(ready, missing);
}

// A body that stalls past --body-timeout gets a 408, however slowly its bytes trickle.
TEST(ServerConnectionsTest, AStalledBodyGets408AtItsDeadline) {
  HarnessOptions o;
  o.server.body_timeout_s = 1;
  Harness h(o);
  const int fd = Connect(h.port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(SendAll(fd, InvokeHead(100) + "{\"prompt\":"));
  // A byte every 300 ms: each read succeeds, the whole body never arrives in time.
  for (int i = 0; i < 5; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    if (!SendAll(fd, " ")) break;
  }
  const RawReply r = ReadUntilClosed(fd, 5);
  close(fd);
  EXPECT_EQ(r.bytes.rfind("HTTP/1.1 408", 0), 0u) << r.bytes;
  EXPECT_NE(r.bytes.find("body_timeout"), std::string::npos) << r.bytes;
  EXPECT_TRUE(r.closed);
}

// A declared body over --max-body-mb is refused from its head: 413 before a body byte is sent.
TEST(ServerConnectionsTest, ADeclaredBodyOverTheLimitIsRefusedFromItsHead) {
  HarnessOptions o;
  o.server.max_body_bytes = 1 << 20;
  Harness h(o);
  const RawReply r = testing::Exchange(h.port(), InvokeHead(size_t{100} << 20));
  EXPECT_EQ(r.bytes.rfind("HTTP/1.1 413", 0), 0u) << r.bytes;
  EXPECT_NE(r.bytes.find("payload_too_large"), std::string::npos) << r.bytes;
  EXPECT_TRUE(r.closed);
}

// Expect: 100-continue: the client hears "100 Continue" before it sends the body, and only when
// the head was accepted; a refused head gets its final answer instead (and the body is not read).
TEST(ServerConnectionsTest, ExpectContinueIsAnsweredOnlyForAcceptedHeads) {
  HarnessOptions o;
  o.server.guard.api_key = "secret";
  Harness h(o);
  const int fd = Connect(h.port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(SendAll(fd, InvokeHead(kInvokeBody.size(), "Authorization: Bearer secret\r\nExpect: 100-continue\r\n")));
  const std::string interim = ReadUntil(fd, "\r\n\r\n");
  EXPECT_EQ(interim, "HTTP/1.1 100 Continue\r\n\r\n");
  ASSERT_TRUE(SendAll(fd, kInvokeBody));
  const std::string final_reply = ReadUntil(fd, "\"text\"");
  EXPECT_EQ(final_reply.rfind("HTTP/1.1 200", 0), 0u) << final_reply;
  close(fd);

  const RawReply refused = testing::Exchange(h.port(), InvokeHead(kInvokeBody.size(), "Expect: 100-continue\r\n"));
  EXPECT_EQ(refused.bytes.rfind("HTTP/1.1 401", 0), 0u) << refused.bytes;
  EXPECT_EQ(refused.bytes.find("100 Continue"), std::string::npos) << refused.bytes;
  EXPECT_TRUE(refused.closed) << "the announced body was never read: the connection must close";
}

// Chunked framing errors are 400 and close the connection; so is a Transfer-Encoding other than
// chunked alone (its length is unknowable, or its body not what it says) and one in HTTP/1.0.
TEST(ServerConnectionsTest, BadChunkingIs400AndCloses) {
  Harness h;
  const std::string head = "POST /v1/vlm/invoke HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n";
  const std::string hidden = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  for (const std::string& raw :
       {head + "Transfer-Encoding: chunked\r\n\r\nzz\r\n" + kInvokeBody + "\r\n0\r\n\r\n" + hidden,
        head + "Transfer-Encoding: chunked\r\n\r\nfffffffffffffffffff\r\nabc\r\n0\r\n\r\n" + hidden,
        head + "Transfer-Encoding: gzip\r\n\r\n" + kInvokeBody + hidden,
        // A coding before chunked: the body would be read as if it were not gzipped.
        head + "Transfer-Encoding: gzip, chunked\r\n\r\n1\r\n{\r\n0\r\n\r\n" + hidden,
        // HTTP/1.0 has no Transfer-Encoding (RFC 9112 6.1): faulty framing, whatever it says.
        "POST /v1/vlm/invoke HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n"
        "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + hidden}) {
    const RawReply r = testing::Exchange(h.port(), raw);
    EXPECT_EQ(r.bytes.rfind("HTTP/1.1 400", 0), 0u) << r.bytes;
    EXPECT_EQ(r.replies(), 1) << "the hidden request was answered: " << r.bytes;
    EXPECT_TRUE(r.closed);
  }
  // A well-formed chunked body is served.
  char size[16];
  std::snprintf(size, sizeof(size), "%zx", kInvokeBody.size());
  const RawReply ok = testing::Exchange(
      h.port(), head + "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + size + "\r\n" + kInvokeBody +
                    "\r\n0\r\n\r\n");
  EXPECT_EQ(ok.bytes.rfind("HTTP/1.1 200", 0), 0u) << ok.bytes;
}

// HEAD is GET without the body: the length is announced, no body follows, and the connection
// stays in step (the next reply on it is read correctly).
TEST(ServerConnectionsTest, HeadAnswersWithoutABody) {
  Harness h;
  const RawReply r = testing::Exchange(
      h.port(), "HEAD /health HTTP/1.1\r\nHost: x\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(r.replies(), 2) << r.bytes;
  const size_t second = r.bytes.find("HTTP/1.1 ", 1);
  ASSERT_NE(second, std::string::npos) << r.bytes;
  const std::string head_reply = r.bytes.substr(0, second);
  EXPECT_EQ(head_reply.rfind("HTTP/1.1 200", 0), 0u) << head_reply;
  EXPECT_NE(head_reply.find("Content-Length: 15\r\n"), std::string::npos) << head_reply;
  EXPECT_EQ(head_reply.substr(head_reply.size() - 4), "\r\n\r\n") << "a body followed the HEAD reply";
  EXPECT_NE(r.bytes.find("{\"status\":\"ok\"}", second), std::string::npos) << r.bytes;
}

// Stopping the server while a reply streams: the stream is finished (its last event and the
// final chunk reach the client) and Stop returns; it used to wait forever once the I/O thread
// ran out of work between two chunks.
TEST(ServerConnectionsTest, StopFinishesAStreamInFlight) {
  auto h = std::make_unique<Harness>();
  std::atomic<int> chunks{0};
  std::string body;
  std::thread client([&] {
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/vlm/invoke";
    req.body = R"({"prompt":"write a long story","max_tokens":60,"stream":true})";
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      body.append(data, n);
      chunks.fetch_add(1);
      return true;
    };
    (void)h->Client()->send(req);
  });
  for (int i = 0; i < 500 && chunks.load() < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_GE(chunks.load(), 2) << "the stream did not start";
  h.reset();  // Server::Stop
  client.join();
  EXPECT_NE(body.find("data: [DONE]"), std::string::npos) << body;
}

// HTTP/1.0 clients are answered and the connection closes (no keep-alive asked).
TEST(ServerConnectionsTest, Http10IsAnsweredAndClosed) {
  Harness h;
  const RawReply r = testing::Exchange(h.port(), "GET /health HTTP/1.0\r\n\r\n");
  EXPECT_EQ(r.bytes.rfind("HTTP/1.1 200", 0), 0u) << r.bytes;
  EXPECT_NE(r.bytes.find("Connection: close"), std::string::npos) << r.bytes;
  EXPECT_TRUE(r.closed);
}

// A TLS client that closes its connection (close_notify, then the socket) before a non-streamed
// reply cancels its sequence like a plain one: the server peeked the alert's bytes, took them for
// a live client and generated to the end.
TEST(ServerConnectionsTest, ATlsClientThatClosesCancelsItsSequence) {
  TempDir dir;
  const testing::PemPair pem = testing::SelfSignedCert("vlmd-test-close");
  HarnessOptions o;
  o.n_ctx = 4096;
  o.server.tls_cert_file = dir.Write("cert.pem", pem.cert);
  o.server.tls_key_file = dir.Write("key.pem", pem.key);
  Harness h(o);
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  ASSERT_NE(ctx, nullptr);
  const int fd = Connect(h.port());
  ASSERT_GE(fd, 0);
  SSL* ssl = SSL_new(ctx);
  SSL_set_fd(ssl, fd);
  ASSERT_EQ(SSL_connect(ssl), 1);
  const std::string request =
      testing::InvokeRequest(R"({"prompt":"write a very long story","max_tokens":4000})");
  ASSERT_EQ(SSL_write(ssl, request.data(), static_cast<int>(request.size())), static_cast<int>(request.size()));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // generating by now
  SSL_shutdown(ssl);  // close_notify
  close(fd);
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  double tokens = -1;
  auto c = std::make_unique<httplib::Client>("https://127.0.0.1:" + std::to_string(h.port()));
  c->enable_server_certificate_verification(false);
  for (int i = 0; i < 200 && tokens <= 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    auto m = c->Get("/metrics");
    if (m) tokens = testing::MetricValue(m->body, "vlm_generated_tokens_total");
  }
  EXPECT_GT(tokens, 0) << "the cancelled sequence should complete as cancelled";
  EXPECT_LT(tokens, 4000) << "the sequence ran to max_tokens after its client left";
}

// CPU time, in ns, that this process's threads named `name` have run (/proc/self/task/*/comm and
// schedstat; the clock ticks of stat where schedstat is missing); -1 when no thread has the name.
int64_t ThreadCpuNs(const std::string& name) {
  int64_t total = -1;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string thread_name;
    if (!std::getline(comm, thread_name) || thread_name != name) continue;
    int64_t ns = 0;
    std::ifstream sched(task.path() / "schedstat");
    if (!(sched >> ns)) {
      std::ifstream stat(task.path() / "stat");
      std::string line;
      std::getline(stat, line);
      std::istringstream fields(line.substr(line.rfind(')') + 2));  // after "pid (comm) "
      std::string field;
      int64_t utime = 0, stime = 0;
      for (int i = 3; i <= 15 && fields >> field; ++i) {  // fields 14 and 15: utime, stime
        if (i == 14) utime = std::stoll(field);
        if (i == 15) stime = std::stoll(field);
      }
      ns = (utime + stime) * (1000000000 / sysconf(_SC_CLK_TCK));
    }
    total = std::max<int64_t>(total, 0) + ns;
  }
  return total;
}

// One TLS client connection: handshaken (SSL_connect's result), then closed.
int TlsHandshake(SSL_CTX* ctx, int port) {
  const int fd = Connect(port);
  if (fd < 0) return -1;
  SSL* ssl = SSL_new(ctx);
  SSL_set_fd(ssl, fd);
  const int result = SSL_connect(ssl);
  if (result == 1) SSL_shutdown(ssl);
  SSL_free(ssl);
  close(fd);
  return result;
}

// TLS handshakes (their key exchange and signature: a few milliseconds of CPU with an RSA-3072
// key) run on the front's TLS thread, not on its I/O thread, where a flood of new TLS
// connections held every established connection behind them.
TEST(ServerConnectionsTest, TlsHandshakesRunOffTheIoThread) {
  TempDir dir;
  const testing::PemPair pem = testing::SelfSignedCert("vlmd-test-lane", testing::KeyKind::kRsa3072);
  HarnessOptions o;
  o.load_model = false;
  o.server.tls_cert_file = dir.Write("cert.pem", pem.cert);
  o.server.tls_key_file = dir.Write("key.pem", pem.key);
  Harness h(o);
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  ASSERT_NE(ctx, nullptr);
  ASSERT_EQ(TlsHandshake(ctx, h.port()), 1);  // the lane has started and run one
  const int64_t tls_before = ThreadCpuNs("http-tls"), io_before = ThreadCpuNs("http-io");
  ASSERT_GE(tls_before, 0) << "no thread named http-tls";
  ASSERT_GE(io_before, 0) << "no thread named http-io";
  for (int i = 0; i < 100; ++i) ASSERT_EQ(TlsHandshake(ctx, h.port()), 1) << i;
  SSL_CTX_free(ctx);
  const int64_t tls_ns = ThreadCpuNs("http-tls") - tls_before, io_ns = ThreadCpuNs("http-io") - io_before;
  EXPECT_GT(tls_ns, 2 * io_ns) << "handshakes: TLS thread " << tls_ns / 1000 << " us, I/O thread " << io_ns / 1000
                               << " us";
}

// A handshake that stalls (a ClientHello's record header, then nothing) is closed at the head
// deadline and counted; one still stalled when the server stops does not hold the stop.
TEST(ServerConnectionsTest, AStalledTlsHandshakeIsClosedAtItsDeadline) {
  TempDir dir;
  const testing::PemPair pem = testing::SelfSignedCert("vlmd-test-stall");
  HarnessOptions o;
  o.load_model = false;
  o.server.read_timeout_s = 1;
  o.server.tls_cert_file = dir.Write("cert.pem", pem.cert);
  o.server.tls_key_file = dir.Write("key.pem", pem.key);
  auto h = std::make_unique<Harness>(o);
  const std::string record_head("\x16\x03\x01\x02\x00", 5);  // a handshake record of 512 bytes
  const int stalled = Connect(h->port());
  ASSERT_GE(stalled, 0);
  ASSERT_TRUE(SendAll(stalled, record_head));
  const auto start = std::chrono::steady_clock::now();
  const RawReply got = ReadUntilClosed(stalled, 5);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  close(stalled);
  EXPECT_TRUE(got.bytes.empty()) << got.bytes.size() << " bytes";
  EXPECT_LT(waited, 4.0) << "the stalled handshake was not closed at its 1 s deadline";
  auto c = std::make_unique<httplib::Client>("https://127.0.0.1:" + std::to_string(h->port()));
  c->enable_server_certificate_verification(false);
  auto m = c->Get("/metrics");
  ASSERT_TRUE(m) << httplib::to_string(m.error());
  EXPECT_GE(testing::MetricValue(m->body, "vlm_http_dropped_connections_total{reason=\"tls_handshake_failed\"}"), 1);

  const int left = Connect(h->port());  // stalled when the server stops
  ASSERT_GE(left, 0);
  ASSERT_TRUE(SendAll(left, record_head));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto stop_start = std::chrono::steady_clock::now();
  h.reset();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - stop_start).count(), 4.0);
  close(left);
}

// HTTPS with --tls-cert/--tls-key: served with the certificate (a client verifying it against
// that certificate connects; plain HTTP does not get an answer), and when the files change the
// new certificate is what new connections get; a pair that does not load leaves the old one.
TEST(ServerConnectionsTest, TlsServesTheCertificateAndReloadsIt) {
  TempDir dir;
  const testing::PemPair a = testing::SelfSignedCert("vlmd-test-a");
  const testing::PemPair b = testing::SelfSignedCert("vlmd-test-b");
  const std::string a_ca = dir.Write("a-ca.pem", a.cert), b_ca = dir.Write("b-ca.pem", b.cert);
  HarnessOptions o;
  o.server.tls_cert_file = dir.Write("cert.pem", a.cert);
  o.server.tls_key_file = dir.Write("key.pem", a.key);
  o.server.tls_reload_interval = std::chrono::milliseconds(50);
  Harness h(o);
  auto https = [&](const std::string& ca) {
    auto c = std::make_unique<httplib::Client>("https://127.0.0.1:" + std::to_string(h.port()));
    c->set_ca_cert_path(ca.c_str());
    c->enable_server_certificate_verification(true);
    c->set_connection_timeout(5, 0);
    return c;
  };
  auto health = https(a_ca)->Get("/health");
  ASSERT_TRUE(health) << httplib::to_string(health.error());
  EXPECT_EQ(health->status, 200);
  auto invoke = https(a_ca)->Post("/v1/vlm/invoke", kInvokeBody, "application/json");
  ASSERT_TRUE(invoke);
  EXPECT_EQ(invoke->status, 200) << invoke->body;
  EXPECT_FALSE(https(b_ca)->Get("/health")) << "verified against a certificate it does not serve";
  auto plain = h.Client();
  plain->set_read_timeout(2, 0);
  auto cleartext = plain->Get("/health");
  EXPECT_TRUE(!cleartext || cleartext->status != 200) << "plain HTTP answered on the TLS port";

  // Replaced (each file renamed into place): new connections get certificate b. (A check between
  // the two renames sees b's certificate with a's key: that reload fails, the next one loads.)
  std::filesystem::rename(dir.Write("cert.new", b.cert), o.server.tls_cert_file);
  std::filesystem::rename(dir.Write("key.new", b.key), o.server.tls_key_file);
  bool switched = false;
  for (int i = 0; i < 100 && !switched; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    auto r = https(b_ca)->Get("/health");
    switched = r && r->status == 200;
  }
  EXPECT_TRUE(switched) << "the new certificate was not served";
  EXPECT_FALSE(https(a_ca)->Get("/health")) << "the old certificate is still served";

  // A key that does not load: the reload fails and certificate b keeps serving.
  auto before = https(b_ca)->Get("/metrics");
  ASSERT_TRUE(before);
  const double failed_before =
      std::max(0.0, testing::MetricValue(before->body, "vlm_http_tls_reloads_total{result=\"failed\"}"));
  std::filesystem::rename(dir.Write("key.bad", "-----BEGIN PRIVATE KEY-----\ngarbage\n"), o.server.tls_key_file);
  double failed = failed_before;
  for (int i = 0; i < 100 && failed <= failed_before; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    auto m = https(b_ca)->Get("/metrics");
    ASSERT_TRUE(m) << "certificate b stopped serving after a bad reload";
    failed = testing::MetricValue(m->body, "vlm_http_tls_reloads_total{result=\"failed\"}");
  }
  EXPECT_EQ(failed, failed_before + 1);
  auto after = https(b_ca)->Get("/metrics");
  ASSERT_TRUE(after);
  EXPECT_GE(testing::MetricValue(after->body, "vlm_http_tls_reloads_total{result=\"ok\"}"), 1) << after->body;
  EXPECT_GE(testing::MetricValue(after->body, "vlm_http_dropped_connections_total{reason=\"tls_handshake_failed\"}"), 1);
}

}  // namespace
}  // namespace vlmd::serve
