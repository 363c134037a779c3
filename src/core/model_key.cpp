// Model keys from a file, the environment or a command (see model_key.h).
#include "core/model_key.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

extern char** environ;

namespace vlmd {
namespace {

constexpr size_t kMaxKeyText = 4096;
constexpr int kCommandTimeoutMs = 30000;

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Reads at most kMaxKeyText bytes of `path` into a wiped-on-exit buffer.
Result<SecretKey> KeyFromFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NotFoundError("cannot open the model key file '" + path + "': " + std::strerror(errno));
  char buf[kMaxKeyText + 1];
  size_t n = 0;
  while (n < sizeof buf) {
    const ssize_t r = ::read(fd, buf + n, sizeof buf - n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    n += static_cast<size_t>(r);
  }
  ::close(fd);
  Result<SecretKey> key = n > kMaxKeyText
                              ? Result<SecretKey>(InvalidArgumentError("the model key file '" + path +
                                                                       "' is longer than 4 KiB"))
                              : ParseHexKey(std::string_view(buf, n), "the model key file '" + path + "'");
  WipeBytes(buf, sizeof buf);
  return key;
}

Result<SecretKey> KeyFromCommand(const std::string& command, const std::string& key_id) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return UnavailableError("pipe: " + std::string(std::strerror(errno)));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "VLMD_KEY_ID=", 12) != 0) env_strings.emplace_back(*e);
  }
  env_strings.push_back("VLMD_KEY_ID=" + key_id);
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string cmd = command;
  char sh[] = "/bin/sh", dash_c[] = "-c";
  char* argv[] = {sh, dash_c, cmd.data(), nullptr};
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, "/bin/sh", &actions, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  if (rc != 0) {
    ::close(pipe_fds[0]);
    return UnavailableError("cannot run the model key command: " + std::string(std::strerror(rc)));
  }
  char buf[kMaxKeyText + 1];
  size_t n = 0;
  bool timed_out = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kCommandTimeoutMs);
  while (n < sizeof buf) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd pfd{pipe_fds[0], POLLIN, 0};
    const int pr = ::poll(&pfd, 1, static_cast<int>(left.count()));
    if (pr < 0 && errno == EINTR) continue;
    if (pr == 0) {
      timed_out = true;
      break;
    }
    const ssize_t r = ::read(pipe_fds[0], buf + n, sizeof buf - n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    n += static_cast<size_t>(r);
  }
  ::close(pipe_fds[0]);
  if (timed_out || n > kMaxKeyText) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  auto interpret = [&]() -> Result<SecretKey> {
    if (timed_out) return Status(StatusCode::kDeadlineExceeded, "the model key command ran longer than 30 s");
    if (n > kMaxKeyText) return InvalidArgumentError("the model key command printed more than 4 KiB");
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      return UnavailableError("the model key command failed (" +
                              (WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status))
                                                 : "signal " + std::to_string(WTERMSIG(status))) + ")");
    }
    return ParseHexKey(std::string_view(buf, n), "the model key command's output");
  };
  Result<SecretKey> key = interpret();
  WipeBytes(buf, sizeof buf);
  return key;
}

}  // namespace

Result<SecretKey> ParseHexKey(std::string_view text, std::string_view origin) {
  while (!text.empty() && IsSpace(text.front())) text.remove_prefix(1);
  while (!text.empty() && IsSpace(text.back())) text.remove_suffix(1);
  if (text.size() != 2 * SecretKey::kBytes) {
    return InvalidArgumentError(std::string(origin) + " must hold 32 hexadecimal digits (a 128-bit SM4 key); it holds " +
                                std::to_string(text.size()) + " characters");
  }
  SecretKey key;
  for (size_t i = 0; i < SecretKey::kBytes; ++i) {
    const int hi = HexDigit(text[2 * i]), lo = HexDigit(text[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      return InvalidArgumentError(std::string(origin) + " holds a character that is not a hexadecimal digit");
    }
    key.bytes[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return key;
}

Result<SecretKey> ResolveModelKey(const ModelKeySource& source, const std::string& key_id) {
  if (!source.file.empty() && !source.command.empty()) {
    return InvalidArgumentError("give the model key as a file or a command, not both");
  }
  if (!source.command.empty()) return KeyFromCommand(source.command, key_id);
  if (!source.file.empty()) return KeyFromFile(source.file);
  if (const char* env = std::getenv(kModelKeyEnv); env != nullptr && *env != '\0') {
    return ParseHexKey(env, std::string("the environment variable ") + kModelKeyEnv);
  }
  return NotFoundError("no model key: give it with --model-key-file, --model-key-command or " +
                       std::string(kModelKeyEnv) + " (in a config file: key_file or key_command)");
}

}  // namespace vlmd
