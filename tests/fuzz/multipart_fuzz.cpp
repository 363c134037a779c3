// libFuzzer target: multipart/form-data bodies (serve/api/multipart.h). The first line of the
// input is the Content-Type, the rest the body. Beyond "no crash", it traps on broken
// invariants: every part has a name, no more parts than the cap, part contents never contain the
// delimiter, and the parts written back with the same boundary parse to the same parts.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "serve/api/multipart.h"

namespace {

using vlmd::serve::api::MultipartPart;

bool Writable(std::string_view name) { return name.find_first_of("\"\\\r\n") == std::string_view::npos; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t eol = input.find('\n');
  const std::string_view content_type =
      eol == std::string_view::npos ? "multipart/form-data; boundary=B" : input.substr(0, eol);
  const std::string_view body = eol == std::string_view::npos ? input : input.substr(eol + 1);
  auto parts = vlmd::serve::api::ParseMultipart(body, content_type);
  if (!parts.ok()) return 0;
  if (parts->size() > vlmd::serve::api::kMaxMultipartParts) __builtin_trap();
  const std::string boundary = *vlmd::serve::api::MultipartBoundary(content_type);
  std::string rebuilt;
  bool writable = true;
  for (const MultipartPart& p : *parts) {
    if (p.name.empty()) __builtin_trap();
    if (p.content.find("\r\n--" + boundary) != std::string::npos) __builtin_trap();
    writable = writable && Writable(p.name);
    rebuilt += "--" + boundary + "\r\nContent-Disposition: form-data; name=\"" + p.name + "\"\r\n\r\n" +
               p.content + "\r\n";
  }
  if (!writable || !Writable(boundary)) return 0;
  rebuilt += "--" + boundary + "--\r\n";
  auto again = vlmd::serve::api::ParseMultipart(rebuilt, "multipart/form-data; boundary=\"" + boundary + "\"");
  if (!again.ok() || again->size() != parts->size()) __builtin_trap();
  for (size_t i = 0; i < parts->size(); ++i) {
    if ((*again)[i].name != (*parts)[i].name || (*again)[i].content != (*parts)[i].content) __builtin_trap();
  }
  return 0;
}
