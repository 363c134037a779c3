// Streaming detokenization: turns token pieces (arbitrary byte strings, e.g. one byte-fallback
// token per byte of an emoji) into valid UTF-8 text, emitting only complete characters.
#pragma once

#include <string>
#include <string_view>

#include "engine/tokenizer/tokenizer.h"

namespace vlmd::engine::tokenizer {

// Byte stream -> valid UTF-8. Not thread-safe (one per output stream); cheap to create.
class Utf8StreamDecoder {
 public:
  // Appends `bytes` and returns the text completed so far: every complete, well-formed UTF-8
  // sequence as is; each ill-formed part (stray continuation byte, lead byte not followed by the
  // right continuation bytes, overlong/surrogate/out-of-range forms) as one U+FFFD, following the
  // Unicode "maximal subpart" rule. A well-formed but incomplete trailing sequence (1-3 bytes) is
  // held back for the next call.
  std::string Push(std::string_view bytes);
  // Ends the stream: returns U+FFFD if an incomplete sequence was held back ("" otherwise) and
  // resets the decoder.
  std::string Flush();
  size_t pending_bytes() const { return pending_.size(); }

 private:
  std::string pending_;
};

// Token ids -> text pieces for generation: TokenToPiece + Utf8StreamDecoder. The tokenizer must
// outlive this object. Not thread-safe (one per request).
class TokenStreamDecoder {
 public:
  // special: whether control tokens (e.g. <|im_end|>) are rendered as their text.
  explicit TokenStreamDecoder(const Tokenizer& tokenizer, bool special = false)
      : tokenizer_(tokenizer), special_(special) {}
  // Text completed by token `id` (often "" while a multi-byte character is still incomplete).
  std::string Push(TokenId id) { return utf8_.Push(tokenizer_.TokenToPiece(id, special_)); }
  std::string Flush() { return utf8_.Flush(); }

 private:
  const Tokenizer& tokenizer_;
  bool special_;
  Utf8StreamDecoder utf8_;
};

}  // namespace vlmd::engine::tokenizer
