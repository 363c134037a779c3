// A bound on how many requests run one costly step at once (redaction's detectors, which run on
// the HTTP handler threads): past it a request waits a little for a slot, then is turned away
// (the caller answers 429 with Retry-After), so a burst of such requests cannot take every core
// and every handler thread from the rest.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>

namespace vlmd::serve {

class ConcurrencyLimit {
 public:
  // A held slot; released when destroyed.
  class Slot {
   public:
    Slot(Slot&& o) noexcept : limit_(o.limit_) { o.limit_ = nullptr; }
    Slot& operator=(Slot&&) = delete;
    Slot(const Slot&) = delete;
    ~Slot() {
      if (limit_ != nullptr) limit_->Release();
    }

   private:
    friend class ConcurrencyLimit;
    explicit Slot(ConcurrencyLimit* limit) : limit_(limit) {}
    ConcurrencyLimit* limit_;
  };

  explicit ConcurrencyLimit(int slots) : slots_(slots < 1 ? 1 : slots) {}
  ConcurrencyLimit(const ConcurrencyLimit&) = delete;
  ConcurrencyLimit& operator=(const ConcurrencyLimit&) = delete;

  // A slot, or nullopt when none frees up within `wait` (0: only one that is free now).
  std::optional<Slot> Acquire(std::chrono::milliseconds wait) {
    std::unique_lock lock(mu_);
    if (!freed_.wait_for(lock, wait, [&] { return in_use_ < slots_; })) return std::nullopt;
    ++in_use_;
    return Slot(this);
  }

  int slots() const { return slots_; }
  int in_use() const {
    std::lock_guard lock(mu_);
    return in_use_;
  }

 private:
  void Release() {
    {
      std::lock_guard lock(mu_);
      --in_use_;
    }
    freed_.notify_one();
  }

  const int slots_;
  mutable std::mutex mu_;
  std::condition_variable freed_;
  int in_use_ = 0;
};

}  // namespace vlmd::serve
