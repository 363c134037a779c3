// One HTTP/1.1 request and its response as the route handlers see them, independent of the
// connection layer (http_front.h reads and writes them on the wire). Header names compare
// case-insensitively (RFC 9110 5.1); headers keep their order.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vlmd::serve {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

// Case-insensitive lookup in a header list: the i-th value of `name`, or "" when absent.
std::string_view HeaderValue(const HttpHeaders& headers, std::string_view name, size_t i = 0);
size_t HeaderCount(const HttpHeaders& headers, std::string_view name);

struct HttpRequest {
  std::string method;   // "GET", "POST", ...
  std::string target;   // as sent: path and query
  std::string path;     // the target's path, percent-decoded
  std::string query;    // after '?', as sent ("" when none)
  int version = 11;     // 10 or 11
  HttpHeaders headers;
  std::string body;     // the whole body (de-chunked); read only for routes that take one
  std::string remote_addr;  // numeric address of the client
  int remote_port = 0;
  std::vector<std::string> matches;  // the route pattern's capture groups
  int32_t route = -1;  // the handler's route for this request, found once, on the head
  std::string key_id;  // the client key's id once the head was admitted (for the audit line)
  // True once the client has closed its side (or reset) while the request is handled; never
  // blocks, never consumes bytes. Set by the connection layer; always false when unset.
  std::function<bool()> peer_closed;

  std::string_view header(std::string_view name, size_t i = 0) const {
    return HeaderValue(headers, name, i);
  }
  size_t header_count(std::string_view name) const { return HeaderCount(headers, name); }
  bool has_header(std::string_view name) const { return header_count(name) > 0; }
  bool PeerClosed() const { return peer_closed && peer_closed(); }
};

// Writes the chunks of a streamed body. Write blocks until the chunk is on the wire (or the
// connection failed: false, and every later Write is false too).
class ChunkWriter {
 public:
  virtual ~ChunkWriter() = default;
  virtual bool Write(std::string_view data) = 0;
};

struct HttpResponse {
  int status = 200;
  HttpHeaders headers;  // besides Content-Type, Content-Length, Transfer-Encoding and Connection
  std::string content_type;
  std::string body;
  bool close = false;  // close the connection after this response
  // A refusal of the connection layer (FrontHandler::FrontRefusal) with an audit line to write
  // (FrontHandler::AuditFrontRefusal).
  bool audit_refusal = false;
  // When set, the body is streamed instead of `body`: the headers go out with chunked transfer
  // encoding, then this runs on the handler's thread writing the chunks; the final chunk follows
  // when it returns.
  std::function<void(ChunkWriter&)> stream;

  void set_header(std::string name, std::string value) {
    headers.emplace_back(std::move(name), std::move(value));
  }
  void set_content(std::string text, std::string type) {
    body = std::move(text);
    content_type = std::move(type);
  }
};

// Splits a request target into its percent-decoded path and its query (as sent). False when an
// escape is malformed or decodes to a control character.
bool DecodeTargetPath(std::string_view target, std::string* path, std::string* query);

}  // namespace vlmd::serve
