// Names the calling thread (what `top -H`, `ps -L`, perf and /proc/PID/task/TID/comm show), so
// that an operator can tell the HTTP front's I/O thread from its TLS handshake thread or a
// handler. Linux keeps 15 bytes; a longer name is cut there. Best effort: failures are ignored.
#pragma once

#include <string_view>

namespace vlmd {

void SetThreadName(std::string_view name);

}  // namespace vlmd
