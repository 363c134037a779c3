// A new file beside a target, for writing the target atomically (write, fsync, rename over it).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/status.h"

namespace vlmd {

struct TempFile {
  int fd = -1;       // open for writing; the caller closes it
  std::string name;  // unlink it when the write fails
};

// Creates `target` + ".tmp.<pid>.<n>" with O_EXCL (mode 0666 less the umask): a name no file has,
// so that it never truncates an existing file (an input named like the old fixed "<target>.tmp"
// was cut to junk while mapped) and two writers of one target never share it.
// UNAVAILABLE when it cannot be created.
Result<TempFile> CreateTempBeside(const std::string& target);

// Writes `bytes` to `path` atomically: a temp file beside it (CreateTempBeside), fsync'd, renamed
// over it. On failure nothing is left and an existing `path` is untouched. UNAVAILABLE naming
// the path and the error.
Status WriteFileAtomically(const std::string& path, std::span<const uint8_t> bytes);

}  // namespace vlmd
