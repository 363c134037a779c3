// Stream windows: thumbnails, motion, and the per-stream frames (see stream_window.h).
#include "serve/hosting/stream_window.h"

#include <algorithm>
#include <cmath>
#include <string_view>

namespace vlmd::serve {

FrameThumbnail Thumbnail(const engine::image::Image& image) {
  constexpr int64_t kSide = 16;
  const int64_t w = image.width, h = image.height;
  FrameThumbnail t{};
  if (w <= 0 || h <= 0 || image.rgb.size() < static_cast<size_t>(w * h * 3)) return t;
  // About 16 x 16 samples per cell on any image size; a cell of a small image takes at least
  // the one pixel under it.
  for (int64_t cy = 0; cy < kSide; ++cy) {
    const int64_t y0 = cy * h / kSide, y1 = std::max(y0 + 1, (cy + 1) * h / kSide);
    const int64_t ys = std::max<int64_t>(1, (y1 - y0) / 16);
    for (int64_t cx = 0; cx < kSide; ++cx) {
      const int64_t x0 = cx * w / kSide, x1 = std::max(x0 + 1, (cx + 1) * w / kSide);
      const int64_t xs = std::max<int64_t>(1, (x1 - x0) / 16);
      uint64_t sum = 0, count = 0;
      for (int64_t y = y0; y < y1; y += ys) {
        const uint8_t* row = image.rgb.data() + static_cast<size_t>(y * w * 3);
        for (int64_t x = x0; x < x1; x += xs) {
          const uint8_t* p = row + x * 3;
          sum += (77u * p[0] + 150u * p[1] + 29u * p[2] + 128u) >> 8;  // BT.601 luma
          ++count;
        }
      }
      t[static_cast<size_t>(cy * kSide + cx)] = static_cast<uint8_t>(sum / count);
    }
  }
  return t;
}

double Motion(const FrameThumbnail& a, const FrameThumbnail& b) {
  uint32_t total = 0;
  for (size_t i = 0; i < a.size(); ++i) total += static_cast<uint32_t>(std::abs(int(a[i]) - int(b[i])));
  return total / (255.0 * a.size());
}

uint64_t StreamWindows::FrameBytes(const ContextFrame& f) {
  return sizeof(ContextFrame) + f.key.size() +
         (f.encoded ? f.encoded->embeddings.size() * sizeof(float) : 0);
}

int StreamWindows::WindowFor(double motion) const {
  const int extra = std::max(options_.max_frames, 1) - 1;
  const double span = options_.motion_high - options_.motion_low;
  const double t = span > 0 ? (motion - options_.motion_low) / span : (motion >= options_.motion_high);
  return 1 + static_cast<int>(std::lround(extra * std::clamp(t, 0.0, 1.0)));
}

double StreamWindows::NextMotion(const Stream& s, const FrameThumbnail& frame) const {
  if (s.frames.empty() || s.frames.back().kept < Clock::now() - options_.max_age) return 0.0;
  return std::max(Motion(s.frames.back().thumbnail, frame), 0.5 * s.motion);
}

std::vector<ContextFrame> StreamWindows::Last(const Stream& s, int64_t n) const {
  const Clock::time_point oldest = Clock::now() - options_.max_age;
  std::vector<ContextFrame> out;
  for (auto it = s.frames.rbegin(); it != s.frames.rend() && static_cast<int64_t>(out.size()) < n; ++it) {
    if (it->kept < oldest) break;  // older frames are older still
    out.push_back(*it);
  }
  std::reverse(out.begin(), out.end());
  return out;
}

StreamView StreamWindows::Arrive(const std::string& key, const FrameThumbnail& frame) {
  std::lock_guard<std::mutex> lock(mu_);
  DropIdle(nullptr);  // an idle stream's frames are no context any more
  StreamView view;
  view.sequence = next_sequence_++;
  view.thumbnail = frame;
  auto it = streams_.find(key);
  if (it == streams_.end()) return view;  // Push creates the stream
  Stream& s = it->second;
  s.used = Clock::now();
  view.motion = NextMotion(s, frame);
  view.window = WindowFor(view.motion);
  view.context = Last(s, view.window - 1);
  view.held_frames = static_cast<int>(s.frames.size());
  view.expired = !s.frames.empty() && s.frames.back().kept < Clock::now() - options_.max_age;
  return view;
}

StreamView StreamWindows::Peek(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  DropIdle(nullptr);
  auto it = streams_.find(key);
  if (it == streams_.end()) return {};
  Stream& s = it->second;
  s.used = Clock::now();
  // Without a new frame the question is about the frames seen: the window's earlier frames and
  // the newest one.
  StreamView view{Last(s, std::max(s.window, 1)), s.motion, s.window, 0, {}};
  view.held_frames = static_cast<int>(s.frames.size());
  view.expired = !s.frames.empty() && s.frames.back().kept < Clock::now() - options_.max_age;
  return view;
}

void StreamWindows::Push(const std::string& key, ContextFrame frame) {
  std::lock_guard<std::mutex> lock(mu_);
  Stream& s = streams_[key];
  s.used = Clock::now();
  if (!s.frames.empty() && frame.sequence < s.frames.back().sequence) return;  // overtaken
  frame.kept = s.used;
  // Frames past max_age are no context any more.
  while (!s.frames.empty() && s.frames.front().kept < s.used - options_.max_age) DropOldest(s);
  const double motion = NextMotion(s, frame.thumbnail);
  // A still frame replaces the newest kept one: the window holds scenes, not copies of one.
  if (!s.frames.empty() && Motion(s.frames.back().thumbnail, frame.thumbnail) < options_.motion_low) {
    Forget(s, s.frames.back());
    s.frames.pop_back();
  }
  s.motion = motion;
  s.window = WindowFor(motion);
  const uint64_t b = FrameBytes(frame);
  s.frames.push_back(std::move(frame));
  s.bytes += b;
  bytes_ += b;
  // Keep what the widest window can use: max_frames - 1 earlier frames (at least the newest,
  // which a frameless request asks about).
  const size_t keep = static_cast<size_t>(std::max(options_.max_frames - 1, 1));
  while (s.frames.size() > keep) DropOldest(s);
  Evict(&key);
}

void StreamWindows::DropIdle(const std::string* keep) {
  const Clock::time_point now = Clock::now();
  for (auto it = streams_.begin(); it != streams_.end();) {
    const bool idle = now - it->second.used > options_.idle && (keep == nullptr || it->first != *keep);
    if (idle) {
      bytes_ -= it->second.bytes;
      it = streams_.erase(it);
    } else {
      ++it;
    }
  }
}

void StreamWindows::ExpireIdle() {
  std::lock_guard<std::mutex> lock(mu_);
  DropIdle(nullptr);
}

void StreamWindows::Evict(const std::string* keep) {
  auto drop = [&](std::unordered_map<std::string, Stream>::iterator it) {
    bytes_ -= it->second.bytes;
    return streams_.erase(it);
  };
  DropIdle(keep);
  // The key's first line names the stream's owner (the client): over a limit, the owner holding
  // the most (streams over the count, bytes over the bytes) loses its least recently used stream
  // first, so that one client opening streams by the hundred evicts its own (of owners holding as
  // much, and with one owner, the least recently used stream goes).
  auto owner_of = [](const std::string& key) { return std::string_view(key).substr(0, key.find('\n')); };
  while (streams_.size() > static_cast<size_t>(std::max(options_.max_streams, 1)) ||
         bytes_ > options_.max_bytes) {
    const bool by_count = streams_.size() > static_cast<size_t>(std::max(options_.max_streams, 1));
    std::unordered_map<std::string_view, uint64_t> load;
    for (const auto& [key, stream] : streams_) load[owner_of(key)] += by_count ? 1 : stream.bytes;
    auto victim = streams_.end();
    uint64_t victim_load = 0;
    for (auto it = streams_.begin(); it != streams_.end(); ++it) {
      if (keep != nullptr && it->first == *keep) continue;
      const uint64_t l = load[owner_of(it->first)];
      if (victim == streams_.end() || l > victim_load ||
          (l == victim_load && it->second.used < victim->second.used)) {
        victim = it;
        victim_load = l;
      }
    }
    if (victim == streams_.end()) break;  // only `keep` is left
    drop(victim);
  }
  // One stream alone over the byte limit keeps only its newest frame.
  if (bytes_ > options_.max_bytes && keep != nullptr) {
    auto it = streams_.find(*keep);
    while (it != streams_.end() && it->second.frames.size() > 1 && bytes_ > options_.max_bytes) {
      DropOldest(it->second);
    }
  }
}

void StreamWindows::Forget(Stream& s, const ContextFrame& f) {
  const uint64_t b = FrameBytes(f);
  s.bytes -= b;
  bytes_ -= b;
}

void StreamWindows::DropOldest(Stream& s) {
  Forget(s, s.frames.front());
  s.frames.pop_front();
}

uint64_t StreamWindows::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

size_t StreamWindows::streams() const {
  std::lock_guard<std::mutex> lock(mu_);
  return streams_.size();
}

}  // namespace vlmd::serve
