// vlmd-run generation and tokenization commands: load the model, build the prompt (chat template
// from the GGUF unless --raw-prompt), generate, print text or JSON with timings.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "core/read_file.h"
#include "core/temp_file.h"
#include "engine/gguf/gguf_reader.h"
#include "engine/gguf/model_file.h"
#include "engine/runtime/vlm_engine.h"
#include "engine/tokenizer/tokenizer.h"
#include "serve/redact/redactor.h"
#include "vlmd-run/commands.h"

namespace vlmd::tools {

namespace redact = serve::redact;

namespace {

using engine::runtime::VlmEngine;

int Fail(std::ostream& err, const Status& s) {
  err << "vlmd-run: error: " << s.ToString() << "\n";
  return kExitError;
}


// Atomically: a failed write (a full disk) leaves no truncated file, and an old one as it was.
Status WriteF32(const std::string& path, const std::vector<float>& v) {
  return WriteFileAtomically(
      path, std::span(reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(float)));
}


// How the matrices were packed (ops::PackingSummary), in --json output.
nlohmann::json PackingJson(const engine::ops::PackingSummary& p) {
  return {{"float_column_scaled", p.float_column_scaled},
          {"float_q8_blocks", p.float_q8_blocks},
          {"quant_int8", p.quant_int8},
          {"quant_4bit", p.quant_4bit},
          {"bf16_tiles", p.bf16_tiles},
          {"bytes", p.bytes}};
}

}  // namespace

int RunTokenize(const RunOptions& opts, std::ostream& out, std::ostream& err) {
  auto file = engine::gguf::OpenModelFile(opts.model_path, opts.model_key, nullptr);
  if (!file.ok()) return Fail(err, file.status());
  auto tok = engine::tokenizer::Tokenizer::FromGguf(**file);
  if (!tok.ok()) return Fail(err, tok.status());
  std::string text = opts.tokenize_text;
  if (!opts.tokenize_file.empty()) {
    auto t = ReadWholeFile(opts.tokenize_file);
    if (!t.ok()) return Fail(err, t.status());
    text = *t;
  }
  auto ids = tok->Tokenize(text, opts.add_special, /*parse_special=*/opts.add_special);
  if (!ids.ok()) return Fail(err, ids.status());
  out << nlohmann::json(*ids).dump() << "\n";
  return kExitOk;
}

int RunGenerate(const RunOptions& opts, std::ostream& out, std::ostream& err) {
  std::string text = opts.prompt;
  if (!opts.prompt_file.empty()) {
    auto t = ReadWholeFile(opts.prompt_file);
    if (!t.ok()) return Fail(err, t.status());
    text = *t;
  }
  engine::runtime::EngineOptions eo;
  eo.threads = opts.threads;
  eo.n_ctx = opts.n_ctx;
  eo.precision = engine::ops::ParsePrecision(opts.precision).value_or(engine::ops::Precision::kFast);
  eo.mmproj_path = opts.mmproj_path;
  eo.model_key = opts.model_key;
  if (!opts.images.empty() && opts.mmproj_path.empty()) {
    return Fail(err, InvalidArgumentError("--image needs --mmproj"));
  }
  auto engine = VlmEngine::Load(opts.model_path, eo);
  if (!engine.ok()) return Fail(err, engine.status());
  std::vector<engine::runtime::EncodedImage> images;
  engine::runtime::ImageTimings image_timings;
  auto redact_options = RedactOptionsOf(opts);
  if (!redact_options.ok()) return Fail(err, redact_options.status());
  std::shared_ptr<const redact::Redactor> redactor;
  if (*redact_options) {
    auto made = redact::Redactor::Create(**redact_options);
    if (!made.ok()) return Fail(err, made.status());
    redactor = std::move(*made);
  }
  nlohmann::json redactions = nlohmann::json::array();
  for (const std::string& path : opts.images) {
    engine::runtime::ImageTimings t;
    Result<engine::runtime::EncodedImage> encoded = InvalidArgumentError("unreachable");
    if (redactor) {
      // Covered at full size, then preprocessed and encoded as the server does.
      auto img = LoadRedacted(path, *redactor, images.empty() ? opts.save_redacted : "", &redactions);
      if (!img.ok()) return Fail(err, img.status());
      auto prepared = (*engine)->PreprocessDecoded(*img, 0, &t);
      if (!prepared.ok()) return Fail(err, prepared.status().WithContext(path));
      encoded = (*engine)->EncodePrepared(*prepared, &t);
    } else {
      auto bytes = ReadWholeFile(path);
      if (!bytes.ok()) return Fail(err, bytes.status());
      encoded = (*engine)->EncodeImage(BytesOf(*bytes), &t);
    }
    if (!encoded.ok()) return Fail(err, encoded.status().WithContext(path));
    image_timings.decode_ms += t.decode_ms;
    image_timings.preprocess_ms += t.preprocess_ms;
    image_timings.encode_ms += t.encode_ms;
    images.push_back(std::move(*encoded));
  }
  if (!opts.dump_image_embeddings_path.empty()) {
    if (images.empty()) return Fail(err, InvalidArgumentError("--dump-image-embeddings needs --image"));
    Status s = WriteF32(opts.dump_image_embeddings_path, images[0].embeddings);
    if (!s.ok()) return Fail(err, s);
  }
  if (!opts.raw_prompt && (*engine)->chat_template_is_fallback()) {
    err << "vlmd-run: warning: the model's chat template is missing or unknown; using ChatML "
           "(pass --raw-prompt to send the prompt as is)\n";
  }
  auto prompt = (*engine)->BuildPrompt(text, images, opts.raw_prompt);
  if (!prompt.ok()) return Fail(err, prompt.status());

  if (!opts.dump_logits_path.empty()) {
    auto logits = (*engine)->PromptLogits(*prompt);
    if (!logits.ok()) return Fail(err, logits.status());
    Status s = WriteF32(opts.dump_logits_path, *logits);
    if (!s.ok()) return Fail(err, s);
  }

  engine::runtime::GenerateParams gp;
  gp.max_tokens = opts.n_predict;
  gp.stop = opts.stop;
  gp.ignore_eos = opts.ignore_eos;
  gp.sampling.temperature = opts.temperature;
  gp.sampling.top_k = opts.top_k;
  gp.sampling.top_p = opts.top_p;
  gp.sampling.min_p = opts.min_p;
  gp.sampling.repeat_penalty = opts.repeat_penalty;
  gp.sampling.seed = opts.seed;
  engine::runtime::TextCallback stream;
  if (!opts.json) {
    stream = [&out](std::string_view piece) {
      out << piece << std::flush;
      return true;
    };
  }
  auto r = (*engine)->Generate(*prompt, gp, stream);
  if (!r.ok()) return Fail(err, r.status());
  if (!opts.json) {
    out << "\n";
    return kExitOk;
  }
  const double out_tok = static_cast<double>(r->tokens.size());
  nlohmann::json j;
  j["text"] = r->text;
  j["tokens"] = r->tokens;
  j["prompt_token_ids"] = prompt->tokens;  // -1 marks an image-token row
  j["finish_reason"] = r->finish_reason;
  j["kernels"] = std::string((*engine)->isa_name());
  j["packing"]["text"] = PackingJson((*engine)->model().packing());
  if ((*engine)->vision() != nullptr) j["packing"]["vision"] = PackingJson((*engine)->vision()->packing());
  if (redactor) j["redaction"] = redactions;
  nlohmann::json& t = j["timings"];
  t["prefill_ms"] = r->prefill_ms;
  t["decode_ms"] = r->decode_ms;
  t["prompt_tokens"] = r->prompt_tokens;
  t["image_tokens"] = prompt->n_image_tokens;
  t["image_decode_ms"] = image_timings.decode_ms;
  t["preprocess_ms"] = image_timings.preprocess_ms;
  t["encode_ms"] = image_timings.encode_ms;
  t["output_tokens"] = r->tokens.size();
  t["prefill_tok_s"] = r->prefill_ms > 0 ? r->prompt_tokens / (r->prefill_ms / 1e3) : 0.0;
  // The first token comes from the prefill's logits: out_tok - 1 decode steps were timed.
  t["decode_tok_s"] = r->decode_ms > 0 && out_tok > 1 ? (out_tok - 1) / (r->decode_ms / 1e3) : 0.0;
  out << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";  // model text, paths: maybe not UTF-8
  return kExitOk;
}

}  // namespace vlmd::tools
