// Audit log: one compact JSON line per request, appended to a file and in the kernel (or on disk,
// with fsync) before the reply is sent, rotated by size. What goes into a record (and so whether
// prompt text is ever logged) is the caller's choice; this class writes what it is given.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace vlmd::serve::policy {

struct AuditOptions {
  std::string path;
  uint64_t max_bytes = 64ull << 20;  // rotate before a line would make the file larger; 0: never
  int keep_files = 5;                // path.1 (newest) .. path.N are kept; older ones deleted
  bool fsync = false;                // fdatasync after each line (power-loss durability; slower)
};

class AuditLog {
 public:
  // Opens (creating with mode 0600, O_APPEND) the file; an existing file is appended to and its
  // size counts toward max_bytes. Errors name the path: INVALID_ARGUMENT for bad options,
  // UNAVAILABLE when the file cannot be opened. The caller owns the result.
  static Result<std::unique_ptr<AuditLog>> Open(AuditOptions options);
  ~AuditLog();
  AuditLog(const AuditLog&) = delete;
  AuditLog& operator=(const AuditLog&) = delete;

  // Serializes `record` as one compact JSON line + '\n' (invalid UTF-8 replaced by U+FFFD) and
  // writes it with one write(2), retrying on EINTR and partial writes, so the line is in the kernel
  // when this returns (on disk too with fsync). Rotates first when the line would push the file past
  // max_bytes; a single line longer than max_bytes still goes, whole, into a fresh file.
  // Thread-safe (one mutex): lines never interleave. IO errors -> UNAVAILABLE naming the path; the
  // caller should then refuse the request rather than serve it unaudited. After a failed rotation
  // the next Append retries opening the file.
  Status Append(const nlohmann::json& record);

  const std::string& path() const { return options_.path; }

 private:
  explicit AuditLog(AuditOptions options) : options_(std::move(options)) {}
  Status OpenFileLocked();    // opens options_.path into fd_ and reads its size
  Status RotateLocked();      // path -> path.1 -> ... -> path.N (deleted), then reopens
  Status WriteAllLocked(const std::string& line);

  const AuditOptions options_;
  std::mutex mu_;      // guards fd_ and size_
  int fd_ = -1;
  uint64_t size_ = 0;  // bytes in the current file (ours since open, plus what was there)
};

}  // namespace vlmd::serve::policy
