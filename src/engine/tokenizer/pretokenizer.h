// Byte-level BPE pre-tokenizers: the regex cascade that cuts text into words before BPE merges,
// one per `tokenizer.ggml.pre` name, with the semantics of llama.cpp's unicode_regex_split.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace vlmd::engine::tokenizer {

// Per-family behaviour that llama.cpp ties to the pre-tokenizer name.
struct PreTokenizerTraits {
  bool ignore_merges = false;  // a word that is itself a token skips the merges (llama3)
  bool clean_spaces = true;    // detokenizer removes " ?" " ." ... (clean_up_tokenization_spaces)
  bool add_bos = false;        // default of tokenizer.ggml.add_bos_token for this family
};

// Compiled regex cascade. Immutable after Create(); Split() is thread-safe.
class PreTokenizer {
 public:
  // Builds the pre-tokenizer named by tokenizer.ggml.pre ("gpt-2", "llama-bpe", "qwen2",
  // "starcoder", "smollm", "default", ...). UNIMPLEMENTED (naming it) for an unknown name.
  static Result<PreTokenizer> Create(std::string_view name);

  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;
  ~PreTokenizer();

  // Appends to *words the words of `text`, which must be valid UTF-8 (see SanitizeUtf8): each
  // regex of the cascade splits every current piece into its matches and the gaps between them,
  // so the words are a partition of `text` (views into it). RESOURCE_EXHAUSTED if the regex
  // engine hits its match limit (pathological input).
  Status Split(std::string_view text, std::vector<std::string_view>* words) const;

  const std::string& name() const { return name_; }
  const PreTokenizerTraits& traits() const { return traits_; }

  // Exposed for tests: rewrites \s and \S of a regex into explicit Unicode White_Space classes.
  static std::string TranslateWhitespace(std::string_view regex);

 private:
  struct Regex;
  PreTokenizer() = default;

  std::string name_;
  PreTokenizerTraits traits_;
  std::vector<std::unique_ptr<Regex>> regexes_;
};

}  // namespace vlmd::engine::tokenizer
