// Where the key of a sealed model (core/sealed_file.h) comes from: a file, the VLMD_MODEL_KEY
// environment variable, or the output of a command (a KMS or HSM client). Each holds the 128-bit
// SM4 key as 32 hexadecimal digits; surrounding whitespace is ignored.
#pragma once

#include <string>

#include "core/secure_memory.h"
#include "core/status.h"

namespace vlmd {

inline constexpr const char* kModelKeyEnv = "VLMD_MODEL_KEY";

struct ModelKeySource {
  std::string file;     // --model-key-file
  std::string command;  // --model-key-command: run by /bin/sh with VLMD_KEY_ID set, stdout read
  int command_timeout_ms = 30000;
  // How the user gives a key, for the error when none is given (a tool with options of its own
  // names them here).
  std::string how_to_give =
      "--model-key-file, --model-key-command or VLMD_MODEL_KEY (in a config file: key_file or key_command)";
  bool empty() const { return file.empty() && command.empty(); }
};

// 32 hex digits (whitespace around them ignored) -> key. The message never quotes the text.
Result<SecretKey> ParseHexKey(std::string_view text, std::string_view origin);

// The key for a file sealed under `key_id`: from `source.command` (run in its own process group
// with default signals, only stdin/stdout/stderr open, VLMD_KEY_ID set and VLMD_MODEL_KEY
// removed from its environment; killed with its group after command_timeout_ms; its exit status checked; at
// most 4 KiB of output), else `source.file`, else the environment variable; both a file and a
// command is an error, and none of the three is a NOT_FOUND naming the options.
Result<SecretKey> ResolveModelKey(const ModelKeySource& source, const std::string& key_id);

}  // namespace vlmd
