// Camera and video streams (SPEC S6). A request may name a stream (`stream_id`); the server keeps
// the visual tokens of the stream's recent frames and puts the last few before the new frame, so
// that the model sees what changed. How many is decided by motion: the mean absolute difference
// of 16x16 grayscale thumbnails of the new frame and the stream's newest kept frame (0..1), which
// widens the window at once and narrows it by half a step per frame. Below motion_low the window
// is the new frame alone (the scene is still: earlier frames would only repeat it), and a still
// frame replaces the newest kept one instead of adding a copy; from motion_high on the window is
// max_frames; linear in between.
//
// Two phases: Arrive only reads (the window for a new frame); Push, once the frame's request has
// succeeded, commits the frame with its thumbnail and the motion. So a request that fails, is
// refused or retried changes nothing, and frames of one stream that are in flight together are
// kept in arrival order (one older than the newest kept frame is dropped).
//
// Streams are scoped by the caller's key (client, model file hash, stream id: one client cannot
// read another's frames, and visual tokens never cross model versions) and bounded: at most
// max_frames - 1 frames each, max_streams streams, max_bytes of visual tokens over all (the
// least recently used stream of the client holding the most goes first: the key's first line
// names its client), and a stream unused for `idle` is forgotten.
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
  // An earlier frame older than this is no context for a new one (a camera that paused): it is
  // not offered, and goes at the stream's next frame.
  std::chrono::seconds max_age{60};
};

using FrameThumbnail = std::array<uint8_t, 256>;

// An earlier frame of a stream: its image cache key (pixels + preprocessing), visual tokens, the
// prompt tokens it takes (visual tokens and their wrapper text), its thumbnail and arrival order.
struct ContextFrame {
  std::string key;
  std::shared_ptr<const engine::runtime::EncodedImage> encoded;
  int64_t prompt_tokens = 0;
  FrameThumbnail thumbnail{};
  uint64_t sequence = 0;
  std::chrono::steady_clock::time_point kept{};  // set by Push
  // SHA-256 (hex) of the frame's encoded bytes, as the image allowlist knows it: a frame whose
  // image leaves the list is no context from then on (the server leaves it out).
  std::string image_sha256;
};
// 16 x 16 box-averaged luma of the image (sampled with a stride on large images).
FrameThumbnail Thumbnail(const engine::image::Image& image);
// Mean absolute difference of two thumbnails, 0 (same) .. 1.
double Motion(const FrameThumbnail& a, const FrameThumbnail& b);

// What a request gets from its stream.
struct StreamView {
  std::vector<ContextFrame> context;  // earlier frames to put before the new one, oldest first
  double motion = 0;                  // the stream's motion with this frame
  int window = 1;                     // frames the window spans, the new one included
  uint64_t sequence = 0;              // the new frame's arrival order (for Push)
  FrameThumbnail thumbnail{};         // the new frame's (for Push)
  int held_frames = 0;                // earlier frames the stream holds here, of any age
  bool expired = false;               // ... and the newest of them is past max_age
  // Earlier frames the caller took out of `context`: their image is no longer allowed (the
  // allowlist changed since they were kept).
  int withdrawn = 0;
};

class StreamWindows {
 public:
  explicit StreamWindows(StreamOptions options) : options_(options) {}

  // A new frame (its thumbnail) on stream `key`: the window it gets and the earlier frames in it.
  // Changes nothing (Push commits) but forgetting streams idle past options.idle (this one
  // included: it is new again). A stream without frames gives a window of 1.
  StreamView Arrive(const std::string& key, const FrameThumbnail& frame);
  // A request on the stream without a frame: the window's frames and the newest one (none for a
  // stream that does not exist).
  StreamView Peek(const std::string& key);
  // Commits a frame whose request succeeded (`frame.sequence` from its Arrive): it becomes the
  // stream's newest frame (replacing the newest when the scene was still), the motion follows,
  // the oldest beyond max_frames - 1 go. A frame older than the newest kept one is dropped.
  void Push(const std::string& key, ContextFrame frame);

  // Forgets the streams idle past options.idle (Arrive, Peek and Push do it too; /metrics calls
  // it so that an idle server's gauges and memory drop as well).
  void ExpireIdle();
  uint64_t bytes() const;
  size_t streams() const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Stream {
    std::deque<ContextFrame> frames;  // oldest first
    double motion = 0;                // committed, with the newest frame
    int window = 1;
    uint64_t bytes = 0;
    Clock::time_point used;
  };
  static uint64_t FrameBytes(const ContextFrame& f);
  int WindowFor(double motion) const;
  // The motion with a new frame: fast to widen, slow to narrow (a burst of motion keeps its
  // context for a few frames); 0 when the newest kept frame is past max_age (or none).
  double NextMotion(const Stream& s, const FrameThumbnail& frame) const;
  // The last n frames of `s` younger than max_age, oldest first.
  std::vector<ContextFrame> Last(const Stream& s, int64_t n) const;
  // Takes frame f (of s) out of the byte counts; the caller removes it.
  void Forget(Stream& s, const ContextFrame& f);
  void DropOldest(Stream& s);
  // Forgets idle streams, then the least recently used ones while over the limits (never `keep`).
  void Evict(const std::string* keep);
  // Under mu_: drops the streams idle past options.idle, but `keep` (may be null).
  void DropIdle(const std::string* keep);

  const StreamOptions options_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Stream> streams_;
  uint64_t bytes_ = 0;
  uint64_t next_sequence_ = 1;
};

}  // namespace vlmd::serve
