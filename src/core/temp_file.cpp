// CreateTempBeside (temp_file.h).
#include "core/temp_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace vlmd {

Result<TempFile> CreateTempBeside(const std::string& target) {
  static std::atomic<unsigned> counter{0};
  for (int attempt = 0; attempt < 100; ++attempt) {
    TempFile t;
    t.name = target + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
    t.fd = ::open(t.name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (t.fd >= 0) return t;
    if (errno != EEXIST) {
      return UnavailableError("cannot create '" + t.name + "': " + std::strerror(errno));
    }
  }
  return UnavailableError("cannot create a temporary file beside '" + target + "'");
}

Status WriteFileAtomically(const std::string& path, std::span<const uint8_t> bytes) {
  VLMD_ASSIGN_OR_RETURN(const TempFile t, CreateTempBeside(path));
  int err = 0;
  for (size_t done = 0; done < bytes.size() && err == 0;) {
    const ssize_t n = ::write(t.fd, bytes.data() + done, bytes.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n < 0 && errno != EINTR) {
      err = errno;
    }
  }
  if (err == 0 && ::fsync(t.fd) != 0) err = errno;
  if (::close(t.fd) != 0 && err == 0) err = errno;
  if (err == 0 && std::rename(t.name.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(t.name.c_str());
    return UnavailableError("cannot write '" + path + "': " + std::strerror(err));
  }
  return Status::Ok();
}

}  // namespace vlmd
