// Fetches the http(s) image URLs of a request (OpenAI image_url parts) from the hosts of the
// allowlist (`server.image_url_hosts`; request parsing already refused every other host), on the
// handler's thread. Redirects are not followed (a redirect could leave the allowlist), the size is
// capped while receiving, and HTTPS certificates are verified against the system CA store.
#pragma once

#include <string>

#include "core/status.h"
#include "serve/api/requests.h"

namespace vlmd::serve {

struct FetchOptions {
  size_t max_bytes = 20u << 20;  // the request's fetched images together (its body limit)
  int timeout_s = 10;            // connect, each read, and the whole download
};

// Downloads request->image_urls and inserts their bytes into request->images at their marker
// positions (image_url_positions), so that `images` is complete and in marker order; clears the
// URL lists. INVALID_ARGUMENT naming the URL for an unreachable host, a non-200 status or a
// redirect or a download slower than timeout_s; OUT_OF_RANGE when the downloads together pass
// max_bytes.
// Thread-safe (no shared state).
Status FetchImageUrls(api::GenerationRequest* request, const FetchOptions& options);

}  // namespace vlmd::serve
