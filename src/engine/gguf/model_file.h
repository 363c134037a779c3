// Opens a model file as a user gives it: a plain GGUF (memory-mapped) or a sealed one
// (core/sealed_file.h: decrypted into locked anonymous memory with the key its source gives; the
// key is asked for only when the file is sealed). And the files' identity, the SHA-256 of their
// plaintext bytes one after the other, which a sealed file does not change.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/model_key.h"
#include "core/status.h"
#include "engine/gguf/gguf_reader.h"

namespace vlmd {
class ThreadPool;
}

namespace vlmd::engine::gguf {

// `pool` (may be null) decrypts a sealed file's chunks in parallel.
Result<std::unique_ptr<GgufFile>> OpenModelFile(const std::string& path, const ModelKeySource& key,
                                                ThreadPool* pool);

struct OpenedFile {
  std::string path;
  const GgufFile* file = nullptr;  // hashed from memory when decrypted, else read from `path`
};
// Lowercase hex SHA-256 of the files' plaintexts in order. Call it before the engine releases a
// decrypted file's pages (GgufFile::ReleasePages wipes them).
Result<std::string> HashModelFiles(const std::vector<OpenedFile>& files);

}  // namespace vlmd::engine::gguf
