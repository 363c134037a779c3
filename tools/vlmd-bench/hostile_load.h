// Hostile connections held against a server while `vlmd-bench serve` measures normal requests
// (issue 20): slow clients that trickle a request head that never ends (one byte a second) and
// idle clients that connect and send nothing. A connection the server closes (a 408 at its head
// deadline, an idle one reaped) is opened again at once, so the population holds for the whole
// run. Each connection comes from its own loopback address (127.1.x.y), so that the server's
// per-address cap does not simply shed them: they look like that many clients.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

namespace vlmd::bench {

struct HostileLoadOptions {
  std::string host = "127.0.0.1";  // an IPv4 loopback server
  int port = 0;
  int slow = 0;
  int idle = 0;
};

class HostileLoad {
 public:
  explicit HostileLoad(HostileLoadOptions options) : options_(std::move(options)) {}
  ~HostileLoad() { Stop(); }

  // Opens the connections from a thread of its own and keeps them open.
  void Start();
  // Waits until every connection has been opened once (false when `timeout` passed first).
  bool WaitOpen(std::chrono::seconds timeout) const;
  void Stop();

  int open() const { return open_.load(); }
  uint64_t reopened() const { return reopened_.load(); }   // closed by the server, opened again
  uint64_t failures() const { return failures_.load(); }   // connects that failed

 private:
  void Run();

  const HostileLoadOptions options_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int> open_{0};
  std::atomic<int> opened_once_{0};
  std::atomic<uint64_t> reopened_{0};
  std::atomic<uint64_t> failures_{0};
};

}  // namespace vlmd::bench
