// Strict RFC 4648 base64 (standard alphabet) and RFC 2397 data URIs carrying base64 payloads.
// Strict means one spelling per byte string: no whitespace, '=' only as final padding, and the
// unused low bits of the last character must be zero, so a decoded image has a single encoding.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "serve/api/requests.h"

namespace vlmd::serve::api {
namespace {

constexpr std::string_view kAlphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// Character -> 6-bit value, or -1 for anything outside the alphabet (including '=' and spaces).
constexpr std::array<int8_t, 256> MakeDecodeTable() {
  std::array<int8_t, 256> t{};
  for (auto& v : t) v = -1;
  for (size_t i = 0; i < kAlphabet.size(); ++i) {
    t[static_cast<uint8_t>(kAlphabet[i])] = static_cast<int8_t>(i);
  }
  return t;
}
constexpr std::array<int8_t, 256> kDecode = MakeDecodeTable();

char LowerAscii(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (LowerAscii(a[i]) != LowerAscii(b[i])) return false;
  }
  return true;
}

// RFC 6838 restricted-name characters: what a media type, subtype or parameter may contain.
bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '!' ||
         c == '#' || c == '$' || c == '&' || c == '^' || c == '_' || c == '.' || c == '+' ||
         c == '-';
}

bool IsName(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!IsNameChar(c)) return false;
  }
  return true;
}

// "type/subtype" (both restricted names).
bool IsMediaType(std::string_view s) {
  const size_t slash = s.find('/');
  return slash != std::string_view::npos && IsName(s.substr(0, slash)) &&
         IsName(s.substr(slash + 1));
}

std::string HexByte(uint8_t b) {
  constexpr std::string_view kHex = "0123456789abcdef";
  return {'0', 'x', kHex[b >> 4], kHex[b & 15]};
}

}  // namespace

Result<std::string> DecodeBase64(std::string_view text, size_t max_bytes) {
  const size_t n = text.size();
  size_t pad = 0;
  if (n >= 1 && text[n - 1] == '=') pad = (n >= 2 && text[n - 2] == '=') ? 2 : 1;
  const size_t data_len = n - pad;
  const size_t rem = data_len % 4;  // 1 is impossible in valid input (reported below)
  const size_t out_size = data_len / 4 * 3 + (rem <= 1 ? 0 : rem - 1);
  // Before touching the payload: an oversized image costs no decoding work.
  if (out_size > max_bytes) {
    return OutOfRangeError("decoded size " + std::to_string(out_size) +
                           " bytes exceeds the limit of " + std::to_string(max_bytes) + " bytes");
  }
  std::string out;
  out.resize(out_size);
  size_t o = 0;
  uint32_t acc = 0;
  int bits = 0;
  // Characters first: a stray space or newline is the likeliest fault and the clearest message.
  for (size_t i = 0; i < data_len; ++i) {
    const int8_t v = kDecode[static_cast<uint8_t>(text[i])];
    if (v < 0) {
      return InvalidArgumentError("base64: invalid character " +
                                  HexByte(static_cast<uint8_t>(text[i])) + " at offset " +
                                  std::to_string(i));
    }
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[o++] = static_cast<char>((acc >> bits) & 0xffu);
    }
  }
  if (pad > 0 && n % 4 != 0) {
    return InvalidArgumentError("base64: '=' padding must complete a 4-character group");
  }
  if (rem == 1) return InvalidArgumentError("base64: truncated (a lone final character)");
  // 2 or 4 bits left over from a partial group: an encoder always leaves them zero.
  if (bits > 0 && (acc & ((1u << bits) - 1u)) != 0) {
    return InvalidArgumentError("base64: non-zero bits after the last byte (not canonical)");
  }
  return out;
}

std::string EncodeBase64(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t g = (static_cast<uint32_t>(static_cast<uint8_t>(bytes[i])) << 16) |
                       (static_cast<uint32_t>(static_cast<uint8_t>(bytes[i + 1])) << 8) |
                       static_cast<uint32_t>(static_cast<uint8_t>(bytes[i + 2]));
    out += kAlphabet[(g >> 18) & 63];
    out += kAlphabet[(g >> 12) & 63];
    out += kAlphabet[(g >> 6) & 63];
    out += kAlphabet[g & 63];
  }
  const size_t rest = bytes.size() - i;
  if (rest > 0) {
    uint32_t g = static_cast<uint32_t>(static_cast<uint8_t>(bytes[i])) << 16;
    if (rest == 2) g |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[i + 1])) << 8;
    out += kAlphabet[(g >> 18) & 63];
    out += kAlphabet[(g >> 12) & 63];
    out += rest == 2 ? kAlphabet[(g >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

Result<std::string> DecodeDataUri(std::string_view uri, size_t max_bytes) {
  constexpr std::string_view kScheme = "data:";
  constexpr size_t kMaxHeader = 256;  // media type and parameters; real ones are ~20 bytes
  if (uri.size() < kScheme.size() || !EqualsIgnoreCase(uri.substr(0, kScheme.size()), kScheme)) {
    return InvalidArgumentError("data URI: must start with 'data:'");
  }
  const size_t comma = uri.find(',', kScheme.size());
  if (comma == std::string_view::npos || comma - kScheme.size() > kMaxHeader) {
    return InvalidArgumentError("data URI: missing ',' after the media type");
  }
  // Header: [<type/subtype>] *(";" attr=value) ";base64".
  std::string_view header = uri.substr(kScheme.size(), comma - kScheme.size());
  const size_t last_semi = header.rfind(';');
  if (last_semi == std::string_view::npos ||
      !EqualsIgnoreCase(header.substr(last_semi + 1), "base64")) {
    return InvalidArgumentError("data URI: only ';base64' payloads are supported");
  }
  header = header.substr(0, last_semi);
  const size_t first_semi = header.find(';');
  const std::string_view media_type = header.substr(0, first_semi);
  if (!media_type.empty() && !IsMediaType(media_type)) {
    return InvalidArgumentError("data URI: malformed media type");
  }
  if (first_semi != std::string_view::npos) {
    std::string_view params = header.substr(first_semi + 1);
    while (true) {
      const size_t semi = params.find(';');
      const std::string_view param = params.substr(0, semi);
      const size_t eq = param.find('=');
      if (eq == std::string_view::npos || !IsName(param.substr(0, eq)) ||
          !IsName(param.substr(eq + 1))) {
        return InvalidArgumentError("data URI: malformed parameter");
      }
      if (semi == std::string_view::npos) break;
      params = params.substr(semi + 1);
    }
  }
  Result<std::string> bytes = DecodeBase64(uri.substr(comma + 1), max_bytes);
  if (!bytes.ok()) return bytes.status().WithContext("data URI");
  return bytes;
}

}  // namespace vlmd::serve::api
