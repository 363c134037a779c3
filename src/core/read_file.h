// Reading a whole file into memory, with errors as Status.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "core/status.h"

namespace vlmd {

// The bytes of the file at `path`, read to its end (a regular file, or a pipe, /dev/stdin, a
// /proc file). NOT_FOUND when it does not exist; INVALID_ARGUMENT when it is a directory
// (std::ifstream opens one and its stream buffer then throws std::ios_base::failure from inside
// istreambuf_iterator, which aborted the tools and the server) or holds more than `max_bytes`;
// UNAVAILABLE for any other open or read error. Every message names the path. A FIFO without a
// writer blocks, as any read of it does.
Result<std::string> ReadWholeFile(const std::string& path,
                                  uint64_t max_bytes = std::numeric_limits<uint64_t>::max());

}  // namespace vlmd
