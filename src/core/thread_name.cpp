#include "core/thread_name.h"

#include <pthread.h>

#include <string>

namespace vlmd {

void SetThreadName(std::string_view name) {
  constexpr size_t kMaxBytes = 15;  // the kernel's TASK_COMM_LEN less its NUL
  const std::string cut(name.substr(0, kMaxBytes));
  (void)pthread_setname_np(pthread_self(), cut.c_str());
}

}  // namespace vlmd
