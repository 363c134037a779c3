// libFuzzer target: the W3C traceparent header parser (serve/obs/trace.h) on hostile header
// values. Whatever it accepts must format back to a header that parses to the same trace.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "serve/obs/trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace vlmd::serve::obs;
  const std::string_view header(reinterpret_cast<const char*>(data), size);
  const auto parsed = ParseTraceParent(header);
  if (!parsed) return 0;
  const std::string again = FormatTraceParent(parsed->trace_id, parsed->parent_id, parsed->flags);
  const auto reparsed = ParseTraceParent(again);
  if (again.size() != 55 || !reparsed || reparsed->trace_id != parsed->trace_id ||
      reparsed->parent_id != parsed->parent_id || reparsed->flags != parsed->flags) {
    std::abort();  // the formatter and the parser disagree
  }
  return 0;
}
