// The server under concurrency and hostile clients, over real sockets on 127.0.0.1: batched
// answers equal one-at-a-time answers, a full queue gives 429 and nothing hangs, bad input gets
// the right 4xx and the server stays up, slow or vanished clients do not hold resources.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>

#include "serve/api/requests.h"
#include "raw_socket.h"
#include "server_harness.h"

namespace vlmd::serve {
namespace {

using nlohmann::json;
using testing::FixtureImage;
using testing::Harness;
using testing::HarnessOptions;

json InvokeBody(int i) {
  json req{{"prompt", "Request number " + std::to_string(i) + ": tell me something."},
           {"max_tokens", 6 + i % 5}};
  if (i % 3 == 0) req["image_base64"] = api::EncodeBase64(FixtureImage(i % 2 ? "img-50x100.png" : "img-128x96.png"));
  return req;
}

TEST(ServerLoadTest, SixteenConcurrentClientsGetTheirOneAtATimeAnswers) {
  HarnessOptions o;
  o.scheduler.max_batch = 4;
  // Prompts (~100 rows with an image) are prefilled 7 rows per step, interleaved with the
  // decode steps of the others, chunk edges falling inside images.
  o.scheduler.prefill_chunk = 7;
  Harness h(o);
  constexpr int kClients = 16;
  std::vector<std::string> alone(kClients), together(kClients);
  std::vector<int> status(kClients, 0);
  std::vector<std::string> client_error(kClients);
  {
    auto c = h.Client();
    for (int i = 0; i < kClients; ++i) {
      auto r = c->Post("/v1/vlm/invoke", InvokeBody(i).dump(), "application/json");
      ASSERT_TRUE(r);
      ASSERT_EQ(r->status, 200) << r->body;
      alone[i] = json::parse(r->body)["text"];
    }
  }
  // An anchor that decodes long: the 16 are sent once it streams its first token, so they join
  // its decode steps whatever the machine's speed (the batching check below does not hang on
  // 16 threads happening to start together).
  std::mutex started_mu;
  std::condition_variable started_cv;
  bool started = false;
  int anchor_status = 0;
  std::thread anchor([&] {
    auto c = h.Client();
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/vlm/invoke";
    req.body = json{{"prompt", "count slowly"}, {"max_tokens", 300}, {"stream", true}}.dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
      std::lock_guard<std::mutex> lock(started_mu);
      started = true;
      started_cv.notify_all();
      return true;
    };
    auto r = c->send(req);
    anchor_status = r ? r->status : -1;
    std::lock_guard<std::mutex> lock(started_mu);
    started = true;  // also when it failed: the assertions below name it
    started_cv.notify_all();
  });
  {
    std::unique_lock<std::mutex> lock(started_mu);
    started_cv.wait(lock, [&] { return started; });
  }
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      auto c = h.Client();
      auto r = c->Post("/v1/vlm/invoke", InvokeBody(i).dump(), "application/json");
      if (!r) {
        client_error[i] = httplib::to_string(r.error());
        return;
      }
      status[i] = r->status;
      if (r->status == 200) together[i] = json::parse(r->body)["text"];
    });
  }
  for (auto& t : threads) t.join();
  anchor.join();
  EXPECT_EQ(anchor_status, 200);
  for (int i = 0; i < kClients; ++i) {
    EXPECT_EQ(status[i], 200) << "client " << i << " " << client_error[i];
    EXPECT_EQ(together[i], alone[i]) << "client " << i;
  }
  // Continuous batching really batched: decode steps ran several sequences (the anchor's 300
  // tokens alone would take 300 steps).
  const std::string m = h.Client()->Get("/metrics")->body;
  const double steps = testing::MetricValue(m, "vlm_decode_steps_total");
  const double tokens = testing::MetricValue(m, "vlm_generated_tokens_total");
  EXPECT_GT(steps, 0);
  EXPECT_LT(steps + 2 * kClients, tokens) << "decode steps should be fewer than tokens when batched";
}

TEST(ServerLoadTest, FullQueueGives429WithRetryAfterAndNothingHangs) {
  HarnessOptions o;
  o.scheduler.max_batch = 1;
  o.scheduler.queue_size = 1;
  Harness h(o);
  constexpr int kClients = 8;
  std::vector<int> status(kClients, 0);
  std::vector<std::string> retry(kClients);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      auto c = h.Client();
      auto r = c->Post("/v1/vlm/invoke", R"({"prompt":"go on and on","max_tokens":40})", "application/json");
      if (!r) return;
      status[i] = r->status;
      retry[i] = r->get_header_value("Retry-After");
    });
  }
  for (auto& t : threads) t.join();
  int ok = 0, full = 0;
  for (int i = 0; i < kClients; ++i) {
    if (status[i] == 200) ++ok;
    if (status[i] == 429) {
      ++full;
      EXPECT_EQ(retry[i], "1");
    }
    EXPECT_TRUE(status[i] == 200 || status[i] == 429) << status[i];
  }
  EXPECT_GE(ok, 1);
  EXPECT_GE(full, 1);
  // The server is still serving.
  auto r = h.Client()->Post("/v1/vlm/invoke", R"({"prompt":"again","max_tokens":2})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  // Requests by the version that served them: the 429s ran nowhere.
  const std::string metrics = h.Client()->Get("/metrics")->body;
  double served = 0;
  std::istringstream lines(metrics);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("vlm_route_version_total{", 0) == 0) served += std::stod(line.substr(line.rfind(' ') + 1));
  }
  EXPECT_EQ(served, ok + 1) << metrics;
}

struct BadCase {
  const char* name;
  std::string content_type;
  std::string body;
  int status;
};

TEST(ServerLoadTest, BadInputMatrixGetsTheRight4xxAndTheServerStaysUp) {
  HarnessOptions o;
  o.server.max_body_bytes = 1 << 20;
  o.server.limits.max_images = 2;
  Harness h(o);
  const std::string png_b64 = api::EncodeBase64(FixtureImage("img-50x100.png"));
  const std::string b = "XyZbOuNdArY";
  std::vector<BadCase> cases{
      {"broken json", "application/json", R"({"prompt": "hi", )", 400},
      {"json not an object", "application/json", "[1,2]", 400},
      {"truncated base64", "application/json",
       json{{"prompt", "x"}, {"image_base64", png_b64.substr(0, png_b64.size() - 5)}}.dump(), 400},
      {"bad base64 char", "application/json", json{{"prompt", "x"}, {"image_base64", "AA*A"}}.dump(), 400},
      {"unsupported image", "application/json",
       json{{"prompt", "x"}, {"image_base64", api::EncodeBase64("GIF89a not supported here")}}.dump(), 415},
      {"corrupt png", "application/json",
       json{{"prompt", "x"}, {"image_base64", api::EncodeBase64(FixtureImage("img-50x100.png").substr(0, 60))}}.dump(),
       400},
      {"too many images", "application/json",
       json{{"prompt", "x"}, {"images_base64", {png_b64, png_b64, png_b64}}}.dump(), 413},
      {"oversized body", "application/json", std::string(2 << 20, ' '), 413},
      {"wrong content type", "text/plain", "hello", 415},
      {"max_tokens zero", "application/json", R"({"prompt":"x","max_tokens":0})", 400},
      {"malformed multipart", "multipart/form-data; boundary=" + b,
       "--" + b + "\r\nContent-Disposition: form-data; name=\"image\"\r\n\r\nabc", 400},
      {"multipart bad request json", "multipart/form-data; boundary=" + b,
       "--" + b + "\r\nContent-Disposition: form-data; name=\"request\"\r\n\r\n{oops\r\n--" + b + "--\r\n", 400},
  };
  auto c = h.Client();
  for (const BadCase& bc : cases) {
    auto r = c->Post("/v1/vlm/invoke", bc.body, bc.content_type.c_str());
    ASSERT_TRUE(r) << bc.name;
    EXPECT_EQ(r->status, bc.status) << bc.name << ": " << r->body;
    const json e = json::parse(r->body, nullptr, false);
    EXPECT_TRUE(e.is_object() && e.contains("error") && e["error"].contains("message") &&
                e["error"].contains("type") && e["error"].contains("code"))
        << bc.name << ": " << r->body;
  }
  auto alive = c->Post("/v1/vlm/invoke", R"({"prompt":"still there?","max_tokens":2})", "application/json");
  ASSERT_TRUE(alive);
  EXPECT_EQ(alive->status, 200);
}

// Ambiguous framing (RFC 9112 6.3) is refused and the connection closed, so that a request
// hidden in the body is never read as the next one (request smuggling); a header flood is 431.
TEST(ServerLoadTest, AmbiguousFramingAndHeaderFloodsAreRefused) {
  Harness h;
  const std::string body = R"({"prompt":"hi","max_tokens":2})";
  const std::string hidden = "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string len = std::to_string(body.size());
  const std::string head = "POST /v1/vlm/invoke HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n";
  struct Case {
    const char* name;
    std::string raw;
    const char* status;
  };
  const Case cases[] = {
      {"two Content-Lengths that differ",
       head + "Content-Length: " + len + "\r\nContent-Length: " + std::to_string(body.size() + hidden.size()) +
           "\r\n\r\n" + body + hidden,
       "HTTP/1.1 400"},
      {"Content-Length with Transfer-Encoding",
       head + "Content-Length: " + len + "\r\nTransfer-Encoding: chunked\r\n\r\n" + body + hidden,
       "HTTP/1.1 400"},
      {"150 header lines", [&] {
         std::string r = head + "Content-Length: " + len + "\r\n";
         for (int i = 0; i < 150; ++i) r += "X-Pad-" + std::to_string(i) + ": 1\r\n";
         return r + "\r\n" + body;
       }(),
       "HTTP/1.1 431"},
  };
  for (const Case& c : cases) {
    const testing::RawReply r = testing::Exchange(h.port(), c.raw);
    EXPECT_EQ(r.bytes.rfind(c.status, 0), 0u) << c.name << ": " << r.bytes;
    EXPECT_EQ(r.replies(), 1) << c.name << ": the hidden request was answered: " << r.bytes;
    EXPECT_TRUE(r.closed) << c.name << ": the connection stayed open";
    EXPECT_NE(r.bytes.find("\"code\""), std::string::npos) << c.name << ": no JSON error";
  }
  // Two equal Content-Lengths are one length: served.
  const testing::RawReply same = testing::Exchange(
      h.port(), head + "Content-Length: " + len + "\r\nContent-Length: " + len +
                    "\r\nConnection: close\r\n\r\n" + body);
  EXPECT_EQ(same.bytes.rfind("HTTP/1.1 200", 0), 0u) << same.bytes;
}

// A chunked body past --max-body-mb is cut off where it passes the limit: the server stops
// reading (the client cannot push more than the limit plus the sockets' buffers) and answers 413.
// It used to read all of it before the 413 (256 MiB: +820 MiB resident).
TEST(ServerLoadTest, ChunkedBodyOverTheLimitIsCutOffWhileReading) {
  HarnessOptions o;
  o.server.max_body_bytes = 1 << 20;
  Harness h(o);
  const int fd = testing::Connect(h.port());
  ASSERT_GE(fd, 0);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  const std::string head =
      "POST /v1/vlm/invoke HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Transfer-Encoding: chunked\r\n\r\n";
  ASSERT_EQ(send(fd, head.data(), head.size(), MSG_NOSIGNAL), static_cast<ssize_t>(head.size()));
  const std::string chunk = "10000\r\n" + std::string(1 << 16, ' ') + "\r\n";  // 64 KiB each
  constexpr int64_t kTotal = int64_t{256} << 20;
  int64_t sent = 0;
  while (sent < kTotal) {
    const ssize_t n = send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL);
    if (n <= 0) break;  // the server stopped reading (timeout) or closed (reset)
    sent += n;
  }
  // Loopback buffers may hold tens of MiB (receive buffers autotune up to net.ipv4.tcp_rmem's
  // maximum, 32 MiB here); reading the whole body would take all 256.
  EXPECT_LT(sent, kTotal / 2) << "the server read far past the 1 MiB limit";
  std::string got;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) got.append(buf, static_cast<size_t>(n));
  close(fd);
  // The 413 may be lost to the connection reset of a close with unread data; when it arrives,
  // it is a 413.
  EXPECT_TRUE(got.empty() || got.rfind("HTTP/1.1 413", 0) == 0) << got.substr(0, 200);
  auto alive = h.Client()->Post("/v1/vlm/invoke", R"({"prompt":"hi","max_tokens":2})", "application/json");
  ASSERT_TRUE(alive);
  EXPECT_EQ(alive->status, 200);
}

// A chunk-size line that never ends (an endless chunk extension) or a trailer that never ends:
// neither counts as body, so the body limit did not stop them and the server buffered all of it
// (300 MiB: +320 MiB resident). The read buffer is bounded: the server stops reading there and
// answers 400 (or the reset of a close with unread data loses the reply).
TEST(ServerLoadTest, EndlessChunkHeaderOrTrailerIsCutOff) {
  HarnessOptions o;
  o.server.max_body_bytes = 1 << 20;
  Harness h(o);
  const std::string head =
      "POST /v1/vlm/invoke HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Transfer-Encoding: chunked\r\n\r\n";
  for (const std::string& start : {std::string("1;ext="), std::string("0\r\nX-Trailer: ")}) {
    const int fd = testing::Connect(h.port());
    ASSERT_GE(fd, 0);
    timeval tv{5, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    const std::string first = head + start;
    ASSERT_EQ(send(fd, first.data(), first.size(), MSG_NOSIGNAL), static_cast<ssize_t>(first.size()));
    const std::string filler(1 << 16, 'b');
    constexpr int64_t kTotal = int64_t{256} << 20;
    int64_t sent = 0;
    while (sent < kTotal) {
      const ssize_t n = send(fd, filler.data(), filler.size(), MSG_NOSIGNAL);
      if (n <= 0) break;  // the server stopped reading or closed
      sent += n;
    }
    EXPECT_LT(sent, kTotal / 2) << start << ": the server read far past any bound";
    std::string got;
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) > 0) got.append(buf, static_cast<size_t>(n));
    close(fd);
    EXPECT_TRUE(got.empty() || got.rfind("HTTP/1.1 400", 0) == 0) << start << ": " << got.substr(0, 200);
  }
  auto alive = h.Client()->Get("/health");
  ASSERT_TRUE(alive);
  EXPECT_EQ(alive->status, 200);
}

TEST(ServerLoadTest, SlowLorisClientsAreDroppedAndDoNotBlockOthers) {
  HarnessOptions o;
  o.server.http_threads = 2;
  o.server.read_timeout_s = 1;
  o.server.keep_alive_s = 1;
  Harness h(o);
  // Fifty slow clients with half a request head each: with a thread per connection they took
  // every thread; the connection layer holds them without one.
  std::vector<int> fds;
  for (int i = 0; i < 50; ++i) {
    const int fd = testing::Connect(h.port());
    ASSERT_GE(fd, 0);
    const char partial[] = "POST /v1/vlm/invoke HTTP/1.1\r\nHost: x\r\nContent-Len";
    ASSERT_GT(write(fd, partial, sizeof(partial) - 1), 0);
    fds.push_back(fd);
  }
  // A normal client is served meanwhile, before the stalled heads' deadline.
  auto c = h.Client();
  c->set_connection_timeout(10, 0);
  auto r = c->Post("/v1/vlm/invoke", R"({"prompt":"hi","max_tokens":2})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  for (int fd : fds) {
    // At the head deadline each stalled request gets a 408 and its connection is closed.
    const testing::RawReply got = testing::ReadUntilClosed(fd, 5);
    EXPECT_TRUE(got.closed) << "the server should close a stalled connection";
    EXPECT_EQ(got.bytes.rfind("HTTP/1.1 408", 0), 0u) << got.bytes;
    EXPECT_NE(got.bytes.find("\"head_timeout\""), std::string::npos) << got.bytes;
    close(fd);
  }
  const std::string m = c->Get("/metrics")->body;
  EXPECT_EQ(testing::MetricValue(m, "vlm_http_refusals_total{reason=\"head_timeout\"}"), 50) << m;
}

TEST(ServerLoadTest, AClientThatDisconnectsMidStreamCancelsItsSequence) {
  Harness h;
  auto c = h.Client();
  const json req{{"prompt", "write a very long story"}, {"max_tokens", 400}, {"stream", true}};
  int chunks = 0;
  httplib::Request hreq;
  hreq.method = "POST";
  hreq.path = "/v1/vlm/invoke";
  hreq.body = req.dump();
  hreq.set_header("Content-Type", "application/json");
  hreq.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++chunks < 2; };
  auto r = c->send(hreq);
  EXPECT_GE(chunks, 2);
  // The scheduler notices at its next step; generated tokens stop far short of 400.
  double tokens = -1;
  for (int i = 0; i < 100; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const std::string m = h.Client()->Get("/metrics")->body;
    tokens = testing::MetricValue(m, "vlm_generated_tokens_total");
    if (tokens > 0) break;
  }
  EXPECT_GT(tokens, 0) << "the cancelled sequence should complete as cancelled";
  EXPECT_LT(tokens, 400);
}

// A connection that has asked for a long non-streamed reply (4000 tokens: the server needs
// n_ctx 4096) and is generating by now; -1 when it could not send.
int StartLongGeneration(int port) {
  const int fd = testing::SendInvoke(port, json{{"prompt", "write a very long story"}, {"max_tokens", 4000}}.dump());
  if (fd >= 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  return fd;
}

// Without streaming the server writes nothing until the answer is done, so it has to look at the
// connection itself: a client that hangs up mid-generation still frees its slot early.
TEST(ServerLoadTest, AClientThatDisconnectsBeforeANonStreamedReplyCancelsItsSequence) {
  HarnessOptions o;
  o.n_ctx = 4096;
  Harness h(o);
  const int fd = StartLongGeneration(h.port());
  ASSERT_GE(fd, 0);
  close(fd);
  double tokens = -1;
  for (int i = 0; i < 200 && tokens <= 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    tokens = testing::MetricValue(h.Client()->Get("/metrics")->body, "vlm_generated_tokens_total");
  }
  EXPECT_GT(tokens, 0) << "the cancelled sequence should complete as cancelled";
  EXPECT_LT(tokens, 4000) << "the sequence ran to max_tokens after its client left";
  const std::string m = h.Client()->Get("/metrics")->body;
  EXPECT_NE(m.find("status=\"499\""), std::string::npos) << "no 499 in the request metrics";
}

// A request whose client left while it waited for the (one) handler thread is answered 499
// without any of its work: its image was decoded, encoded and looked up in the cache for nobody.
TEST(ServerLoadTest, ARequestWhoseClientLeftInTheQueueIsNotPrepared) {
  HarnessOptions o;
  o.n_ctx = 4096;
  o.server.http_threads = 1;
  Harness h(o);
  const int busy = StartLongGeneration(h.port());
  ASSERT_GE(busy, 0);
  const std::string image = api::EncodeBase64(FixtureImage("img-128x96.png"));
  const int gone = testing::SendInvoke(
      h.port(), json{{"prompt", "what?"}, {"max_tokens", 2}, {"image_base64", image}}.dump());
  ASSERT_GE(gone, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // read and queued by now
  close(gone);
  close(busy);  // the generation is cancelled; the thread takes the queued request
  double answered = 0;
  std::string m;
  for (int i = 0; i < 200 && answered < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
    m = h.Client()->Get("/metrics")->body;
    answered = testing::MetricValue(m, R"(vlm_requests_total{route="/v1/vlm/invoke",status="499"})");
  }
  EXPECT_EQ(answered, 2) << m;
  EXPECT_EQ(testing::MetricValue(m, "vlm_embedding_cache_queries_total"), 0) << "its image was prepared";
}

// A client that only half-closes (shutdown of its sending side) counts as gone, and may still
// read: it gets the 499 with "Connection: close" and then the end of the connection (the 499
// said keep-alive).
TEST(ServerLoadTest, AHalfClosedClientGetsItsEndOfConnection) {
  HarnessOptions o;
  o.n_ctx = 4096;
  Harness h(o);
  const int fd = StartLongGeneration(h.port());
  ASSERT_GE(fd, 0);
  ASSERT_EQ(shutdown(fd, SHUT_WR), 0);
  const testing::RawReply r = testing::ReadUntilClosed(fd, 5);
  close(fd);
  EXPECT_EQ(r.bytes.rfind("HTTP/1.1 499", 0), 0u) << r.bytes;
  EXPECT_NE(r.bytes.find("Connection: close"), std::string::npos) << r.bytes;
  EXPECT_TRUE(r.closed) << "the connection stayed open after the 499";
}


// Queued requests whose clients hang up leave the queue at once: they used to hold their --queue
// slots (and count in vlm_queue_depth, which autoscalers read) until the running job ended, and
// a live client got 429 meanwhile.
TEST(ServerLoadTest, AbandonedQueuedRequestsFreeTheirQueueSlots) {
  HarnessOptions o;
  o.n_ctx = 4096;
  o.scheduler.max_batch = 1;
  o.scheduler.queue_size = 2;
  Harness h(o);
  auto send = [&](const std::string& body) {
    const int fd = testing::SendInvoke(h.port(), body);
    EXPECT_GE(fd, 0);
    return fd;
  };
  auto queue_depth = [&] {
    return testing::MetricValue(h.Client()->Get("/metrics")->body, "vlm_queue_depth");
  };
  const int running = send(json{{"prompt", "write a very long story"}, {"max_tokens", 4000}}.dump());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // generating by now
  const std::string short_job = json{{"prompt", "hi"}, {"max_tokens", 2}}.dump();
  const int a = send(short_job), b = send(short_job);
  for (int i = 0; i < 100 && queue_depth() < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(queue_depth(), 2);
  close(a);
  close(b);
  double depth = 2;
  for (int i = 0; i < 100 && depth > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    depth = queue_depth();
  }
  EXPECT_EQ(depth, 0) << "abandoned requests still queued";
  // The long job is still running (its reply has not come), and both slots take new requests.
  char byte;
  EXPECT_LT(recv(running, &byte, 1, MSG_PEEK | MSG_DONTWAIT), 0) << "the long job ended early";
  const int c = send(short_job), d = send(short_job);
  for (int i = 0; i < 100 && queue_depth() < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(queue_depth(), 2) << "the new requests were not queued";
  close(c);
  close(d);
  close(running);
  // Idle again: the batch gauge goes back to 0 (it kept the last step's size).
  double batch = 1;
  for (int i = 0; i < 250 && batch != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    batch = testing::MetricValue(h.Client()->Get("/metrics")->body, "vlm_batch_size");
  }
  EXPECT_EQ(batch, 0);
}


// Probes have their own threads: with every handler thread waiting on a long generation,
// /health and /ready still answer at once (they waited for a generation to end, and an
// orchestrator restarts a server whose probes time out).
TEST(ServerLoadTest, ProbesAnswerWhileEveryHandlerThreadIsBusy) {
  HarnessOptions o;
  o.n_ctx = 4096;
  o.server.http_threads = 2;
  Harness h(o);
  const std::string body = json{{"prompt", "write a very long story"}, {"max_tokens", 4000}}.dump();
  std::vector<int> fds;
  for (int i = 0; i < 4; ++i) {  // two on the handler threads, two waiting for one
    fds.push_back(testing::SendInvoke(h.port(), body));
    ASSERT_GE(fds.back(), 0);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // generating by now
  auto c = h.Client();
  for (const char* probe : {"/health", "/ready", "/metrics"}) {
    auto r = c->Get(probe);
    ASSERT_TRUE(r) << probe;
    EXPECT_EQ(r->status, 200) << probe;
  }
  // Answered while the generations still run: no reply has come on any of their connections.
  for (int fd : fds) {
    char byte;
    EXPECT_LT(recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT), 0) << "a probe waited for a generation";
    close(fd);
  }
}

// A request's head is checked on threads of its own: with every handler thread on a long
// generation, a request without the key gets its 401 at once (its head waited in the handlers'
// queue, so a flood of keyless heads could fill it and refuse the clients with keys).
TEST(ServerLoadTest, HeadsAreCheckedWhileEveryHandlerThreadIsBusy) {
  HarnessOptions o;
  o.n_ctx = 4096;
  o.server.http_threads = 1;
  o.server.guard.api_key = "the-right-key-for-this-test";
  Harness h(o);
  const std::string body = json{{"prompt", "write a very long story"}, {"max_tokens", 4000}}.dump();
  const int busy = testing::Connect(h.port());
  ASSERT_GE(busy, 0);
  ASSERT_TRUE(testing::SendAll(busy, "POST /v1/vlm/invoke HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                     "Authorization: Bearer the-right-key-for-this-test\r\nContent-Length: " +
                                     std::to_string(body.size()) + "\r\n\r\n" + body));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // generating by now
  const auto t0 = std::chrono::steady_clock::now();
  const testing::RawReply r = testing::Exchange(
      h.port(), "POST /v1/vlm/invoke HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                "Authorization: Bearer wrong\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  EXPECT_EQ(r.bytes.rfind("HTTP/1.1 401", 0), 0u) << r.bytes;
  char byte;
  EXPECT_LT(recv(busy, &byte, 1, MSG_PEEK | MSG_DONTWAIT), 0) << "the generation ended first";
  close(busy);
}

// Bodies of up to 1 MiB each, 1 MiB of them held at once (--max-body-mb, --body-budget-mb).
HarnessOptions BodyBudgetOf1MiB() {
  HarnessOptions o;
  o.server.max_body_bytes = 1 << 20;
  o.server.body_budget_bytes = 1 << 20;
  return o;
}

// Bodies held at once are bounded over all connections (--body-budget-mb): with room for one
// 800 KB body, a second one arriving while the first has sent 700 KB of its own gets 503
// body_budget from its head, and once the first connection is gone its room is free again. (Each
// body was bounded alone: a thousand queued requests of 32 MB each could hold 32 GB.)
TEST(ServerLoadTest, BodiesHeldAtOnceAreBoundedOverAllConnections) {
  Harness h(BodyBudgetOf1MiB());
  const std::string head = "POST /v1/vlm/invoke HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                           "Content-Length: 800000\r\n\r\n";
  const int first = testing::Connect(h.port());
  ASSERT_GE(first, 0);
  std::string partial = head + "{\"prompt\": ";
  partial.resize(head.size() + 700000, ' ');
  ASSERT_TRUE(testing::SendAll(first, partial));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // its bytes are read and counted
  const testing::RawReply second = testing::Exchange(h.port(), head);
  EXPECT_EQ(second.bytes.rfind("HTTP/1.1 503", 0), 0u) << second.bytes;
  EXPECT_NE(second.bytes.find("body_budget"), std::string::npos) << second.bytes;
  EXPECT_NE(second.bytes.find("Retry-After: 1"), std::string::npos) << second.bytes;
  close(first);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // its connection is gone
  std::string body = R"({"prompt":"hi","max_tokens":2})";
  body.resize(800000, ' ');
  const testing::RawReply third = testing::Exchange(h.port(), head.substr(0, head.size() - 2) + "Connection: close\r\n\r\n" + body);
  EXPECT_EQ(third.bytes.rfind("HTTP/1.1 200", 0), 0u) << third.bytes.substr(0, 300);
  // A body's count ends with its handler, not with its connection: a kept-alive connection that
  // was answered holds none of the budget (it held its 800 KB until its keep-alive ran out).
  const int kept = testing::SendInvoke(h.port(), body);
  ASSERT_GE(kept, 0);
  const testing::RawReply kept_reply = testing::ReadUntilClosed(kept, 1);
  EXPECT_EQ(kept_reply.bytes.rfind("HTTP/1.1 200", 0), 0u) << kept_reply.bytes.substr(0, 300);
  const testing::RawReply beside = testing::Exchange(h.port(), head.substr(0, head.size() - 2) + "Connection: close\r\n\r\n" + body);
  EXPECT_EQ(beside.bytes.rfind("HTTP/1.1 200", 0), 0u) << beside.bytes.substr(0, 300);
  close(kept);
}

// A body counts the bytes that arrived, not the length its head declares: two connections that
// declare 800 KB each and send one byte do not keep a 400 KB request out of a 1 MiB budget (the
// first of them held 800 KB of it for the whole body timeout; 32 such connections held the
// default budget).
TEST(ServerLoadTest, DeclaredButUnsentBodiesDoNotHoldTheBodyBudget) {
  Harness h(BodyBudgetOf1MiB());
  const std::string head = "POST /v1/vlm/invoke HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                           "Content-Length: 800000\r\n\r\n{";
  std::vector<int> stalled;
  for (int i = 0; i < 2; ++i) {
    const int fd = testing::Connect(h.port());
    ASSERT_GE(fd, 0);
    ASSERT_EQ(write(fd, head.data(), head.size()), static_cast<ssize_t>(head.size()));
    stalled.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // their heads are read
  std::string body = R"({"prompt":"hi","max_tokens":2})";
  const testing::RawReply normal = testing::Exchange(
      h.port(), "POST /v1/vlm/invoke HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                "Connection: close\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
  EXPECT_EQ(normal.bytes.rfind("HTTP/1.1 200", 0), 0u) << normal.bytes.substr(0, 300);
  // 400 KB fit beside their 2 x (1 byte + 256 KiB counted ahead).
  body.resize(400000, ' ');
  const testing::RawReply large = testing::Exchange(
      h.port(), "POST /v1/vlm/invoke HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                "Connection: close\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
  EXPECT_EQ(large.bytes.rfind("HTTP/1.1 200", 0), 0u) << large.bytes.substr(0, 300);
  for (int fd : stalled) close(fd);
}

// A body that outgrows the room left while it arrives is refused then (503 body_budget, the reply
// readable: the connection lingers): A declares 800 KB and sends 100 KB, B's 600 KB fit beside
// that from its head and B sends all but 10 KB of them, then A's other 700 KB do not fit.
TEST(ServerLoadTest, ABodyThatOutgrowsTheRoomLeftIsRefusedWhileItArrives) {
  Harness h(BodyBudgetOf1MiB());
  using testing::SendAll;
  auto request_of = [](size_t size) {
    std::string body = R"({"prompt":"hi","max_tokens":2})";
    body.resize(size, ' ');
    return testing::InvokeRequest(body);
  };
  const std::string request_a = request_of(800000), request_b = request_of(600000);
  const size_t a_first = request_a.size() - 700000;
  const int a = testing::Connect(h.port());
  ASSERT_GE(a, 0);
  ASSERT_TRUE(SendAll(a, request_a.substr(0, a_first)));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // its 100 KB are read and counted
  const int b = testing::Connect(h.port());
  ASSERT_GE(b, 0);
  ASSERT_TRUE(SendAll(b, request_b.substr(0, request_b.size() - 10000)));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // B's 590 KB are counted
  SendAll(a, request_a.substr(a_first));  // may stop early: the refusal can come first
  const testing::RawReply reply_a = testing::ReadUntilClosed(a, 5);
  EXPECT_EQ(reply_a.bytes.rfind("HTTP/1.1 503", 0), 0u) << reply_a.bytes.substr(0, 300);
  EXPECT_NE(reply_a.bytes.find("body_budget"), std::string::npos) << reply_a.bytes.substr(0, 300);
  // B, whose room was counted from its head on, completes.
  ASSERT_TRUE(SendAll(b, request_b.substr(request_b.size() - 10000)));
  const testing::RawReply reply_b = testing::ReadUntilClosed(b, 2);  // kept alive: read for 2 s
  EXPECT_EQ(reply_b.bytes.rfind("HTTP/1.1 200", 0), 0u) << reply_b.bytes.substr(0, 300);
  close(a);
  close(b);
}

}  // namespace
}  // namespace vlmd::serve
