// vlmd-run --info: a GGUF file as JSON (header, metadata in file order, tensor table), and under
// "vlmd" which model family it is and whether vlmd runs it (or why not). Long arrays (e.g. a
// 50k-token vocab) are summarized as {"type","count","head"} to keep the output readable.
#include <charconv>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "core/sealed_file.h"
#include "engine/gguf/gguf_reader.h"
#include "engine/gguf/model_file.h"
#include "engine/models/text_config.h"
#include "engine/models/vision_config.h"
#include "vlmd-run/commands.h"

namespace vlmd::tools {
namespace {

using engine::gguf::ArrayElements;
using engine::gguf::GgufFile;
using engine::gguf::MetadataValue;
using engine::gguf::ValueType;
using Json = nlohmann::ordered_json;

constexpr uint64_t kMaxInlineArray = 16;  // longer arrays are summarized
constexpr uint64_t kArrayHead = 8;        // elements shown in a summary

// The shortest decimal that round-trips the float, as a double: prints 1e-05, not
// 9.999999747378752e-06.
double ShortestFloat(float f) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof(buf) - 1, f);
  *r.ptr = '\0';
  return std::strtod(buf, nullptr);
}

Json ScalarJson(const MetadataValue& v) {
  switch (v.type) {
    case ValueType::kInt8: case ValueType::kInt16: case ValueType::kInt32: case ValueType::kInt64:
      return v.i;
    case ValueType::kUint8: case ValueType::kUint16: case ValueType::kUint32:
    case ValueType::kUint64:
      return v.u;
    case ValueType::kBool: return v.u != 0;
    case ValueType::kFloat32: return ShortestFloat(static_cast<float>(v.f));
    case ValueType::kFloat64: return v.f;
    case ValueType::kString: return std::string(v.str);
    case ValueType::kArray: break;
  }
  return nullptr;
}

Json ValueJson(const MetadataValue& v) {
  if (v.type != ValueType::kArray) return ScalarJson(v);
  const bool summarize = v.array_count > kMaxInlineArray;
  Json elems = Json::array();
  for (const MetadataValue& e : ArrayElements(v, summarize ? kArrayHead : kMaxInlineArray)) {
    elems.push_back(ScalarJson(e));
  }
  if (!summarize) return elems;
  Json s = Json::object();
  s["type"] = std::string(engine::gguf::ValueTypeName(v.array_type));
  s["count"] = v.array_count;
  s["head"] = std::move(elems);
  return s;
}

// The family a vision file (mmproj) belongs to, by its projector.
std::string VisionFamilyName(const engine::models::VisionConfig& c) {
  using engine::models::ProjectorType;
  switch (c.projector) {
    case ProjectorType::kMlp: return c.grid_pinpoints.empty() ? "LLaVA-1.5" : "LLaVA-1.6 (anyres)";
    case ProjectorType::kIdefics3: return "SmolVLM / Idefics3";
    case ProjectorType::kQwen2vl: return "Qwen2-VL";
    case ProjectorType::kQwen25vl: return "Qwen2.5-VL";
    case ProjectorType::kQwen3vl: return "Qwen3-VL";
    case ProjectorType::kInternvl: return "InternVL";
    case ProjectorType::kGemma3: return "Gemma 3";
  }
  return "unknown";
}

// {"kind": "text" | "vision", "family", "runs", "why" (when it does not)}: what vlmd makes of
// the file, by the same config readers the engine loads it with.
Json SupportJson(const GgufFile& f) {
  Json j = Json::object();
  const auto arch = f.GetString("general.architecture");
  const bool vision = arch.ok() && *arch == "clip";
  j["kind"] = vision ? "vision" : "text";
  if (vision) {
    const auto projector = f.GetString("clip.projector_type");
    j["projector_type"] = projector.ok() ? std::string(*projector) : "";
    auto config = engine::models::ReadVisionConfig(f);
    if (config.ok()) j["family"] = VisionFamilyName(*config);
    j["runs"] = config.ok();
    if (!config.ok()) j["why"] = config.status().ToString();
    return j;
  }
  j["family"] = arch.ok() ? std::string(*arch) : "";
  auto config = engine::models::ReadTextConfig(f);
  j["runs"] = config.ok();
  if (!config.ok()) j["why"] = config.status().ToString();
  return j;
}

Json InfoJson(const std::string& path, const GgufFile& f) {
  Json j = Json::object();
  j["file"] = path;
  j["version"] = f.version();
  j["alignment"] = f.alignment();
  j["data_offset"] = f.data_offset();
  Json meta = Json::object();
  for (const auto& e : f.metadata()) meta[std::string(e.key)] = ValueJson(e.value);
  j["metadata"] = std::move(meta);
  Json tensors = Json::array();
  for (const auto& t : f.tensors()) {
    Json shape = Json::array();
    for (int d = 0; d < t.n_dims; ++d) shape.push_back(t.ne[d]);
    tensors.push_back(Json{{"name", std::string(t.name)},
                           {"type", std::string(engine::DTypeName(t.type))},
                           {"shape", std::move(shape)},
                           {"offset", t.offset},
                           {"nbytes", t.nbytes}});
  }
  j["tensors"] = std::move(tensors);
  j["vlmd"] = SupportJson(f);
  return j;
}

}  // namespace

int RunInfo(const std::string& path, const ModelKeySource& key, std::ostream& out, std::ostream& err) {
  Json sealed;
  if (IsSealedFile(path)) {
    auto h = ReadSealedHeader(path);
    if (!h.ok()) {
      err << "vlmd-run: error: " << h.status().ToString() << "\n";
      return kExitError;
    }
    sealed = {{"scheme", h->scheme}, {"key_id", h->key_id}, {"plaintext_bytes", h->plaintext_bytes},
              {"plaintext_sha256", DigestHex(h->plaintext_sha256)}};
    const char* env = std::getenv(kModelKeyEnv);
    if (key.empty() && (env == nullptr || *env == '\0')) {  // the header alone, without a key
      Json j{{"file", path}, {"sealed", sealed}};
      out << j.dump(2, ' ', false, Json::error_handler_t::replace) << "\n";
      return kExitOk;
    }
  }
  auto file = engine::gguf::OpenModelFile(path, key, nullptr);
  if (!file.ok()) {
    err << "vlmd-run: error: " << file.status().ToString() << "\n";
    return kExitError;
  }
  // Strings in GGUF files are not guaranteed UTF-8 (byte-level vocab pieces): replace invalid
  // sequences with U+FFFD instead of failing.
  Json j = InfoJson(path, **file);
  if (!sealed.is_null()) j["sealed"] = sealed;
  out << j.dump(2, ' ', false, Json::error_handler_t::replace) << "\n";
  return kExitOk;
}

}  // namespace vlmd::tools
