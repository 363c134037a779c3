// Sealed files (see sealed_file.h): SM4-CTR + HMAC-SHA256 per chunk, keys from HKDF-SHA256.
#include "core/sealed_file.h"

#include <fcntl.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>
#include <openssl/rand.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <vector>

#include "core/thread_pool.h"

namespace vlmd {
namespace {

constexpr uint32_t kVersion = 1;
constexpr size_t kSaltBytes = 32, kNonceBytes = 8, kMacBytes = 32;
constexpr size_t kMaxKeyId = 255;
constexpr uint32_t kMaxChunk = 64u << 20;

std::span<const uint8_t> Span(const void* p, size_t n) { return {static_cast<const uint8_t*>(p), n}; }

// Key ids go to a KMS command's environment and into messages before anything authenticates
// them: letters, digits and . _ : / @ + - only (KMS ids and ARNs), at most 255 bytes.
bool ValidKeyId(std::string_view id) {
  if (id.size() > kMaxKeyId) return false;
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    std::string_view("._:/@+-").find(c) != std::string_view::npos;
    if (!ok) return false;
  }
  return true;
}

// ---- OpenSSL helpers (RAII; each failure is an INTERNAL status naming the step) ----

struct EvpCipherCtxFree { void operator()(EVP_CIPHER_CTX* c) const { EVP_CIPHER_CTX_free(c); } };
struct EvpMacFree { void operator()(EVP_MAC* m) const { EVP_MAC_free(m); } };
struct EvpMacCtxFree { void operator()(EVP_MAC_CTX* c) const { EVP_MAC_CTX_free(c); } };
struct EvpKdfFree { void operator()(EVP_KDF* k) const { EVP_KDF_free(k); } };
struct EvpKdfCtxFree { void operator()(EVP_KDF_CTX* c) const { EVP_KDF_CTX_free(c); } };
struct EvpCipherFree { void operator()(EVP_CIPHER* c) const { EVP_CIPHER_free(c); } };

// The two keys a file's salt derives from the user's key. Wiped on destruction.
struct DerivedKeys {
  uint8_t sm4[16];
  uint8_t mac[32];
  ~DerivedKeys() {
    WipeBytes(sm4, sizeof sm4);
    WipeBytes(mac, sizeof mac);
  }
};

Status Hkdf(const SecretKey& key, const uint8_t* salt, std::string_view info, uint8_t* out, size_t n) {
  std::unique_ptr<EVP_KDF, EvpKdfFree> kdf(EVP_KDF_fetch(nullptr, "HKDF", nullptr));
  if (!kdf) return InternalError("OpenSSL has no HKDF");
  std::unique_ptr<EVP_KDF_CTX, EvpKdfCtxFree> ctx(EVP_KDF_CTX_new(kdf.get()));
  if (!ctx) return InternalError("HKDF context");
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, const_cast<uint8_t*>(key.bytes.data()),
                                        key.bytes.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, const_cast<uint8_t*>(salt), kSaltBytes),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, const_cast<char*>(info.data()), info.size()),
      OSSL_PARAM_construct_end()};
  if (EVP_KDF_derive(ctx.get(), out, n, params) != 1) return InternalError("HKDF-SHA256 failed");
  return Status::Ok();
}

// The key check is keyed independently of the file's salt, so that a damaged salt reads as an
// altered header and not as a wrong key.
Status KeyCheck(const SecretKey& key, uint8_t out[kMacBytes]);

Status DeriveKeys(const SecretKey& key, const uint8_t* salt, DerivedKeys* out) {
  VLMD_RETURN_IF_ERROR(Hkdf(key, salt, "vlmd sealed file: SM4-CTR key", out->sm4, sizeof out->sm4));
  return Hkdf(key, salt, "vlmd sealed file: HMAC-SHA256 key", out->mac, sizeof out->mac);
}

// HMAC-SHA256 over the concatenation of `parts`.
Status Hmac(const uint8_t* mac_key, std::initializer_list<std::span<const uint8_t>> parts,
            uint8_t out[kMacBytes]) {
  std::unique_ptr<EVP_MAC, EvpMacFree> mac(EVP_MAC_fetch(nullptr, "HMAC", nullptr));
  if (!mac) return InternalError("OpenSSL has no HMAC");
  std::unique_ptr<EVP_MAC_CTX, EvpMacCtxFree> ctx(EVP_MAC_CTX_new(mac.get()));
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                         OSSL_PARAM_construct_end()};
  if (!ctx || EVP_MAC_init(ctx.get(), mac_key, 32, params) != 1) return InternalError("HMAC init");
  for (std::span<const uint8_t> p : parts) {
    if (!p.empty() && EVP_MAC_update(ctx.get(), p.data(), p.size()) != 1) return InternalError("HMAC update");
  }
  size_t len = 0;
  if (EVP_MAC_final(ctx.get(), out, &len, kMacBytes) != 1 || len != kMacBytes) return InternalError("HMAC final");
  return Status::Ok();
}

// SM4-CTR over `n` bytes of chunk `index` (encryption and decryption are the same operation).
Status Sm4Ctr(const uint8_t* sm4_key, const uint8_t* nonce, uint64_t first_block, const uint8_t* in,
              uint8_t* out, size_t n) {
  uint8_t iv[16];
  std::memcpy(iv, nonce, kNonceBytes);
  for (int b = 0; b < 8; ++b) iv[8 + b] = static_cast<uint8_t>(first_block >> (56 - 8 * b));
  std::unique_ptr<EVP_CIPHER, EvpCipherFree> cipher(EVP_CIPHER_fetch(nullptr, "SM4-CTR", nullptr));
  if (!cipher) return InternalError("this OpenSSL has no SM4-CTR");
  std::unique_ptr<EVP_CIPHER_CTX, EvpCipherCtxFree> ctx(EVP_CIPHER_CTX_new());
  int len = 0;
  if (!ctx || EVP_EncryptInit_ex2(ctx.get(), cipher.get(), sm4_key, iv, nullptr) != 1) {
    return InternalError("SM4-CTR init");
  }
  // EVP lengths are int: feed at most 1 GiB per call.
  for (size_t done = 0; done < n;) {
    const size_t step = std::min<size_t>(n - done, size_t{1} << 30);
    if (EVP_EncryptUpdate(ctx.get(), out + done, &len, in + done, static_cast<int>(step)) != 1) {
      return InternalError("SM4-CTR update");
    }
    done += step;
  }
  return Status::Ok();
}

void PutU16(std::vector<uint8_t>& b, uint16_t v) { for (int i = 0; i < 2; ++i) b.push_back(uint8_t(v >> (8 * i))); }
void PutU32(std::vector<uint8_t>& b, uint32_t v) { for (int i = 0; i < 4; ++i) b.push_back(uint8_t(v >> (8 * i))); }
void PutU64(std::vector<uint8_t>& b, uint64_t v) { for (int i = 0; i < 8; ++i) b.push_back(uint8_t(v >> (8 * i))); }
void PutBytes(std::vector<uint8_t>& b, const void* p, size_t n) {
  b.insert(b.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
}
std::array<uint8_t, 8> Le64(uint64_t v) {
  std::array<uint8_t, 8> out{};
  for (int i = 0; i < 8; ++i) out[i] = uint8_t(v >> (8 * i));
  return out;
}

// A read-only mapping of a whole file.
class MappedFile {
 public:
  static Result<MappedFile> Open(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      const std::string msg = "cannot open '" + path + "': " + std::strerror(err);
      return err == ENOENT ? NotFoundError(msg) : UnavailableError(msg);
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      return InvalidArgumentError("'" + path + "' is not a regular file");
    }
    MappedFile f;
    f.size_ = static_cast<size_t>(st.st_size);
    if (f.size_ > 0) {
      void* m = ::mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (m == MAP_FAILED) {
        ::close(fd);
        return UnavailableError("cannot map '" + path + "'");
      }
      f.data_ = static_cast<const uint8_t*>(m);
    }
    ::close(fd);
    return f;
  }
  MappedFile() = default;
  MappedFile(MappedFile&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  ~MappedFile() {
    if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// The parsed header plus the raw fields the MACs need.
struct ParsedHeader {
  SealedHeader h;
  const uint8_t* salt = nullptr;
  const uint8_t* nonce = nullptr;
  const uint8_t* key_check = nullptr;
  const uint8_t* header_mac = nullptr;
  size_t mac_offset = 0;  // header bytes covered by the header MAC
};

Result<ParsedHeader> ParseHeader(std::span<const uint8_t> file, const std::string& path) {
  ParsedHeader p;
  size_t at = 0;
  auto need = [&](size_t n, const char* what) -> Status {
    if (file.size() - at < n) {
      return DataLossError("'" + path + "' is truncated inside its sealed-file header (at the " + what + ")");
    }
    return Status::Ok();
  };
  auto u = [&](int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= uint64_t(file[at + i]) << (8 * i);
    at += bytes;
    return v;
  };
  VLMD_RETURN_IF_ERROR(need(kSealedMagic.size(), "magic"));
  if (std::memcmp(file.data(), kSealedMagic.data(), kSealedMagic.size()) != 0) {
    return InvalidArgumentError("'" + path + "' is not a sealed file");
  }
  at = kSealedMagic.size();
  VLMD_RETURN_IF_ERROR(need(4, "version"));
  p.h.version = static_cast<uint32_t>(u(4));
  if (p.h.version != kVersion) {
    return UnimplementedError("'" + path + "' is a sealed file of version " + std::to_string(p.h.version) +
                              "; this vlmd reads version " + std::to_string(kVersion));
  }
  for (std::string* s : {&p.h.scheme, &p.h.key_id}) {
    VLMD_RETURN_IF_ERROR(need(2, "scheme and key id"));
    const size_t n = u(2);
    VLMD_RETURN_IF_ERROR(need(n, "scheme and key id"));
    s->assign(reinterpret_cast<const char*>(file.data() + at), n);
    at += n;
  }
  if (!ValidKeyId(p.h.key_id)) {
    return DataLossError("'" + path + "' has a key id of other than at most 255 of [A-Za-z0-9._:/@+-]: the file was altered");
  }
  if (p.h.scheme != kSealedScheme) {
    return UnimplementedError("'" + path + "' is sealed with '" + p.h.scheme + "'; this vlmd reads " +
                              std::string(kSealedScheme));
  }
  VLMD_RETURN_IF_ERROR(need(kSaltBytes + kNonceBytes + 8 + 4 + 32 + kMacBytes, "sizes and digests"));
  p.salt = file.data() + at;
  at += kSaltBytes;
  p.nonce = file.data() + at;
  at += kNonceBytes;
  p.h.plaintext_bytes = u(8);
  p.h.chunk_bytes = static_cast<uint32_t>(u(4));
  std::memcpy(p.h.plaintext_sha256.data(), file.data() + at, 32);
  at += 32;
  p.key_check = file.data() + at;
  at += kMacBytes;
  p.mac_offset = at;
  VLMD_RETURN_IF_ERROR(need(kMacBytes, "header MAC"));
  p.header_mac = file.data() + at;
  at += kMacBytes;
  p.h.header_bytes = at;
  if (p.h.chunk_bytes == 0 || p.h.chunk_bytes % 16 != 0 || p.h.chunk_bytes > kMaxChunk) {
    return DataLossError("'" + path + "' has a bad chunk size " + std::to_string(p.h.chunk_bytes));
  }
  const uint64_t n_chunks = (p.h.plaintext_bytes + p.h.chunk_bytes - 1) / p.h.chunk_bytes;
  // Bounded so that the sum below cannot overflow (2^56 bytes is far beyond any model).
  if (p.h.plaintext_bytes > (uint64_t{1} << 56)) {
    return DataLossError("'" + path + "' claims " + std::to_string(p.h.plaintext_bytes) + " bytes of plaintext");
  }
  p.h.file_bytes = p.h.header_bytes + p.h.plaintext_bytes + n_chunks * kMacBytes;
  return p;
}

Status CheckSize(const ParsedHeader& p, uint64_t actual, const std::string& path) {
  if (actual < p.h.file_bytes) {
    return DataLossError("'" + path + "' is truncated: " + std::to_string(actual) + " bytes, its header says " +
                         std::to_string(p.h.file_bytes));
  }
  if (actual > p.h.file_bytes) {
    return DataLossError("'" + path + "' has " + std::to_string(actual - p.h.file_bytes) +
                         " bytes after its end: the file was altered");
  }
  return Status::Ok();
}

constexpr std::string_view kKeyCheckText = "vlmd sealed file: key check";

Status KeyCheck(const SecretKey& key, uint8_t out[kMacBytes]) {
  static const uint8_t kNoSalt[kSaltBytes] = {};
  uint8_t check_key[32];
  Status s = Hkdf(key, kNoSalt, "vlmd sealed file: key check key", check_key, sizeof check_key);
  if (s.ok()) s = Hmac(check_key, {Span(kKeyCheckText.data(), kKeyCheckText.size())}, out);
  WipeBytes(check_key, sizeof check_key);
  return s;
}

template <typename Fn>
void ForEachChunk(ThreadPool* pool, uint64_t n, Fn&& fn) {
  if (pool == nullptr) {
    for (uint64_t i = 0; i < n; ++i) fn(static_cast<int64_t>(i), 0);
  } else {
    pool->ParallelFor(static_cast<int64_t>(n), fn);
  }
}

// The first failing chunk (the lowest index) and its status, from parallel tasks.
struct FirstFailure {
  std::atomic<int64_t> index{INT64_MAX};
  std::mutex mu;
  Status status;
  void Record(int64_t i, Status s) {
    std::lock_guard<std::mutex> lock(mu);
    if (i < index.load()) {
      index.store(i);
      status = std::move(s);
    }
  }
};

}  // namespace

bool IsSealedFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char magic[8] = {};
  const ssize_t n = ::read(fd, magic, sizeof magic);
  ::close(fd);
  return n == static_cast<ssize_t>(sizeof magic) && std::memcmp(magic, kSealedMagic.data(), sizeof magic) == 0;
}

Result<SealedHeader> ParseSealedHeader(std::span<const uint8_t> file, const std::string& name) {
  VLMD_ASSIGN_OR_RETURN(ParsedHeader p, ParseHeader(file, name));
  VLMD_RETURN_IF_ERROR(CheckSize(p, file.size(), name));
  return p.h;
}

Result<SealedHeader> ReadSealedHeader(const std::string& path) {
  VLMD_ASSIGN_OR_RETURN(MappedFile file, MappedFile::Open(path));
  return ParseSealedHeader(file.bytes(), path);
}

Status SealFile(const std::string& in_path, const std::string& out_path, const SecretKey& key,
                const SealOptions& opts, ThreadPool* pool) {
  if (!ValidKeyId(opts.key_id)) {
    return InvalidArgumentError("a key id is at most 255 of the characters A-Z a-z 0-9 . _ : / @ + -");
  }
  if (opts.chunk_bytes == 0 || opts.chunk_bytes % 16 != 0 || opts.chunk_bytes > kMaxChunk) {
    return InvalidArgumentError("chunk size must be a multiple of 16 up to 64 MiB");
  }
  VLMD_ASSIGN_OR_RETURN(MappedFile in, MappedFile::Open(in_path));
  const std::span<const uint8_t> plain = in.bytes();
  uint8_t salt[kSaltBytes], nonce[kNonceBytes];
  if (RAND_bytes(salt, sizeof salt) != 1 || RAND_bytes(nonce, sizeof nonce) != 1) {
    return InternalError("the random generator failed");
  }
  DerivedKeys keys;
  VLMD_RETURN_IF_ERROR(DeriveKeys(key, salt, &keys));

  std::vector<uint8_t> header;
  PutBytes(header, kSealedMagic.data(), kSealedMagic.size());
  PutU32(header, kVersion);
  PutU16(header, static_cast<uint16_t>(kSealedScheme.size()));
  PutBytes(header, kSealedScheme.data(), kSealedScheme.size());
  PutU16(header, static_cast<uint16_t>(opts.key_id.size()));
  PutBytes(header, opts.key_id.data(), opts.key_id.size());
  PutBytes(header, salt, sizeof salt);
  PutBytes(header, nonce, sizeof nonce);
  PutU64(header, plain.size());
  PutU32(header, opts.chunk_bytes);
  const Sha256Digest sha = Sha256Of(plain);
  PutBytes(header, sha.data(), sha.size());
  uint8_t mac[kMacBytes];
  VLMD_RETURN_IF_ERROR(KeyCheck(key, mac));
  PutBytes(header, mac, sizeof mac);
  uint8_t header_mac[kMacBytes];
  VLMD_RETURN_IF_ERROR(Hmac(keys.mac, {header}, header_mac));
  PutBytes(header, header_mac, sizeof header_mac);

  // Written next to the target and renamed when complete: a failure leaves no partial file.
  const std::string tmp = out_path + ".partial";
  std::error_code ec;
  if (std::filesystem::equivalent(in_path, tmp, ec) || std::filesystem::equivalent(in_path, out_path, ec)) {
    return InvalidArgumentError("the sealed file must not replace its input '" + in_path + "'");
  }
  ::unlink(tmp.c_str());  // a stale one from an interrupted run
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return UnavailableError("cannot create '" + tmp + "': " + std::strerror(errno));
  auto fail = [&](Status s) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  };
  auto write_all = [&](const uint8_t* p, size_t n) -> Status {
    while (n > 0) {
      const ssize_t w = ::write(fd, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return UnavailableError("cannot write '" + tmp + "': " + std::strerror(errno));
      p += w;
      n -= static_cast<size_t>(w);
    }
    return Status::Ok();
  };
  if (Status s = write_all(header.data(), header.size()); !s.ok()) return fail(s);

  const uint64_t chunk = opts.chunk_bytes;
  const uint64_t n_chunks = (plain.size() + chunk - 1) / chunk;
  std::vector<uint8_t> tags(n_chunks * kMacBytes);
  // Batches of chunks: encrypted in parallel into one buffer, then written in order.
  const uint64_t batch = std::max<uint64_t>(1, (uint64_t{64} << 20) / chunk);
  std::vector<uint8_t> out(std::min<uint64_t>(batch * chunk, plain.size()));
  for (uint64_t first = 0; first < n_chunks; first += batch) {
    const uint64_t count = std::min(batch, n_chunks - first);
    FirstFailure failure;
    ForEachChunk(pool, count, [&](int64_t t, int) {
      const uint64_t i = first + static_cast<uint64_t>(t);
      const uint64_t begin = i * chunk, n = std::min<uint64_t>(chunk, plain.size() - begin);
      uint8_t* dst = out.data() + static_cast<uint64_t>(t) * chunk;
      Status s = Sm4Ctr(keys.sm4, nonce, begin / 16, plain.data() + begin, dst, n);
      const auto index = Le64(i);
      if (s.ok()) s = Hmac(keys.mac, {Span(header_mac, kMacBytes), index, Span(dst, n)}, &tags[i * kMacBytes]);
      if (!s.ok()) failure.Record(t, std::move(s));
    });
    if (!failure.status.ok()) return fail(failure.status);
    const uint64_t bytes = std::min<uint64_t>(count * chunk, plain.size() - first * chunk);
    if (Status s = write_all(out.data(), bytes); !s.ok()) return fail(s);
  }
  if (Status s = write_all(tags.data(), tags.size()); !s.ok()) return fail(s);
  if (::fsync(fd) != 0) return fail(UnavailableError("cannot sync '" + tmp + "'"));
  ::close(fd);
  if (::rename(tmp.c_str(), out_path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return UnavailableError("cannot rename '" + tmp + "' to '" + out_path + "': " + std::strerror(err));
  }
  return Status::Ok();
}

Result<SecureBuffer> UnsealFile(const std::string& path, const SecretKey& key, ThreadPool* pool) {
  VLMD_ASSIGN_OR_RETURN(MappedFile file, MappedFile::Open(path));
  return UnsealBytes(file.bytes(), path, key, pool);
}

Result<SecureBuffer> UnsealBytes(std::span<const uint8_t> bytes, const std::string& path, const SecretKey& key,
                                 ThreadPool* pool) {
  VLMD_ASSIGN_OR_RETURN(ParsedHeader p, ParseHeader(bytes, path));
  DerivedKeys keys;
  VLMD_RETURN_IF_ERROR(DeriveKeys(key, p.salt, &keys));
  uint8_t mac[kMacBytes];
  VLMD_RETURN_IF_ERROR(KeyCheck(key, mac));
  if (CRYPTO_memcmp(mac, p.key_check, kMacBytes) != 0) {
    return InvalidArgumentError("the key does not open '" + path + "' (key id '" + p.h.key_id +
                                "'): wrong key (or the header's key check bytes were altered)");
  }
  VLMD_RETURN_IF_ERROR(Hmac(keys.mac, {bytes.first(p.mac_offset)}, mac));
  if (CRYPTO_memcmp(mac, p.header_mac, kMacBytes) != 0) {
    return DataLossError("'" + path + "' fails authentication in its header: the file was altered");
  }
  VLMD_RETURN_IF_ERROR(CheckSize(p, bytes.size(), path));

  VLMD_ASSIGN_OR_RETURN(SecureBuffer plain, SecureBuffer::Allocate(p.h.plaintext_bytes));
  const uint64_t chunk = p.h.chunk_bytes;
  const uint64_t n_chunks = (p.h.plaintext_bytes + chunk - 1) / chunk;
  const uint8_t* cipher = bytes.data() + p.h.header_bytes;
  const uint8_t* tags = cipher + p.h.plaintext_bytes;
  FirstFailure failure;
  ForEachChunk(pool, n_chunks, [&](int64_t t, int) {
    const uint64_t i = static_cast<uint64_t>(t);
    const uint64_t begin = i * chunk, n = std::min<uint64_t>(chunk, p.h.plaintext_bytes - begin);
    uint8_t tag[kMacBytes];
    const auto index = Le64(i);
    Status s = Hmac(keys.mac, {Span(p.header_mac, kMacBytes), index, Span(cipher + begin, n)}, tag);
    if (s.ok() && CRYPTO_memcmp(tag, tags + i * kMacBytes, kMacBytes) != 0) {
      s = DataLossError("'" + path + "' fails authentication in chunk " + std::to_string(i) + " (plaintext bytes " +
                        std::to_string(begin) + ".." + std::to_string(begin + n) + "): the file was altered");
    }
    if (s.ok()) s = Sm4Ctr(keys.sm4, p.nonce, begin / 16, cipher + begin, plain.data() + begin, n);
    if (!s.ok()) failure.Record(t, std::move(s));
  });
  if (!failure.status.ok()) return failure.status;  // `plain` is wiped as it goes
  if (Sha256Of(plain.bytes()) != p.h.plaintext_sha256) {
    return DataLossError("'" + path + "' decrypts to bytes whose SHA-256 is not the one its header names");
  }
  return plain;
}

}  // namespace vlmd
