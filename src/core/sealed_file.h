// Sealed files: a file (a GGUF model) encrypted with SM4 and authenticated, so that weights can
// ship to an edge box without ever being in clear on its disk. vlmd decrypts a sealed file into a
// SecureBuffer (core/secure_memory.h) when it loads the model.
//
// Scheme "SM4-CTR+HMAC-SHA256" (OpenSSL 3 has no SM4-GCM before 3.2; Debian 12 ships 3.0):
// from the user's 128-bit key K and a random per-file salt, HKDF-SHA256 derives an SM4 key and an
// HMAC-SHA256 key. The plaintext is cut into chunks (1 MiB); chunk i is SM4-CTR encrypted with the
// counter block nonce || (i * chunk / 16) and authenticated by its own tag
// HMAC(header MAC || i || ciphertext), so chunks decrypt and verify in parallel (OpenSSL 3.0's
// SM4 is portable code: ~60 MB/s per core on x86) and a moved, dropped or altered chunk is
// detected.
//
// Layout (little-endian):
//   "VLMDSEAL" | u32 version (1) | u16 n + scheme | u16 n + key id | salt[32] | nonce[8] |
//   u64 plaintext bytes | u32 chunk bytes | plaintext SHA-256[32] | key check[32] | header MAC[32]
//   | ciphertext (plaintext bytes) | one 32-byte tag per chunk
// The key check (an HMAC of a constant, keyed from K alone) tells a wrong key from a damaged
// file; the header MAC
// covers every header byte before it. The plaintext SHA-256 is that of the original file, so a
// model's identity (model_hash) does not change when it is sealed.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/secure_memory.h"
#include "core/sha256.h"
#include "core/status.h"

namespace vlmd {

class ThreadPool;

inline constexpr std::string_view kSealedMagic = "VLMDSEAL";
inline constexpr std::string_view kSealedScheme = "SM4-CTR+HMAC-SHA256";

struct SealedHeader {
  uint32_t version = 0;
  std::string scheme;
  std::string key_id;             // names the key for a KMS (given to --model-key-command)
  uint64_t plaintext_bytes = 0;
  uint32_t chunk_bytes = 0;
  Sha256Digest plaintext_sha256{};
  uint64_t header_bytes = 0;      // where the ciphertext starts
  uint64_t file_bytes = 0;        // the size the file must have
};

// Whether `path` starts with the sealed-file magic (false for a missing or short file).
bool IsSealedFile(const std::string& path);

// Reads and checks the header's structure (not the key): DATA_LOSS naming what is wrong,
// including a file shorter or longer than the header says (truncated / appended to).
Result<SealedHeader> ReadSealedHeader(const std::string& path);
// The same on a file's bytes; `name` is the file named in messages.
Result<SealedHeader> ParseSealedHeader(std::span<const uint8_t> file, const std::string& name);

struct SealOptions {
  std::string key_id;                   // up to 255 bytes
  uint32_t chunk_bytes = 1u << 20;      // a multiple of 16
};

// Encrypts `in_path` into `out_path` (written to a temporary name first, renamed when complete).
Status SealFile(const std::string& in_path, const std::string& out_path, const SecretKey& key,
                const SealOptions& opts, ThreadPool* pool);

// Decrypts a sealed file into locked anonymous memory after checking, in this order: the header,
// the key (INVALID_ARGUMENT "wrong key"), the header MAC, the file size,
// each chunk's tag, and the plaintext SHA-256. Nothing of the plaintext is kept on failure.
// `pool` may be null (one thread).
Result<SecureBuffer> UnsealFile(const std::string& path, const SecretKey& key, ThreadPool* pool);
// The same on a sealed file's bytes (the fuzzer's entry point).
Result<SecureBuffer> UnsealBytes(std::span<const uint8_t> file, const std::string& name, const SecretKey& key,
                                 ThreadPool* pool);

}  // namespace vlmd
