// Bytes of decoded pixels in flight across callers: a bound on the memory that concurrent image
// decodes take (a 194 KB PNG of 7071x7071 decodes to 150 MB; eight at once took 2.7 GiB).
// DecodeImage reserves what the decoder holds at its peak (the RGB output, its staging and the
// library's image-sized buffers: 3 to 11 bytes a pixel by format, decoders.h) once the header
// gives the dimensions, before any pixel buffer exists; after the decode the hold shrinks to the
// image's RGB bytes, released with the decoded Image. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>

#include "core/status.h"

namespace vlmd::engine::image {

class DecodeHold;

class DecodeBudget : public std::enable_shared_from_this<DecodeBudget> {
 public:
  // Create through std::make_shared (holds keep the budget alive).
  DecodeBudget(uint64_t capacity_bytes, std::chrono::milliseconds max_wait)
      : capacity_(capacity_bytes), max_wait_(max_wait) {}

  // Waits up to max_wait for `bytes` to be free and holds them until the returned handle (and
  // its copies) are gone. `already_held`: bytes the caller itself holds from this budget (the
  // earlier images of one request), which cannot be freed while it waits. OUT_OF_RANGE when
  // already_held + bytes exceed the whole capacity (it can never fit); UNAVAILABLE when the wait
  // runs out (the server is busy decoding: retry).
  Result<std::shared_ptr<DecodeHold>> Reserve(uint64_t bytes, uint64_t already_held = 0);

  uint64_t capacity() const { return capacity_; }
  uint64_t in_use() const;
  uint64_t refused() const;  // reservations that ran out of wait
  uint64_t granted() const;  // reservations made: one per decoded image (server decodes counted)

 private:
  friend class DecodeHold;
  // Waits for `bytes` more (Reserve's rules and errors); counts a grant when `count`.
  Status Acquire(uint64_t bytes, uint64_t already_held, bool count);
  void Release(uint64_t bytes);

  const uint64_t capacity_;
  const std::chrono::milliseconds max_wait_;
  mutable std::mutex mu_;
  std::condition_variable freed_;
  uint64_t in_use_ = 0;
  uint64_t refused_ = 0;
  uint64_t granted_ = 0;
};

// Bytes held from a DecodeBudget, given back when the last handle to it goes. A decode grows its
// hold as it learns what it needs and shrinks it to the image it leaves. Not thread-safe itself
// (one decode owns it); the budget it draws on is.
class DecodeHold {
 public:
  DecodeHold(std::shared_ptr<DecodeBudget> budget, uint64_t bytes);
  ~DecodeHold();
  DecodeHold(const DecodeHold&) = delete;
  DecodeHold& operator=(const DecodeHold&) = delete;
  uint64_t bytes() const { return bytes_; }
  // Holds `bytes` in all, waiting for the difference as DecodeBudget::Reserve does
  // (`already_held`: the caller's other holds). Nothing to do when it holds that much already.
  Status GrowTo(uint64_t bytes, uint64_t already_held = 0);
  // Gives back all but `bytes` (no-op when it holds no more).
  void ShrinkTo(uint64_t bytes);

 private:
  std::shared_ptr<DecodeBudget> budget_;
  uint64_t bytes_;
};

}  // namespace vlmd::engine::image
