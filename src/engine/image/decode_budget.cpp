#include "engine/image/decode_budget.h"

#include <string>

namespace vlmd::engine::image {

Result<std::shared_ptr<const void>> DecodeBudget::Reserve(uint64_t bytes, uint64_t already_held) {
  if (bytes > capacity_ || already_held > capacity_ - bytes) {
    return OutOfRangeError(
        already_held == 0
            ? "image of " + std::to_string(bytes >> 20) + " MiB decoded exceeds the decode budget of " +
                  std::to_string(capacity_ >> 20) + " MiB"
            : "the request's images, " + std::to_string((already_held + bytes) >> 20) +
                  " MiB decoded together, exceed the decode budget of " +
                  std::to_string(capacity_ >> 20) + " MiB");
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (!freed_.wait_for(lock, max_wait_, [&] { return in_use_ + bytes <= capacity_; })) {
    ++refused_;
    return UnavailableError("image decoding is at its memory budget (" +
                            std::to_string(in_use_ >> 20) + " of " +
                            std::to_string(capacity_ >> 20) + " MiB in use): retry later");
  }
  in_use_ += bytes;
  ++granted_;
  // An empty handle whose deleter gives the bytes back; it keeps the budget alive.
  std::shared_ptr<DecodeBudget> self = shared_from_this();
  return std::shared_ptr<const void>(nullptr, [self, bytes](const void*) { self->Release(bytes); });
}

void DecodeBudget::Release(uint64_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_use_ -= bytes;
  }
  freed_.notify_all();
}

uint64_t DecodeBudget::in_use() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_use_;
}

uint64_t DecodeBudget::refused() const {
  std::lock_guard<std::mutex> lock(mu_);
  return refused_;
}

uint64_t DecodeBudget::granted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return granted_;
}

}  // namespace vlmd::engine::image
