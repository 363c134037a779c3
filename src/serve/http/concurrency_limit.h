// A bound on how many requests run one costly step at once (redaction's detectors, which run on
// the HTTP handler threads): past it a request waits a little for a slot, then is turned away
// (the caller answers 429 with Retry-After). At most as many wait as there are slots; later ones
// are turned away at once. So a burst of such requests holds at most 2 x slots handler threads
// and `slots` cores, whatever its size.
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

  // A slot, or nullopt when none frees up within `wait` (0: only one that is free now), or at
  // once when `slots` callers are waiting already.
  std::optional<Slot> Acquire(std::chrono::milliseconds wait) {
    std::unique_lock lock(mu_);
    if (in_use_ >= slots_ && waiting_ >= slots_) return std::nullopt;
    ++waiting_;
    const bool got = freed_.wait_for(lock, wait, [&] { return in_use_ < slots_; });
    --waiting_;
    if (!got) return std::nullopt;
    ++in_use_;
    return Slot(this);
  }

  int slots() const { return slots_; }
  int in_use() const {
    std::lock_guard lock(mu_);
    return in_use_;
  }
  int waiting() const {
    std::lock_guard lock(mu_);
    return waiting_;
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
  int waiting_ = 0;
};

}  // namespace vlmd::serve
