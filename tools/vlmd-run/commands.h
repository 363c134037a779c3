// The vlmd-run subcommands. main.cpp parses flags into RunOptions and dispatches to one of these;
// each returns the process exit code (0 ok, 2 error with one "vlmd-run: error: ..." line on err).
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <optional>

#include "serve/redact/redactor.h"

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "core/model_key.h"

namespace vlmd::tools {

// Exit codes shared by all commands (CLI11 usage errors keep CLI11's own codes, >= 100).
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 2;

// Everything the command line can set. Generation flags (-m, -p, --image, ...) join here.
struct RunOptions {
  std::string info_path;  // --info FILE.gguf

  // Generation (-m MODEL -p PROMPT ...).
  std::string model_path;        // -m
  std::string mmproj_path;       // --mmproj (vision encoder + projector)
  ModelKeySource model_key;      // --model-key-file / --model-key-command (sealed files)
  std::vector<std::string> images;  // --image (repeatable); one <__media__> marker per image
  std::string dump_image_embeddings_path;  // f32 [n_image_tokens, n_embd] of the first image
  std::string prompt;            // -p
  std::string prompt_file;       // -f
  int32_t n_predict = 64;        // -n
  float temperature = 0.0f;      // --temp (0 = greedy)
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repeat_penalty = 1.0f;
  uint64_t seed = 0;
  std::vector<std::string> stop;
  int32_t threads = 0;           // -t (0 = all cores)
  int32_t n_ctx = 4096;          // -c
  std::string precision = "fast";  // --precision exact|fast (engine::ops::Precision)
  bool raw_prompt = false;       // no chat template; special-token text is parsed
  bool json = false;             // one JSON object instead of plain text
  bool ignore_eos = false;
  std::string dump_logits_path;  // f32 logits of the last prompt position

  // Tokenization (-m MODEL --tokenize TEXT | --tokenize-file FILE).
  std::string tokenize_text;
  std::string tokenize_file;
  bool tokenize_set = false;
  bool add_special = false;

  // Redaction (--redact faces,plates): the --image files' faces and plates are covered before
  // the model sees them; --save-redacted writes the first one as PNG.
  std::string redact;
  std::string redact_style = "blur";
  std::string face_detector = "haar";
  std::string save_redacted;
};

// -m MODEL -p PROMPT: generates text (see RunOptions); prints text or JSON on `out`.
int RunGenerate(const RunOptions& opts, std::ostream& out, std::ostream& err);

// -m MODEL --tokenize TEXT: prints the token ids as a JSON array (no BOS/EOS added and
// special-token text not parsed unless --add-special).
int RunTokenize(const RunOptions& opts, std::ostream& out, std::ostream& err);

// --redact KINDS --image FILE [--save-redacted OUT.png] without -m: covers the image's faces
// and/or plates, prints what was found as JSON, writes the covered image.
int RunRedact(const RunOptions& opts, std::ostream& out, std::ostream& err);
// The redaction --redact asks for (none without it); INVALID_ARGUMENT for unknown names.
Result<std::optional<serve::redact::RedactOptions>> RedactOptionsOf(const RunOptions& opts);
// Reads, decodes and redacts one image file, appends what was found to *report, and writes the
// covered image to `save_to` (PNG) unless empty.
Result<engine::image::Image> LoadRedacted(const std::string& path, const serve::redact::Redactor& redactor,
                                          const std::string& save_to, nlohmann::json* report);

// --info: prints the GGUF header, metadata and tensor table of `path` as JSON on `out`; for a
// sealed file, its sealed header (and, with a key, the decrypted GGUF's).
int RunInfo(const std::string& path, const ModelKeySource& key, std::ostream& out, std::ostream& err);

}  // namespace vlmd::tools
