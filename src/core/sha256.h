// SHA-256 digests (OpenSSL libcrypto EVP) for content identity: image cache keys and allowlists.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

namespace vlmd {

using Sha256Digest = std::array<uint8_t, 32>;

// Incremental SHA-256. Update() may be called any number of times before Finish(); after
// Finish() the object is reset and can hash a new message. libcrypto failures (allocation) are
// invariant violations (VLMD_CHECK), since no input can cause them.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Update(std::span<const uint8_t> bytes);
  Sha256Digest Finish();

 private:
  void* ctx_;  // EVP_MD_CTX*, kept opaque so that callers do not include OpenSSL headers
};

// One-shot digest of `bytes`.
Sha256Digest Sha256Of(std::span<const uint8_t> bytes);
// Lowercase hex (64 characters).
std::string DigestHex(const Sha256Digest& digest);
// Lowercase hex of any bytes (two characters each).
std::string HexOf(std::span<const uint8_t> bytes);

}  // namespace vlmd
