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

// The child's environment: the parent's without the key variable (a KMS client has no use for
// it) and with VLMD_KEY_ID; wiped after the spawn.
std::vector<std::string> ChildEnvironment(const std::string& key_id) {
  std::vector<std::string> env;
  const std::string key_var = std::string(kModelKeyEnv) + "=";
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "VLMD_KEY_ID=", 12) != 0 && std::strncmp(*e, key_var.c_str(), key_var.size()) != 0) {
      env.emplace_back(*e);
    }
  }
  env.push_back("VLMD_KEY_ID=" + key_id);
  return env;
}

// Runs `command` in its own process group with default signal handling and only stdin, stdout
// (the pipe) and stderr open; reads its stdout until EOF, 4 KiB + 1 or the deadline, then waits
// for it until the same deadline. On a timeout the whole group is killed, so a grandchild that
// holds the pipe cannot keep the load waiting.
Result<SecretKey> KeyFromCommand(const std::string& command, int timeout_ms, const std::string& key_id) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return UnavailableError("pipe: " + std::string(std::strerror(errno)));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  // Sockets the HTTP layer opened without O_CLOEXEC must not reach a KMS client.
  posix_spawn_file_actions_addclosefrom_np(&actions, STDERR_FILENO + 1);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);    // vlmd blocks SIGINT/SIGTERM/SIGHUP for sigwait
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  std::vector<std::string> env_strings = ChildEnvironment(key_id);
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string cmd = command;
  char sh[] = "/bin/sh", dash_c[] = "-c";
  char* argv[] = {sh, dash_c, cmd.data(), nullptr};
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, "/bin/sh", &actions, &attr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  for (std::string& e : env_strings) WipeBytes(e.data(), e.size());
  ::close(pipe_fds[1]);
  if (rc != 0) {
    ::close(pipe_fds[0]);
    return UnavailableError("cannot run the model key command: " + std::string(std::strerror(rc)));
  }
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  auto ms_left = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  };
  char buf[kMaxKeyText + 1];
  size_t n = 0;
  bool timed_out = false, read_failed = false;
  while (n < sizeof buf) {
    if (ms_left() <= 0) {
      timed_out = true;
      break;
    }
    pollfd pfd{pipe_fds[0], POLLIN, 0};
    const int pr = ::poll(&pfd, 1, static_cast<int>(ms_left()));
    if (pr < 0 && errno == EINTR) continue;
    if (pr < 0) {
      read_failed = true;
      break;
    }
    if (pr == 0) continue;  // the loop's deadline check decides
    const ssize_t r = ::read(pipe_fds[0], buf + n, sizeof buf - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) read_failed = true;
    if (r <= 0) break;
    n += static_cast<size_t>(r);
  }
  ::close(pipe_fds[0]);
  // Wait for the exit until the deadline (stdout closed is not the end of the command).
  int status = 0;
  bool exited = false;
  while (!timed_out && !read_failed && n <= kMaxKeyText) {
    const pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) {
      exited = true;
      break;
    }
    if (w < 0 && errno != EINTR) break;
    if (ms_left() <= 0) {
      timed_out = true;
      break;
    }
    ::usleep(10000);
  }
  if (!exited) {
    ::kill(-pid, SIGKILL);  // the command's whole process group
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  auto interpret = [&]() -> Result<SecretKey> {
    if (timed_out) return Status(StatusCode::kDeadlineExceeded, "the model key command ran longer than " + std::to_string(timeout_ms / 1000.0) + " s");
    if (read_failed) return UnavailableError("cannot read the model key command's output");
    if (n > kMaxKeyText) return InvalidArgumentError("the model key command printed more than 4 KiB");
    if (!exited) return UnavailableError("the model key command's exit status is unknown");
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
  if (!source.command.empty()) return KeyFromCommand(source.command, source.command_timeout_ms, key_id);
  if (!source.file.empty()) return KeyFromFile(source.file);
  if (const char* env = std::getenv(kModelKeyEnv); env != nullptr && *env != '\0') {
    return ParseHexKey(env, std::string("the environment variable ") + kModelKeyEnv);
  }
  return NotFoundError("no model key: give it with " + source.how_to_give);
}

}  // namespace vlmd
