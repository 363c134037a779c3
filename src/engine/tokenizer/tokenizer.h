// Text <-> token ids for GGUF vocabularies: byte-level BPE ("gpt2") with the pre-tokenizer named
// by tokenizer.ggml.pre, and SentencePiece ("llama"); special-token parsing, BOS/EOS, pieces and
// detokenization. Reproduces llama.cpp's llama_tokenize / llama_token_to_piece token for token.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/tokenizer/pretokenizer.h"
#include "engine/tokenizer/prompt_text.h"
#include "engine/tokenizer/vocab.h"

namespace vlmd::engine::gguf {
class GgufFile;
}

namespace vlmd::engine::tokenizer {

// Immutable after construction: every method is const and safe to call from many threads.
// Owns its copy of the vocabulary (the GgufFile may be closed afterwards).
class Tokenizer {
 public:
  // Reads the tokenizer.* keys of `file` (a full model or a vocab-only GGUF). Errors: see
  // ReadVocabData and FromVocabData.
  static Result<Tokenizer> FromGguf(const gguf::GgufFile& file);
  // Builds from vocabulary arrays given directly. Errors: Vocab::Build's, and UNIMPLEMENTED
  // naming tokenizer.ggml.pre when a BPE vocabulary names an unknown pre-tokenizer (an absent
  // key selects llama.cpp's "default" cascade and sets pre_tokenizer_defaulted()).
  static Result<Tokenizer> FromVocabData(VocabData data);

  // Token ids of `text` (raw bytes; invalid UTF-8 is tokenized as U+FFFD by BPE and as byte
  // fallback by SPM, as llama.cpp does).
  //  - add_special: prepend BOS / append EOS where the vocabulary says so (add_bos/add_eos).
  //  - parse_special: text equal to a control token (e.g. "<|im_start|>") becomes its id.
  //    User-defined tokens are always cut out of the text, whatever this flag (llama.cpp).
  //  - literal: byte ranges of `text` (sorted, disjoint) where a guarded token's text is read as
  //    plain text even with parse_special: a client's words in a templated prompt (PromptText).
  // RESOURCE_EXHAUSTED only if the pre-tokenizer regex engine gives up on pathological input.
  Result<std::vector<TokenId>> Tokenize(std::string_view text, bool add_special,
                                        bool parse_special,
                                        std::span<const TextRange> literal = {}) const;
  // A templated prompt: special text parsed outside its literal ranges (PromptText).
  Result<std::vector<TokenId>> TokenizePrompt(const PromptText& prompt, bool add_special) const {
    return Tokenize(prompt.text(), add_special, /*parse_special=*/true, prompt.literal());
  }

  // The bytes token `id` stands for. With special == false, control and unknown tokens give "".
  // Pieces need not be valid UTF-8 on their own (byte tokens, split characters): stream them
  // through Utf8StreamDecoder. An id outside the vocabulary gives "". The view lives as long as
  // the Tokenizer.
  std::string_view TokenToPiece(TokenId id, bool special = true) const;

  // Concatenated pieces of `ids`, as llama_detokenize: with remove_special a leading BOS / trailing
  // EOS (when the vocab adds them) is dropped; SPM's added leading space is removed; BPE
  // vocabularies with clean_spaces undo " ." / " 's" spacing. Invalid ids are skipped.
  std::string Detokenize(std::span<const TokenId> ids, bool remove_special,
                         bool unparse_special) const;

  // Whether token `id`'s text in a client's words (Tokenize's literal ranges) is read as text:
  // control and unknown tokens, and user-defined ones whose text is a chat template's or image
  // wrapper's marker (IsPromptMarkerText: some GGUFs type "<start_of_turn>" user-defined).
  // Other user-defined tokens are words the vocabulary added and stay tokens, as llama.cpp reads
  // them with parse_special = false.
  bool guarded_in_literal(TokenId id) const;

  const Vocab& vocab() const { return vocab_; }
  int32_t n_tokens() const { return vocab_.n_tokens(); }
  TokenId bos() const { return vocab_.bos(); }
  TokenId eos() const { return vocab_.eos(); }
  bool IsEog(TokenId id) const { return vocab_.IsEog(id); }
  bool pre_tokenizer_defaulted() const { return pre_defaulted_; }

 private:
  struct Fragment {
    TokenId token;  // kNoToken: text [offset, offset + length) of the input
    size_t offset;
    size_t length;
  };

  Tokenizer(Vocab vocab, std::optional<PreTokenizer> pre, bool pre_defaulted);
  // `literal`: ranges of `text` where control and unknown tokens are not parsed.
  std::vector<Fragment> Partition(std::string_view text, bool parse_special,
                                  std::span<const TextRange> literal) const;
  Status EncodeBpeText(std::string_view text, std::vector<TokenId>* out) const;
  std::string ComputePiece(TokenId id) const;

  Vocab vocab_;
  std::optional<PreTokenizer> pre_;  // BPE only
  bool pre_defaulted_ = false;
  std::vector<std::string> pieces_;  // TokenToPiece(id, special = true), precomputed
  std::vector<TokenId> guarded_markers_;  // user-defined tokens with a marker's text, sorted
};

}  // namespace vlmd::engine::tokenizer
