// OpenModelFile and HashModelFiles (see model_file.h).
#include "engine/gguf/model_file.h"

#include <fstream>

#include "core/sealed_file.h"
#include "core/secure_memory.h"
#include "core/sha256.h"

namespace vlmd::engine::gguf {

Result<std::unique_ptr<GgufFile>> OpenModelFile(const std::string& path, const ModelKeySource& key,
                                                ThreadPool* pool) {
  if (!IsSealedFile(path)) return GgufFile::Open(path);
  VLMD_ASSIGN_OR_RETURN(SealedHeader header, ReadSealedHeader(path));
  Result<SecretKey> secret = ResolveModelKey(key, header.key_id);
  if (!secret.ok()) {
    return secret.status().WithContext("'" + path + "' is a sealed model (key id '" + header.key_id + "')");
  }
  VLMD_ASSIGN_OR_RETURN(SecureBuffer plain, UnsealFile(path, *secret, pool));
  Result<std::unique_ptr<GgufFile>> file = GgufFile::FromSecureBuffer(std::move(plain));
  if (!file.ok()) return file.status().WithContext(path + " (decrypted)");
  return file;
}

Result<std::string> HashModelFiles(const std::vector<OpenedFile>& files) {
  Sha256 sha;
  std::vector<uint8_t> buf;
  for (const OpenedFile& f : files) {
    if (f.file != nullptr && f.file->decrypted()) {
      sha.Update(f.file->content());
      continue;
    }
    buf.resize(1 << 20);
    std::ifstream in(f.path, std::ios::binary);
    if (!in) return NotFoundError("cannot read " + f.path);
    while (in) {
      in.read(reinterpret_cast<char*>(buf.data()), static_cast<std::streamsize>(buf.size()));
      const std::streamsize n = in.gcount();
      if (n > 0) sha.Update(std::span<const uint8_t>(buf.data(), static_cast<size_t>(n)));
    }
    if (in.bad()) return NotFoundError("error reading " + f.path);
  }
  return DigestHex(sha.Finish());
}

}  // namespace vlmd::engine::gguf
