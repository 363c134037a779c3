// libFuzzer target: the sealed-file reader (core/sealed_file.h) on hostile bytes, with the key the
// seed corpus was sealed with (32 zero hex digits), so that mutations of a valid file reach the
// chunk checks and decryption. Whatever it accepts must decrypt to the SHA-256 its header names.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "core/sealed_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  const auto header = vlmd::ParseSealedHeader(bytes, "fuzz");
  const vlmd::SecretKey key;  // all zero: the corpus's key
  const auto plain = vlmd::UnsealBytes(bytes, "fuzz", key, nullptr);
  if (plain.ok() && (!header.ok() || vlmd::Sha256Of(plain->bytes()) != header->plaintext_sha256 ||
                     plain->size() != header->plaintext_bytes)) {
    std::abort();  // accepted bytes that its own header does not describe
  }
  return 0;
}
