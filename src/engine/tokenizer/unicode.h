// UTF-8 helpers for the tokenizers: lenient decoding with llama.cpp's error semantics, encoding,
// and the GPT-2 byte-level alphabet (each byte 0..255 <-> one printable code point).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace vlmd::engine::tokenizer {

inline constexpr uint32_t kReplacementChar = 0xFFFD;

// Length of the UTF-8 sequence that `lead` starts, judged by its high nibble only (1 for ASCII,
// stray continuation bytes and 0xF8..0xFF alike). This is how llama.cpp cuts text into symbols.
inline size_t Utf8SeqLen(uint8_t lead) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[lead >> 4];
}

// Decodes one code point at text[*offset] and advances *offset. An invalid or truncated sequence
// consumes ONE byte and yields U+FFFD (llama.cpp's unicode_cpts_from_utf8 behaviour). Overlong
// forms are accepted as llama.cpp does; surrogates and values above U+10FFFF yield U+FFFD (they
// cannot be re-encoded as valid UTF-8). Precondition: *offset < text.size().
uint32_t DecodeUtf8Lenient(std::string_view text, size_t* offset);

// Appends the UTF-8 encoding of `cpt` (must be a valid scalar value) to *out.
void AppendUtf8(uint32_t cpt, std::string* out);

// Re-encodes `text` through DecodeUtf8Lenient: the result is valid UTF-8 in which every invalid
// byte of the input became U+FFFD. Valid input is returned unchanged.
std::string SanitizeUtf8(std::string_view text);

// True when `text` is entirely valid UTF-8 (no overlongs, surrogates or values > U+10FFFF).
bool IsValidUtf8(std::string_view text);

// GPT-2 byte-level alphabet: the printable code point (as UTF-8) that stands for `byte` inside
// byte-level BPE vocabularies ("Ġ" for 0x20, "Ċ" for 0x0A, ...).
std::string_view ByteToBpeChar(uint8_t byte);
// Inverse: the byte that code point `cpt` stands for, or -1 if it is not in the alphabet.
int BpeCharToByte(uint32_t cpt);

}  // namespace vlmd::engine::tokenizer
