// The HTTP front's TLS files: a server context loaded from PEM files, and the stamp that tells
// when they changed (certificate reloads).
#pragma once

#include <boost/asio/ssl/context.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "core/status.h"

namespace vlmd::serve {

// The modification time and size of a file (for certificate reloads); zeros when unreadable.
std::pair<int64_t, int64_t> FileStamp(const std::string& path);

// A TLS server context from PEM files: TLS 1.2 and 1.3 only, the key checked against the
// certificate.
Result<std::shared_ptr<boost::asio::ssl::context>> LoadTlsContext(const std::string& cert_file,
                                                                  const std::string& key_file);

}  // namespace vlmd::serve
