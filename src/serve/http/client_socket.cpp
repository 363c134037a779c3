// ClientConnection (see client_socket.h).
#include "serve/http/client_socket.h"

#include <dirent.h>
#include <httplib.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>

namespace vlmd::serve {
namespace {

// Numeric host and port of a socket address, as httplib formats the request's endpoints
// (getnameinfo with NI_NUMERICHOST).
bool Endpoint(const sockaddr_storage& addr, socklen_t len, std::string* host, int* port) {
  char buf[NI_MAXHOST];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, buf, sizeof(buf), nullptr, 0,
                  NI_NUMERICHOST) != 0) {
    return false;
  }
  *host = buf;
  if (addr.ss_family == AF_INET) {
    *port = ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    *port = ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);
  } else {
    return false;
  }
  return true;
}

}  // namespace

ClientConnection::ClientConnection(const httplib::Request& req)
    : remote_addr_(req.remote_addr),
      local_addr_(req.local_addr),
      remote_port_(req.remote_port),
      local_port_(req.local_port) {}

bool ClientConnection::Disconnected() {
  if (!searched_) {
    searched_ = true;
    if (DIR* dir = opendir("/proc/self/fd")) {
      while (const dirent* e = readdir(dir)) {
        char* end = nullptr;
        const long fd = std::strtol(e->d_name, &end, 10);
        if (end == e->d_name || *end != '\0') continue;
        sockaddr_storage local{}, peer{};
        socklen_t local_len = sizeof(local), peer_len = sizeof(peer);
        if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
            getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) {
          continue;  // not a connected socket
        }
        std::string lhost, phost;
        int lport = -1, pport = -1;
        if (Endpoint(local, local_len, &lhost, &lport) && Endpoint(peer, peer_len, &phost, &pport) &&
            lport == local_port_ && pport == remote_port_ && lhost == local_addr_ &&
            phost == remote_addr_) {
          fd_ = static_cast<int>(fd);
          break;
        }
      }
      closedir(dir);
    }
  }
  if (fd_ < 0) return false;
  char byte;
  const ssize_t n = ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return false;  // bytes waiting (a pipelined request): still there
  if (n == 0) return true;  // orderly shutdown by the peer
  return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;  // reset, or worse
}

}  // namespace vlmd::serve
