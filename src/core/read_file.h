// Reading a whole file into memory, with errors as Status.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/status.h"

namespace vlmd {

// The most ReadWholeFile reads unless told otherwise: far above any config, key list, prompt or
// image, and a bound for a path that never ends (/dev/zero).
inline constexpr uint64_t kDefaultMaxFileBytes = uint64_t{1} << 30;

// The bytes of the file at `path`, read to its end (a regular file, or a pipe, /dev/stdin, a
// /proc file). NOT_FOUND when it cannot be opened (missing, or not readable: the message says
// which); INVALID_ARGUMENT when it is a directory (std::ifstream opens one and its stream buffer
// then throws std::ios_base::failure from inside istreambuf_iterator, which aborted the tools and
// the server) or holds more than `max_bytes`; RESOURCE_EXHAUSTED when the memory for it cannot be
// had; UNAVAILABLE for a read error. Every message names the path. A FIFO without a writer
// blocks, as any read of it does.
Result<std::string> ReadWholeFile(const std::string& path, uint64_t max_bytes = kDefaultMaxFileBytes);

// The bytes of `s` (what ReadWholeFile returned) as the byte span the decoders and parsers take,
// without a copy.
inline std::span<const uint8_t> BytesOf(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

}  // namespace vlmd
