#include "samples.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/read_file.h"
#include "serve/api/requests.h"

namespace vlmd::tools::quantize {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kDefaultPrompt = "Describe this image.";


std::string LowerExtension(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext;
}

bool IsImage(const fs::path& p) {
  static const std::set<std::string> kExts = {".jpg", ".jpeg", ".png", ".webp", ".bmp", ".ppm", ".pgm"};
  return kExts.count(LowerExtension(p)) > 0;
}

Result<std::vector<Sample>> LoadFolder(const fs::path& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_regular_file(ec)) files.push_back(it->path());
  }
  if (ec) return UnavailableError("cannot list " + dir.string() + ": " + ec.message());
  std::sort(files.begin(), files.end());
  std::set<fs::path> image_stems;
  for (const fs::path& f : files) {
    if (IsImage(f)) image_stems.insert(fs::path(f).replace_extension());
  }
  std::vector<Sample> samples;
  for (const fs::path& f : files) {
    const bool image = IsImage(f);
    const fs::path stem = fs::path(f).replace_extension();
    if (!image && (LowerExtension(f) != ".txt" || image_stems.count(stem) > 0)) continue;
    Sample s;
    s.name = f.filename().string();
    std::string text(kDefaultPrompt);
    const fs::path prompt_file = image ? fs::path(stem).concat(".txt") : f;
    if (fs::exists(prompt_file, ec)) {
      VLMD_ASSIGN_OR_RETURN(text, ReadWholeFile(prompt_file.string()));
    }
    if (image) {
      s.image_files.push_back(f.string());
      text = std::string(serve::api::kMediaMarker) + "\n" + text;
    }
    s.messages.push_back({"user", std::move(text)});
    samples.push_back(std::move(s));
  }
  if (samples.empty()) {
    return InvalidArgumentError(dir.string() + " holds no image or .txt prompt");
  }
  return samples;
}

// The requests' images are decoded from base64 and held until the run ends (a JSONL of images
// is as large in memory as on disk).
Result<std::vector<Sample>> LoadJsonl(const fs::path& file) {
  std::ifstream lines(file, std::ios::binary);
  if (!lines) return UnavailableError("cannot read " + file.string());
  serve::api::RequestLimits limits;
  limits.max_images = 64;
  limits.max_image_bytes = 64u << 20;
  std::vector<Sample> samples;
  std::string line;
  for (int64_t n = 1; std::getline(lines, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const bool chat = line.find("\"messages\"") != std::string::npos;
    auto request = chat ? serve::api::ParseChatCompletion(line, limits)
                        : serve::api::ParseInvokeJson(line, limits);
    if (!request.ok()) {
      return InvalidArgumentError(file.string() + " line " + std::to_string(n) + ": " +
                                  request.status().message());
    }
    if (!request->image_urls.empty()) {
      return InvalidArgumentError(file.string() + " line " + std::to_string(n) +
                                  ": image URLs are not fetched; give the images as data URIs");
    }
    Sample s;
    s.name = "line " + std::to_string(n);
    s.raw = request->raw_prompt;
    for (const serve::api::ChatMessage& m : request->messages) s.messages.push_back({m.role, m.text});
    s.images = std::move(request->images);
    samples.push_back(std::move(s));
  }
  if (lines.bad()) return UnavailableError("error reading " + file.string());
  if (samples.empty()) return InvalidArgumentError(file.string() + " holds no request");
  return samples;
}

}  // namespace

Result<std::vector<Sample>> LoadSamples(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return LoadFolder(path);
  if (!fs::exists(path, ec)) return NotFoundError("no such file or folder: " + path);
  return LoadJsonl(path);
}

Result<engine::runtime::PromptRows> SampleRows(engine::runtime::VlmEngine& engine,
                                               const Sample& sample) {
  std::vector<std::string> read;  // the folder's image files, now
  for (const std::string& path : sample.image_files) {
    VLMD_ASSIGN_OR_RETURN(std::string bytes, ReadWholeFile(path));
    read.push_back(std::move(bytes));
  }
  std::vector<engine::runtime::EncodedImage> images;
  for (const std::string& bytes : sample.image_files.empty() ? sample.images : read) {
    VLMD_ASSIGN_OR_RETURN(
        engine::runtime::EncodedImage img,
        engine.EncodeImage(BytesOf(bytes), nullptr));
    images.push_back(std::move(img));
  }
  // As the server builds it: a raw sample as it is, a conversation with its messages' words
  // read as text.
  const engine::tokenizer::PromptText prompt =
      sample.raw ? engine::tokenizer::PromptText(
                       sample.messages.empty() ? std::string() : sample.messages.front().content)
                 : engine.ApplyChatTemplate(sample.messages);
  return engine.BuildPrompt(prompt, images, /*raw=*/true);
}

}  // namespace vlmd::tools::quantize
