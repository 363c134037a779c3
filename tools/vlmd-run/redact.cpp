// vlmd-run --redact: faces and plates covered in the --image files before the model sees them,
// as the server does (serve/redact), and --save-redacted to look at what the model gets.
#include <png.h>

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "vlmd-run/commands.h"

namespace vlmd::tools {

namespace redact = serve::redact;

namespace {

Status WritePng(const std::string& path, const engine::image::Image& img) {
  png_image png{};
  png.version = PNG_IMAGE_VERSION;
  png.width = static_cast<png_uint_32>(img.width);
  png.height = static_cast<png_uint_32>(img.height);
  png.format = PNG_FORMAT_RGB;
  if (!png_image_write_to_file(&png, path.c_str(), 0, img.rgb.data(), 0, nullptr)) {
    const std::string why = png.message;
    png_image_free(&png);
    return UnavailableError("cannot write " + path + ": " + why);
  }
  return Status::Ok();
}

}  // namespace

Result<std::optional<redact::RedactOptions>> RedactOptionsOf(const RunOptions& opts) {
  if (opts.redact.empty()) {
    if (!opts.save_redacted.empty()) return InvalidArgumentError("--save-redacted needs --redact");
    return std::optional<redact::RedactOptions>();
  }
  redact::RedactOptions o;
  VLMD_RETURN_IF_ERROR(redact::ParseRedactKinds(opts.redact, &o));
  VLMD_RETURN_IF_ERROR(redact::ParseRedactStyle(opts.redact_style, &o.style));
  VLMD_RETURN_IF_ERROR(redact::ParseFaceDetector(opts.face_detector, &o.face_detector));
  return std::optional<redact::RedactOptions>(o);
}

Result<engine::image::Image> LoadRedacted(const std::string& path, const redact::Redactor& redactor,
                                          const std::string& save_to, nlohmann::json* report) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return NotFoundError("cannot read " + path);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto img = engine::image::DecodeImage(bytes);
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
