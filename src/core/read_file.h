// Reading a whole file into memory, with errors as Status.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "core/status.h"

namespace vlmd {

// The bytes of the regular file at `path`. NOT_FOUND when it does not exist; INVALID_ARGUMENT
// when it is not a regular file (a directory, a FIFO, a device: std::ifstream opens a directory
// and its stream buffer then throws std::ios_base::failure from inside istreambuf_iterator, which
// aborted the tools and the server) or is larger than `max_bytes`; UNAVAILABLE for any other
// open or read error. Every message names the path.
Result<std::string> ReadWholeFile(const std::string& path,
                                  uint64_t max_bytes = std::numeric_limits<uint64_t>::max());

}  // namespace vlmd
