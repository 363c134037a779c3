// A webhook receiver on 127.0.0.1 for tests: records the JSON bodies posted to it, answers 500
// to the first `fail_first` posts (to exercise retries), and lets a test wait for N events.
#pragma once

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace vlmd::serve::testing {

class WebhookReceiver {
 public:
  explicit WebhookReceiver(int fail_first = 0) : fail_left_(fail_first) {
    http_.Post("/hook", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      ++posts_;
      if (fail_left_ > 0) {
        --fail_left_;
        res.status = 500;
        return;
      }
      events_.push_back(nlohmann::json::parse(req.body, nullptr, false));
      cv_.notify_all();
      res.status = 204;
    });
    port_ = http_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { http_.listen_after_bind(); });
  }
  ~WebhookReceiver() {
    http_.stop();
    thread_.join();
  }
  std::string Url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/hook"; }

  // The events received once there are `n` (or what there is after `timeout`).
  std::vector<nlohmann::json> WaitFor(size_t n, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return events_.size() >= n; });
    return events_;
  }
  // The events received once `done(events)` holds (or what there is after `timeout`).
  template <typename Done>
  std::vector<nlohmann::json> WaitUntil(Done done, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return done(events_); });
    return events_;
  }
  int posts() {
    std::lock_guard<std::mutex> lock(mu_);
    return posts_;
  }

 private:
  httplib::Server http_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<nlohmann::json> events_;
  int fail_left_ = 0;
  int posts_ = 0;
};

}  // namespace vlmd::serve::testing
