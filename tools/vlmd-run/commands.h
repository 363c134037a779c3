// The vlmd-run subcommands. main.cpp parses flags into RunOptions and dispatches to one of these;
// each returns the process exit code (0 ok, 2 error with one "vlmd-run: error: ..." line on err).
#pragma once

#include <ostream>
#include <string>

namespace vlmd::tools {

// Exit codes shared by all commands (CLI11 usage errors keep CLI11's own codes, >= 100).
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 2;

// Everything the command line can set. Generation flags (-m, -p, --image, ...) join here.
struct RunOptions {
  std::string info_path;  // --info FILE.gguf
};

// --info: prints the GGUF header, metadata and tensor table of `path` as JSON on `out`.
int RunInfo(const std::string& path, std::ostream& out, std::ostream& err);

}  // namespace vlmd::tools
