// vlmd-run: command-line front end of the engine. Flag parsing and dispatch only; each command
// lives in its own file (info.cpp, ...).
#include <CLI/CLI.hpp>
#include <iostream>

#include "vlmd-run/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"vlmd-run: inspect GGUF models (generation commands will follow)"};
  vlmd::tools::RunOptions opts;
  app.add_option("--info", opts.info_path,
                 "Print the header, metadata and tensor table of a GGUF file as JSON")
      ->type_name("FILE.gguf");
  app.require_option(1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (!opts.info_path.empty()) return vlmd::tools::RunInfo(opts.info_path, std::cout, std::cerr);
  std::cerr << app.help();
  return vlmd::tools::kExitError;
}
