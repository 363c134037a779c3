#include "engine/image/decode_budget.h"

#include <string>

namespace vlmd::engine::image {

Status DecodeBudget::Acquire(uint64_t bytes, uint64_t already_held, bool count) {
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
  if (count) ++granted_;
  return Status::Ok();
}

Result<std::shared_ptr<DecodeHold>> DecodeBudget::Reserve(uint64_t bytes, uint64_t already_held) {
  VLMD_RETURN_IF_ERROR(Acquire(bytes, already_held, /*count=*/true));
  return std::make_shared<DecodeHold>(shared_from_this(), bytes);
}

DecodeHold::DecodeHold(std::shared_ptr<DecodeBudget> budget, uint64_t bytes)
    : budget_(std::move(budget)), bytes_(bytes) {}

DecodeHold::~DecodeHold() { budget_->Release(bytes_); }

Status DecodeHold::GrowTo(uint64_t bytes, uint64_t already_held) {
  if (bytes <= bytes_) return Status::Ok();
  // What it holds already counts as held by the caller while it waits for the rest.
  VLMD_RETURN_IF_ERROR(budget_->Acquire(bytes - bytes_, already_held + bytes_, /*count=*/false));
  bytes_ = bytes;
  return Status::Ok();
}

void DecodeHold::ShrinkTo(uint64_t bytes) {
  if (bytes >= bytes_) return;
  budget_->Release(bytes_ - bytes);
  bytes_ = bytes;
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
