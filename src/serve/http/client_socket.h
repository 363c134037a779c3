// Disconnect detection for replies that are not streamed. httplib (0.11) gives a handler no
// handle on its connection, and a non-streaming handler writes nothing until the answer is
// ready, so it would only learn that the client left when the finished reply fails to send: the
// sequence would keep its batch slot to the end. ClientConnection finds the connection's socket
// among the process's descriptors by the request's two endpoints (address and port of each
// side, which identify a TCP connection) and peeks at it.
#pragma once

#include <string>

namespace httplib {
struct Request;
}

namespace vlmd::serve {

class ClientConnection {
 public:
  // Keeps the endpoints of `req`; the socket is looked up at the first Disconnected() call.
  explicit ClientConnection(const httplib::Request& req);

  // True when the peer closed the connection (orderly shutdown or reset). False while it is open
  // or when the socket cannot be found. Never consumes request bytes (MSG_PEEK), never blocks.
  // The socket stays valid while the handler runs: httplib closes it only after the handler
  // returned, so the descriptor found once is this connection's until then.
  bool Disconnected();

 private:
  std::string remote_addr_, local_addr_;
  int remote_port_ = -1, local_port_ = -1;
  int fd_ = -1;
  bool searched_ = false;
};

}  // namespace vlmd::serve
