// Image allowlist (security.image_allowlist): the SHA-256 digests of the ENCODED image bytes that a
// client may send. Hashing the encoded bytes (not decoded pixels) lets an unlisted image be refused
// before any decoder touches it. The list file can be reloaded while the server runs.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_set>

#include "core/status.h"

namespace vlmd::serve::policy {

class ImageAllowlist {
 public:
  // File format: one 64-hex-digit SHA-256 per line (case-insensitive; stored lowercase), optionally
  // followed by whitespace and/or a '#' comment ("<hex>  # label"). Lines that are blank or start
  // with '#' (after leading whitespace) are skipped. Anything else -> INVALID_ARGUMENT naming
  // path:line. NOT_FOUND when the file cannot be read. The returned object is owned by the caller.
  static Result<std::unique_ptr<ImageAllowlist>> Load(std::string path);

  ImageAllowlist(const ImageAllowlist&) = delete;
  ImageAllowlist& operator=(const ImageAllowlist&) = delete;

  // True when `hex_digest` (64 lowercase hex characters, e.g. DigestHex(Sha256Of(bytes))) is
  // listed. Thread-safe (shared lock; may run concurrently with a reload).
  bool Contains(std::string_view hex_digest) const;

  // stat()s the file at most once per `min_interval`; when its mtime or size changed since the last
  // read, re-reads it. A bad or unreadable new file keeps the previous list and returns the error
  // (the caller logs it); a bad file is reported once, then retried only when it changes again.
  // Calls inside the interval return OK without a syscall. Thread-safe.
  Status ReloadIfChanged(std::chrono::milliseconds min_interval = std::chrono::milliseconds(1000));

  // Unconditional re-read; on error the previous list stays in force. Thread-safe.
  Status Reload();

  size_t size() const;  // number of distinct digests now in force; thread-safe
  const std::string& path() const { return path_; }

 private:
  // What stat() said about the file when it was last read; a change triggers a reload.
  // A change shows in the inode (a file renamed into place), the status-change time (which
  // `cp -p` or `rsync -t` cannot set back, unlike the modification time) or the size: a list
  // replaced by one of the same size with its old mtime kept was not reloaded.
  struct FileStamp {
    timespec mtime{}, ctime{};
    int64_t size = -1;
    uint64_t inode = 0;
    bool operator==(const FileStamp& o) const {
      return mtime.tv_sec == o.mtime.tv_sec && mtime.tv_nsec == o.mtime.tv_nsec &&
             ctime.tv_sec == o.ctime.tv_sec && ctime.tv_nsec == o.ctime.tv_nsec && size == o.size &&
             inode == o.inode;
    }
  };

  explicit ImageAllowlist(std::string path) : path_(std::move(path)) {}
  // Reads and parses the file; on success swaps the set in. Requires reload_mu_ held.
  Status ReadLocked();

  const std::string path_;
  mutable std::shared_mutex set_mu_;      // guards digests_
  std::unordered_set<std::string> digests_;
  std::mutex reload_mu_;                  // serializes reloads; guards stamp_
  FileStamp stamp_;
  // steady_clock nanoseconds before which ReloadIfChanged does nothing (lock-free fast path).
  std::atomic<int64_t> next_check_ns_{0};
};

}  // namespace vlmd::serve::policy
