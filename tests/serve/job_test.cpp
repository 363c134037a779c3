// Job: the scheduler -> handler channel. A waiter without a text sink must sleep through text
// (a non-streaming handler would otherwise spin a core per request), a streaming waiter wakes on
// each piece, and completion wakes both.
#include "serve/hosting/job.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace vlmd::serve {
namespace {

TEST(JobTest, WaitWithoutSinkIgnoresTextAndWakesOnCompletion) {
  Job job(JobInput{});
  job.PushText("partial");
  const auto t0 = Clock::now();
  EXPECT_FALSE(job.Wait(t0 + std::chrono::milliseconds(100), nullptr));
  EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(90)) << "returned early on text";
  std::thread producer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    JobResult r;
    r.text = "done";
    job.Complete(std::move(r));
  });
  EXPECT_TRUE(job.Wait(Clock::now() + std::chrono::seconds(10), nullptr));
  producer.join();
  EXPECT_EQ(job.result().text, "done");
  EXPECT_TRUE(job.status().ok());
}

TEST(JobTest, StreamingWaitDrainsTextInOrderAndFailureIsFinal) {
  Job job(JobInput{});
  std::string got;
  job.PushText("a");
  job.PushText("b");
  EXPECT_FALSE(job.Wait(Clock::now() + std::chrono::seconds(1), &got));
  EXPECT_EQ(got, "ab");
  job.Fail(Status(StatusCode::kDeadlineExceeded, "late"));
  job.Complete(JobResult{});  // ignored: the job is already over
  EXPECT_TRUE(job.Wait(Clock::now(), &got));
  EXPECT_EQ(job.status().code(), StatusCode::kDeadlineExceeded);
}


// Once the scheduler has an image's embeddings, the job drops that image's pixels and keeps the
// rest (its cache key and layout are still read).
// Tokens travel with their text, in order; a token without new text (a piece that spells
// nothing) wakes a waiter that takes tokens, and not one that takes only text.
TEST(JobTest, TokensTravelWithTheirTextInOrder) {
  Job job(JobInput{});
  StreamedToken a, b, c;
  a.id = 1;
  b.id = 2;
  c.id = 3;
  a.stats.logprob = -0.5f;
  job.PushText("x", {a, b});
  std::string text;
  std::vector<StreamedToken> tokens;
  EXPECT_FALSE(job.Wait(Clock::now() + std::chrono::seconds(1), &text, &tokens));
  EXPECT_EQ(text, "x");
  ASSERT_EQ(tokens.size(), 2u);
  EXPECT_EQ(tokens[0].id, 1);
  EXPECT_EQ(tokens[0].stats.logprob, -0.5f);
  EXPECT_EQ(tokens[1].id, 2);
  job.PushText("", {c});
  const auto t0 = Clock::now();
  std::string only_text;
  EXPECT_FALSE(job.Wait(t0 + std::chrono::milliseconds(100), &only_text));
  EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(90)) << "woke for a token it does not take";
  tokens.clear();
  EXPECT_FALSE(job.Wait(Clock::now() + std::chrono::seconds(1), &text, &tokens));
  ASSERT_EQ(tokens.size(), 1u);
  EXPECT_EQ(tokens[0].id, 3);
}

TEST(JobTest, ReleaseImagePixelsDropsOnlyThatImagesPixels) {
  JobInput in;
  for (int i = 0; i < 2; ++i) {
    engine::runtime::PreparedImage img;
    img.key = "image" + std::to_string(i);
    img.tiles.n_tiles = 1;
    img.tiles.pixels.assign(3 * 16 * 16, 0.5f);
    in.images.push_back(std::move(img));
  }
  Job job(std::move(in));
  job.ReleaseImagePixels(0);
  job.ReleaseImagePixels(7);  // no such image: nothing
  EXPECT_TRUE(job.input().images[0].tiles.pixels.empty());
  EXPECT_EQ(job.input().images[0].tiles.pixels.capacity(), 0u) << "the memory was kept";
  EXPECT_EQ(job.input().images[0].key, "image0");
  EXPECT_EQ(job.input().images[0].tiles.n_tiles, 1);
  EXPECT_EQ(job.input().images[1].tiles.pixels.size(), 3u * 16 * 16);
}

}  // namespace
}  // namespace vlmd::serve
