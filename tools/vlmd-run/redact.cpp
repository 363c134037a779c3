// vlmd-run --redact: faces and plates covered in the --image files before the model sees them,
// as the server does (serve/redact), and --save-redacted to look at what the model gets.
#include <png.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/read_file.h"
#include "core/temp_file.h"
#include "vlmd-run/commands.h"

namespace vlmd::tools {

namespace redact = serve::redact;

namespace {

// Encoded in memory, then written atomically: a failed write leaves no half PNG.
Status WritePng(const std::string& path, const engine::image::Image& img) {
  png_image png{};
  png.version = PNG_IMAGE_VERSION;
  png.width = static_cast<png_uint_32>(img.width);
  png.height = static_cast<png_uint_32>(img.height);
  png.format = PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  std::vector<uint8_t> bytes;
  bool ok = png_image_write_to_memory(&png, nullptr, &size, 0, img.rgb.data(), 0, nullptr);
  if (ok) {
    bytes.resize(size);
    ok = png_image_write_to_memory(&png, bytes.data(), &size, 0, img.rgb.data(), 0, nullptr);
  }
  if (!ok) {
    const std::string why = png.message;
    png_image_free(&png);
    return UnavailableError("cannot encode the PNG for " + path + ": " + why);
  }
  bytes.resize(size);
  return WriteFileAtomically(path, bytes);
}

// --save-redacted writes a PNG, and never over an input (the covered copy would replace the
// original, or a later run would redact the copy).
Status CheckSaveRedactedPath(const std::string& save_to, const std::vector<std::string>& images) {
  std::string ext = std::filesystem::path(save_to).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  if (ext != ".png") {
    return InvalidArgumentError("--save-redacted " + save_to + ": the covered image is written as PNG; name it *.png");
  }
  for (const std::string& image : images) {
    std::error_code ec;
    if (std::filesystem::equivalent(save_to, image, ec)) {
      return InvalidArgumentError("--save-redacted " + save_to + " is the input image " + image +
                                  "; write the covered copy to another file");
    }
  }
  return Status::Ok();
}

}  // namespace

Result<std::optional<redact::RedactOptions>> RedactOptionsOf(const RunOptions& opts) {
  if (opts.redact.empty()) {
    if (!opts.save_redacted.empty()) return InvalidArgumentError("--save-redacted needs --redact");
    return std::optional<redact::RedactOptions>();
  }
  if (!opts.save_redacted.empty()) VLMD_RETURN_IF_ERROR(CheckSaveRedactedPath(opts.save_redacted, opts.images));
  redact::RedactOptions o;
  VLMD_RETURN_IF_ERROR(redact::ParseRedactKinds(opts.redact, &o));
  VLMD_RETURN_IF_ERROR(redact::ParseRedactStyle(opts.redact_style, &o.style));
  VLMD_RETURN_IF_ERROR(redact::ParseFaceDetector(opts.face_detector, &o.face_detector));
  return std::optional<redact::RedactOptions>(o);
}

Result<engine::image::Image> LoadRedacted(const std::string& path, const redact::Redactor& redactor,
                                          const std::string& save_to, nlohmann::json* report) {
  VLMD_ASSIGN_OR_RETURN(const std::string file, ReadWholeFile(path));
  auto img = engine::image::DecodeImage(BytesOf(file));
  if (!img.ok()) return img.status().WithContext(path);
  VLMD_ASSIGN_OR_RETURN(const redact::Redaction r, redactor.Apply(&*img));
  nlohmann::json regions = nlohmann::json::array();
  for (const redact::Region& g : r.regions) {
    regions.push_back({{"kind", redact::RedactKindName(g.kind)},
                       {"box", {g.x, g.y, g.width, g.height}},
                       {"score", g.score}});
  }
  report->push_back({{"image", path}, {"faces", r.faces}, {"plates", r.plates},
                     {"detect_ms", r.detect_ms}, {"regions", regions}});
  if (!save_to.empty()) VLMD_RETURN_IF_ERROR(WritePng(save_to, *img));
  return img;
}

int RunRedact(const RunOptions& opts, std::ostream& out, std::ostream& err) {
  auto fail = [&](const Status& s) {
    err << "vlmd-run: error: " << s.ToString() << "\n";
    return kExitError;
  };
  auto options = RedactOptionsOf(opts);
  if (!options.ok()) return fail(options.status());
  if (opts.images.size() != 1) return fail(InvalidArgumentError("--redact without -m takes one --image"));
  auto redactor = redact::Redactor::Create(**options);
  if (!redactor.ok()) return fail(redactor.status());
  nlohmann::json report = nlohmann::json::array();
  auto img = LoadRedacted(opts.images[0], **redactor, opts.save_redacted, &report);
  if (!img.ok()) return fail(img.status());
  out << report[0].dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";  // paths: maybe not UTF-8
  return 0;
}

}  // namespace vlmd::tools
