// vlmd-quantize: re-quantize a GGUF model (optionally weighted by an importance matrix), make an
// importance matrix from image+prompt samples (calibrate), or compare a quantized model's
// next-token distributions with a reference's (eval).
#include <string_view>

#include "commands.h"

int main(int argc, char** argv) {
  using namespace vlmd::tools::quantize;
  const std::string_view command = argc > 1 ? argv[1] : "";
  if (command == "calibrate") return RunCalibrate(argc - 1, argv + 1);
  if (command == "eval") return RunEval(argc - 1, argv + 1);
  return RunQuantize(argc, argv);
}
