#include "serve/http/tls_files.h"

#include <sys/stat.h>

namespace vlmd::serve {

namespace ssl = boost::asio::ssl;
using boost::system::error_code;

std::pair<int64_t, int64_t> FileStamp(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {0, 0};
  return {static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec, st.st_size};
}

Result<std::shared_ptr<ssl::context>> LoadTlsContext(const std::string& cert_file, const std::string& key_file) {
  auto ctx = std::make_shared<ssl::context>(ssl::context::tls_server);
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                   ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 | ssl::context::single_dh_use);
  // No renegotiation (OpenSSL 3 refuses a client's by default; this says so for every version):
  // a renegotiation is a handshake inside the connection's reads, on the I/O thread, where the
  // front never runs one (HttpFront::Impl::tls_lane).
  SSL_CTX_set_options(ctx->native_handle(), SSL_OP_NO_RENEGOTIATION);
  error_code ec;
  ctx->use_certificate_chain_file(cert_file, ec);
  if (ec) return InvalidArgumentError("TLS certificate " + cert_file + ": " + ec.message());
  ctx->use_private_key_file(key_file, ssl::context::pem, ec);
  if (ec) return InvalidArgumentError("TLS private key " + key_file + ": " + ec.message());
  if (SSL_CTX_check_private_key(ctx->native_handle()) != 1) {
    return InvalidArgumentError("TLS private key " + key_file + " does not match the certificate " + cert_file);
  }
  return ctx;
}

}  // namespace vlmd::serve
