// Stream windows (SPEC S6): thumbnails, motion, the adaptive window and its limits.
#include "serve/stream_window.h"

#include <gtest/gtest.h>

#include <thread>

namespace vlmd::serve {
namespace {

engine::image::Image Solid(int w, int h, uint8_t v) {
  return {w, h, std::vector<uint8_t>(static_cast<size_t>(w * h * 3), v)};
}

// A frame whose left `split` columns are white and the rest black.
engine::image::Image Split(int w, int h, int split) {
  engine::image::Image img = Solid(w, h, 0);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < split; ++x) {
      for (int c = 0; c < 3; ++c) img.rgb[size_t((y * w + x) * 3 + c)] = 255;
    }
  }
  return img;
}

ContextFrame Frame(const std::string& key, size_t floats) {
  auto e = std::make_shared<engine::runtime::EncodedImage>();
  e->embeddings.assign(floats, 0.5f);
  return {key, e};
}

TEST(StreamWindow, ThumbnailsAndMotion) {
  const FrameThumbnail black = Thumbnail(Solid(64, 48, 0)), white = Thumbnail(Solid(640, 480, 255));
  EXPECT_EQ(black[0], 0);
  EXPECT_EQ(white[255], 255);
  EXPECT_DOUBLE_EQ(Motion(black, black), 0.0);
  EXPECT_DOUBLE_EQ(Motion(black, white), 1.0);
  // Half the picture changed: half the motion, whatever the size.
  EXPECT_NEAR(Motion(Thumbnail(Split(160, 90, 0)), Thumbnail(Split(160, 90, 80))), 0.5, 0.01);
  EXPECT_NEAR(Motion(Thumbnail(Split(1920, 1080, 0)), Thumbnail(Split(1920, 1080, 960))), 0.5, 0.01);
  // A 1 x 1 image and a very narrow one do not crash and give a uniform thumbnail.
  EXPECT_EQ(Thumbnail(Solid(1, 1, 7))[100], 7);
  EXPECT_EQ(Thumbnail(Solid(3, 700, 9))[255], 9);
}

TEST(StreamWindow, TheWindowWidensWithMotionAndNarrowsWhenTheSceneIsStill) {
  StreamOptions o;
  o.max_frames = 4;
  o.motion_low = 0.02;
  o.motion_high = 0.10;
  StreamWindows w(o);
  const FrameThumbnail still = Thumbnail(Split(64, 48, 10)), moved = Thumbnail(Split(64, 48, 54));
  StreamView v = w.Arrive("s", still);
  EXPECT_EQ(v.window, 1);  // a new stream
  EXPECT_TRUE(v.context.empty());
  w.Push("s", Frame("f1", 100));
  v = w.Arrive("s", still);
  EXPECT_DOUBLE_EQ(v.motion, 0.0);
  EXPECT_EQ(v.window, 1);  // nothing moved: the new frame alone
  EXPECT_TRUE(v.context.empty());
  w.Push("s", Frame("f2", 100));
  v = w.Arrive("s", moved);  // most of the picture changed
  EXPECT_GT(v.motion, 0.5);
  EXPECT_EQ(v.window, 4);
  ASSERT_EQ(v.context.size(), 2u);  // all there is, oldest first
  EXPECT_EQ(v.context[0].key, "f1");
  EXPECT_EQ(v.context[1].key, "f2");
  w.Push("s", Frame("f3", 100));
  w.Push("s", Frame("f4", 100));  // beyond max_frames - 1: f1 goes
  // Still again: the motion halves per frame, the window follows it down.
  int last = 4;
  for (int i = 0; i < 8; ++i) {
    v = w.Arrive("s", moved);
    EXPECT_LE(v.window, last);
    last = v.window;
    ASSERT_EQ(v.context.size(), static_cast<size_t>(v.window - 1));
    if (!v.context.empty()) EXPECT_EQ(v.context.back().key, "f4");  // the latest first to stay
  }
  EXPECT_EQ(last, 1);
  // A request without a frame asks about what was seen: the window's frames and the last one.
  const StreamView peek = w.Peek("s");
  ASSERT_EQ(peek.context.size(), 1u);
  EXPECT_EQ(peek.context[0].key, "f4");
  EXPECT_TRUE(w.Peek("other").context.empty());
}

TEST(StreamWindow, StreamsAreBoundedInCountBytesAndIdleTime) {
  StreamOptions o;
  o.max_frames = 3;
  o.max_streams = 2;
  o.max_bytes = 10'000;
  o.idle = std::chrono::seconds(1);
  StreamWindows w(o);
  const FrameThumbnail t = Thumbnail(Solid(8, 8, 1));
  w.Arrive("a", t);
  w.Push("a", Frame("a1", 100));
  w.Arrive("b", t);
  w.Push("b", Frame("b1", 100));
  w.Arrive("c", t);  // a third stream: the least recently used ("a") goes
  EXPECT_EQ(w.streams(), 2u);
  EXPECT_TRUE(w.Peek("a").context.empty());
  EXPECT_EQ(w.Peek("b").context.size(), 1u);
  // Bytes: 2000 floats = 8000 bytes per frame; a push over the limit evicts the other stream,
  // then the stream's own older frames.
  w.Push("c", Frame("c1", 2000));
  EXPECT_EQ(w.streams(), 2u);  // 402 + 8002 bytes: within the limit
  w.Push("c", Frame("c2", 2000));
  EXPECT_EQ(w.streams(), 1u);
  EXPECT_LE(w.bytes(), o.max_bytes);
  const StreamView c = w.Peek("c");
  ASSERT_EQ(c.context.size(), 1u);
  EXPECT_EQ(c.context[0].key, "c2");
  // A frame for a stream that was evicted meanwhile is dropped, not resurrected.
  w.Push("gone", Frame("g1", 10));
  EXPECT_TRUE(w.Peek("gone").context.empty());
  // Idle streams are forgotten at the next arrival.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  w.Arrive("d", t);
  EXPECT_EQ(w.streams(), 1u);
  EXPECT_EQ(w.bytes(), 0u);
}

}  // namespace
}  // namespace vlmd::serve
