// A request body read within a byte limit, chunked or not: httplib (0.11) checks its payload
// limit only against Content-Length, so a chunked body was read whole (a 256 MiB body with a
// 32 MiB limit: +820 MiB resident) before the 413. Handlers registered with a ContentReader read
// the body themselves; this stops at the first byte past the limit.
#pragma once

#include <cstddef>

namespace httplib {
struct Request;
class ContentReader;
}  // namespace httplib

namespace vlmd::serve {

enum class BodyRead {
  kOk,
  kTooLarge,  // past max_bytes (declared or read): reply 413 and close the connection
  kFailed,    // the client's stream ended or broke: reply 400 and close the connection
};

// Copies req's head into *out and reads its body into out->body, or for multipart/form-data its
// parts into out->files (as httplib fills them), stopping past max_bytes of body (multipart:
// of part contents). A Content-Length over the limit by at most kDrainBytes is read and dropped
// (the client then reads the 413 rather than a reset); by more, refused before any byte is read.
inline constexpr size_t kDrainBytes = 16u << 20;
BodyRead ReadBoundedBody(const httplib::Request& req, const httplib::ContentReader& reader,
                         size_t max_bytes, httplib::Request* out);

}  // namespace vlmd::serve
