// Image allowlist: parsing of the digest file and reload-on-change by stat() stamp.
#include "serve/policy/image_allowlist.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>

#include "core/read_file.h"

namespace vlmd::serve::policy {
namespace {

bool IsHex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

// Parses one line. Returns true and sets `digest` (lowercase) for a digest line, true with an empty
// `digest` for a blank/comment line, false for anything else.
bool ParseLine(std::string_view line, std::string& digest) {
  digest.clear();
  size_t i = 0;
  while (i < line.size() && IsSpace(line[i])) ++i;
  if (i == line.size() || line[i] == '#') return true;
  if (line.size() - i < 64) return false;
  for (size_t k = 0; k < 64; ++k) {
    const char c = line[i + k];
    if (!IsHex(c)) return false;
    digest.push_back(c >= 'A' && c <= 'F' ? char(c - 'A' + 'a') : c);
  }
  i += 64;
  // After the digest: nothing, or whitespace and/or a comment. A 65th hex digit or other text
  // means the line is not what the admin thinks it is, so it is an error rather than ignored.
  while (i < line.size() && IsSpace(line[i])) ++i;
  if (i < line.size() && line[i] != '#') {
    digest.clear();
    return false;
  }
  return true;
}

}  // namespace

Result<std::unique_ptr<ImageAllowlist>> ImageAllowlist::Load(std::string path) {
  std::unique_ptr<ImageAllowlist> list(new ImageAllowlist(std::move(path)));
  {
    std::lock_guard<std::mutex> lock(list->reload_mu_);
    VLMD_RETURN_IF_ERROR(list->ReadLocked());
  }
  return list;
}

bool ImageAllowlist::Contains(std::string_view hex_digest) const {
  std::shared_lock<std::shared_mutex> lock(set_mu_);
  // C++20 heterogeneous lookup needs a transparent hash; one small string copy is cheaper to read.
  return digests_.count(std::string(hex_digest)) != 0;
}

size_t ImageAllowlist::size() const {
  std::shared_lock<std::shared_mutex> lock(set_mu_);
  return digests_.size();
}

Status ImageAllowlist::Reload() {
  std::lock_guard<std::mutex> lock(reload_mu_);
  return ReadLocked();
}

Status ImageAllowlist::ReloadIfChanged(std::chrono::milliseconds min_interval) {
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  if (now < next_check_ns_.load(std::memory_order_relaxed)) return Status::Ok();
  std::unique_lock<std::mutex> lock(reload_mu_, std::try_to_lock);
  if (!lock.owns_lock()) return Status::Ok();  // another thread is checking right now
  next_check_ns_.store(now + std::chrono::duration_cast<std::chrono::nanoseconds>(min_interval).count(),
                       std::memory_order_relaxed);
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) {
    return NotFoundError("image allowlist " + path_ + ": " + std::strerror(errno) +
                         " (keeping the previous list)");
  }
  const FileStamp now_stamp{st.st_mtim, st.st_ctim, int64_t(st.st_size), uint64_t(st.st_ino)};
  if (now_stamp == stamp_) return Status::Ok();
  return ReadLocked();
}

Status ImageAllowlist::ReadLocked() {
  // stat before reading: if the file changes while we read, the next check sees a newer stamp.
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) {
    return NotFoundError("image allowlist " + path_ + ": " + std::strerror(errno));
  }
  const FileStamp new_stamp{st.st_mtim, st.st_ctim, int64_t(st.st_size), uint64_t(st.st_ino)};
  // Read whole (at most 1 GiB: ~16 million digests), so that a path that never ends or a line
  // without an end cannot take the memory line by line.
  auto text = ReadWholeFile(path_);
  if (!text.ok()) return Status(text.status().code(), "image allowlist: " + text.status().message());
  std::unordered_set<std::string> fresh;
  std::string digest;
  size_t line_no = 0;
  Status error;
  for (size_t at = 0; at < text->size();) {
    const size_t end = std::min(text->find('\n', at), text->size());
    const std::string_view line = std::string_view(*text).substr(at, end - at);
    at = end + 1;
    ++line_no;
    if (!ParseLine(line, digest)) {
      error = InvalidArgumentError(path_ + ":" + std::to_string(line_no) +
                                   ": expected a 64-hex-digit SHA-256, optionally followed by a "
                                   "# comment");
      break;
    }
    if (!digest.empty()) fresh.insert(digest);
  }
  // Remember the stamp even for a bad file so that it is reported once, not at every check.
  stamp_ = new_stamp;
  if (!error.ok()) return error;
  std::unique_lock<std::shared_mutex> lock(set_mu_);
  digests_.swap(fresh);
  return Status::Ok();
}

}  // namespace vlmd::serve::policy
