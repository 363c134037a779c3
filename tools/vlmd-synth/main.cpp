// vlmd-synth: writes a random-weight VLM (text.gguf + mmproj.gguf) of a named shape, for
// benchmarks, tests and the demo model. The files load in vlmd and in llama.cpp.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>

#include "engine/synth/synthetic_model.h"

namespace {

using vlmd::engine::DType;
using vlmd::engine::ParseDType;
namespace synth = vlmd::engine::synth;

int Fail(const std::string& message) {
  std::fprintf(stderr, "vlmd-synth: error: %s\n", message.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Write a random-weight VLM (text.gguf + mmproj.gguf) of a named shape."};
  std::string preset_name = "tiny";
  std::string out_dir = ".";
  std::string text_type = "f16";
  std::string vision_type = "f16";
  uint64_t seed = 1;
  bool text_only = false;
  std::string presets;
  for (const auto& n : synth::PresetNames()) presets += (presets.empty() ? "" : ", ") + n;
  app.add_option("--preset", preset_name, "model shape: " + presets)->capture_default_str();
  app.add_option("--out", out_dir, "output directory (text.gguf, mmproj.gguf)")
      ->capture_default_str();
  app.add_option("--type", text_type, "text weight type: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q4_k q5_k q6_k")
      ->capture_default_str();
  app.add_option("--vision-type", vision_type, "vision matrix type")->capture_default_str();
  app.add_option("--seed", seed, "random seed")->capture_default_str();
  app.add_flag("--text-only", text_only, "write only text.gguf");
  int32_t outliers = 0;
  float outlier_scale = 16.0f;
  app.add_option("--outlier-channels", outliers,
                 "scale this many input channels of every decoder matrix up (norm weights and "
                 "ffn_up rows), as trained LLMs' activations have them")->capture_default_str();
  app.add_option("--outlier-scale", outlier_scale, "their factor")->capture_default_str();
  int32_t text_layers = 0;
  app.add_option("--text-layers", text_layers,
                 "write this many decoder layers instead of the preset's (same shape per layer: "
                 "a benchmark file of a model too large to write whole); 0: the preset's");
  CLI11_PARSE(app, argc, argv);

  auto preset = synth::FindPreset(preset_name);
  if (!preset) return Fail("unknown preset '" + preset_name + "' (known: " + presets + ")");
  if (text_layers < 0 || text_layers > 1024) return Fail("--text-layers must be in [0, 1024]");
  if (text_layers > 0) {
    preset->text.n_layers = text_layers;
    // Deepstack adds slices after the first n layers: fewer of them than layers (llama.cpp's
    // Qwen3-VL graphs add a slice after the last layer's output rows were already selected,
    // which fails when the last layer is a deepstack layer).
    preset->text.n_deepstack = std::min(preset->text.n_deepstack, text_layers - 1);
  }
  synth::SynthOptions opts;
  opts.seed = seed;
  // Scaled weights are written as f16 (at most 65504) or quantized: a larger factor, or inf,
  // wrote a model that does not load.
  if (outliers < 0 || !(outlier_scale > 0.0f) || !(outlier_scale <= 1024.0f)) {
    return Fail("--outlier-channels must be >= 0 and --outlier-scale in (0, 1024]");
  }
  opts.outlier_channels = outliers;
  opts.outlier_scale = outlier_scale;
  auto tt = ParseDType(text_type);
  auto vt = ParseDType(vision_type);
  if (!tt) return Fail("unknown --type '" + text_type + "'");
  if (!vt) return Fail("unknown --vision-type '" + vision_type + "'");
  opts.text_type = *tt;
  opts.vision_type = *vt;

  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return Fail("cannot create " + out_dir + ": " + ec.message());
  const std::string text_path = out_dir + "/text.gguf";
  vlmd::Status s = synth::WriteSyntheticText(*preset, opts, text_path);
  if (!s.ok()) return Fail(s.ToString());
  std::printf("wrote %s (%s, %s)\n", text_path.c_str(), preset->description.c_str(),
              text_type.c_str());
  if (!text_only && preset->vision.projector != synth::ProjectorKind::kNone) {
    const std::string mmproj_path = out_dir + "/mmproj.gguf";
    s = synth::WriteSyntheticMmproj(*preset, opts, mmproj_path);
    if (!s.ok()) return Fail(s.ToString());
    std::printf("wrote %s (vision %s)\n", mmproj_path.c_str(), vision_type.c_str());
  }
  return 0;
}
