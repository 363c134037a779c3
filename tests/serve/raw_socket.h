// Raw TCP clients for the connection-layer tests: what an HTTP client library would never send
// (half heads, ambiguous framing, pipelined requests), and what it would hide (the exact bytes
// back, whether the server closed).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

namespace vlmd::serve::testing {

// A connection to 127.0.0.1:port, from `source` (another loopback address, e.g. "127.0.0.2",
// to look like another client; "" : the kernel's choice). -1 on failure.
inline int Connect(int port, const std::string& source = "") {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  if (!source.empty()) {
    sockaddr_in from{};
    from.sin_family = AF_INET;
    inet_pton(AF_INET, source.c_str(), &from.sin_addr);
    if (bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0) {
      close(fd);
      return -1;
    }
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// A POST of `body` (JSON) to /v1/vlm/invoke as raw bytes.
inline std::string InvokeRequest(const std::string& body) {
  return "POST /v1/vlm/invoke HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// A fresh connection that has sent InvokeRequest(body) and reads nothing yet (the test decides
// when to read or hang up). -1 when it could not connect or send.
inline int SendInvoke(int port, const std::string& body) {
  const int fd = Connect(port);
  if (fd < 0) return -1;
  const std::string request = InvokeRequest(body);
  if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return -1;
  }
  return fd;
}

// Sends all of `bytes` on fd (no SIGPIPE when the server has closed); false when it stops early.
inline bool SendAll(int fd, const std::string& bytes) {
  for (size_t sent = 0; sent < bytes.size();) {
    const ssize_t n = send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

struct RawReply {
  std::string bytes;
  bool closed = false;  // the server closed the connection (read returned 0)
  int replies() const {  // status lines in the bytes
    int n = 0;
    for (size_t at = bytes.find("HTTP/1.1 "); at != std::string::npos; at = bytes.find("HTTP/1.1 ", at + 1)) ++n;
    return n;
  }
};

// Reads until the server closes the connection or `timeout_s` pass without a byte.
inline RawReply ReadUntilClosed(int fd, int timeout_s) {
  RawReply r;
  timeval tv{timeout_s, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) r.bytes.append(buf, static_cast<size_t>(n));
  r.closed = n == 0;
  return r;
}

// Sends `raw` on a fresh connection and reads until the server closes it (or 5 s pass).
inline RawReply Exchange(int port, const std::string& raw) {
  const int fd = Connect(port);
  if (fd < 0) return {};
  if (write(fd, raw.data(), raw.size()) != static_cast<ssize_t>(raw.size())) {
    close(fd);
    return {};
  }
  RawReply r = ReadUntilClosed(fd, 5);
  close(fd);
  return r;
}

// A POST of `body` (JSON) to `path` with `headers` (each "Name: value\r\n") that asks the server
// to close the connection after its reply.
inline std::string PostRequest(const std::string& path, const std::string& body, const std::string& headers = "") {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" + headers +
         "Connection: close\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// Sends `raw` from the loopback address `source` (another client, see Connect) and returns the
// reply's body: what follows its head ("" when no reply came within 10 s).
inline std::string BodyFrom(int port, const std::string& source, const std::string& raw) {
  const int fd = Connect(port, source);
  if (fd < 0) return "";
  if (!SendAll(fd, raw)) {
    close(fd);
    return "";
  }
  const RawReply r = ReadUntilClosed(fd, 10);
  close(fd);
  const size_t at = r.bytes.find("\r\n\r\n");
  return at == std::string::npos ? "" : r.bytes.substr(at + 4);
}

}  // namespace vlmd::serve::testing
