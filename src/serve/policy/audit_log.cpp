// Audit log file handling: append-only writes, size-based rotation.
#include "serve/policy/audit_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace vlmd::serve::policy {
namespace {

Status IoError(const std::string& what, const std::string& path, int err) {
  return Status(StatusCode::kUnavailable, "audit log " + path + ": " + what + ": " + std::strerror(err));
}

std::string Numbered(const std::string& path, int n) { return path + "." + std::to_string(n); }

}  // namespace

Result<std::unique_ptr<AuditLog>> AuditLog::Open(AuditOptions options) {
  if (options.path.empty()) return InvalidArgumentError("audit log: empty path");
  if (options.keep_files < 0) {
    return InvalidArgumentError("audit log " + options.path + ": keep_files must be >= 0");
  }
  std::unique_ptr<AuditLog> log(new AuditLog(std::move(options)));
  std::lock_guard<std::mutex> lock(log->mu_);
  VLMD_RETURN_IF_ERROR(log->OpenFileLocked());
  return log;
}

AuditLog::~AuditLog() {
  if (fd_ >= 0) ::close(fd_);
}

Status AuditLog::OpenFileLocked() {
  const int fd = ::open(options_.path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return IoError("open", options_.path, errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return IoError("fstat", options_.path, err);
  }
  fd_ = fd;
  size_ = uint64_t(st.st_size);
  return Status::Ok();
}

Status AuditLog::RotateLocked() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  const std::string& p = options_.path;
  const int keep = options_.keep_files;
  if (keep == 0) {
    if (::unlink(p.c_str()) != 0 && errno != ENOENT) return IoError("unlink", p, errno);
  } else {
    // Drop the oldest, shift the rest up by one; a missing step (fewer files so far) is fine.
    if (::unlink(Numbered(p, keep).c_str()) != 0 && errno != ENOENT) {
      return IoError("unlink " + Numbered(p, keep), p, errno);
    }
    for (int i = keep - 1; i >= 1; --i) {
      if (::rename(Numbered(p, i).c_str(), Numbered(p, i + 1).c_str()) != 0 && errno != ENOENT) {
        return IoError("rename " + Numbered(p, i), p, errno);
      }
    }
    if (::rename(p.c_str(), Numbered(p, 1).c_str()) != 0 && errno != ENOENT) {
      return IoError("rename to " + Numbered(p, 1), p, errno);
    }
  }
  return OpenFileLocked();
}

Status AuditLog::WriteAllLocked(const std::string& line) {
  const char* data = line.data();
  size_t left = line.size();
  const uint64_t line_start = size_;
  while (left > 0) {
    const ssize_t n = ::write(fd_, data, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      // Part of the line went out (a full disk): cut it off again, so that the file stays one
      // JSON object per line for whoever reads it.
      if (size_ > line_start && ::ftruncate(fd_, static_cast<off_t>(line_start)) == 0) {
        size_ = line_start;
      }
      return IoError("write", options_.path, err);
    }
    // O_APPEND: the remainder of a partial write lands right after it (the mutex keeps our own
    // writers out), so the line stays whole.
    data += n;
    left -= size_t(n);
    size_ += uint64_t(n);
  }
  if (options_.fsync && ::fdatasync(fd_) != 0) return IoError("fdatasync", options_.path, errno);
  return Status::Ok();
}

Status AuditLog::Append(const nlohmann::json& record) {
  std::string line = record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  line.push_back('\n');
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0) VLMD_RETURN_IF_ERROR(OpenFileLocked());
  if (options_.max_bytes > 0 && size_ > 0 && size_ + line.size() > options_.max_bytes) {
    VLMD_RETURN_IF_ERROR(RotateLocked());
  }
  return WriteAllLocked(line);
}

}  // namespace vlmd::serve::policy
