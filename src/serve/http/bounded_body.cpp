#include "serve/http/bounded_body.h"

#include <httplib.h>

#include <cstdlib>
#include <iterator>
#include <string>

namespace vlmd::serve {

BodyRead ReadBoundedBody(const httplib::Request& req, const httplib::ContentReader& reader,
                         size_t max_bytes, httplib::Request* out) {
  *out = req;
  if (req.has_header("Content-Length")) {
    const std::string declared = req.get_header_value("Content-Length");
    char* end = nullptr;
    const unsigned long long n = std::strtoull(declared.c_str(), &end, 10);
    if (end == declared.c_str() || *end != '\0') return BodyRead::kFailed;
    if (n > max_bytes) {
      // Read and drop a body of moderate excess, so that the client, still sending, reads the
      // 413 instead of a connection reset; beyond kDrainBytes, close at once.
      if (n - max_bytes <= kDrainBytes) {
        auto drop = [](const char*, size_t) { return true; };
        if (req.is_multipart_form_data()) {
          reader([](const httplib::MultipartFormData&) { return true; }, drop);
        } else {
          reader(drop);
        }
      }
      return BodyRead::kTooLarge;
    }
  }
  size_t total = 0;
  bool too_large = false;
  auto within = [&](size_t len) {
    total += len;
    too_large = total > max_bytes;
    return !too_large;
  };
  bool ok;
  if (req.is_multipart_form_data()) {
    std::string current;  // the part being read (its name)
    ok = reader(
        [&](const httplib::MultipartFormData& part) {
          current = part.name;
          out->files.emplace(part.name, part);  // content appended below
          return true;
        },
        [&](const char* data, size_t len) {
          if (!within(len)) return false;
          // The part just added is the last of its name (multimap: equal keys keep their order).
          auto range = out->files.equal_range(current);
          if (range.first == range.second) return false;
          std::prev(range.second)->second.content.append(data, len);
          return true;
        });
  } else {
    ok = reader([&](const char* data, size_t len) {
      if (!within(len)) return false;
      out->body.append(data, len);
      return true;
    });
  }
  if (too_large) return BodyRead::kTooLarge;
  return ok ? BodyRead::kOk : BodyRead::kFailed;
}

}  // namespace vlmd::serve
