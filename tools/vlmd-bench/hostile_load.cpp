#include "hostile_load.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

namespace vlmd::bench {
namespace {

// What a slow client sends first; then one more byte of the never-ending header value a second.
constexpr char kSlowHead[] = "POST /v1/vlm/invoke HTTP/1.1\r\nHost: x\r\nX-Slow: ";

struct Conn {
  int fd = -1;
  bool slow = false;
  bool sent_head = false;
};

// Non-blocking connect from 127.1.(i / 250).(i % 250 + 1); -1 on failure.
int OpenFrom(int index, const sockaddr_in& server) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  sockaddr_in from{};
  from.sin_family = AF_INET;
  from.sin_addr.s_addr = htonl((127u << 24) | (1u << 16) | (static_cast<uint32_t>(index / 250) << 8) |
                               static_cast<uint32_t>(index % 250 + 1));
  if (bind(fd, reinterpret_cast<const sockaddr*>(&from), sizeof(from)) != 0 ||
      (connect(fd, reinterpret_cast<const sockaddr*>(&server), sizeof(server)) != 0 && errno != EINPROGRESS)) {
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

void HostileLoad::Start() {
  // Thousands of sockets: raise the open-file limit to its maximum.
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &lim);
  }
  thread_ = std::thread([this] { Run(); });
}

bool HostileLoad::WaitOpen(std::chrono::seconds timeout) const {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (opened_once_.load() < options_.slow + options_.idle) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

void HostileLoad::Stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

void HostileLoad::Run() {
  sockaddr_in server{};
  server.sin_family = AF_INET;
  server.sin_port = htons(static_cast<uint16_t>(options_.port));
  inet_pton(AF_INET, options_.host.c_str(), &server.sin_addr);
  const int total = options_.slow + options_.idle;
  std::vector<Conn> conns(static_cast<size_t>(total));
  const int ep = epoll_create1(0);
  auto open_one = [&](int i) {
    Conn& c = conns[static_cast<size_t>(i)];
    c.slow = i < options_.slow;
    c.sent_head = false;
    c.fd = OpenFrom(i, server);
    if (c.fd < 0) {
      failures_.fetch_add(1);
      return;
    }
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u32 = static_cast<uint32_t>(i);
    epoll_ctl(ep, EPOLL_CTL_ADD, c.fd, &ev);
    open_.fetch_add(1);
  };
  auto close_one = [&](int i) {
    Conn& c = conns[static_cast<size_t>(i)];
    if (c.fd < 0) return;
    epoll_ctl(ep, EPOLL_CTL_DEL, c.fd, nullptr);
    close(c.fd);
    c.fd = -1;
    open_.fetch_sub(1);
  };
  // Opened gradually (500 per 10 ms) so that the accept backlog is not the first thing measured.
  for (int i = 0; i < total && !stop_.load(); ++i) {
    open_one(i);
    opened_once_.fetch_add(1);
    if (i % 500 == 499) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::vector<epoll_event> events(1024);
  auto next_tick = std::chrono::steady_clock::now();
  char sink[4096];
  while (!stop_.load()) {
    const int n = epoll_wait(ep, events.data(), static_cast<int>(events.size()), 100);
    for (int k = 0; k < n; ++k) {
      const int i = static_cast<int>(events[static_cast<size_t>(k)].data.u32);
      Conn& c = conns[static_cast<size_t>(i)];
      if (c.fd < 0) continue;
      // Whatever the server says (a 408, a 503) is read and dropped; a close is reopened.
      ssize_t got;
      while ((got = read(c.fd, sink, sizeof(sink))) > 0) {
      }
      const bool closed = got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK) ||
                          (events[static_cast<size_t>(k)].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR));
      if (closed) {
        close_one(i);
        open_one(i);
        reopened_.fetch_add(1);
      }
    }
    if (std::chrono::steady_clock::now() < next_tick) continue;
    next_tick += std::chrono::seconds(1);
    for (Conn& c : conns) {  // the slow clients' byte a second
      if (c.fd < 0 || !c.slow) continue;
      if (!c.sent_head) {
        c.sent_head = send(c.fd, kSlowHead, sizeof(kSlowHead) - 1, MSG_NOSIGNAL) > 0;
      } else {
        (void)send(c.fd, "a", 1, MSG_NOSIGNAL);
      }
    }
  }
  for (int i = 0; i < total; ++i) close_one(i);
  close(ep);
}

}  // namespace vlmd::bench
