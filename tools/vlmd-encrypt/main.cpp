// vlmd-encrypt IN.gguf OUT.sealed --key-id ID: seals a model file with SM4 (core/sealed_file.h) so
// that it can be shipped and stored without its weights in clear; vlmd and vlmd-run load it with
// the key. `vlmd-encrypt --inspect FILE` prints a sealed file's header (no key needed).
#include <CLI/CLI.hpp>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>
#include <thread>

#include "core/model_key.h"
#include "core/sealed_file.h"
#include "core/thread_pool.h"

namespace {

int Fail(const vlmd::Status& s) {
  std::fprintf(stderr, "vlmd-encrypt: error: %s\n", s.ToString().c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Seal a GGUF model file with SM4 (CTR + HMAC-SHA256) for vlmd.\n"
               "The key is 32 hex digits (a 128-bit SM4 key), e.g. from `openssl rand -hex 16`."};
  std::string in_path, out_path, inspect;
  vlmd::ModelKeySource key_source;
  vlmd::SealOptions opts;
  int threads = static_cast<int>(std::thread::hardware_concurrency());
  app.add_option("input", in_path, "plain GGUF file");
  app.add_option("output", out_path, "sealed file to write (written whole, then renamed)");
  app.add_option("--key-file", key_source.file, "file holding the key (hex)");
  app.add_option("--key-command", key_source.command,
                 "command printing the key (run by /bin/sh with VLMD_KEY_ID set); else env VLMD_MODEL_KEY");
  app.add_option("--key-id", opts.key_id, "name of the key, stored in the header for the loader's KMS");
  app.add_option("-t,--threads", threads, "threads")->check(CLI::Range(0, vlmd::kMaxThreads))->capture_default_str();
  app.add_option("--inspect", inspect, "print a sealed file's header and exit");
  CLI11_PARSE(app, argc, argv);

  if (!inspect.empty()) {
    if (!in_path.empty() || !out_path.empty()) {
      std::fprintf(stderr, "vlmd-encrypt: error: --inspect FILE only prints a header; give it without INPUT and OUTPUT\n");
      return 2;
    }
    auto h = vlmd::ReadSealedHeader(inspect);
    if (!h.ok()) return Fail(h.status());
    const nlohmann::json j{{"scheme", h->scheme},
                           {"version", h->version},
                           {"key_id", h->key_id},
                           {"plaintext_bytes", h->plaintext_bytes},
                           {"chunk_bytes", h->chunk_bytes},
                           {"plaintext_sha256", vlmd::DigestHex(h->plaintext_sha256)}};
    std::printf("%s\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  if (in_path.empty() || out_path.empty()) {
    std::fprintf(stderr, "vlmd-encrypt: error: give INPUT and OUTPUT (or --inspect FILE)\n");
    return 2;
  }
  if (in_path == out_path) {
    std::fprintf(stderr, "vlmd-encrypt: error: the output must not replace the input\n");
    return 2;
  }
  {  // What vlmd loads from a sealed file is a GGUF: anything else (a file sealed already) would
     // be sealed and then refused at every start.
    char magic[4] = {};
    std::FILE* f = std::fopen(in_path.c_str(), "rb");
    const bool gguf = f != nullptr && std::fread(magic, 1, 4, f) == 4 && std::string(magic, 4) == "GGUF";
    if (f != nullptr) std::fclose(f);
    if (!gguf) {
      std::fprintf(stderr, "vlmd-encrypt: error: %s is not a GGUF file (sealed already?)\n", in_path.c_str());
      return 2;
    }
  }
  key_source.how_to_give = std::string("--key-file, --key-command or ") + vlmd::kModelKeyEnv;
  auto key = vlmd::ResolveModelKey(key_source, opts.key_id);
  if (!key.ok()) return Fail(key.status());
  vlmd::ThreadPool pool(threads < 1 ? 1 : threads);
  if (vlmd::Status s = vlmd::SealFile(in_path, out_path, *key, opts, &pool); !s.ok()) return Fail(s);
  auto h = vlmd::ReadSealedHeader(out_path);
  if (!h.ok()) return Fail(h.status());
  std::printf("sealed %s -> %s (%llu bytes, key id '%s', plaintext sha256 %s)\n", in_path.c_str(),
              out_path.c_str(), static_cast<unsigned long long>(h->plaintext_bytes), h->key_id.c_str(),
              vlmd::DigestHex(h->plaintext_sha256).c_str());
  return 0;
}
