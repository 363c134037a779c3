// What the vlmd-quantize commands share: the error line, and the engine flags of calibrate and
// eval (-t, -c, --precision).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "engine/runtime/vlm_engine.h"

namespace CLI {
class App;
}

namespace vlmd::tools::quantize {

// Prints "vlmd-quantize: error: WHAT" and returns the error exit code (2).
int Fail(const std::string& what);

struct EngineFlags {
  int32_t threads = 0;  // 0: all cores
  int32_t n_ctx = 8192;
  std::string precision = "exact";
};
void AddEngineFlags(CLI::App& app, EngineFlags* flags);

// Loads `model` (with `mmproj` unless empty) as the flags say. INVALID_ARGUMENT for a bad
// --precision; the engine's load errors.
Result<std::unique_ptr<engine::runtime::VlmEngine>> LoadEngine(const EngineFlags& flags,
                                                               const std::string& model,
                                                               const std::string& mmproj);

}  // namespace vlmd::tools::quantize
