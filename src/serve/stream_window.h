// Camera and video streams (SPEC S6). A request may name a stream (`stream_id`); the server keeps
// the visual tokens of the stream's recent frames and puts the last few before the new frame, so
// that the model sees what changed. How many is decided by motion: the mean absolute difference
// of 16x16 grayscale thumbnails of consecutive frames (0..1), which widens the window at once and
// narrows it by half a step per frame. Below motion_low the window is the new frame alone (the
// scene is still: earlier frames would only repeat it); from motion_high on it is max_frames;
// linear in between.
//
// Streams are scoped by the caller's key (client key id, model file hash, stream id: one client
// cannot read another's frames, and visual tokens never cross model versions) and bounded: at
// most max_frames - 1 frames each, max_streams streams, max_bytes of visual tokens over all
// (least recently used streams go first), and a stream unused for `idle` is forgotten.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/image/image.h"
#include "engine/runtime/multimodal_prompt.h"

namespace vlmd::serve {

struct StreamOptions {
  int max_frames = 4;  // frames in a prompt at most, the new one included (1: no context)
  double motion_low = 0.02;
  double motion_high = 0.10;
  uint64_t max_bytes = uint64_t{256} << 20;
  int max_streams = 1024;
  std::chrono::seconds idle{600};
};

// An earlier frame of a stream: its image cache key (pixels + preprocessing) and visual tokens.
struct ContextFrame {
  std::string key;
  std::shared_ptr<const engine::runtime::EncodedImage> encoded;
};

using FrameThumbnail = std::array<uint8_t, 256>;
// 16 x 16 box-averaged luma of the image (sampled with a stride on large images).
FrameThumbnail Thumbnail(const engine::image::Image& image);
// Mean absolute difference of two thumbnails, 0 (same) .. 1.
double Motion(const FrameThumbnail& a, const FrameThumbnail& b);

// What a request gets from its stream.
struct StreamView {
  std::vector<ContextFrame> context;  // earlier frames to put before the new one, oldest first
  double motion = 0;                  // the stream's motion after this frame
  int window = 1;                     // frames the window spans now, the new one included
};

class StreamWindows {
 public:
  explicit StreamWindows(StreamOptions options) : options_(options) {}

  // A new frame (its thumbnail) on stream `key`: updates the motion and the window, and returns
  // the earlier frames the window holds. A new stream starts with a window of 1.
  StreamView Arrive(const std::string& key, const FrameThumbnail& frame);
  // A request on the stream without a frame: the window's frames as they are (none for a stream
  // that does not exist).
  StreamView Peek(const std::string& key);
  // The new frame's visual tokens, once encoded, become the stream's latest frame (the oldest
  // beyond max_frames - 1 go).
  void Push(const std::string& key, ContextFrame frame);

  uint64_t bytes() const;
  size_t streams() const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Stream {
    std::deque<ContextFrame> frames;
    FrameThumbnail last{};
    bool has_last = false;
    double motion = 0;
    int window = 1;
    uint64_t bytes = 0;
    Clock::time_point used;
  };
  static uint64_t FrameBytes(const ContextFrame& f);
  int WindowFor(double motion) const;
  // The window's frames of `s` (the last window - 1).
  std::vector<ContextFrame> Context(const Stream& s) const;
  // Forgets idle streams, then the least recently used ones while over the limits (never `keep`).
  void Evict(const std::string* keep);

  const StreamOptions options_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Stream> streams_;
  uint64_t bytes_ = 0;
};

}  // namespace vlmd::serve
