// Synthetic byte-level BPE vocabulary (see synthetic_vocab.h).
#include "engine/synth/synthetic_vocab.h"

#include <array>
#include <string_view>
#include <unordered_set>

#include "core/check.h"

namespace vlmd::engine::synth {
namespace {

// Words whose merges come first, so that generated text is made of plausible pieces.
constexpr std::string_view kWords[] = {
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by",
    "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an",
    "had", "they", "you", "were", "their", "one", "all", "we", "can", "her", "has", "there",
    "been", "if", "more", "when", "will", "would", "who", "so", "no", "image", "picture", "photo",
    "shows", "left", "right", "top", "bottom", "red", "green", "blue", "white", "black", "car",
    "dog", "cat", "person", "people", "man", "woman", "street", "table", "window", "light",
    "water", "sky", "tree", "building", "sign", "text", "number", "part", "defect", "scratch",
    "surface", "metal", "label", "box", "line", "area", "small", "large", "front", "back",
    "standing", "sitting", "holding", "looking", "near", "next", "behind", "under", "over",
    "inside", "outside", "there", "what", "how", "describe", "answer", "question", "yes",
    "color", "shape", "count", "object", "scene", "detail", "view", "camera", "frame", "x", "y",
    "z", "a"};

// GPT-2's printable remapping of bytes: printable Latin-1 bytes map to themselves, the others to
// U+0100 upwards in byte order (so that every token is printable text).
std::array<uint32_t, 256> MakeByteCodepoints() {
  std::array<uint32_t, 256> cp{};
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    cp[b] = printable ? static_cast<uint32_t>(b) : next++;
  }
  return cp;
}

std::string EncodeUtf8(uint32_t c) {
  std::string s;
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xC0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (c >> 12));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  }
  return s;
}

struct SplitMix64 {
  uint64_t state;
  uint64_t Next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
};

class VocabBuilder {
 public:
  explicit VocabBuilder(SyntheticVocab* v) : v_(v) {}

  int32_t Add(std::string text, int32_t type) {
    VLMD_CHECK(known_.insert(text).second);
    v_->tokens.push_back(std::move(text));
    v_->token_types.push_back(type);
    return static_cast<int32_t>(v_->tokens.size() - 1);
  }
  bool Has(const std::string& t) const { return known_.count(t) != 0; }
  // Adds the merge "left right" and its result token, if the result is new.
  bool Merge(const std::string& left, const std::string& right) {
    std::string joined = left + right;
    if (Has(joined)) return false;
    v_->merges.push_back(left + " " + right);
    Add(std::move(joined), kTokenNormal);
    return true;
  }
  size_t size() const { return v_->tokens.size(); }

 private:
  SyntheticVocab* v_;
  std::unordered_set<std::string> known_;
};

}  // namespace

std::string ByteToToken(uint8_t b) {
  static const std::array<uint32_t, 256> cp = MakeByteCodepoints();
  return EncodeUtf8(cp[b]);
}

SyntheticVocab BuildSyntheticVocab(int32_t n_base, AddedTokens added, uint64_t seed) {
  VLMD_CHECK(n_base >= 512);
  SyntheticVocab v;
  VocabBuilder b(&v);
  v.unk_id = b.Add("<|endoftext|>", kTokenControl);
  v.bos_id = b.Add("<|im_start|>", kTokenControl);
  v.eos_id = b.Add("<|im_end|>", kTokenControl);
  v.pad_id = v.eos_id;
  for (int byte = 0; byte < 256; ++byte) b.Add(ByteToToken(static_cast<uint8_t>(byte)), kTokenNormal);

  // Word merges, left to right, with and without the leading-space marker "Ġ" (byte 0x20).
  const std::string space = ByteToToken(' ');
  std::vector<std::string> pieces;  // merge results usable as right-hand sides later
  for (int with_space = 1; with_space >= 0; --with_space) {
    for (std::string_view word : kWords) {
      std::string cur = with_space ? space : std::string();
      size_t i = 0;
      if (cur.empty()) cur = ByteToToken(static_cast<uint8_t>(word[i++]));
      for (; i < word.size() && b.size() < static_cast<size_t>(n_base); ++i) {
        const std::string next = ByteToToken(static_cast<uint8_t>(word[i]));
        b.Merge(cur, next);
        cur += next;
      }
      pieces.push_back(cur);
    }
  }
  // Random merges of existing pieces with single letters up to the requested size: keeps every
  // merge well-formed (both halves are tokens) while the vocabulary reaches realistic sizes.
  SplitMix64 rng{seed ^ 0x766C6D64ull};
  const std::string letters = "etaoinshrdlcumwfgypbvkjxqz";
  while (b.size() < static_cast<size_t>(n_base)) {
    const std::string& left = pieces[rng.Next() % pieces.size()];
    const std::string right = ByteToToken(static_cast<uint8_t>(letters[rng.Next() % letters.size()]));
    if (left.size() + right.size() > 16) continue;
    if (b.Merge(left, right)) pieces.push_back(left + right);
  }

  if (added == AddedTokens::kQwenVl) {
    for (const char* t : {"<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>",
                          "<|video_pad|>"}) {
      b.Add(t, kTokenControl);
    }
  }
  if (added == AddedTokens::kGemma3) {
    for (const char* t : {"<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>"}) {
      b.Add(t, kTokenControl);
    }
  }
  if (added == AddedTokens::kSmolVlm) {
    b.Add("<global-img>", kTokenUserDefined);
    for (int r = 1; r <= 6; ++r) {
      for (int c = 1; c <= 6; ++c) {
        b.Add("<row_" + std::to_string(r) + "_col_" + std::to_string(c) + ">", kTokenUserDefined);
      }
    }
    b.Add("<fake_token_around_image>", kTokenUserDefined);
    b.Add("<image>", kTokenUserDefined);
    while (b.size() < static_cast<size_t>(n_base) + 127) {
      b.Add("<reserved_" + std::to_string(b.size() - n_base) + ">", kTokenUserDefined);
    }
    v.eos_id = b.Add("<end_of_utterance>", kTokenUserDefined);
  }
  return v;
}

}  // namespace vlmd::engine::synth
