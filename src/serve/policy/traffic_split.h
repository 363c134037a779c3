// Weighted, sticky traffic split for gray (canary) releases (SPEC P6): the same client always
// lands on the same target while the weights stay the same, and a weight change moves only the
// clients whose bucket crosses a boundary. Pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace vlmd::serve::policy {

// The client's bucket in [0, 1): the first 8 bytes of SHA-256(route + '\n' + client_key) as a
// fraction. Salting with the route keeps a client's canary membership independent across routes.
double StickyBucket(std::string_view route, std::string_view client_key);

// Index of the target whose cumulative weight interval contains `bucket` (weights >= 0, any sum
// > 0; zero-weight targets are never picked). -1 when every weight is 0 or the list is empty.
int PickWeighted(std::span<const double> weights, double bucket);

}  // namespace vlmd::serve::policy
