// ReadWholeFile (read_file.h).
#include "core/read_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <limits>

namespace vlmd {
namespace {

Status OpenError(const std::string& path, int err) {
  return NotFoundError("cannot open '" + path + "': " + std::strerror(err));
}

Status ReadError(const std::string& path, int err) {
  return UnavailableError("cannot read '" + path + "': " + std::strerror(err));
}

Status TooLarge(const std::string& path, uint64_t max_bytes) {
  return InvalidArgumentError("cannot read '" + path + "': more than the limit of " +
                              std::to_string(max_bytes) + " bytes");
}

}  // namespace

Result<std::string> ReadWholeFile(const std::string& path, uint64_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return OpenError(path, errno);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return ReadError(path, errno);
  if (S_ISDIR(st.st_mode)) return InvalidArgumentError("cannot read '" + path + "': it is a directory");
  // Read to the end, whatever the size said: /proc files report 0, a pipe or /dev/stdin none.
  const uint64_t size_hint = S_ISREG(st.st_mode) ? static_cast<uint64_t>(st.st_size) : 0;
  if (size_hint > max_bytes) return TooLarge(path, max_bytes);
  // One byte of room past the expected end, so that a regular file's end is seen without growing
  // the buffer; a stream grows it by doubling, to at most max_bytes + 1 (which means too large).
  const uint64_t most = max_bytes == std::numeric_limits<uint64_t>::max() ? max_bytes : max_bytes + 1;
  std::string bytes;
  auto grow = [&](uint64_t size) {
    try {
      bytes.resize(static_cast<size_t>(size));
      return true;
    } catch (const std::exception&) {  // bad_alloc, length_error
      return false;
    }
  };
  auto no_memory = [&] {
    return ResourceExhaustedError("cannot read '" + path + "': no memory for " +
                                  std::to_string(bytes.size()) + "+ bytes");
  };
  if (!grow(std::min<uint64_t>(std::max<uint64_t>(size_hint + 1, 4096), most))) return no_memory();
  size_t done = 0;
  for (;;) {
    if (done == bytes.size()) {
      if (done > max_bytes) return TooLarge(path, max_bytes);
      if (!grow(std::min<uint64_t>(uint64_t{bytes.size()} * 2, most))) return no_memory();
    }
    const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ReadError(path, errno);
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  if (done > max_bytes) return TooLarge(path, max_bytes);
  bytes.resize(done);
  return bytes;
}

}  // namespace vlmd
