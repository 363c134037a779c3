// Image+prompt samples for calibrate and eval, from either
// - a folder: each image (jpg, jpeg, png, webp, bmp, ppm, pgm) with the prompt in a .txt file of
//   the same stem (absent: "Describe this image."), and each .txt without an image as a text-only
//   sample, in file-name order; or
// - a JSONL file: one request per line as the server receives it, a chat completion (has
//   "messages", images as data URIs) or an invoke body ("prompt", "image_base64"...).
// A sample becomes the rows the server would prefill for it (the model's chat template, its
// family's image wrapping).
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "engine/runtime/vlm_engine.h"

namespace vlmd::tools::quantize {

struct Sample {
  std::string name;  // file name, or "line N"
  std::vector<engine::tokenizer::ChatMessage> messages;
  bool raw = false;                 // messages[0] is the whole prompt (invoke raw_prompt)
  // One <__media__> marker each in the text, in order: encoded bytes (JSONL), or files read
  // when the sample is used (a folder), so that a large folder is not held in memory.
  std::vector<std::string> images;
  std::vector<std::string> image_files;
};

// NOT_FOUND for a missing path, INVALID_ARGUMENT naming the file or line that is malformed or
// a folder or file without any sample, UNAVAILABLE for a folder or file that cannot be read.
Result<std::vector<Sample>> LoadSamples(const std::string& path);

// The prompt rows of `sample` for `engine` (images read and encoded). Errors from the engine,
// UNAVAILABLE for an image file that cannot be read.
Result<engine::runtime::PromptRows> SampleRows(engine::runtime::VlmEngine& engine,
                                               const Sample& sample);

}  // namespace vlmd::tools::quantize
