// A self-made byte-level BPE vocabulary (GPT-2 byte alphabet, merges grown from common English
// words, then random merges of existing tokens up to the requested size). It makes generated
// models loadable by any GGUF tokenizer (vlmd's and llama.cpp's) without shipping a real one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vlmd::engine::synth {

// ggml token types (llama_token_type): 1 normal, 2 unknown, 3 control, 4 user-defined.
inline constexpr int32_t kTokenNormal = 1;
inline constexpr int32_t kTokenControl = 3;
inline constexpr int32_t kTokenUserDefined = 4;

struct SyntheticVocab {
  std::vector<std::string> tokens;   // id -> text (byte-level BPE alphabet)
  std::vector<int32_t> token_types;  // id -> ggml token type
  std::vector<std::string> merges;   // "left right", in rank order
  int32_t bos_id = 1;                // <|im_start|>
  int32_t eos_id = 2;                // <|im_end|> (or <end_of_utterance> with image tokens)
  int32_t unk_id = 0;                // <|endoftext|>
  int32_t pad_id = 2;
};

// The family's added tokens after the base vocabulary.
enum class AddedTokens {
  kNone,
  // SmolVLM/Idefics3: <global-img>, <row_R_col_C>, <fake_token_around_image>, <image>, reserved
  // ones, and <end_of_utterance> last, which becomes EOS: 128 tokens.
  kSmolVlm,
  // Qwen VL: <|vision_start|>, <|vision_end|>, <|vision_pad|>, <|image_pad|>, <|video_pad|>
  // (control tokens, as the Qwen vocabularies have them); EOS stays <|im_end|>.
  kQwenVl,
  // Gemma 3: <start_of_turn>, <end_of_turn>, <start_of_image>, <end_of_image> (control tokens).
  kGemma3,
};

// Builds n_base tokens (specials + 256 bytes + merges), then the family's added tokens.
// Deterministic for a given (n_base, added, seed). n_base must be >= 512.
SyntheticVocab BuildSyntheticVocab(int32_t n_base, AddedTokens added, uint64_t seed);

// The GPT-2 byte-to-unicode alphabet: the UTF-8 text of the token for raw byte b.
std::string ByteToToken(uint8_t b);

}  // namespace vlmd::engine::synth
