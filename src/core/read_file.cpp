// ReadWholeFile (read_file.h).
#include "core/read_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace vlmd {
namespace {

Status OpenError(const std::string& path, int err) {
  std::string m = "cannot read '" + path + "': " + std::strerror(err);
  return err == ENOENT ? NotFoundError(std::move(m)) : UnavailableError(std::move(m));
}

}  // namespace

Result<std::string> ReadWholeFile(const std::string& path, uint64_t max_bytes) {
  // O_NONBLOCK: opening a FIFO with no writer must not hang; fstat then refuses it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return OpenError(path, errno);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return OpenError(path, errno);
  if (!S_ISREG(st.st_mode)) {
    return InvalidArgumentError("cannot read '" + path + "': " +
                                (S_ISDIR(st.st_mode) ? "it is a directory" : "not a regular file"));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > max_bytes) {
    return InvalidArgumentError("cannot read '" + path + "': " + std::to_string(size) +
                                " bytes, over the limit of " + std::to_string(max_bytes));
  }
  std::string bytes(static_cast<size_t>(size), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return OpenError(path, errno);
    if (n == 0) break;  // the file shrank while read: what is there is what it holds
    done += static_cast<size_t>(n);
  }
  bytes.resize(done);
  return bytes;
}

}  // namespace vlmd
