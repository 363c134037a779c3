// UTF-8 decoding/encoding and the GPT-2 byte-level alphabet (see unicode.h).
#include "engine/tokenizer/unicode.h"

#include <array>

namespace vlmd::engine::tokenizer {
namespace {

bool IsCont(uint8_t b) { return (b & 0xC0) == 0x80; }

// The GPT-2 mapping: printable Latin-1 bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for
// themselves; the other 68 bytes are assigned U+0100, U+0101, ... in increasing byte order.
struct ByteAlphabet {
  std::array<std::string, 256> byte_to_utf8;
  std::array<int16_t, 324> cpt_to_byte;  // code points 0..323 cover the whole alphabet

  ByteAlphabet() {
    cpt_to_byte.fill(-1);
    auto printable = [](int b) {
      return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    int next_extra = 256;
    for (int b = 0; b < 256; ++b) {
      const uint32_t cpt = printable(b) ? static_cast<uint32_t>(b) : next_extra++;
      AppendUtf8(cpt, &byte_to_utf8[b]);
      cpt_to_byte[cpt] = static_cast<int16_t>(b);
    }
  }
};

const ByteAlphabet& Alphabet() {
  static const ByteAlphabet alphabet;
  return alphabet;
}

}  // namespace

uint32_t DecodeUtf8Lenient(std::string_view text, size_t* offset) {
  const size_t i = *offset;
  const size_t n = text.size();
  const uint8_t b0 = static_cast<uint8_t>(text[i]);
  auto at = [&](size_t k) { return static_cast<uint8_t>(text[i + k]); };
  uint32_t cpt;
  size_t len;
  if (b0 < 0x80) {
    cpt = b0;
    len = 1;
  } else if ((b0 & 0xE0) == 0xC0) {
    if (i + 1 >= n || !IsCont(at(1))) { ++*offset; return kReplacementChar; }
    cpt = ((b0 & 0x1Fu) << 6) | (at(1) & 0x3Fu);
    len = 2;
  } else if ((b0 & 0xF0) == 0xE0) {
    if (i + 2 >= n || !IsCont(at(1)) || !IsCont(at(2))) { ++*offset; return kReplacementChar; }
    cpt = ((b0 & 0x0Fu) << 12) | ((at(1) & 0x3Fu) << 6) | (at(2) & 0x3Fu);
    len = 3;
  } else if ((b0 & 0xF8) == 0xF0) {
    if (i + 3 >= n || !IsCont(at(1)) || !IsCont(at(2)) || !IsCont(at(3))) {
      ++*offset;
      return kReplacementChar;
    }
    cpt = ((b0 & 0x07u) << 18) | ((at(1) & 0x3Fu) << 12) | ((at(2) & 0x3Fu) << 6) |
          (at(3) & 0x3Fu);
    len = 4;
  } else {  // stray continuation byte or 0xF8..0xFF
    ++*offset;
    return kReplacementChar;
  }
  *offset += len;
  if ((cpt >= 0xD800 && cpt <= 0xDFFF) || cpt > 0x10FFFF) return kReplacementChar;
  return cpt;
}

void AppendUtf8(uint32_t cpt, std::string* out) {
  if (cpt < 0x80) {
    out->push_back(static_cast<char>(cpt));
  } else if (cpt < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cpt >> 6)));
    out->push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else if (cpt < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cpt >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cpt >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cpt >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cpt & 0x3F)));
  }
}

std::string SanitizeUtf8(std::string_view text) {
  if (IsValidUtf8(text)) return std::string(text);
  std::string out;
  out.reserve(text.size() + 8);
  size_t offset = 0;
  while (offset < text.size()) AppendUtf8(DecodeUtf8Lenient(text, &offset), &out);
  return out;
}

bool IsValidUtf8(std::string_view text) {
  size_t i = 0;
  const size_t n = text.size();
  while (i < n) {
    const uint8_t b0 = static_cast<uint8_t>(text[i]);
    if (b0 < 0x80) { ++i; continue; }
    size_t len;
    uint32_t min_cpt;
    uint32_t cpt;
    if ((b0 & 0xE0) == 0xC0) { len = 2; min_cpt = 0x80; cpt = b0 & 0x1F; }
    else if ((b0 & 0xF0) == 0xE0) { len = 3; min_cpt = 0x800; cpt = b0 & 0x0F; }
    else if ((b0 & 0xF8) == 0xF0) { len = 4; min_cpt = 0x10000; cpt = b0 & 0x07; }
    else return false;
    if (i + len > n) return false;
    for (size_t k = 1; k < len; ++k) {
      const uint8_t b = static_cast<uint8_t>(text[i + k]);
      if (!IsCont(b)) return false;
      cpt = (cpt << 6) | (b & 0x3F);
    }
    if (cpt < min_cpt || cpt > 0x10FFFF || (cpt >= 0xD800 && cpt <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

std::string_view ByteToBpeChar(uint8_t byte) { return Alphabet().byte_to_utf8[byte]; }

int BpeCharToByte(uint32_t cpt) {
  const auto& table = Alphabet().cpt_to_byte;
  return cpt < table.size() ? table[cpt] : -1;
}

}  // namespace vlmd::engine::tokenizer
