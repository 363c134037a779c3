// Bytes of decoded pixels in flight across callers: a bound on the memory that concurrent image
// decodes take (a 194 KB PNG of 7071x7071 decodes to 150 MB; eight at once took 2.7 GiB).
// DecodeImage reserves what the decoder holds at its peak (the RGB output, its staging and the
// library's image-sized buffers: 3 to 11 bytes a pixel by format, decoders.h) once the header
// gives the dimensions, before any pixel buffer exists; the reservation is released with the
// decoded Image. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>

#include "core/status.h"

namespace vlmd::engine::image {

class DecodeBudget : public std::enable_shared_from_this<DecodeBudget> {
 public:
  // Create through std::make_shared (reservations keep the budget alive).
  DecodeBudget(uint64_t capacity_bytes, std::chrono::milliseconds max_wait)
      : capacity_(capacity_bytes), max_wait_(max_wait) {}

  // Waits up to max_wait for `bytes` to be free and holds them until the returned handle (and
  // its copies) are gone. `already_held`: bytes the caller itself holds from this budget (the
  // earlier images of one request), which cannot be freed while it waits. OUT_OF_RANGE when
  // already_held + bytes exceed the whole capacity (it can never fit); UNAVAILABLE when the wait
  // runs out (the server is busy decoding: retry).
  Result<std::shared_ptr<const void>> Reserve(uint64_t bytes, uint64_t already_held = 0);

  uint64_t capacity() const { return capacity_; }
  uint64_t in_use() const;
  uint64_t refused() const;  // reservations that ran out of wait
  uint64_t granted() const;  // reservations made: one per decoded image (server decodes counted)

 private:
  void Release(uint64_t bytes);

  const uint64_t capacity_;
  const std::chrono::milliseconds max_wait_;
  mutable std::mutex mu_;
  std::condition_variable freed_;
  uint64_t in_use_ = 0;
  uint64_t refused_ = 0;
  uint64_t granted_ = 0;
};

}  // namespace vlmd::engine::image
