// Stream windows (SPEC S6): thumbnails, motion, the adaptive window and its limits.
#include "serve/hosting/stream_window.h"

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

ContextFrame Frame(const std::string& key, size_t floats, const FrameThumbnail& thumb = {},
                   uint64_t sequence = 0) {
  auto e = std::make_shared<engine::runtime::EncodedImage>();
  e->embeddings.assign(floats, 0.5f);
  return {.key = key, .encoded = e, .prompt_tokens = 10, .thumbnail = thumb, .sequence = sequence, .image_sha256 = ""};
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
  // Four scenes, each far from the others.
  const FrameThumbnail s0 = Thumbnail(Split(64, 48, 4)), s1 = Thumbnail(Split(64, 48, 24)),
                       s2 = Thumbnail(Split(64, 48, 44)), s3 = Thumbnail(Split(64, 48, 64));
  StreamView v = w.Arrive("s", s0);
  EXPECT_EQ(v.window, 1);  // no stream yet
  EXPECT_TRUE(v.context.empty());
  EXPECT_EQ(w.streams(), 0u);  // Arrive commits nothing
  w.Push("s", Frame("a", 100, s0, v.sequence));
  v = w.Arrive("s", s0);
  EXPECT_DOUBLE_EQ(v.motion, 0.0);
  EXPECT_EQ(v.window, 1);  // nothing moved: the new frame alone
  EXPECT_TRUE(v.context.empty());
  w.Push("s", Frame("a2", 100, s0, v.sequence));  // still: replaces "a", no copy
  EXPECT_EQ(w.Peek("s").context.size(), 1u);
  v = w.Arrive("s", s1);  // the scene changed
  EXPECT_GT(v.motion, 0.2);
  EXPECT_EQ(v.window, 4);
  ASSERT_EQ(v.context.size(), 1u);
  EXPECT_EQ(v.context[0].key, "a2");
  w.Push("s", Frame("b", 100, s1, v.sequence));
  v = w.Arrive("s", s2);
  w.Push("s", Frame("c", 100, s2, v.sequence));
  v = w.Arrive("s", s3);
  ASSERT_EQ(v.context.size(), 3u);  // max_frames - 1 earlier frames, oldest first
  EXPECT_EQ(v.context[0].key, "a2");
  EXPECT_EQ(v.context[2].key, "c");
  w.Push("s", Frame("d", 100, s3, v.sequence));  // beyond max_frames - 1: "a2" goes
  EXPECT_EQ(w.Peek("s").context.front().key, "b");
  // Still again: the motion halves per frame, the window follows it down.
  int last = 4;
  for (int i = 0; i < 8; ++i) {
    v = w.Arrive("s", s3);
    EXPECT_LE(v.window, last);
    last = v.window;
    ASSERT_EQ(v.context.size(), static_cast<size_t>(v.window - 1));
    // Replaces the newest.
    w.Push("s", Frame(std::string("d").append(std::to_string(i)), 100, s3, v.sequence));
  }
  EXPECT_EQ(last, 1);
  // A request without a frame asks about what was seen: the window and the newest frame.
  const StreamView peek = w.Peek("s");
  ASSERT_EQ(peek.context.size(), 1u);
  EXPECT_EQ(peek.context[0].key, "d7");
  EXPECT_TRUE(w.Peek("other").context.empty());
}

TEST(StreamWindow, OnlyCommittedFramesCountAndOvertakenOnesAreDropped) {
  StreamOptions o;
  o.max_frames = 4;
  StreamWindows w(o);
  const FrameThumbnail s0 = Thumbnail(Split(64, 48, 4)), s1 = Thumbnail(Split(64, 48, 60));
  const StreamView first = w.Arrive("s", s0);
  w.Push("s", Frame("a", 100, s0, first.sequence));
  // A frame whose request failed (never pushed) leaves the motion and the window as they were.
  (void)w.Arrive("s", s1);
  const StreamView again = w.Arrive("s", s1);
  EXPECT_GT(again.motion, 0.5);  // measured against "a", the newest kept frame
  // Two frames in flight: the later one finishes first; the earlier one then is dropped.
  const StreamView x = w.Arrive("s", s1), y = w.Arrive("s", s0);
  w.Push("s", Frame("y", 100, s0, y.sequence));
  w.Push("s", Frame("x", 100, s1, x.sequence));
  const StreamView peek = w.Peek("s");
  ASSERT_FALSE(peek.context.empty());
  EXPECT_EQ(peek.context.back().key, "y");
  for (const ContextFrame& f : peek.context) EXPECT_NE(f.key, "x");
}

TEST(StreamWindow, FramesPastTheirAgeAreNoContext) {
  StreamOptions o;
  o.max_frames = 4;
  o.max_age = std::chrono::seconds(1);
  StreamWindows w(o);
  const FrameThumbnail s0 = Thumbnail(Split(64, 48, 4)), s1 = Thumbnail(Split(64, 48, 60));
  w.Push("s", Frame("a", 100, s0, w.Arrive("s", s0).sequence));
  StreamView v = w.Arrive("s", s1);
  ASSERT_EQ(v.context.size(), 1u);  // young: offered
  EXPECT_EQ(v.held_frames, 1);
  EXPECT_FALSE(v.expired);
  EXPECT_EQ(w.Arrive("t", s1).held_frames, 0);  // a stream not seen here
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  v = w.Arrive("s", s1);
  EXPECT_TRUE(v.context.empty());  // the camera paused: a fresh start
  EXPECT_EQ(v.window, 1);
  EXPECT_EQ(v.held_frames, 1);
  EXPECT_TRUE(v.expired);
  EXPECT_TRUE(w.Peek("s").expired);
  EXPECT_TRUE(w.Peek("s").context.empty());
  w.Push("s", Frame("b", 100, s1, v.sequence));  // and "a" goes
  const StreamView peek = w.Peek("s");
  ASSERT_EQ(peek.context.size(), 1u);
  EXPECT_EQ(peek.context[0].key, "b");
}

TEST(StreamWindow, StreamsAreBoundedInCountBytesAndIdleTime) {
  StreamOptions o;
  o.max_frames = 3;
  o.max_streams = 2;
  o.max_bytes = 20'000;
  o.idle = std::chrono::seconds(1);
  StreamWindows w(o);
  const FrameThumbnail s0 = Thumbnail(Solid(8, 8, 1)), s1 = Thumbnail(Solid(8, 8, 200));
  w.Push("a", Frame("a1", 100, s0, 1));
  w.Push("b", Frame("b1", 100, s0, 2));
  w.Push("c", Frame("c1", 100, s0, 3));  // a third stream: the least recently used ("a") goes
  EXPECT_EQ(w.streams(), 2u);
  EXPECT_TRUE(w.Peek("a").context.empty());
  EXPECT_EQ(w.Peek("b").context.size(), 1u);
  // Bytes: 4000 floats = 16000 bytes (plus its record) per frame; a push over the limit evicts
  // the other stream, then the stream's own older frames.
  w.Push("c", Frame("c2", 4000, s1, 4));
  EXPECT_EQ(w.streams(), 2u);
  EXPECT_LE(w.bytes(), o.max_bytes);
  w.Push("c", Frame("c3", 4000, s0, 5));
  EXPECT_EQ(w.streams(), 1u);
  EXPECT_LE(w.bytes(), o.max_bytes);
  const StreamView c = w.Peek("c");
  ASSERT_EQ(c.context.size(), 1u);
  EXPECT_EQ(c.context[0].key, "c3");
  // Idle streams are forgotten at the next commit.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  w.Push("d", Frame("d1", 10, s0, 6));
  EXPECT_EQ(w.streams(), 1u);
  EXPECT_TRUE(w.Peek("c").context.empty());
}

// Over a limit, the client holding the most loses its own least recently used stream first: a
// client opening streams by the dozen does not evict another's older one (plain LRU did).
TEST(StreamWindow, TheClientHoldingTheMostIsEvictedFirst) {
  StreamOptions o;
  o.max_frames = 3;
  o.max_streams = 4;
  StreamWindows w(o);
  const FrameThumbnail s0 = Thumbnail(Solid(8, 8, 1));
  uint64_t seq = 0;
  w.Push("key:b\ncam", Frame("b1", 100, s0, ++seq));  // the oldest stream, another client's
  // (Names appended, not "literal" + std::to_string: GCC 12 warns on that, -Wrestrict.)
  auto name = [](std::string prefix, int i) { return prefix.append(std::to_string(i)); };
  for (int i = 0; i < 6; ++i) w.Push(name("key:a\ncam", i), Frame(name("a", i), 100, s0, ++seq));
  EXPECT_EQ(w.streams(), 4u);
  EXPECT_EQ(w.Peek("key:b\ncam").context.size(), 1u) << "the other client's stream was evicted";
  EXPECT_TRUE(w.Peek("key:a\ncam0").context.empty());  // a's oldest went instead
  EXPECT_TRUE(w.Peek("key:a\ncam2").context.empty());
  EXPECT_EQ(w.Peek("key:a\ncam5").context.size(), 1u);
  // By bytes too: a's large frames push out a's own streams, not b's.
  StreamOptions ob = o;
  ob.max_streams = 100;
  ob.max_bytes = 60'000;
  StreamWindows wb(ob);
  wb.Push("key:b\ncam", Frame("b1", 1000, s0, ++seq));
  for (int i = 0; i < 6; ++i) wb.Push(name("key:a\ncam", i), Frame("a", 4000, s0, ++seq));
  EXPECT_LE(wb.bytes(), ob.max_bytes);
  EXPECT_EQ(wb.Peek("key:b\ncam").context.size(), 1u);
}

// An idle stream is gone without another stream's frame: its next frame or question finds no
// context (it found the idle stream's frames), and its memory goes at the next look (/metrics).
TEST(StreamWindow, AnIdleStreamIsForgottenWithoutAnotherPush) {
  StreamOptions o;
  o.max_frames = 3;
  o.idle = std::chrono::seconds(1);
  o.max_age = std::chrono::seconds(60);
  StreamWindows w(o);
  const FrameThumbnail s0 = Thumbnail(Solid(8, 8, 1)), s1 = Thumbnail(Split(8, 8, 4));
  w.Push("a", Frame("a1", 100, s0, 1));
  w.Push("b", Frame("b1", 100, s0, 2));
  ASSERT_EQ(w.Peek("a").context.size(), 1u);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  EXPECT_TRUE(w.Arrive("a", s1).context.empty());
  EXPECT_TRUE(w.Peek("b").context.empty());
  w.Push("c", Frame("c1", 100, s0, 3));
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  EXPECT_GT(w.bytes(), 0u);
  w.ExpireIdle();
  EXPECT_EQ(w.streams(), 0u);
  EXPECT_EQ(w.bytes(), 0u);
}

}  // namespace
}  // namespace vlmd::serve
