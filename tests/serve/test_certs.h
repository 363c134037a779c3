// Self-signed TLS certificates for the HTTPS tests, made with OpenSSL at run time (no key
// material in the repository): an EC P-256 key (or RSA, whose handshakes cost the server more
// CPU) and a certificate for IP 127.0.0.1, valid for a day, each call a new key.
#pragma once

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <stdexcept>
#include <string>

namespace vlmd::serve::testing {

struct PemPair {
  std::string cert;
  std::string key;
};

inline std::string BioText(BIO* bio) {
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio, &data);
  std::string out(data, static_cast<size_t>(n));
  BIO_free(bio);
  return out;
}

enum class KeyKind { kEcP256, kRsa3072 };

inline PemPair SelfSignedCert(const std::string& common_name, KeyKind kind = KeyKind::kEcP256) {
  EVP_PKEY* key = kind == KeyKind::kEcP256 ? EVP_EC_gen("P-256") : EVP_RSA_gen(3072);
  X509* x = X509_new();
  if (key == nullptr || x == nullptr) throw std::runtime_error("openssl: cannot make a key");
  X509_set_version(x, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
  X509_gmtime_adj(X509_getm_notBefore(x), -3600);
  X509_gmtime_adj(X509_getm_notAfter(x), 86400);
  X509_set_pubkey(x, key);
  X509_NAME* name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(common_name.c_str()),
                             -1, -1, 0);
  X509_set_issuer_name(x, name);
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, x, x, nullptr, nullptr, 0);
  X509_EXTENSION* san = X509V3_EXT_conf_nid(nullptr, &ctx, NID_subject_alt_name, "IP:127.0.0.1");
  X509_add_ext(x, san, -1);
  X509_EXTENSION_free(san);
  if (X509_sign(x, key, EVP_sha256()) == 0) throw std::runtime_error("openssl: cannot sign");
  BIO* cert_bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(cert_bio, x);
  BIO* key_bio = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(key_bio, key, nullptr, nullptr, 0, nullptr, nullptr);
  X509_free(x);
  EVP_PKEY_free(key);
  return {BioText(cert_bio), BioText(key_bio)};
}

}  // namespace vlmd::serve::testing
