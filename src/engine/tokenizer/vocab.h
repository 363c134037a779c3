// Token vocabulary: the raw arrays a GGUF file declares (VocabData) and their validated, indexed
// form (Vocab) with token attributes, special-token ids, merge ranks and llama.cpp's load-time
// fix-ups (EOT/EOG detection by text, model-name quirks).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/status.h"

namespace vlmd::engine::gguf {
class GgufFile;
}

namespace vlmd::engine::tokenizer {

using TokenId = int32_t;
inline constexpr TokenId kNoToken = -1;

enum class VocabType : uint8_t {
  kSpm,  // tokenizer.ggml.model "llama": SentencePiece scores, byte fallback
  kBpe,  // tokenizer.ggml.model "gpt2": byte-level BPE with ranked merges
};

// Token attribute bits (llama_token_attr values, so dumps compare with llama.cpp's).
namespace attr {
inline constexpr uint32_t kUndefined = 0;
inline constexpr uint32_t kUnknown = 1u << 0;
inline constexpr uint32_t kUnused = 1u << 1;
inline constexpr uint32_t kNormal = 1u << 2;
inline constexpr uint32_t kControl = 1u << 3;
inline constexpr uint32_t kUserDefined = 1u << 4;
inline constexpr uint32_t kByte = 1u << 5;
inline constexpr uint32_t kLstrip = 1u << 7;
inline constexpr uint32_t kRstrip = 1u << 8;
}  // namespace attr

// GGUF token types (tokenizer.ggml.token_type values).
enum class TokenType : int32_t {
  kUndefined = 0, kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5,
  kByte = 6,
};

// The vocabulary exactly as declared, before validation. Build one by hand (tests, synthetic
// models) or read it from a GGUF with ReadVocabData. Optional fields mean "key absent".
struct VocabData {
  std::string model;                  // tokenizer.ggml.model: "gpt2" | "llama"
  std::optional<std::string> pre;     // tokenizer.ggml.pre
  std::string name;                   // general.name (only for llama.cpp's per-model quirks)
  std::vector<std::string> tokens;    // tokenizer.ggml.tokens
  std::vector<float> scores;          // tokenizer.ggml.scores: empty or one per token
  std::vector<int32_t> token_types;   // tokenizer.ggml.token_type: empty or one per token
  std::optional<std::vector<std::string>> merges;  // tokenizer.ggml.merges ("left right")
  std::optional<int64_t> bos_id, eos_id, unk_id, pad_id, eot_id, eom_id;
  std::optional<int64_t> fim_pad_id, fim_rep_id, fim_sep_id;  // fill-in-the-middle controls
  std::optional<bool> add_bos, add_eos, add_space_prefix;
  std::optional<std::string> chat_template;  // tokenizer.chat_template (not used to tokenize)
};

// Copies the tokenizer.* keys of `file` into a VocabData. NOT_FOUND if tokenizer.ggml.model or
// tokenizer.ggml.tokens is absent; INVALID_ARGUMENT / OUT_OF_RANGE (naming the key) when a key has
// the wrong type. Array lengths and ids are checked later, by Vocab::Build.
Result<VocabData> ReadVocabData(const gguf::GgufFile& file);

// Flags that depend on the pre-tokenizer family (see PreTokenizerTraits).
struct VocabDefaults {
  bool add_bos = false;
  bool ignore_merges = false;
  bool clean_spaces = true;
};

// Validated vocabulary. Immutable after Build(); all methods are const and thread-safe.
class Vocab {
 public:
  // Validates and indexes `data`. UNIMPLEMENTED for a model other than "gpt2"/"llama";
  // DATA_LOSS for an empty or duplicated token list, arrays whose length differs from the token
  // count, special-token ids outside the vocabulary, a byte token whose text is not <0xHH>, or
  // add_bos/add_eos without the matching id; NOT_FOUND for a BPE vocab without merges.
  // `defaults` are the BPE family's defaults (ignored for SPM).
  static Result<Vocab> Build(VocabData data, const VocabDefaults& defaults);

  VocabType type() const { return type_; }
  int32_t n_tokens() const { return static_cast<int32_t>(tokens_.size()); }
  bool IsValid(TokenId id) const { return id >= 0 && id < n_tokens(); }
  // Accessors below require IsValid(id).
  const std::string& text(TokenId id) const { return tokens_[id].text; }
  float score(TokenId id) const { return tokens_[id].score; }
  uint32_t attributes(TokenId id) const { return tokens_[id].attributes; }
  uint8_t byte_value(TokenId id) const { return tokens_[id].byte; }  // for attr::kByte tokens

  // Token whose text is exactly `text`, or kNoToken.
  TokenId Find(std::string_view text) const;
  // Rank of merge "left right" (lower merges first), or -1.
  int32_t MergeRank(std::string_view left, std::string_view right) const;
  // SPM byte fallback: the <0xHH> token of `byte`, else the one-byte token, else kNoToken.
  TokenId ByteToken(uint8_t byte) const { return byte_tokens_[byte]; }

  TokenId bos() const { return bos_; }
  TokenId eos() const { return eos_; }
  TokenId eot() const { return eot_; }
  TokenId unk() const { return unk_; }
  TokenId pad() const { return pad_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  bool add_space_prefix() const { return add_space_prefix_; }
  bool ignore_merges() const { return ignore_merges_; }
  bool clean_spaces() const { return clean_spaces_; }
  // End-of-generation tokens: EOS, EOT, EOM and tokens named like them (<|im_end|>, ...).
  bool IsEog(TokenId id) const { return eog_.count(id) != 0; }
  const std::unordered_set<TokenId>& eog_ids() const { return eog_; }
  // Control, user-defined and unknown tokens, longest text first: the order in which
  // Tokenize() cuts them out of the text.
  const std::vector<TokenId>& special_tokens() const { return special_tokens_; }
  const std::string& pre() const { return pre_; }
  const std::optional<std::string>& chat_template() const { return chat_template_; }
  // The longest token text, in bytes: without strip tokens (below) no token covers more bytes
  // of a text (byte-level BPE and SentencePiece spell a byte with one or more), so a text of b
  // bytes then has at least b / max_token_bytes() tokens.
  size_t max_token_bytes() const { return max_token_bytes_; }
  // Special tokens that swallow the whitespace beside them (llama.cpp's Phi-3 rule): one token
  // may then cover any number of bytes.
  bool has_strip_tokens() const { return has_strip_tokens_; }

 private:
  struct Token {
    std::string text;
    float score = 0.0f;
    uint32_t attributes = attr::kNormal;
    uint8_t byte = 0;
  };
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using StringMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

  Status ApplySpecialIds(const VocabData& data);
  void DetectEndOfGeneration();

  VocabType type_ = VocabType::kBpe;
  std::vector<Token> tokens_;
  StringMap token_to_id_;
  StringMap merge_ranks_;  // key: 4-byte length of left, left, right (unambiguous)
  TokenId byte_tokens_[256];
  TokenId bos_ = kNoToken, eos_ = kNoToken, eot_ = kNoToken, eom_ = kNoToken;
  TokenId unk_ = kNoToken, pad_ = kNoToken;
  TokenId fim_pad_ = kNoToken, fim_rep_ = kNoToken, fim_sep_ = kNoToken;
  bool add_bos_ = false, add_eos_ = false, add_space_prefix_ = false;
  bool ignore_merges_ = false, clean_spaces_ = true;
  std::unordered_set<TokenId> eog_;
  size_t max_token_bytes_ = 1;
  bool has_strip_tokens_ = false;
  std::vector<TokenId> special_tokens_;
  std::string pre_;
  std::optional<std::string> chat_template_;
};

}  // namespace vlmd::engine::tokenizer
