// SHA-256 via OpenSSL's EVP interface (the low-level SHA256_* calls are deprecated in 3.x).
#include "core/sha256.h"

#include <openssl/evp.h>

#include "core/check.h"

namespace vlmd {

namespace {
EVP_MD_CTX* Ctx(void* p) { return static_cast<EVP_MD_CTX*>(p); }
}  // namespace

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  VLMD_CHECK(ctx_ != nullptr);
  VLMD_CHECK(EVP_DigestInit_ex(Ctx(ctx_), EVP_sha256(), nullptr) == 1);
}

Sha256::~Sha256() { EVP_MD_CTX_free(Ctx(ctx_)); }

void Sha256::Update(std::span<const uint8_t> bytes) {
  if (bytes.empty()) return;
  VLMD_CHECK(EVP_DigestUpdate(Ctx(ctx_), bytes.data(), bytes.size()) == 1);
}

Sha256Digest Sha256::Finish() {
  Sha256Digest out{};
  unsigned int len = 0;
  VLMD_CHECK(EVP_DigestFinal_ex(Ctx(ctx_), out.data(), &len) == 1 && len == out.size());
  VLMD_CHECK(EVP_DigestInit_ex(Ctx(ctx_), EVP_sha256(), nullptr) == 1);
  return out;
}

Sha256Digest Sha256Of(std::span<const uint8_t> bytes) {
  Sha256 h;
  h.Update(bytes);
  return h.Finish();
}

std::string HexOf(std::span<const uint8_t> bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  s.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    s.push_back(kHex[b >> 4]);
    s.push_back(kHex[b & 15]);
  }
  return s;
}

std::string DigestHex(const Sha256Digest& digest) { return HexOf(digest); }

}  // namespace vlmd
